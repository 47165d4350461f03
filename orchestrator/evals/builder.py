"""``mesh eval suite --from-git`` as a library: candidates from history, verified in the sandbox,
written as a JSONL suite, with each dropped commit's reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracker.errors import TrackerError

from orchestrator.evals.suite import Case, Dropped, from_git, sandbox_run, verify, write_suite

__all__ = ["BuiltSuite", "SuiteError", "build_suite", "hidden_command_for"]


class SuiteError(Exception):
    """The suite cannot be built (not a repository, no test command known, a bad config): exit 2."""


@dataclass
class BuiltSuite:
    """What ``build_suite`` kept and dropped, and where it wrote the suite."""

    out: Path
    kept: list[Case] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    command: str = ""

    def lines(self) -> list[str]:
        """The outcome as terminal lines: one per kept case, one per dropped commit."""
        out = [f"hidden tests run with: {self.command}"]
        out += [f"kept    {case.id}  {case.title[:70]}  ({len(case.hidden_tests)} test file(s))" for case in self.kept]
        out += [f"dropped {d.commit[:12]}  {d.subject[:50]}: {d.why}" for d in self.dropped]
        out.append(f"{len(self.kept)} case(s) written to {self.out}; {len(self.dropped)} commit(s) dropped")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {"suite": str(self.out), "command": self.command,
                "kept": [case.model_dump(exclude_defaults=True) for case in self.kept],
                "dropped": [{"commit": d.commit, "subject": d.subject, "why": d.why} for d in self.dropped]}


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


def build_suite(repo: Path, config_file: Path | None, *, out: Path, command: str | None = None, max_files: int = 20,
                max_lines: int = 400, limit: int | None = None, db: Any = None) -> BuiltSuite:
    """Build and write the suite of ``repo`` (see ``orchestrator.evals.suite``)."""
    from orchestrator.config import ConfigError, load_config
    from orchestrator.toolchains.base import DependenciesMissing, ToolchainMissing
    from orchestrator.toolchains.view import inspect
    from orchestrator.workspace import TrackerUnavailable, open_found_tracker
    from orchestrator.worktree.gitops import GitError, repo_root

    try:
        root = repo_root(Path(repo))
        config = load_config(root, config_file)
        inspection = inspect(root, config.validation)
    except (GitError, ConfigError, DependenciesMissing, ToolchainMissing) as exc:
        raise SuiteError(str(exc)) from None
    command = command or hidden_command_for(inspection.found)
    if not command:
        raise SuiteError("no test runner found for this project; name the hidden tests' command with --command"
                         " (e.g. --command 'python -m pytest {tests}')")
    tracker = None
    try:
        tracker = open_found_tracker(db, None, config.tracker.url, repo=root)
    except TrackerUnavailable:
        tracker = None

    def issue_of(word: str) -> dict | None:
        try:
            return tracker.get(word) if tracker is not None else None
        except TrackerError:  # any word of a message may look like an id; a miss is no issue
            return None

    try:
        candidates, dropped = from_git(root, max_files=max_files, max_lines=max_lines, limit=limit, command=command,
                                       issue_of=issue_of if tracker is not None else None)
        kept, refused = verify(root, candidates, sandbox_run(root, config.validation, inspection.view))
    finally:
        if tracker is not None:
            tracker.close()
    write_suite(out, kept)
    return BuiltSuite(out=out, kept=kept, dropped=[*dropped, *refused], command=command)
