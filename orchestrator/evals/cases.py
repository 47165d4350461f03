"""One case of an eval made real: a repository holding only its base's history, and the grade
of a finished run (its final tree with the hidden tests added, run in the validation sandbox).

A case's repository (``repos/<case>/<profile>/``) is cloned from ``repos/<case>/base.git``, a
bare repository that fetched the base commit alone from the user's repository: no later commit,
so no hidden test and no reference, is in any object a worker could reach. The hidden tests
are copied in only when the run has ended, to grade it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.evals.suite import Case, build_tree, describe, sandbox_results, sandbox_run
from orchestrator.toolchains.view import VALIDATE_AT_KEY

__all__ = ["Grade", "case_repo", "grade_run", "mirror_of", "write_json", "write_text"]

_IDENTITY = {"GIT_AUTHOR_NAME": "mesh eval", "GIT_AUTHOR_EMAIL": "mesh-eval@localhost",
             "GIT_COMMITTER_NAME": "mesh eval", "GIT_COMMITTER_EMAIL": "mesh-eval@localhost"}


def _git(cwd: Path, *args: str, lazy: bool = False) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    if lazy:  # a partial clone serving a fetch may fetch the files it lacks from its own remote
        env["GIT_NO_LAZY_FETCH"] = "0"
    done = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *args], cwd=cwd, capture_output=True, text=True,
                          env={**env, **_IDENTITY}, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ValueError(f"git {args[0]}: {done.stderr.strip()[-300:]}")
    return done.stdout


def case_repo(folder: Path, source: Path, case: Case, profile: str, view: Any = None, *,
              origin: Path | None = None) -> Path:
    """The repository a (case, profile) run works in, made once: ``main`` at the case's base,
    with the base's history and nothing after it, fetched from ``origin`` (default: the user's
    checkout, ``source``; a shared eval's: the mirror of its remote). What the project installed
    in the user's checkout (``view``: its dependency folders such as ``node_modules/``, its
    generated files) is put at the same places, as hard links where the file system allows: a
    case's repository is validated like the checkout. Runners of one machine may share the
    folder: each builds in a place of its own, and the first whole one stays."""
    bare = folder / "repos" / case.id / "base.git"
    with _lock_of(bare):  # the profiles of one case share it, and may start at once
        if not bare.exists():
            partial = bare.with_name(f".base.git.{os.getpid()}.partial")
            _remove(partial)
            partial.mkdir(parents=True)
            _git(partial, "init", "-q", "--bare", "-b", "main")
            _held_by(origin or source, case.base)
            _fetch_base(partial, origin or source, case.base)
            _settle(partial, bare)
    work = folder / "repos" / case.id / profile
    if not (work / ".git").exists():
        partial = work.with_name(f".{profile}.{os.getpid()}.partial")
        if partial.exists():
            _remove(partial)
        _git(folder, "clone", "-q", "--no-tags", str(bare), str(partial))
        for key, value in (("user.name", "mesh eval"), ("user.email", "mesh-eval@localhost"),
                           # Validated where the user's checkout is: its editable install finds the case's tree.
                           (VALIDATE_AT_KEY, str(source))):
            _git(partial, "config", key, value)
        if view is not None:
            _installed_into(view, source, partial)
        _settle(partial, work)  # whole or not at all: a killed clone is made again
    return work


def _held_by(repo: Path, commit: str) -> None:
    """ValueError saying what to run when ``repo`` lacks ``commit`` because it is a shallow or a
    partial clone (its history or its old files fetched only in part)."""
    try:
        _git(repo, "cat-file", "-e", f"{commit}^{{commit}}")
        return
    except ValueError:
        pass
    try:
        shallow = _git(repo, "rev-parse", "--is-shallow-repository").strip() == "true"
    except ValueError:
        shallow = False
    if shallow:
        raise ValueError(f"{repo} is a shallow clone without commit {commit[:12]}: run `git -C {repo} fetch"
                         f" --unshallow` (or `git -C {repo} fetch origin {commit}`) and try again")
    if _promisor(repo) is not None:
        raise ValueError(f"{repo} is a partial clone without commit {commit[:12]}: run `git -C {repo} fetch origin"
                         f" {commit}` and try again")
    raise ValueError(f"{repo} does not hold commit {commit[:12]} (fetch it there, or name another repository)")


def _promisor(repo: Path) -> str | None:
    """The remote a partial clone fetches its missing objects from (``extensions.partialClone``,
    else a ``remote.<name>.promisor``), None for a whole repository."""
    for args in (("config", "--get", "extensions.partialclone"), ("config", "--get-regexp", r"^remote\..*\.promisor$")):
        try:
            out = _git(repo, *args).strip()
        except ValueError:
            continue
        if args[1] == "--get" and out:
            return out
        for line in out.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lower() in ("true", "1", "yes"):
                return key[len("remote."):-len(".promisor")]
    return None


def _fetch_base(bare: Path, source: Path, commit: str) -> None:
    """Fetch ``commit`` with its history from ``source`` into ``bare``. From a partial clone (its
    old files fetched on demand), the files it lacks are fetched from its own remote on the way;
    when that remote cannot be reached, ValueError says what to run."""
    remote = _promisor(source)
    partial = remote is not None
    try:
        # --update-shallow: from a shallow clone, the base arrives with its history cut where the
        # clone's is (without it git takes nothing and says nothing).
        _git(bare, "fetch", "-q", "--no-tags", "--update-shallow", str(source), f"{commit}:refs/heads/main",
             lazy=partial)
    except ValueError as exc:
        if not partial:
            raise
        said = next((line.strip() for line in str(exc).splitlines() if "promisor" in line), "")
        said = "".join(ch for ch in said if ch.isprintable())[:160]
        raise ValueError(f"{source} is a partial clone whose files of {commit[:12]} are fetched on demand from"
                         f" {remote!r}, which could not give them{f' ({said})' if said else ''}: run `git -C {source} fetch"
                         f" --refetch {remote}` once it can be reached (a whole clone), and try again") from None


def _settle(partial: Path, final: Path) -> None:
    """``partial`` becomes ``final``, unless another process made ``final`` first (then it is dropped)."""
    try:
        os.replace(partial, final)
    except OSError:
        if not final.exists():
            raise
        _remove(partial)


def mirror_of(mirror: Path, remote: str, commits: list[str]) -> Path:
    """A bare repository at ``mirror`` holding ``commits`` (and their history) of the git remote
    ``remote``: the remote's branches and tags are fetched when one is missing, then each commit
    still missing by its id. ValueError naming the first commit the remote does not hold."""
    import fcntl

    mirror.parent.mkdir(parents=True, exist_ok=True)
    with open(mirror.with_name(f".{mirror.name}.lock"), "a") as lock, _lock_of(mirror):
        fcntl.flock(lock, fcntl.LOCK_EX)  # the runners of one machine may share the folder
        if not (mirror / "HEAD").exists():
            mirror.mkdir(exist_ok=True)
            _git(mirror, "init", "-q", "--bare")

        def missing() -> list[str]:
            out = []
            for commit in dict.fromkeys(commits):
                try:
                    _git(mirror, "cat-file", "-e", f"{commit}^{{commit}}")
                except ValueError:
                    out.append(commit)
            return out

        if missing():
            _git(mirror, "fetch", "-q", "--tags", remote, "+refs/heads/*:refs/remotes/eval/*")
        for commit in missing():
            try:
                _git(mirror, "fetch", "-q", "--no-tags", remote, commit)
            except ValueError:
                raise ValueError(f"it does not hold commit {commit} (push it, or name another --remote)") from None
    return mirror


def _installed_into(view: Any, source: Path, repo: Path) -> None:
    """The checkout's installed dependency folders and generated files, at the same places in ``repo``."""
    import shutil

    relative = [m.target for m in view.mounts if m.in_tree and not m.writable
                and Path(m.source).resolve().is_relative_to(source)] + list(view.carried)
    for path in relative:
        origin, target = source / path, repo / path
        if target.exists() or not origin.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_dir():
            done = subprocess.run(["cp", "-al", str(origin), str(target)], capture_output=True)
            if done.returncode != 0:  # another file system: a copy
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(origin, target, symlinks=True)
        else:
            shutil.copy2(origin, target)


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _lock_of(path: Path) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(str(path), threading.Lock())


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Grade:
    """What the hidden tests and the project's own check said of a run's final tree."""

    resolved: bool
    detail: str
    commit: str | None = None  # the graded commit: the final tree with the hidden tests added
    hidden: dict[str, Any] = field(default_factory=dict)
    existing: list[dict[str, Any]] = field(default_factory=list)
    # A case graded by test: {"fail_to_pass": {"passed": n, "failed": [ids]},
    # "pass_to_pass": {"checked": n, "failed": [ids]}}.
    tests: dict[str, Any] = field(default_factory=dict)
    # The lines of the run's change the tamper check flags (docs/forged-verdicts.md): a suspected
    # forgery is never resolved, whatever the tests said, and is counted apart.
    suspected_forgery: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def grade_run(repo: Path, source: Path, case: Case, head: str | None, *, settings: Any, view: Any,
              checks: list[str], base_passes: bool) -> Grade:
    """Grade the tree at ``head`` (the run's task branch; None: the run changed nothing): the
    hidden tests added to it must pass, and so must the project's check commands (``checks``),
    unless the base failed them already (``base_passes`` False: then only the hidden tests judge).
    A case curated at suite build (``case.grading``) is graded by its lists instead: every
    FAIL_TO_PASS test passes and no PASS_TO_PASS test fails (``curation.grade_listed``)."""
    if head is None:
        return Grade(False, "the run committed no change")
    grade = _graded(repo, source, case, head, settings=settings, view=view, checks=checks, base_passes=base_passes)
    from orchestrator.worktree.gitops import changed_texts
    from orchestrator.worktree.tamper import scan

    flagged = scan(changed_texts(repo, "main", head))
    if flagged:
        lines = "; ".join(f"{found.location} ({found.rule})" for found in flagged[:5])
        grade.suspected_forgery = [found.to_dict() for found in flagged]
        grade.detail = (f"suspected forgery: the change reaches into the test machinery ({lines}), so it is not"
                        f" resolved whatever its tests say; {grade.detail}")
        grade.resolved = False
    return grade


def _graded(repo: Path, source: Path, case: Case, head: str, *, settings: Any, view: Any, checks: list[str],
            base_passes: bool) -> Grade:
    commit = build_tree(repo, case, head, source=source)
    if case.grading:
        return _graded_by_lists(repo, case, commit, settings, view)
    run = sandbox_run(repo, settings, view, setup=case.setup, env=case.env)  # its range's, if any
    passed, why = run(commit, case.hidden_command or "")
    hidden = {"command": case.hidden_command, "passed": passed, "detail": why}
    if not passed:
        return Grade(False, f"the hidden tests fail ({why})", commit, hidden)
    existing = []
    for command in checks if base_passes else []:
        ok, reason = run(commit, command)
        existing.append({"command": command, "passed": ok, "detail": reason})
        if not ok:
            return Grade(False, f"the hidden tests pass, the project's own `{command}` fails ({reason})", commit,
                         hidden, existing)
    tail = ("the project's own check passes" if existing else
            "the base fails the project's own check, so only the hidden tests judge" if checks else
            "no project check to run")
    return Grade(True, f"the hidden tests pass; {tail}", commit, hidden, existing)


def _graded_by_lists(repo: Path, case: Case, commit: str, settings: Any, view: Any) -> Grade:
    """The hidden command and the case's whole check on ``commit`` (one tree copy), judged by
    the case's FAIL_TO_PASS and PASS_TO_PASS tests (or by exit status, ``grading == "exit"``)."""
    from orchestrator.evals.curation import grade_listed

    results = sandbox_results(repo, settings, view, setup=case.setup, env=case.env)
    commands = list(dict.fromkeys([case.hidden_command or "", *([case.check_command] if case.check_command else [])]))
    by_command = dict(zip(commands, results(commit, commands)))
    resolved, detail, tests = grade_listed(case, by_command, results.timeout_s)
    shown = [{"command": command, "passed": passed, "detail": why}
             for command, (passed, why) in ((c, describe(r, results.timeout_s)) for c, r in by_command.items())]
    return Grade(resolved, detail, commit, shown[0], shown[1:], tests)


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON, replacing the file at once (a reader never sees half of it)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, replacing the file at once (each writer, process or thread,
    through a temporary file of its own: two writers of one file never take each other's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
