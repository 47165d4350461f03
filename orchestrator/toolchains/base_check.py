"""The base check: the project's check command on the base tree, before any worker call.

A task cannot be judged on a tree whose tests already fail: every patch would fail validation,
and the run would pay for a full team's rounds before blocking the task for a fault that is not
its own. So before the first worker call of a task, mesh runs the check command(s) on the tree
the task starts from, in the validation sandbox, exactly as validation will. The answer is kept
per base commit, command and validation view (``<build caches>/base-checks/``; a pass only, since a
failure may be the environment's), so the next task cut from the same commit does not pay again.
The base check is the one validation that writes the project's build caches (those of the commit
it checks: ``orchestrator.sandbox.cache_layers``), so a kept pass is used only while they are kept.

The commands are ``[validation] check`` when set, else the detected toolchains' check commands
that ``validation.allow`` admits (none admitted: no base check, said in preflight). A failing base
stops the run (``BaseFailing``: exit 5, the task left open); with ``allow_failing_base`` the
failures are recorded instead and only new ones count against a patch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from orchestrator.sandbox import cache_layers
from orchestrator.sandbox.allowlist import ARGS_PLACEHOLDER, PATH_PLACEHOLDER, is_allowed, parse_allow_entry, split
from orchestrator.sandbox.project_view import ProjectView
from orchestrator.sandbox.testcounts import TestCounts
from orchestrator.toolchains import base_results
from orchestrator.toolchains.caches import project_cache_root
from roles.validation_text import failure_text

__all__ = ["BaseCheck", "BaseFailing", "check_commands", "note_validated", "passed_before", "record_passed",
           "run_base_check"]

# What makes a command's tests readable, said where mesh cannot judge one test by test.
UNREAD_HINT = ("name a runner mesh reads (pytest, unittest, Django's manage.py test, go test, cargo test, Jest, Vitest,"
               " node --test, mocha, tape) in the command or its package.json script; docs/toolchains.md")

_VERSION = 1
# What no failing base excuses: the run ended before its runner reported, or its report lies.
NEVER_PASSES = ("no_test_report", "test_report_unreadable", "runner_forged")


class BaseFailing(Exception):
    """The base tree fails its check: ``check`` says how."""

    def __init__(self, check: "BaseCheck"):
        super().__init__(check.failure_text())
        self.check = check


@dataclass
class BaseCheck:
    """The outcome of the check commands on one base commit (``results``: result dicts)."""

    commit: str
    commands: list[str]
    results: list[dict[str, Any]] = field(default_factory=list)
    cached: bool = False

    @property
    def passed(self) -> bool:
        """Every command ran and passed."""
        return bool(self.results) and all(r.get("passed") for r in self.results)

    def failures(self) -> dict[str, dict[str, Any]]:
        """The failing commands' results by command."""
        return {r["command"]: r for r in self.results if not r.get("passed")}

    def judge(self, results: Sequence[Any],
              statuses: Callable[[str], base_results.BaseStatuses | None] = lambda command: None) -> list[Any]:
        """With failures allowed on the base: ``results`` (validation results) where a command that
        also failed on the base passes unless it fails worse. Where the runner names its tests
        (``statuses``: the base's, by command), worse is a test that passed on the base and fails
        or is gone, a new failing test, or more modules that cannot be collected; the note names
        what the patch fixed and what still fails. With counts alone, worse is more failed or
        errored tests, fewer passed ones or fewer run; without counts (mesh reads no test of the
        command) it stays failed, and says why: a new failure would look like the base's. A command that ended without its report,
        with one that cannot be read, or whose control tests were forged (``NEVER_PASSES``) never
        passes; one that ran no test passes only where the base ran none either."""
        failing = self.failures()
        judged = []
        for result in results:
            base = failing.get(result.command)
            if result.passed or result.rejected or base is None or result.limit or result.reason == "timeout" \
                    or result.reason in NEVER_PASSES:
                judged.append(result)
                continue
            known = statuses(result.command)
            if known is not None and result.run is not None:
                found = base_results.compare(known, result.run)
                summary = found.line()
                if found.worse:
                    note = f"mesh: held against the base tree {self.commit[:12]} test by test: {summary}"
                    judged.append(replace(result, reason="tests_broken", lost=found.lost(),
                                          stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip()))
                    continue
                note = (f"mesh: this command fails on the base tree {self.commit[:12]} as well, and no test that"
                        f" passed there fails now" + (f" ({summary})" if summary else "")
                        + ": with allow_failing_base only new failures count against the patch")
                judged.append(replace(result, passed=True, reason="fails_on_base_too",
                                      stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip()))
                continue
            now, then = result.tests, TestCounts.from_dict(base.get("tests"))
            if now is None or then is None:
                # No test of it is read, here or on the base: a newly failing, skipped or deleted
                # test would look the same as the base's failures. Never passed blind.
                note = (f"mesh: this command fails on the base tree {self.commit[:12]} as well, but mesh reads no"
                        " test of it, so it cannot tell the base's failures from new ones: it counts as failed"
                        f" ({UNREAD_HINT})")
                judged.append(replace(result, stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip()))
                continue
            if (now.failed + now.errors > then.failed + then.errors or now.passed < then.passed
                    or now.ran < then.ran):
                judged.append(result)
                continue
            note = (f"mesh: this command fails on the base tree {self.commit[:12]} as well"
                    + (f" ({then.line()}; now {now.line()})" if now and then else "")
                    + ": with allow_failing_base only new failures count against the patch")
            judged.append(replace(result, passed=True, reason="fails_on_base_too",
                                  stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip()))
        return judged

    def line(self) -> str:
        """One preflight line."""
        how = " (cached for this tree)" if self.cached else ""
        state = "passes" if self.passed else f"fails ({len(self.failures())} of {len(self.results)} command(s))"
        # A check whose runner mesh does not read is judged by its exit status alone: say so.
        blind = [r["command"] for r in self.results if not r.get("tests") and not r.get("rejected")
                 and r.get("exit_code") is not None]
        note = (f"; tests not counted for {', '.join(blind)} (mesh does not read its test runner: a skipped or"
                " deleted test goes unseen; docs/toolchains.md lists the runners it reads)") if blind else ""
        return f"base check on {self.commit[:12]}: {', '.join(self.commands)} {state}{how}{note}"

    def failure_text(self, lines: int = 30, repo: Path | None = None) -> str:
        """What failed, with each failing command's last output lines; first, when a module the
        commands could not import is a dependency the project's ``repo`` declares in a group or
        an extra its environment was made without, the install that brings it."""
        missing = _missing_group(repo, self.failures().values()) if repo is not None else None
        if missing is not None:
            return missing
        unread = [command for command, result in self.failures().items() if not result.get("tests")]
        remedy = ("pass --allow-failing-base to count only new failures against the patch" if not unread else
                  f"--allow-failing-base cannot help: mesh reads no test of {', '.join(f'`{c}`' for c in unread)}, so"
                  f" it could not tell the base's failures from new ones; {UNREAD_HINT}")
        out = [f"the base tree {self.commit[:12]} fails its check before any worker was called; it is not the"
               f" task's fault, so the task stays open. Fix the base (or {remedy}):"]
        for command, result in self.failures().items():
            why = result.get("reason") or f"exit {result.get('exit_code')}"
            counts = TestCounts.from_dict(result.get("tests"))
            out.append(f"- `{command}`: {why}" + (f" (tests {counts.line()})" if counts else ""))
            # Its failing tests with their own messages first, then its output's last lines.
            out += [f"    {line}" for line in failure_text(result, tail_lines=lines).splitlines() if line.strip()]
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        """The form kept in the cache and in a run's preflight checkpoint."""
        return {"version": _VERSION, "commit": self.commit, "commands": self.commands, "results": self.results}


def _family(tokens: Sequence[str]) -> tuple[str, ...]:
    """What makes two commands the same check: the program (any ``python3.X`` is ``python``)
    and its sub-command (``-m unittest``, ``test``)."""
    program = os.path.basename(tokens[0]) if tokens else ""
    if re.fullmatch(r"python(3(\.\d+)?)?", program):
        return ("python", *tokens[1:3]) if tokens[1:2] == ["-m"] else ("python",)
    return (program, *tokens[1:2])


def check_commands(settings: Any, detected: Sequence[str]) -> list[str]:
    """``settings.check`` when set; else the ``detected`` check commands ``settings.allow`` admits;
    else, for each detected one, the first exact allowlist entry of the same program and
    sub-command (the project's own way of running it: ``python3 -m unittest discover -s tests``
    for a detected ``python -m unittest``)."""
    if settings.check:
        return list(settings.check)
    admitted = [command for command in dict.fromkeys(detected) if is_allowed(command, settings.allow)]
    if admitted:
        return admitted
    chosen: list[str] = []
    for command in dict.fromkeys(detected):
        family = _family(split(command) or [])
        for entry in settings.allow:
            try:
                tokens = parse_allow_entry(entry)
            except ValueError:
                continue
            if PATH_PLACEHOLDER not in tokens and ARGS_PLACEHOLDER not in tokens and _family(tokens) == family:
                chosen.append(entry)
                break
    return list(dict.fromkeys(chosen))


def _key(tree: str, commands: Sequence[str], view: ProjectView | None) -> str:
    fingerprint = json.dumps([tree, list(commands), base_results.view_key(view)])
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:32]


def run_base_check(repo: Path, commit: str, commands: Sequence[str], settings: Any, view: ProjectView | None,
                   hidden: Sequence[str] = ()) -> BaseCheck:
    """Run ``commands`` on ``commit`` of ``repo`` in the validation sandbox (``settings``: the
    ``[validation]`` table), writing the build caches of ``commit``; or read the answer kept for the
    same commit, commands and view, while those caches are kept."""
    from orchestrator.sandbox.validation import run_configured

    folder = project_cache_root(repo) / "base-checks"
    # Keyed by tree, not commit: a squash of a validated tree, or a merge whose tree was checked,
    # is the same base (``base_results``).
    tree = base_results.tree_of(repo, commit) or commit
    path = folder / f"{_key(tree, commands, view)}.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        # Kept while this commit's build caches are, or passed on another commit with this tree (a
        # squash of a validated tree): its validations start from the nearest ancestor's caches.
        if stored.get("version") == _VERSION and stored.get("tree") == tree and (
                stored.get("commit") != commit or cache_layers.warm(view, repo, commit)):
            return BaseCheck(commit, list(commands), stored["results"], cached=True)
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    results = run_configured(list(commands), settings, cwd=repo, commit=commit, environment=cache_layers.writing(view),
                             hidden=hidden)
    for result in results:
        if result.run is not None:  # each test's status, for the comparison by test
            base_results.save(repo, tree, result.command, base_results.view_key(view), result.run)
    check = BaseCheck(commit, list(commands), [r.to_dict() for r in results])
    if not check.passed:
        # Only a pass is kept: a failure may be the environment's (dependencies installed since).
        return check
    record_passed(repo, check, view, tree)
    return check


def note_validated(repo: Path, commit: str, results: Sequence[Any], view: ProjectView | None, settings: Any) -> bool:
    """After a validation of ``commit`` (a task's tree, or a merged tree at landing): when its
    ``results`` (``ValidationResult``s) include every check command and each passed, keep them as
    a passed base check of that tree, and each command's test statuses as the tree's, so a task
    cut from a commit with this tree (the squash that lands it) pays no base check. True when kept."""
    commands = check_commands(settings, list(view.checks) if view else [])
    by_command = {result.command: result for result in results if not result.rejected}
    if not commands or not all(command in by_command and by_command[command].passed
                               and by_command[command].reason is None for command in commands):
        return False
    tree = base_results.tree_of(repo, commit)
    if tree is None:
        return False
    for command in commands:
        if by_command[command].run is not None:
            base_results.save(repo, tree, command, base_results.view_key(view), by_command[command].run)
    record_passed(repo, BaseCheck(commit, list(commands), [by_command[c].to_dict() for c in commands]), view, tree)
    return True


def passed_before(repo: Path, commit: str, commands: Sequence[str], view: ProjectView | None) -> list[dict] | None:
    """The results of ``commands`` on ``commit``'s tree when a validation already passed them there
    with the same view (a base check, a task's validation, a landing's: the store ``record_passed``
    keeps), each marked as read from that run; None when none did."""
    tree = base_results.tree_of(repo, commit)
    if tree is None or not commands:
        return None
    try:
        stored = json.loads((project_cache_root(repo) / "base-checks" / f"{_key(tree, commands, view)}.json")
                            .read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("version") != _VERSION or stored.get("tree") != tree \
            or not isinstance(stored.get("results"), list):
        return None
    note = f"mesh: this tree ({tree[:12]}) passed these commands before with the same view; not run again"
    return [{**r, "stderr_tail": f"{r.get('stderr_tail') or ''}\n{note}".lstrip(), "reused": True}
            for r in stored["results"] if isinstance(r, dict)]


def record_passed(repo: Path, check: BaseCheck, view: ProjectView | None, tree: str | None = None) -> None:
    """Keep ``check`` (passed) as the base check of its commit's tree: the next task cut from a
    commit with that tree does not run it again."""
    tree = tree or base_results.tree_of(repo, check.commit) or check.commit
    folder = project_cache_root(repo) / "base-checks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_key(tree, check.commands, view)}.json"
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({**check.to_dict(), "tree": tree}), encoding="utf-8")
    os.replace(temporary, path)


def _missing_group(repo: Path, results: Any) -> str | None:
    """The line naming a missing dependency group when a failing command could not import a
    module that ``pyproject.toml`` lists in ``[dependency-groups]`` or an extra."""
    import tomllib

    text = "\n".join(f"{r.get('stdout_tail') or ''}\n{r.get('stderr_tail') or ''}" for r in results)
    modules = set(re.findall(r"No module named '([\w.]+)'", text))
    if not modules:
        return None
    try:
        data = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    groups = {name: items for name, items in (data.get("dependency-groups") or {}).items() if isinstance(items, list)}
    extras = {name: items for name, items in ((data.get("project") or {}).get("optional-dependencies") or {}).items()
              if isinstance(items, list)}

    def names(items: list[Any]) -> set[str]:
        return {re.split(r"[\s\[<>=!~;]", item, 1)[0].lower().replace("-", "_") for item in items if isinstance(item, str)}

    for module in sorted(modules):
        top = module.split(".")[0].lower()
        for kind, table in (("group", groups), ("extra", extras)):
            for name, items in table.items():
                if top in names(items):
                    install = (f"uv sync --group {name}" if kind == "group" and (repo / "uv.lock").exists() else
                               f"pip install --group {name}" if kind == "group" else f"pip install -e '.[{name}]'")
                    return (f"the base check cannot import {module}: the project's environment was made without its"
                            f" {kind} '{name}' (pyproject.toml), which holds it. Install it ({install};"
                            f" `uv sync` installs the dev group), then run mesh again. The task stays open.")
    return None
