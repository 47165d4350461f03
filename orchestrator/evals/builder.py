"""``mesh eval suite --from-git`` as a library: candidates from history, verified in the sandbox,
written as a JSONL suite, with each dropped commit's reason."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tracker.errors import TrackerError

from orchestrator.evals.history import TASK_TEXTS, candidates, ranges_of, seal
from orchestrator.evals.curation import curate, kept_note, whole_check
from orchestrator.evals.suite import Case, CommandUnusable, Dropped, sandbox_results, write_suite

__all__ = ["BuiltSuite", "SuiteError", "build_suite", "hidden_command_for", "project"]


class SuiteError(Exception):
    """The suite cannot be built (not a repository, no test command known, a bad config): exit 2."""


@dataclass
class BuiltSuite:
    """What ``build_suite`` kept and dropped, and where it wrote the suite."""

    out: Path
    kept: list[Case] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    command: str = ""
    looked_at: int = 0
    stopped_at_limit: bool = False
    notes: dict[str, str] = field(default_factory=dict)  # a kept SWE-bench instance's line: what it adds
    unit: str = "commit"  # what a dropped line names: a commit, or a SWE-bench instance
    order: str = "newest first"
    # A kept instance whose environment names its own hidden tests' command: that command.
    own_commands: dict[str, str] = field(default_factory=dict)

    def header(self) -> str:
        """Which command runs the hidden tests: the suite's, and the environments' own."""
        if not self.own_commands:
            return f"hidden tests run with: {self.command}"
        counts = Counter(self.own_commands.values())
        theirs = "; ".join(f"{command} ({n})" for command, n in counts.items())
        rest = len(self.kept) - len(self.own_commands)
        return (f"hidden tests run with: {self.command}" + (f" ({rest} case(s))" if rest else " (no case)")
                + f"; with their environment's own command: {theirs}")

    def lines(self) -> list[str]:
        """The outcome as terminal lines: one per kept case, one per dropped commit."""
        out = [self.header()]
        out += [f"kept    {case.id}  {case.instance_id or (case.reference or '')[:12]}  {case.title[:60]}"
                f"  ({len(case.hidden_paths())} test file(s)"
                + ("" if any(path in (case.hidden_command or "") for path in case.hidden_paths())
                   else f"; run by the whole check: {case.hidden_command}") + kept_note(case)
                + self.notes.get(case.instance_id or "", "") + ")" for case in self.kept]
        out += [f"dropped {_short(d.commit)}  {d.subject[:50]}: {d.why}" for d in self.dropped]
        tail = (f"; the limit was reached: {'older commits' if self.unit == 'commit' else 'the others'} were not"
                " looked at") if self.stopped_at_limit else ""
        out.append(f"{len(self.kept)} case(s) written to {self.out}; {len(self.dropped)} {self.unit}(s) dropped"
                   f" ({self.looked_at} looked at, {self.order}{tail})")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {"suite": str(self.out), "command": self.command, "looked_at": self.looked_at,
                "stopped_at_limit": self.stopped_at_limit,
                "kept": [case.model_dump(exclude_defaults=True) for case in self.kept],
                "dropped": [{"commit": d.commit, "subject": d.subject, "why": d.why} for d in self.dropped],
                **({"notes": dict(self.notes)} if self.notes else {}),
                **({"own_commands": dict(self.own_commands)} if self.own_commands else {})}


def hidden_command_for(found: list[Any]) -> str | None:
    """The command that runs a case's hidden test files, from the project's first toolchain that
    has a check command: its test runner on ``{tests}`` where the runner takes files, else the
    whole check (Go and cargo run packages, not files)."""
    for item in found:
        if not item.check:
            continue
        if item.toolchain == "python":
            return f"{item.check} {{tests}}"
        if item.toolchain == "node":
            return "node --test {tests}"
        return item.check
    return None


def _short(name: str) -> str:
    """A commit's short id; any other name (a SWE-bench instance's) whole."""
    return name[:12] if len(name) == 40 and all(c in "0123456789abcdef" for c in name) else name


def project(repo: Path, config_file: Path | None, command: str | None,
            environments: Callable[[Any], bool] = lambda config: False) -> tuple[Path, Any, Any, str, str | None]:
    """(the repository's root, its config, its toolchains' inspection, the hidden tests' command:
    ``command``, else the project's test runner on ``{tests}``, and why the checkout's own
    environment cannot run them); SuiteError when one is missing. The checkout's environment
    missing its dependencies stops nothing when the cases may have environments of their own
    (``environments(config)``): the cases without one are dropped with that reason instead."""
    from orchestrator.config import ConfigError, load_config
    from orchestrator.toolchains.base import DependenciesMissing, ToolchainMissing
    from orchestrator.toolchains.view import inspect
    from orchestrator.worktree.gitops import GitError, repo_root

    missing = None
    try:
        root = repo_root(Path(repo))
        config = load_config(root, config_file)
        try:
            inspection = inspect(root, config.validation)
        except DependenciesMissing as exc:
            if not environments(config):
                raise
            missing = str(exc)
            inspection = inspect(root, config.validation, check_installed=False)
    except (GitError, ConfigError, DependenciesMissing, ToolchainMissing) as exc:
        raise SuiteError(str(exc)) from None
    command = command or hidden_command_for(inspection.found)
    if not command:
        raise SuiteError("no test runner found for this project; name the hidden tests' command with --command"
                         " (e.g. --command 'python -m pytest {tests}')")
    return root, config, inspection, command, missing


def build_suite(repo: Path, config_file: Path | None, *, out: Path, command: str | None = None, max_files: int = 20,
                max_lines: int = 400, limit: int | None = None, db: Any = None, since: str | None = None,
                until: str = "HEAD", timeout_s: float | None = None,
                progress: Callable[[str], None] | None = None, merges: bool = False,
                task_text: str = "message", runs: int = 3) -> BuiltSuite:
    """Build and write the suite of ``repo`` (see ``orchestrator.evals.suite``): the history of
    ``until`` after ``since`` is walked newest first, each candidate verified as it comes, until
    ``limit`` cases are kept; the suite lists them oldest first, sealed (``case-001``, ...).
    ``progress`` hears of each candidate before its tests run (a hidden test that hangs is then
    seen at once). ``merges``: merges are cases too; ``task_text``: ``message``, ``subject`` or
    ``issue`` (``history.task_text``). A case whose base comes before an ``[[eval.history]]``
    range's ``before`` runs with its setup and environment. The base and the reference of each
    case run ``runs`` times with the hidden command and the whole check (``curation.curate``)."""
    from orchestrator.workspace import TrackerUnavailable, open_found_tracker
    from orchestrator.worktree.policy import PatchPolicy

    root, config, inspection, command, _ = project(repo, config_file, command)
    for rev in (since, until):
        if rev is not None and not _is_commit(root, rev):
            raise SuiteError(f"{rev!r} names no commit of {root}")
    if task_text not in TASK_TEXTS:
        raise SuiteError(f"--task-text {task_text!r}: one of {', '.join(TASK_TEXTS)}")
    try:
        ranges = ranges_of(root, config.eval.history)
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
    tracker = None
    try:
        tracker = open_found_tracker(db, None, config.tracker.url, repo=root)
    except TrackerUnavailable:
        tracker = None
    if task_text == "issue" and tracker is None:
        raise SuiteError("--task-text issue takes each case's text from the tracker issue its commit names;"
                         " no tracker found here (--db names one)")

    def issue_of(word: str) -> dict | None:
        try:
            return tracker.get(word) if tracker is not None else None
        except TrackerError:  # any word of a message may look like an id; a miss is no issue
            return None

    # The whole check gives each case's PASS_TO_PASS tests, and checks a commit whose test
    # changes are data only.
    whole = whole_check(config.validation, list(inspection.view.checks), command)
    if not whole:
        raise SuiteError("no whole check: the project's tests as a whole cannot be run, so no case could say which"
                         " tests a run must not break (PASS_TO_PASS); set validation.check")
    built = BuiltSuite(out=out, command=command)
    run = sandbox_results(root, config.validation, inspection.view, timeout_s)
    policy = PatchPolicy.from_config(config.patch)
    try:
        for found in candidates(root, max_files=max_files, max_lines=max_lines, command=command, since=since,
                                until=until, issue_of=issue_of if tracker is not None else None, whole=whole,
                                merges=merges, task=task_text, ranges=ranges):
            if limit is not None and len(built.kept) >= limit:
                built.stopped_at_limit = True
                break
            built.looked_at += 1
            if isinstance(found, Dropped):
                built.dropped.append(found)
                continue
            if progress is not None:  # the user's screen: the commit, not the case's (sealed) id
                progress(f"checking {(found.reference or '')[:12]}  {found.title[:60]} ({len(built.kept)} kept so far)")
            case_run = sandbox_results(root, config.validation, inspection.view, timeout_s, setup=found.setup,
                                       env=found.env) if found.setup or found.env else run
            kept, why = curate(root, found, case_run, whole=whole, runs=runs, policy=policy)
            if kept is not None:
                built.kept.append(kept)
            else:
                built.dropped.append(Dropped(found.reference or found.base, found.title, why))
    except CommandUnusable as exc:
        what = "the whole check" if str(exc).startswith(repr(whole)) else "the hidden tests' command"
        raise SuiteError(f"{what} {exc}; fix --command, or validation.allow / check") from None
    finally:
        if tracker is not None:
            tracker.close()
    built.kept = seal(built.kept[::-1])  # oldest first, as history reads; ids that name no commit
    built.dropped.reverse()
    write_suite(out, built.kept)
    return built


def _is_commit(root: Path, rev: str) -> bool:
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "-q", "--end-of-options",
                           f"{rev}^{{commit}}"], capture_output=True, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")})
    return done.returncode == 0
