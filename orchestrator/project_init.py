"""``mesh init``: one command that sets a project up for ``mesh run``.

It detects the project's toolchains (``orchestrator.toolchains``), writes a commented
``mesh.toml`` with the validation allowlist and the check command they call for, initialises the
tracker when the project has none, adds to ``.gitignore`` what must stay out of git (installed
dependencies, the tracker's database) and is not ignored yet, and says what to run next: the
install command of dependencies not yet installed, then the first task and run. Nothing that
exists is overwritten: a ``mesh.toml`` already there is left as is (``force`` rewrites it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.toolchains.base import DependenciesMissing, ToolchainMissing
from orchestrator.toolchains.view import inspect

__all__ = ["InitReport", "InitError", "init_project"]

_TRACKER_IGNORE = ".beads/*.db*"


class InitError(Exception):
    """The project cannot be set up (not a git repository, a toolchain missing): exit 2."""


@dataclass
class InitReport:
    """What ``mesh init`` found and did, and the commands to run next."""

    repo: Path
    toolchains: list[str] = field(default_factory=list)
    config: str = ""  # "written", "rewritten" or "kept"
    tracker: str = ""  # "created (prefix ...)" or "found at ..."
    ignored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    next: list[str] = field(default_factory=list)
    allow: list[str] = field(default_factory=list)
    check: list[str] = field(default_factory=list)
    # What the toolchains found worth saying: a Django project's test runner, a workspace's packages.
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report as terminal lines."""
        out = [f"project: {self.repo}",
               "toolchains: " + (", ".join(self.toolchains) or "none recognised (mesh.toml lists no command)"),
               *(f"  {note}" for note in self.notes), f"mesh.toml: {self.config}", f"tracker: {self.tracker}"]
        if self.ignored:
            out.append(".gitignore: added " + ", ".join(self.ignored))
        out += [f"not installed: {line}" for line in self.missing]
        out.append("next:")
        out += [f"  {command}" for command in self.next]
        return out


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL)


def _config_text(toolchains: list[str], allow: list[str], check: list[str]) -> str:
    lines = ["# mesh configuration, written by `mesh init` for the toolchains found here:",
             f"#   {', '.join(toolchains) or 'none recognised'}",
             "# Every key and its default: docs/config.md. Toolchains and what validation sees of them:",
             "# docs/toolchains.md.", "", "[validation]",
             "# The commands validation may run. A model proposes them; only commands matching an entry",
             "# run, without a shell, in a sandbox without network. `{args...}` admits further plain",
             "# arguments (never options such as -q: name those in an entry of their own); `{path}` admits",
             "# one path inside the repository.",
             "allow = [" + "".join(f"\n    {json.dumps(entry)}," for entry in allow) + ("\n]" if allow else "]")]
    if check:
        lines += ["# The project's check, run on the tree a task starts from before any model is called",
                  "# (once per commit): a failing base stops the run, the task left open.",
                  "check = [" + ", ".join(json.dumps(c) for c in check) + "]"]
    lines += ["# Let a run start on a base that fails its check, counting only new failures:",
              "# allow_failing_base = true",
              "# Untracked files of the checkout to copy into the tree under test (globs), and commands",
              "# run in the sandbox before each validation command (they must match `allow`):",
              "# carry = []", "# setup = []", ""]
    return "\n".join(lines)


def _ignore(repo: Path, wanted: list[str]) -> list[str]:
    """Append to ``.gitignore`` each of ``wanted`` git does not ignore yet; returns those added."""
    added = []
    for line in dict.fromkeys(wanted):
        probe = line.rstrip("/").replace("*", "x") + ("/x" if line.endswith("/") else "")
        if _git(repo, "check-ignore", "-q", "--no-index", probe).returncode != 0:
            added.append(line)
    if added:
        path = repo / ".gitignore"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        prefix = "" if not text or text.endswith("\n") else "\n"
        path.write_text(text + prefix + "# added by mesh init\n" + "".join(f"{line}\n" for line in added),
                        encoding="utf-8")
    return added


def init_project(repo: Path, *, prefix: str | None = None, force: bool = False, actor: str | None = None) -> InitReport:
    """Set ``repo`` (a git checkout, or a folder inside one) up for ``mesh run``; see the module
    docstring. Raises InitError for a folder outside git or a toolchain that is not installed."""
    from tracker.jsonl import import_jsonl
    from tracker.store import Tracker
    from orchestrator.workspace import TrackerUnavailable, open_found_tracker

    done = _git(Path(repo), "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise InitError(f"{repo} is not in a git repository; run `git init` there first")
    root = Path(done.stdout.strip())
    report = InitReport(repo=root)
    try:
        try:
            inspection = inspect(root)
        except DependenciesMissing as exc:
            report.missing.append(str(exc))
            inspection = inspect(root, check_installed=False)
    except ToolchainMissing as exc:
        raise InitError(str(exc)) from None
    report.toolchains = [f.label + (f" in {f.folder}/" if f.folder else "") for f in inspection.found]
    report.notes = [note for f in inspection.found for note in f.sees
                    if note.startswith(("a Django project", "a pnpm workspace", "an npm workspace", "a npm workspace",
                                        "a yarn workspace", "packageManager pins", "the project pins Node"))]
    report.allow = list(dict.fromkeys(entry for f in inspection.found for entry in f.allow))
    report.check = inspection.check_commands()
    config = root / "mesh.toml"
    if config.exists() and not force:
        report.config = f"kept {config} (mesh init --force rewrites it)"
    else:
        report.config = f"{'rewritten' if config.exists() else 'written'}: {config}"
        config.write_text(_config_text(report.toolchains, report.allow, report.check), encoding="utf-8")
    try:
        tracker = open_found_tracker(None, actor, None, repo=root)
        report.tracker = f"found: {tracker.path}"
        tracker.close()
    except TrackerUnavailable:
        beads = root / ".beads"
        if prefix is None and not (beads / "config.yaml").is_file():
            # bd's own default: the project's folder name (a bd workspace's config.yaml names its own).
            prefix = re.sub(r"[^a-z0-9]", "", root.name.lower())[:12] or None
        with Tracker.init(root, prefix=prefix, actor=actor) as tracker:
            report.tracker = f"created: {tracker.path} (prefix {tracker.get_config('issue_prefix')})"
            export = beads / "issues.jsonl"
            if export.is_file():
                # A bd workspace shares its issues through git as this export: they become the tracker's.
                imported = import_jsonl(tracker, export)
                report.tracker += f"; imported {imported.created} issue(s) from {export}"
    report.ignored = _ignore(root, [*(line for f in inspection.found for line in f.gitignore), _TRACKER_IGNORE])
    install = [line.rsplit("with: ", 1)[-1] for line in report.missing]
    report.next = [*install, "git add mesh.toml .gitignore && git commit -m 'mesh configuration'",
                   'mesh tracker create "A first task" --type task --label plan:first --acceptance "..." ',
                   "mesh run --label plan:first --worker claude-code   # or --backend anthropic, --worker-cmd ..."]
    return report
