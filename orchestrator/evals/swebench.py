"""SWE-bench tasks in: ``mesh eval suite --from-swebench FILE`` as a library.

A SWE-bench instance (``instance_id``, ``repo``, ``base_commit``, ``problem_statement``,
``test_patch``, ``patch``: the gold fix, ``FAIL_TO_PASS``, ``PASS_TO_PASS``: lists, or JSON
strings of lists as in the Hugging Face dataset; ``hints_text``, ``created_at``, ``version``,
``environment_setup_commit`` are read and not used) of this repository becomes a case:

- ``base`` its ``base_commit``, ``task`` its problem statement (no hints, as SWE-bench's default);
- its ``test_patch`` kept whole in the case (``Case.test_patch``): ``build_tree`` applies it to the
  tree graded, after the files it touches are put back as the base has them, in a private index.
  Nothing enters the user's repository but unreferenced objects, and no run sees it;
- ``hidden_command``: the project's test runner on the patch's test files (or ``--command``);
  PASS_TO_PASS comes from that same command (``check_command`` None), as SWE-bench runs them;
- its test ids mapped to the ones mesh's reader names (``mesh_test_id``): pytest's node id
  ``tests/test_x.py::T::test_a[1]`` is ``tests.test_x.T::test_a[1]`` (pytest's JUnit report),
  or ``tests.test_x.T.test_a`` under unittest; Django's ``test_a (tests.test_x.T)`` is
  ``tests.test_x.T.test_a``; a bare name is matched to the one test the runner reports by it;
- its id sealed (``case-001``, ... in the file's order; the instance's is ``Case.instance_id``).

An instance is kept only when, in the validation sandbox, run ``--runs`` times on the base with
the test patch and on the base with the gold patch and the test patch, every FAIL_TO_PASS test
fails (or does not run) on the base, and, the gold patch given, every FAIL_TO_PASS and
PASS_TO_PASS test passes with it and every PASS_TO_PASS test on the base too. A test whose
outcome varies is left out of both lists and named (``flaky``). Each dropped instance says why:
another repository, a base commit not here, a patch that does not apply, a test id mesh's runner
does not report (with the ids it does), a test that fails with the gold patch.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.evals.builder import BuiltSuite, SuiteError, project
from orchestrator.evals.suite import (Case, CommandUnusable, Dropped, build_tree, describe, patch_paths,
                                      patched_commit, policy_refusal, sandbox_results, write_suite)
from orchestrator.testruns.model import bounded_id

__all__ = ["Instance", "import_swebench", "mesh_test_id", "read_instances", "repository_names"]


class Instance(BaseModel):
    """One SWE-bench instance (the fields mesh reads; others are ignored: datasets add their own)."""

    model_config = ConfigDict(extra="ignore")

    instance_id: str = Field(min_length=1)
    base_commit: str = Field(min_length=4)
    problem_statement: str = Field(min_length=1)
    test_patch: str = Field(min_length=1)
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    patch: str | None = None
    repo: str | None = None
    # SWE-bench's spec key (the repository's version the instance belongs to) and the commit its
    # environment is set up from.
    version: str | None = None
    environment_setup_commit: str | None = None

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) else value

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        """The Hugging Face dataset holds the lists as JSON strings; some exports as lists."""
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else []
            except ValueError:
                raise ValueError("neither a list nor a JSON string of one") from None
        return value


def read_instances(path: Path) -> tuple[list[Instance], list[Dropped]]:
    """The instances of a SWE-bench file: a JSON list (or one object), or JSONL; an entry that is
    no instance is dropped naming its place and the field at fault. SuiteError when the file
    cannot be read or is neither JSON nor JSONL (naming the line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{path}: {exc}") from None
    try:
        whole = json.loads(text)
        entries = [(f"entry {n}", e) for n, e in enumerate(whole if isinstance(whole, list) else [whole], 1)]
    except ValueError:
        entries = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append((f"line {number}", json.loads(line)))
            except ValueError as exc:
                raise SuiteError(f"{path}:{number}: neither JSON nor JSONL ({exc})") from None
    kept: list[Instance] = []
    dropped: list[Dropped] = []
    for place, entry in entries:
        try:
            kept.append(Instance.model_validate(entry))
        except ValidationError as exc:
            named = entry.get("instance_id") if isinstance(entry, dict) else None
            fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the entry'}: {e['msg']}" for e in exc.errors()[:3])
            dropped.append(Dropped(str(named or place), "", f"not a SWE-bench instance ({place}: {fields})"))
    return kept, dropped


# A forge remote's owner/name: https://github.com/o/n(.git), git@github.com:o/n.git, ssh://git@h/o/n.
_REMOTE = re.compile(r"[:/]([^/:]+)/([^/]+?)(?:\.git)?/?$")


def repository_names(root: Path) -> set[str]:
    """``owner/name`` of each remote of ``root`` (lower case): what an instance's ``repo`` must be."""
    done = subprocess.run(["git", "-C", str(root), "config", "--get-regexp", r"^remote\..*\.url$"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    names = set()
    for line in done.stdout.splitlines():
        found = _REMOTE.search(line.split(" ", 1)[-1].strip())
        if found:
            names.add(f"{found.group(1)}/{found.group(2)}".lower())
    return names


def _commit_of(root: Path, rev: str) -> str | None:
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "-q", "--end-of-options",
                           f"{rev}^{{commit}}"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return done.stdout.strip() if done.returncode == 0 else None


# Django's (and unittest's) description of a test: ``test_a (module.Class)`` or, since Python
# 3.11, ``test_a (module.Class.test_a)``; a docstring's first line may follow.
_DJANGO = re.compile(r"^(\w+) \(([\w.]+)\)")


def mesh_test_id(test: str, runner: str) -> str | None:
    """The id mesh's ``runner`` reader (``pytest``, ``unittest``) gives the SWE-bench test
    ``test``; None when its form says nothing of where the test is (a bare name)."""
    test = test.strip()
    if found := _DJANGO.match(test):
        name, owner = found.groups()
        dotted = owner if owner.endswith(f".{name}") else f"{owner}.{name}"
        if runner == "pytest":
            module_class, _, method = dotted.rpartition(".")
            return f"{module_class}::{method}"
        return dotted
    head, sep, params = test.partition("[")
    if "::" not in head:
        return None
    path, *owners = head.split("::")
    module = re.sub(r"\.py$", "", path).replace("/", ".")
    if runner == "pytest":
        return ".".join([module, *owners[:-1]]) + "::" + owners[-1] + sep + params
    return ".".join([module, *owners]) + (sep + params if sep else "")


# A test id holding an absolute path of the machine SWE-bench's logs were made on (a parameter
# naming a file there): no run elsewhere reports it so. Any folder three deep counts (SWE-bench's
# own records name /n/fs/p-swe-bench/temp/...; /api/v1 is no such path).
_MACHINE_PATH = re.compile(r"(?:^|[\[(,=\s'\"])(?:/(?:home|tmp|root|Users|usr|opt|var|private|testbed)/"
                           r"|/[\w.-]+/[\w.-]+/[\w.-]+/|[A-Za-z]:\\)")


def _resolved(test: str, runner: str, reported: Sequence[str]) -> list[str]:
    """The reported tests SWE-bench's ``test`` names: itself when the runner reports it so, else
    ``mesh_test_id`` (pytest's and unittest's readers), else the one reported test whose name is
    ``test`` (its last part); [] when none. A pytest id SWE-bench's log parser cut at a space
    (``test_x[assert`` of ``test_x[assert a == b]``: it keeps a status line's second word) names
    every reported test it is the first word of: SWE-bench's status for it is the last such line
    of the log, and pytest's summary puts failures after passes, so it passes only when they all do."""
    # (mesh keeps an id past ``MAX_ID_CHARS`` cut, and so compares SWE-bench's cut the same way.)
    kept = bounded_id(test)
    mapped = kept if kept in reported else mesh_test_id(test, runner) if runner in ("pytest", "unittest") else None
    mapped = None if mapped is None else bounded_id(mapped)
    if mapped is not None and (mapped in reported or not _cut(test)):
        return [mapped]
    if _cut(test):
        keys = {test, mapped} - {None}
        cut = [r for r in reported if " " in r and r.split()[0] in keys]
        if cut:
            return cut
    if mapped is not None:
        return [mapped]
    named = [r for r in reported if re.split(r"::|\.", r.split("[", 1)[0])[-1] == test.split("[", 1)[0]
             and r.endswith(test[len(test.split("[", 1)[0]):])]
    return named[:1] if len(named) == 1 else []


def _cut(test: str) -> bool:
    """A pytest id cut at a space by SWE-bench's log parser: a parameter list left open."""
    return test.count("[") > test.count("]")


def _outcomes(results: Sequence[Any]) -> list[dict[str, str]]:
    from orchestrator.evals.curation import _outcome

    return [{c.id: _outcome(c.status) for c in result.run.cases} for result in results]


def _names(ids: Sequence[str], limit: int = 3) -> str:
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _title(instance: Instance) -> str:
    return next((line.strip() for line in instance.problem_statement.splitlines() if line.strip()),
                instance.instance_id)


def instance_test_files(test_patch: str) -> list[str]:
    """The test files of an instance's test patch, as SWE-bench's harness names them to its test
    command: every file the patch leaves, data excepted (mesh's runners' own names first; a
    module of a test folder that the project's pytest configuration collects under another
    pattern, astroid's ``tests/unittest_nodes.py``, too: named on the command line, pytest runs
    it whatever its ``python_files``)."""
    from orchestrator.evals.history import is_test_file, is_test_path

    paths = patch_paths(test_patch, after=True)
    named = [path for path in paths if is_test_file(path)]
    other = [path for path in paths if path not in named and path.endswith(".py") and is_test_path(path)
             and path.rsplit("/", 1)[-1] not in ("conftest.py", "__init__.py")
             and not re.search(r"(^|/)(fixtures?|data|testdata|test_data|resources|helpers?|__fixtures__)/", path)]
    return [*named, *other]


def _case_of(instance: Instance, root: Path, command: str, whole: str | None, ranges: Sequence[Any]) -> Case:
    from orchestrator.evals.history import hidden_command, range_for

    where = range_for(root, instance.base_commit, ranges)
    return Case(id="candidate", base=instance.base_commit, title=_title(instance)[:200],
                task=instance.problem_statement,
                hidden_command=hidden_command(command, instance_test_files(instance.test_patch), whole, chosen=True),
                source="swebench",
                instance_id=instance.instance_id, test_patch=instance.test_patch,
                **({"setup": where.setup, "env": where.env} if where else {}))


def check_instance(root: Path, instance: Instance, case: Case, run: Callable[[str, Sequence[str]], list[Any]], *,
                   runs: int = 3, policy: Any = None) -> tuple[Case | None, str]:
    """(the case with its lists, a note for its line) or (None, why the instance is dropped):
    its base with the test patch, and with the gold patch too, ``runs`` times each."""
    from orchestrator.evals.curation import UNTRUSTED, _varied, environment_cause
    from orchestrator.sandbox.allowlist import split
    from orchestrator.testruns.table import reader_for

    if not case.hidden_command:
        return None, "its test patch holds no test file a runner takes, and there is no whole check"
    if policy is not None and instance.patch and (refused := policy_refusal(root, case, policy, instance.patch)):
        return None, refused.replace("its reference", "its gold patch")
    try:
        trees = [build_tree(root, case, case.base)]
        if instance.patch:
            trees.append(build_tree(root, case, patched_commit(root, case.base, instance.patch, "the gold patch")))
    except ValueError as exc:
        return None, str(exc).replace(f"case {case.id}: ", "").replace("the patch does", "its gold patch does")
    limit = getattr(run, "timeout_s", None)
    reader = reader_for(split(case.hidden_command) or [], None)
    on: list[list[Any]] = [[], []]
    for index in range(runs):
        for which, tree in enumerate(trees):
            [result] = run(tree, [case.hidden_command])
            if index == which == 0 and result.passed:
                return None, "its tests pass on the base already (with the test patch)"
            if result.reason in UNTRUSTED:
                return None, f"{UNTRUSTED[result.reason]} ({result.reason})"
            if result.reason == "timeout":
                return None, (f"`{case.hidden_command}` did not finish within {limit:g}s on the"
                              if limit else f"`{case.hidden_command}` did not finish on the") + \
                    (f" {'base' if which == 0 else 'gold'} tree (a slow or hanging test; --timeout sets the limit)")
            if result.run is None and reader is not None:
                # A runner mesh reads that wrote no report: it never started (a package or set-up
                # step missing), and the output says why.
                tree_name = "base" if which == 0 else "gold"
                cause = environment_cause(result, str(root), tree)
                return None, (f"its tests cannot run on the {tree_name} tree because of {cause}" if cause else
                              f"`{case.hidden_command}` wrote no test report on the {tree_name} tree"
                              f" ({describe(result, limit)[1]})")
            if result.run is None:
                return None, (f"mesh reads no per-test results of `{case.hidden_command}`: SWE-bench's"
                              " FAIL_TO_PASS and PASS_TO_PASS tests cannot be checked (--command names a runner"
                              " mesh reads: pytest, unittest, go test, cargo test, jest, vitest, node --test)")
            on[which].append(result)
    if on[1] and not on[1][0].passed and (on[1][0].run.collection_errors or not on[1][0].run.failures()):
        # Not a test that failed: the tests could not run with the gold patch (the environment, a crash).
        cause = environment_cause(on[1][0], str(root), trees[1])
        return None, (f"its tests fail with the gold patch because of {cause}" if cause else
                      f"its tests cannot run with the gold patch ({describe(on[1][0], limit)[1]})")
    runner = getattr(reader, "name", "")
    base, gold = _outcomes(on[0]), _outcomes(on[1])
    reported = list(dict.fromkeys(t for outcomes in (*base, *gold) for t in outcomes))
    flaky = list(dict.fromkeys([*_varied(base), *_varied(gold)]))
    unmatched, failing, f2p, p2p, unseen, foreign = [], [], [], [], [], []
    named: dict[str, str] = {}
    for kind, tests in (("FAIL_TO_PASS", instance.FAIL_TO_PASS), ("PASS_TO_PASS", instance.PASS_TO_PASS)):
        for test, mapped in ((test, mapped) for test in tests for mapped in (_resolved(test, runner, reported)
                                                                              or [None])):
            if mapped is None or (mapped not in reported and (gold or kind == "PASS_TO_PASS")):
                (foreign if _MACHINE_PATH.search(test) and kind == "PASS_TO_PASS" else unmatched).append(test)
            elif mapped in flaky:
                continue
            elif kind == "FAIL_TO_PASS" and base[0].get(mapped) == "passed":
                failing.append(f"the FAIL_TO_PASS test {test} passes on the base already")
            elif gold and gold[0].get(mapped) != "passed":
                failing.append(f"the {kind} test {test} fails with the gold patch: {_why(on[1][0], mapped, limit)}")
            elif kind == "PASS_TO_PASS" and base[0].get(mapped) != "passed":
                failing.append(f"the PASS_TO_PASS test {test} fails on the base: {_why(on[0][0], mapped, limit)}")
            else:
                (f2p if kind == "FAIL_TO_PASS" else p2p).append(mapped)
                if mapped != test:
                    named[mapped] = test
                if kind == "FAIL_TO_PASS" and mapped not in reported:
                    unseen.append(test)
    if unmatched:
        return None, (f"{len(unmatched)} of its test id(s) are not among the tests `{case.hidden_command}` reports"
                      f" ({_names(unmatched)}); mesh's {runner or 'runner'} names them like"
                      f" {_names(reported) or 'nothing'}"
                      + (f"; {len(foreign)} more name a path of the machine its logs came from" if foreign else ""))
    if failing:
        which = 1 if gold else 0  # the tree whose run failed: its classes, not the checkout's
        cause = environment_cause(on[which][0], str(root), trees[which])
        return None, (f"{failing[0]}" + (f" and {len(failing) - 1} more" if len(failing) > 1 else "")
                      + (f" (because of {cause})" if cause else ""))
    if not f2p:
        return None, f"no stable FAIL_TO_PASS test: the outcome of {_names(flaky)} varies between runs (flaky)"
    note = (f"; {len(unseen)} FAIL_TO_PASS test(s) not reported on the base, and no gold patch shows that"
            f" the runner names them so: {_names(unseen)}") if unseen else ""
    note += "" if gold else "; no gold patch: checked on the base only"
    note += (f"; {len(foreign)} PASS_TO_PASS test id(s) name a path of the machine SWE-bench's logs came from"
             f" and can never match here (not graded): {_names(foreign)}") if foreign else ""
    return case.model_copy(update={"grading": "tests", "fail_to_pass": f2p, "pass_to_pass": p2p, "flaky": flaky,
                                   "check_command": None, "swebench_ids": named}), note


def _why(result: Any, test: str, limit: float | None) -> str:
    from orchestrator.evals.curation import _message

    return _message(test, {c.id: c for c in result.run.cases}, result, limit)


def import_swebench(repo: Path, config_file: Path | None, *, instances: Path, out: Path, command: str | None = None,
                    limit: int | None = None, timeout_s: float | None = None, runs: int = 3,
                    progress: Callable[[str], None] | None = None) -> BuiltSuite:
    """Build and write the suite of the SWE-bench instances in ``instances`` that are of ``repo``
    and pass their checks (``check_instance``), at most ``limit``; sealed ids in the file's order."""
    from orchestrator.eval_settings import HistoryRange
    from orchestrator.evals.curation import whole_check
    from orchestrator.evals.environments import (EnvironmentUnusable, build, choose, from_swebench, swebench_gives_specs,
                                                 swebench_without_specs, view_in)
    from orchestrator.evals.history import ranges_of, seal
    from orchestrator.worktree.policy import PatchPolicy

    # A checkout without its dependencies installed is fine when instances bring environments.
    root, config, inspection, command, missing = project(
        repo, config_file, command, environments=lambda config: bool(config.eval.env) or swebench_gives_specs())
    read, dropped = read_instances(instances)
    try:
        ranges = ranges_of(root, config.eval.history)
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
    whole = whole_check(config.validation, list(inspection.view.checks), command)
    try:  # the [[eval.env]] entries serving a base range: their revisions resolved here
        env_ranges = ranges_of(root, [HistoryRange(before=e.before) for e in config.eval.env if e.before])
    except ValueError as exc:
        raise SuiteError(str(exc).replace("[[eval.history]]", "[[eval.env]]")) from None
    built = BuiltSuite(out=out, command=command, dropped=dropped, looked_at=len(dropped), unit="instance",
                       order="in the file's order")
    names = repository_names(root)
    policy = PatchPolicy.from_config(config.patch)
    try:
        for instance in read:
            if limit is not None and len(built.kept) >= limit:
                built.stopped_at_limit = True
                break
            built.looked_at += 1
            title = _title(instance)[:60]
            base = _commit_of(root, instance.base_commit)
            # A fork's or a mirror's remote names another repository; its base commit being here
            # (commits are named by their content) says the instance is of this history all the same.
            other = bool(instance.repo and names and instance.repo.lower() not in names)
            if other and base is None:
                why = f"an instance of another repository ({instance.repo}; this one is {', '.join(sorted(names))})"
            elif base is None:
                why = (f"its base_commit {instance.base_commit[:12]} is not in this repository (an instance of"
                       " another repository, or a commit to fetch)")
            else:
                why = ""
            if why:
                built.dropped.append(Dropped(instance.instance_id, title, why))
                continue
            if progress is not None:
                progress(f"checking {instance.instance_id}  {title} ({len(built.kept)} kept so far)")
            spec, left = choose(config.eval.env, instance.version, base, root, env_ranges), []
            if spec is None and (official := from_swebench(instance.repo, instance.version)):
                spec, left = official  # SWE-bench's own spec of this repository and version
            unspecified = swebench_without_specs() if spec is None and instance.version else None
            if spec is None and missing:
                built.dropped.append(Dropped(instance.instance_id, title, (
                    f"no environment of its own for version {instance.version or '(none)'} (an [[eval.env]], or"
                    f" SWE-bench's spec), and the checkout's cannot run its tests: {missing}")
                    + (f"; {unspecified}" if unspecified else "")))
                continue
            try:
                made = build(spec, echo=progress) if spec is not None else None
            except EnvironmentUnusable as exc:
                built.dropped.append(Dropped(instance.instance_id, title, f"its environment {spec.name}: {exc}"))
                continue
            own = spec.test_command if spec is not None and spec.test_command else None
            case = _case_of(instance.model_copy(update={"base_commit": base}), root, own or command, whole, ranges)
            case = case.model_copy(update={
                "version": instance.version, "environment_setup_commit": instance.environment_setup_commit,
                "environment": {**{k: made[k] for k in ("name", "python_version", "packages", "installer") if k in made},
                                **({"repo": instance.repo} if instance.repo else {})} if made else None})
            run = sandbox_results(root, config.validation, view_in(inspection.view, made, root), timeout_s,
                                  setup=case.setup, env=case.env)
            kept, note = check_instance(root, instance, case, run, runs=runs, policy=policy)
            if kept is not None and made:
                note += f"; in the environment {made['name']} (Python {made['python_version']})" + (
                    f"; not reproduced of SWE-bench's spec: {'; '.join(left)}" if left else "")
            if kept is not None and other:
                note += (f"; {instance.repo} is no remote of this checkout ({', '.join(sorted(names))}): taken as a fork"
                         " or mirror of it, its base commit being here")
            if unspecified:
                note += f"; {unspecified}"
            if kept is None:
                built.dropped.append(Dropped(instance.instance_id, title, note))
            else:
                built.kept.append(kept)
                built.notes[instance.instance_id] = note
                if own and own != command:
                    built.own_commands[instance.instance_id] = own
    except CommandUnusable as exc:
        raise SuiteError(f"the hidden tests' command {exc}; fix --command, or validation.allow") from None
    built.kept = seal(built.kept)
    write_suite(out, built.kept)
    return built
