"""Each test's outcome on a base tree, kept on this machine, and a candidate held against it.

The base comparison is by test, not by count: a patch that fixes one failing test and breaks
another changes no count, and a patch that deletes two tests and adds two empty ones neither.
So whenever a validation command runs on a base tree (the base check before the first worker
call, or the run's own base comparison), the status of every test its runner reported is kept
here, keyed by the tree (not the commit: two commits with one tree are one base), the command
and the validation view; ``compare`` then says, for a candidate's run, which tests that passed
on the base now fail (``broken``) or are gone (``gone``), which fail that the base did not know
(``new_failures``), which the patch fixed and which still fail.

The statuses are many (one per test), so they live in a local file beside the build caches,
never in a tracker comment: a checkpoint keeps the counts. A run resumed on another machine
without the file runs the base again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from orchestrator.testruns.model import Run

__all__ = ["BaseStatuses", "Comparison", "base_statuses", "compare", "load", "save", "tree_of", "view_key"]

_VERSION = 2  # 2: long test ids kept cut (``testruns.model.bounded_id``)
_FAILING = ("failed", "errored")


@dataclass
class BaseStatuses:
    """The status of each test one command's runner reported on a base tree."""

    runner: str
    statuses: dict[str, str]
    collection_errors: int = 0

    @classmethod
    def of(cls, run: Run) -> BaseStatuses:
        return cls(run.runner, {case.id: case.status for case in run.cases}, len(run.collection_errors))


@dataclass
class Comparison:
    """A candidate's run held against its base's statuses (each a list of test ids)."""

    broken: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    new_failures: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    still_failing: list[str] = field(default_factory=list)
    more_collection_errors: int = 0

    @property
    def worse(self) -> bool:
        """Whether the candidate lost anything the base had: a test broken or gone, a new
        failing test, or more modules that could not be collected."""
        return bool(self.broken or self.gone or self.skipped or self.new_failures or self.more_collection_errors)

    def lost(self, limit: int = 50) -> dict[str, list[str]]:
        """The tests the candidate lost, for a result (``broken``, ``gone``, ``new_failures``)."""
        return {name: ids[:limit] for name, ids in (("broken", self.broken), ("gone", self.gone), ("skipped", self.skipped),
                                                    ("new_failures", self.new_failures)) if ids}

    def line(self, *, limit: int = 10) -> str:
        """``2 test(s) that passed on the base fail: a, b; 1 gone: c`` (what is worse first, then
        what the patch fixed and what still fails)."""
        def named(ids: list[str]) -> str:
            return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")

        lists = ((self.broken, "{n} test(s) that passed on the base fail: {names}"),
                 (self.gone, "{n} test(s) that passed on the base are gone: {names}"),
                 (self.skipped, "{n} test(s) that passed on the base are skipped now: {names}"),
                 (self.new_failures, "{n} new test(s) fail: {names}"))
        parts = [form.format(n=len(ids), names=named(ids)) for ids, form in lists if ids]
        if self.more_collection_errors:
            parts.append(f"{self.more_collection_errors} more test module(s) than on the base could not be collected")
        parts += [f"{label}: {named(ids)}" for ids, label in ((self.fixed, "fixed"),
                                                               (self.still_failing, "still failing as on the base"))
                  if ids]
        return "; ".join(parts)


def compare(base: BaseStatuses, run: Run) -> Comparison:
    """``run`` (a candidate's) held against ``base``, test by test."""
    now = {case.id: case.status for case in run.cases}
    out = Comparison()
    for test, then in base.statuses.items():
        if run.scope is not None and not test.startswith(run.scope):
            continue  # a package the change does not reach: not run, not lost
        status = now.get(test)
        if then == "passed" and status is None:
            out.gone.append(test)  # deleted, renamed or deselected: not tested any more
        elif then == "passed" and status == "skipped":
            out.skipped.append(test)
        elif then == "passed" and status in _FAILING:
            out.broken.append(test)
        elif then in _FAILING and status == "passed":
            out.fixed.append(test)
        elif then in _FAILING and status in _FAILING:
            out.still_failing.append(test)
    out.new_failures = [test for test, status in now.items() if status in _FAILING and test not in base.statuses]
    # A subtest's parent first (``TestX`` before ``TestX/case``): the names a person looks for.
    out.gone.sort(key=lambda test: test.count("/"))
    out.skipped.sort(key=lambda test: test.count("/"))
    out.broken.sort(key=lambda test: test.count("/"))
    out.more_collection_errors = max(0, len(run.collection_errors) - base.collection_errors)
    return out


def tree_of(repo: Path, commit: str) -> str | None:
    """The tree id of ``commit`` in ``repo``; None when git cannot say."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{commit}^{{tree}}"],
                              capture_output=True, text=True, env=env, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def view_key(view: Any) -> str:
    """What makes two validation views give the same results (a ``ProjectView`` or None): its
    variables, mounts, carried files and setup commands."""
    return json.dumps([repr(getattr(view, "env", "")), [
        (m.source, m.target, m.writable) for m in getattr(view, "mounts", ())],
        list(getattr(view, "carried", ())), list(getattr(view, "setup", ()))])


def _path(repo: Path, tree: str, command: str, view_key: str) -> Path:
    # Here, not at the top: ``caches`` loads the sandbox, which ``mesh show`` never uses (it
    # imports this module through ``protocol.proof``).
    from orchestrator.toolchains.caches import project_cache_root

    key = hashlib.sha256(json.dumps([tree, command, view_key]).encode()).hexdigest()[:32]
    return project_cache_root(repo) / "base-tests" / f"{key}.json"


def save(repo: Path, tree: str, command: str, view_key: str, run: Run) -> None:
    """Keep ``run``'s statuses as the base's for ``command`` on ``tree`` (atomically)."""
    path = _path(repo, tree, command, view_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = BaseStatuses.of(run)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"version": _VERSION, "tree": tree, "command": command, "runner": base.runner,
                                     "statuses": base.statuses, "collection_errors": base.collection_errors}),
                         encoding="utf-8")
    os.replace(temporary, path)


def load(repo: Path, tree: str, command: str, view_key: str) -> BaseStatuses | None:
    """The statuses kept for ``command`` on ``tree``; None when none are (or they are damaged)."""
    try:
        raw: Any = json.loads(_path(repo, tree, command, view_key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("version") != _VERSION or raw.get("tree") != tree or \
            raw.get("command") != command or not isinstance(raw.get("statuses"), dict):
        return None
    statuses = {k: v for k, v in raw["statuses"].items() if isinstance(k, str) and isinstance(v, str)}
    errors = raw.get("collection_errors")
    return BaseStatuses(str(raw.get("runner") or ""), statuses, errors if isinstance(errors, int) else 0)


def base_statuses(command: str, covering: Sequence[str], store: tuple[Any, str, str], tree: Any
                  ) -> tuple[str, BaseStatuses] | None:
    """A base tree's statuses for ``command`` read from those kept for a command of ``covering``
    that runs every test it selects (the base check's run of that tree): (that command, the
    statuses of ``command``'s tests), or None when none covers it or its tests are not found
    there. ``store``: (repository, the base's tree, the view's key); ``tree``: a checkout to read
    a package's module path from."""
    from orchestrator.sandbox.allowlist import split
    from orchestrator.testruns.subsets import covered_by

    small = split(command) or []
    for big in covering:
        if big == command or not small:
            continue
        pick = covered_by(small, split(big) or [], tree)
        if pick is None:
            continue
        kept = load(store[0], store[1], big, store[2])
        if kept is None:
            continue
        chosen = {test: status for test, status in kept.statuses.items() if pick(test)}
        if any(status != "skipped" for status in chosen.values()):
            return big, BaseStatuses(kept.runner, chosen, 0)
    return None

