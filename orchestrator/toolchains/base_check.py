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
from typing import Any, Sequence

from orchestrator.sandbox import cache_layers
from orchestrator.sandbox.allowlist import ARGS_PLACEHOLDER, PATH_PLACEHOLDER, is_allowed, parse_allow_entry, split
from orchestrator.sandbox.project_view import ProjectView
from orchestrator.sandbox.testcounts import TestCounts
from orchestrator.toolchains.caches import project_cache_root

__all__ = ["BaseCheck", "BaseFailing", "check_commands", "run_base_check"]

_VERSION = 1


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

    def judge(self, results: Sequence[Any]) -> list[Any]:
        """With failures allowed on the base: ``results`` (validation results) where a command that
        also failed on the base passes unless it fails worse. With test counts on both sides, worse
        is more failed or errored tests, or fewer passed ones, than on the base; without them the
        command is not held against the patch (its failure is the base's), and says so."""
        failing = self.failures()
        judged = []
        for result in results:
            base = failing.get(result.command)
            if result.passed or result.rejected or base is None or result.limit or result.reason == "timeout":
                judged.append(result)
                continue
            now, then = result.tests, TestCounts.from_dict(base.get("tests"))
            if now is not None and then is not None and (
                    now.failed + now.errors > then.failed + then.errors or now.passed < then.passed):
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
        how = " (cached for this commit)" if self.cached else ""
        state = "passes" if self.passed else f"fails ({len(self.failures())} of {len(self.results)} command(s))"
        return f"base check on {self.commit[:12]}: {', '.join(self.commands)} {state}{how}"

    def failure_text(self, lines: int = 30) -> str:
        """What failed, with each failing command's last output lines."""
        out = [f"the base tree {self.commit[:12]} fails its check before any worker was called; it is not the"
               " task's fault, so the task stays open. Fix the base (or pass --allow-failing-base to count only"
               " new failures against the patch):"]
        for command, result in self.failures().items():
            why = result.get("reason") or f"exit {result.get('exit_code')}"
            counts = TestCounts.from_dict(result.get("tests"))
            out.append(f"- `{command}`: {why}" + (f" (tests {counts.line()})" if counts else ""))
            text = "\n".join(p for p in (result.get("stdout_tail"), result.get("stderr_tail")) if p)
            out += [f"    {line}" for line in [ln for ln in text.splitlines() if ln.strip()][-lines:]]
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


def _key(commit: str, commands: Sequence[str], view: ProjectView | None) -> str:
    fingerprint = json.dumps([commit, list(commands), repr(view.env) if view else "", [
        (m.source, m.target, m.writable) for m in (view.mounts if view else ())],
        list(view.carried) if view else [], list(view.setup) if view else []])
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:32]


def run_base_check(repo: Path, commit: str, commands: Sequence[str], settings: Any, view: ProjectView | None,
                   hidden: Sequence[str] = ()) -> BaseCheck:
    """Run ``commands`` on ``commit`` of ``repo`` in the validation sandbox (``settings``: the
    ``[validation]`` table), writing the build caches of ``commit``; or read the answer kept for the
    same commit, commands and view, while those caches are kept."""
    from orchestrator.sandbox.validation import run_configured

    folder = project_cache_root(repo) / "base-checks"
    path = folder / f"{_key(commit, commands, view)}.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("version") == _VERSION and stored.get("commit") == commit and cache_layers.warm(
                view, repo, commit):
            return BaseCheck(commit, list(commands), stored["results"], cached=True)
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    results = run_configured(list(commands), settings, cwd=repo, commit=commit, environment=cache_layers.writing(view),
                             hidden=hidden)
    check = BaseCheck(commit, list(commands), [r.to_dict() for r in results])
    if not check.passed:
        # Only a pass is kept: a failure may be the environment's (dependencies installed since).
        return check
    folder.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(check.to_dict()), encoding="utf-8")
    os.replace(temporary, path)
    return check
