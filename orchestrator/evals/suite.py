"""Evaluation suites: cases from the repository's own history, or written by hand.

A case is a task on a base commit with hidden tests: ``base`` (the commit a run starts from),
``task`` (what the run is asked to do), ``hidden_tests`` (test files, whose content is taken from
``tests_from``, or given inline in ``hidden_files``, or as a patch in ``test_patch``: a SWE-bench
instance's), ``hidden_command`` (the command that runs them), and for a case from history its
``reference`` (the commit that did it). A suite is a JSONL file, one case a line (``Case``'s
fields; docs/eval.md).

``orchestrator.evals.history`` makes candidate cases from the first-parent history (base = a
commit's parent, task = its message or the tracker issue it names, hidden tests = the test files
it added or changed, reference = the commit). ``verify`` keeps a case only when, in
the validation sandbox, its hidden tests fail on the base (with the tests added) and pass on the
reference; each dropped case says why. ``orchestrator.evals.curation`` does the same by test, for
``mesh eval suite``: it records which tests a run must make pass and must not break.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = ["Case", "CommandUnusable", "Dropped", "build_tree", "describe", "failure_line", "patch_paths",
           "patched_commit", "policy_refusal", "read_suite", "reference_patch", "sandbox_results", "sandbox_run",
           "verify", "verify_case", "write_suite"]


class Case(BaseModel):
    """One evaluation case (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    base: str = Field(min_length=4)
    title: str = ""
    task: str = Field(min_length=1)
    hidden_tests: list[str] = Field(default_factory=list)
    tests_from: str | None = None
    hidden_files: dict[str, str] = Field(default_factory=dict)
    hidden_command: str | None = None
    reference: str | None = None
    source: Literal["git", "hand", "swebench"] = "hand"
    # A SWE-bench instance's (``orchestrator.evals.swebench``): its id (the case's own id is sealed)
    # and its test patch, applied to the tree graded after the files it touches are reset to the base.
    instance_id: str | None = None
    test_patch: str | None = None
    # A test's id as mesh's reader names it -> as the instance names it, where they differ.
    swebench_ids: dict[str, str] = Field(default_factory=dict)
    # Grading by test (a case from history, curated at suite build: ``orchestrator.evals.curation``).
    # ``grading`` None: the hidden command and the project's check judge by exit status (a
    # hand-written case, an older suite). "tests": every FAIL_TO_PASS test must pass and no
    # PASS_TO_PASS test fail; "exit": the runner gives no per-test results, so the hidden command
    # and ``check_command`` judge by their exit status.
    grading: Literal["tests", "exit"] | None = None
    fail_to_pass: list[str] = Field(default_factory=list)  # fail on the base (hidden tests added), pass on the reference
    pass_to_pass: list[str] = Field(default_factory=list)  # pass on both
    # The whole check whose tests give PASS_TO_PASS; None: the hidden command's own run gives them.
    check_command: str | None = None
    flaky: list[str] = Field(default_factory=list)  # left out of both lists: their outcome varied between runs
    # Tests the reference rewrote that its fix breaks as the base had them (a behaviour change the
    # task must state: a worker keeping the old tests green cannot resolve the case).
    rewritten: list[str] = Field(default_factory=list)
    # The [[eval.history]] range of its base: a command run before each test command (same sandbox,
    # same tree), and variables for both.
    setup: str | None = None
    env: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = \
        Field(default_factory=dict)
    # A SWE-bench instance's version and environment_setup_commit, as its record gives them.
    version: str | None = None
    environment_setup_commit: str | None = None
    # The ``[[eval.env]]`` it was kept in (``orchestrator.evals.environments``): its name, Python
    # version and the packages installed; its checks, arms and grading run in the same.
    environment: dict[str, Any] | None = None

    def hidden_paths(self) -> list[str]:
        """Every hidden test file's path."""
        return list(dict.fromkeys([*self.hidden_tests, *self.hidden_files, *patch_paths(self.test_patch or "")]))


class CommandUnusable(ValueError):
    """A hidden or check command that cannot run on any commit (its program is not installed, it
    does not parse): a mistake of the command or the configuration, not of a case."""


@dataclass(frozen=True)
class Dropped:
    """A commit that did not become a case, and why."""

    commit: str
    subject: str
    why: str


def _git(repo: Path, *args: str, env: Mapping[str, str] | None = None, data: bytes | None = None) -> bytes:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    clean.update(env or {})
    done = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-C", str(repo), *args], capture_output=True,
                          env=clean, input=data, stdin=None if data is not None else subprocess.DEVNULL)
    if done.returncode != 0:
        raise ValueError(f"git {args[0]}: {done.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    return done.stdout


_PATCH_PATH = re.compile(r'(--- |\+\+\+ |rename from |rename to |copy from |copy to )("(?:[^"\\]|\\.)*"|.+?)\t?')


def patch_paths(patch: str, *, after: bool = False) -> list[str]:
    """The paths a unified diff (git's form) touches, old and new names of a rename both (``after``:
    only the paths the patch leaves, not a deleted file or a rename's old name): read from each
    file's header lines only (a removed line ``-- x`` is ``--- x`` in a hunk)."""
    found, header = [], False
    lines = patch.splitlines()
    plain = not any(line.startswith("diff --git ") for line in lines)
    for index, line in enumerate(lines):
        if line.startswith("diff "):
            header = True
        elif line.startswith("@@"):
            header = False
        elif plain and line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            header = True  # a plain unified diff's header
        if not header or not (match := _PATCH_PATH.fullmatch(line)):
            continue
        word, path = match.groups()
        if after and word in ("--- ", "rename from ", "copy from "):
            continue
        if path.startswith('"'):  # git quotes a path with unusual characters, C-style (UTF-8 bytes in octal)
            path = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode(
                "latin-1", "replace").decode("utf-8", "replace")
        if word in ("--- ", "+++ "):
            if path == "/dev/null":
                continue
            path = path[2:] if path[:2] in ("a/", "b/") else path
        found.append(path)
    return list(dict.fromkeys(found))


def _apply_in_index(repo: Path, patch: str, env: Mapping[str, str], what: str) -> None:
    try:
        _git(repo, "apply", "--cached", "--whitespace=nowarn", "-", env=env, data=patch.encode())
    except ValueError as exc:
        raise ValueError(f"{what} does not apply: {str(exc).removeprefix('git apply: ')}") from None


def _commit_index(repo: Path, env: Mapping[str, str], onto: str, message: str) -> str:
    tree = _git(repo, "write-tree", env=env).decode().strip()
    return _git(repo, "commit-tree", tree, "-p", onto, "-m", message,
                env={"GIT_AUTHOR_NAME": "mesh", "GIT_AUTHOR_EMAIL": "mesh@localhost",
                     "GIT_COMMITTER_NAME": "mesh", "GIT_COMMITTER_EMAIL": "mesh@localhost"}).decode().strip()


def patched_commit(repo: Path, onto: str, patch: str, message: str = "mesh eval: a patch applied") -> str:
    """A commit (unreferenced) whose tree is ``onto``'s with ``patch`` applied (private index);
    ValueError when it does not apply."""
    with tempfile.TemporaryDirectory(prefix="mesh-eval-index-") as folder:
        env = {"GIT_INDEX_FILE": os.path.join(folder, "index")}
        _git(repo, "read-tree", onto, env=env)
        _apply_in_index(repo, patch, env, "the patch")
        return _commit_index(repo, env, onto, message)


def changed_test_files(repo: Path, base: str, reference: str, paths: list[str]) -> list[str]:
    """Which of ``paths`` (a case's hidden test files) ``reference`` changed from ``base``, where the
    base had them (not added by the reference)."""
    if not paths:
        return []
    out = _git(repo, "diff", "--name-only", "-z", "--diff-filter=M", base, reference, "--", *paths)
    return [name for name in out.decode().split("\0") if name]


def build_tree(repo: Path, case: Case, onto: str, *, source: Path | None = None) -> str:
    """A commit (unreferenced) whose tree is ``onto``'s with the case's hidden tests written in:
    from ``tests_from`` (a commit of ``source``, by default ``repo`` itself) and ``hidden_files``;
    a ``test_patch`` is applied after the files it touches are put back as the base has them (as
    SWE-bench's harness does: a run's own edits of those files do not count). Made with plumbing
    in a private index: no worktree, no ref, nothing the user sees."""
    origin = source or repo
    with tempfile.TemporaryDirectory(prefix="mesh-eval-index-") as folder:
        env = {"GIT_INDEX_FILE": os.path.join(folder, "index")}
        _git(repo, "read-tree", onto, env=env)
        for path in case.hidden_tests:
            entry = _git(origin, "ls-tree", "-z", case.tests_from or onto, "--", path).split(b"\0")[0]
            if not entry:
                raise ValueError(f"case {case.id}: {path} is not in {case.tests_from or onto}")
            meta, _ = entry.split(b"\t", 1)
            mode, _kind, blob = meta.decode().split(" ")
            if origin != repo:  # the blob is copied over: the case's repository never held it before
                data = _git(origin, "cat-file", "blob", blob)
                blob = _git(repo, "hash-object", "-w", "--stdin", data=data).decode().strip()
            _git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}", env=env)
        for path, text in case.hidden_files.items():
            blob = _git(repo, "hash-object", "-w", "--stdin", data=text.encode()).decode().strip()
            _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        if case.test_patch:
            for path in patch_paths(case.test_patch):
                entry = _git(repo, "ls-tree", "-z", case.base, "--", path).split(b"\0")[0]
                if entry:
                    mode, _kind, blob = entry.split(b"\t", 1)[0].decode().split(" ")
                    _git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}", env=env)
                else:
                    _git(repo, "update-index", "--force-remove", "--", path, env=env)
            _apply_in_index(repo, case.test_patch, env, f"case {case.id}: its test patch")
        return _commit_index(repo, env, onto, f"mesh eval: {case.id} with its hidden tests")


def reference_patch(repo: Path, case: Case) -> str:
    """What a run must write to do a case from history: its reference commit without the hidden tests."""
    if not case.reference:
        return ""
    excluded = [f":(exclude,literal){path}" for path in case.hidden_tests]
    return _git(repo, "diff", "--no-color", "--no-ext-diff", "--full-index", "--binary", case.base, case.reference,
                "--", ".", *excluded).decode("utf-8", "replace")


def policy_refusal(repo: Path, case: Case, policy: Any, patch: str | None = None) -> str | None:
    """Why ``policy`` (a ``PatchPolicy``) would refuse the case's reference patch (or ``patch``,
    a SWE-bench instance's gold patch), if it would: no run could land that change, so the case
    measures nothing. Judged against the base's tree, as a run's patch is against its worktree."""
    from orchestrator.sandbox.tree_copy import materialize_tree
    from orchestrator.worktree.patchcheck import PatchRefused, check_patch

    patch = reference_patch(repo, case) if patch is None else patch
    if not patch.strip():
        return None
    try:
        summary = check_patch(patch, max_bytes=max(len(patch) * 4, 1), max_files=1 << 30)
    except PatchRefused as exc:
        return f"its reference is no patch mesh applies ({exc})"
    problems = policy.violations(summary)
    if problems:  # without the base's files every file counts as new: look again with them
        with tempfile.TemporaryDirectory(prefix="mesh-eval-base-") as folder:
            materialize_tree(repo, case.base, Path(folder) / "tree")
            problems = policy.violations(summary, Path(folder) / "tree")
    if not problems:
        return None
    return (f"the patch policy refuses its reference ({'; '.join(problems)[:300]}): no run could land it"
            " (patch.allow admits a path)")


def verify_case(repo: Path, case: Case, run: Any, policy: Any = None) -> str | None:
    """Why ``case`` is no case (None: it is one): its reference refused by ``policy``, its hidden
    command passing on the base with the hidden tests added, or failing on the reference.
    ``run(commit, command) -> (passed, detail)`` runs one command on one commit in the
    validation sandbox."""
    if not case.hidden_command:
        return ("no hidden command (its test changes are data only, and no project check runs the whole"
                " suite: set validation.check)") if case.hidden_tests else "no hidden command"
    if policy is not None and (refused := policy_refusal(repo, case, policy)):
        return refused
    passed, detail = run(build_tree(repo, case, case.base), case.hidden_command)
    if passed:
        return "its hidden tests pass on the base already"
    if case.reference:
        passed, detail = run(case.reference, case.hidden_command)
        if not passed:
            return f"its hidden tests fail with the reference ({detail})"
    return None


def verify(repo: Path, cases: Sequence[Case], run: Any, policy: Any = None) -> tuple[list[Case], list[Dropped]]:
    """The cases ``verify_case`` keeps, and the others with their reason."""
    kept, dropped = [], []
    for case in cases:
        why = verify_case(repo, case, run, policy)
        if why is None:
            kept.append(case)
        else:
            dropped.append(Dropped(case.reference or case.base, case.title, why))
    return kept, dropped


def write_suite(path: Path, cases: Iterable[Case]) -> None:
    """Write ``cases`` as JSONL (one case a line)."""
    path.write_text("".join(case.model_dump_json(exclude_defaults=True) + "\n" for case in cases), encoding="utf-8")


def read_suite(path: Path) -> list[Case]:
    """The cases of a JSONL suite; ValueError naming the line of a bad one."""
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            cases.append(Case.model_validate(json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: {' '.join(str(exc).split())[:300]}") from None
    ids = [case.id for case in cases]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: case ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return cases


# The line of a failing test run that says why: an exception, a failed assertion, a panic.
_WHY = re.compile(r"(\w*(Error|Exception)\b|panicked at|^--- FAIL|Cannot find module|^FAIL(ED)?\b|^ERROR\b|"
                  r"^E\s{2,}\S|error\[E\d+\]|not ok\b)")


def failure_line(output: str) -> str:
    """The line of ``output`` (a failing command's tail) that best says why it failed: the last one
    naming an error (pytest's ``E   AssertionError: 12 != 8`` rather than its ``tests/test_x.py:9:
    AssertionError`` after it), else the last non-empty one; at most 200 characters."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    said = [line for line in lines if _WHY.search(line) and not re.fullmatch(r"FAILED \((failures|errors)=.*\)", line)]
    if any(re.match(r"E\s{2,}\S", line) for line in said):
        said = [line for line in said if not re.fullmatch(r"\S+:\d+: \w+", line)]
    found = said[-1] if said else lines[-1] if lines else ""
    found = re.sub(r"^E\s+", "", found)
    return found if len(found) <= 200 else found[:199] + "…"


def sandbox_results(repo: Path, settings: Any, view: Any, timeout_s: float | None = None, *,
                    setup: str | None = None, env: Mapping[str, str] | None = None) -> Any:
    """``run(commit, commands) -> [ValidationResult]``: ``commands`` on one commit of ``repo``
    in the validation sandbox (one tree copy), with the ``[validation]`` table's limits
    (``timeout_s``: its own time limit) and the project's view (its toolchains); each result
    holds its runner's per-test results (``.run``, None when mesh does not read that runner).
    ``setup`` runs before the commands in the same tree, ``env`` is given to both (a case's
    history range). The commands are the suite's own, so they are admitted as they are.
    ``CommandUnusable`` when one cannot run on any commit."""
    from dataclasses import replace

    from orchestrator.sandbox.allowlist import split
    from orchestrator.sandbox.project_view import ProjectView
    from orchestrator.sandbox.validation import run_validation

    limit = timeout_s or settings.timeout_s
    if setup or env:
        view = view or ProjectView(project_root=str(repo))
        view = replace(view, setup=(*view.setup, *([setup] if setup else [])), env=(*view.env, *(env or {}).items()))

    def run(commit: str, commands: Sequence[str]) -> list[Any]:
        # The setup commands (the project's, the range's) are the user's own too.
        results = run_validation(list(commands), cwd=repo, allow=[*commands, *(view.setup if view else ())],
                                 timeout_s=limit, max_output_bytes=settings.max_output_bytes, commit=commit,
                                 env_names=settings.env, limits=settings.limits, environment=view,
                                 judge_subsets=False)  # a hidden command's tests all get their own twins
        for command, result in zip(commands, results):
            program = (split(command) or [""])[0]
            if result.rejected or (result.reason == "not_found" and "/" not in program):
                # Not the case's doing: the same on every commit (a program not installed, a command
                # that does not parse): said once, not blamed on each case.
                raise CommandUnusable(f"{command!r} cannot run: {result.reason}: {result.stderr_tail.strip()[:300]}")
        return results

    run.timeout_s = limit  # type: ignore[attr-defined]
    return run


def describe(result: Any, timeout_s: float | None = None) -> tuple[bool, str]:
    """(passed, detail) of one ``ValidationResult``: the detail of a failure names its reason
    and the line of output that says why (the failing tests by name, the first one's message)."""
    if result.passed:
        return True, f"passed ({result.tests.line()})" if result.tests else "passed"
    if result.reason == "timeout":
        return False, (f"timed out after {timeout_s:g}s" if timeout_s else "timed out") + \
            " (a test that hangs; --timeout sets the limit)"
    why = result.reason or (f"exit {result.exit_code}" if result.exit_code is not None else "did not run")
    failing = result.run.failures() if result.run is not None else []
    if failing:  # the tests by name, and the first one's own message
        names = ", ".join(case.id for case in failing[:3]) + (f" and {len(failing) - 3} more" if len(failing) > 3 else "")
        return False, f"{why}: failing {names}: {failure_line(failing[0].message) or failing[0].status}"
    line = failure_line(f"{result.stdout_tail}\n{result.stderr_tail}")
    return False, f"{why}: {line}" if line else why


def sandbox_run(repo: Path, settings: Any, view: Any, timeout_s: float | None = None, *,
                setup: str | None = None, env: Mapping[str, str] | None = None) -> Any:
    """``run`` for ``verify``: ``run(commit, command) -> (passed, detail)``, one command on one
    commit of ``repo`` in the validation sandbox (``sandbox_results``). The detail of a failure
    names its reason and the line of output that says why."""
    results = sandbox_results(repo, settings, view, timeout_s, setup=setup, env=env)

    def run(commit: str, command: str) -> tuple[bool, str]:
        [result] = results(commit, [command])
        return describe(result, results.timeout_s)

    return run
