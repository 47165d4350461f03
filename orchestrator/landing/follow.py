"""The integration branch follows its base, as a merge queue's does.

A scope's integration branch (``mesh/land/<scope>``) is cut from a base branch: ``drain.base``
in config, else the branch checked out when the scope's branch was first used, recorded in the
tracker (config key ``mesh.land.base:<integration branch>``) so every later run, drain and
runner of the scope follows the same one. Before a task's worktree is cut (``follow_base``),
the integration branch is brought up to date with that base:

- ``current``: the base holds nothing the branch lacks;
- ``fast-forward``: the branch holds nothing the base lacks (nothing landed yet, or the
  maintainer merged the landed work): the branch moves to the base's tip;
- ``merged``: both moved on: the base is merged in (``git merge-tree``, no checkout), the
  merge commit is validated with the commands of the work landed on the branch, in the
  sandbox every validation uses, and only then does the branch move;
- ``conflict`` (naming the files) or ``validation_failed``: the branch stays where it was and
  no task starts on it (``BaseProblem``): a person merges the base by hand;
- ``no_base``: there is no base branch to follow (a detached HEAD, a base deleted).

The move is a compare-and-set on the branch's tip under the landing lock (with a remote, a
push with ``--force-with-lease``), so it never races a landing; killed anywhere, the same
command follows again (the branch moved or it did not: a merge commit not yet on the branch is
an orphan and made again).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker.store import Tracker

from orchestrator.protocol.checkpoint import load_checkpoints, signing_key
from orchestrator.protocol.faults import crash_point
from orchestrator.protocol.runhead import run_order, trusted_run_heads
from orchestrator.landing.records import base_branch
from orchestrator.worktree.gitops import _MESH_IDENTITY, GitError, _git, _summary

if TYPE_CHECKING:  # a lander is handed in
    from orchestrator.landing.lander import Lander

__all__ = ["BaseProblem", "FollowResult", "base_branch", "follow_base", "follow_scope", "landed_commands"]

_TRIES = 5


@dataclass
class FollowResult:
    """What following the base did: ``result`` is ``current``, ``fast-forward``, ``merged``,
    ``conflict``, ``validation_failed`` or ``no_base``; ``files`` the conflicting paths."""

    result: str
    branch: str
    base: str = ""
    base_sha: str = ""
    tip: str = ""
    files: list[str] = field(default_factory=list)
    detail: str = ""
    validation_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when tasks may start on the branch."""
        return self.result in ("current", "fast-forward", "merged", "no_base")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)

    def line(self) -> str:
        """One line for the terminal: which base commit and which integration commit tasks start from."""
        base = f"base {self.base} at {self.base_sha[:12]}" if self.base_sha else "no base branch to follow"
        start = f"{self.branch} at {self.tip[:12]}"
        if self.result == "current":
            return f"tasks start from {start} ({base}: already holds it)"
        if self.result == "fast-forward":
            return f"tasks start from {start} ({base}: fast-forwarded to it)"
        if self.result == "merged":
            return f"tasks start from {start} ({base}: merged in and validated)"
        if self.result == "no_base":
            return f"tasks start from {start} ({base}{': ' + self.detail if self.detail else ''})"
        what = (f"conflicts in: {', '.join(self.files)}" if self.result == "conflict"
                else f"the merge fails validation: {self.detail}")
        return (f"{self.branch} at {self.tip[:12]} cannot follow {base}: {what}; no task starts. Merge it by hand:"
                f" git checkout {self.branch} && git merge {self.base}")


class BaseProblem(Exception):
    """The integration branch cannot follow its base (a conflict or a failing validation)."""

    def __init__(self, result: FollowResult) -> None:
        super().__init__(result.line())
        self.result = result


def landed_commands(tracker: Tracker, tasks: Sequence[dict], branch: str) -> list[str]:
    """The validation commands of the work landed on ``branch`` (each closing run head's), in
    order, once each: what a merge of the base into the branch must still pass."""
    from orchestrator.landing.catch_up import landed_on

    key, out = signing_key(), []
    for task in tasks:
        checkpoints = load_checkpoints(tracker, task["id"])
        if not landed_on(checkpoints, branch):
            continue
        heads, _ = trusted_run_heads(checkpoints, key, task["id"])
        if heads:
            head = max(heads, key=run_order).payload["artifact"]
            out += [c for c in (head.get("validation") or {}).get("commands") or [] if c not in out]
    return out


def _base_tip(lander: Lander, base: str) -> str:
    """The base's tip: the remote's (fetched) with a remote, else the local branch's; '' when missing."""
    ref = f"refs/heads/{base}"
    if lander.remote:
        fetched = _git(lander.repo, "fetch", "--quiet", "--no-tags", "--", lander.remote,
                       f"+{ref}:refs/remotes/{lander.remote}/{base}", check=False)
        if fetched.returncode != 0:
            if "couldn't find remote ref" in fetched.stderr:
                return ""
            raise GitError("remote_unavailable", f"git fetch {lander.remote} {base}: {_summary(fetched.stderr)}")
        ref = f"refs/remotes/{lander.remote}/{base}"
    return _git(lander.repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).stdout.strip()


def _ancestor(repo: Path, older: str, newer: str) -> bool:
    return _git(repo, "merge-base", "--is-ancestor", older, newer, check=False).returncode == 0


def follow_base(tracker: Tracker, lander: Lander, base: str | None, commands: Sequence[str]) -> FollowResult:
    """Bring ``lander``'s branch up to date with ``base`` (see the module docstring)."""
    if not base:
        return FollowResult("no_base", lander.branch, tip=lander.sync(),
                            detail="HEAD is detached; name one with drain.base")
    with lander.turn(tracker, f"base:{base}", "follow-base"):
        for _ in range(_TRIES):
            tip = lander.sync()
            base_sha = _base_tip(lander, base)
            found = FollowResult("current", lander.branch, base=base, base_sha=base_sha, tip=tip)
            if not base_sha:
                found.result, found.detail = "no_base", f"no branch {base}"
                return found
            if _ancestor(lander.repo, base_sha, tip):
                return found
            if _ancestor(lander.repo, tip, base_sha):
                found.result, new = "fast-forward", base_sha
            else:
                found.result = "merged"
                new = _merge(lander, found, commands)
                if new is None:
                    return found
            crash_point("follow-commit")
            if lander.move(new, tip):
                found.tip = new
                return found
    raise GitError("git_failed", f"{lander.branch} kept moving while it followed {base}")


def _merge(lander: Lander, found: FollowResult, commands: Sequence[str]) -> str | None:
    """The merge commit of the base into the branch, validated; None (``found`` says why) when
    it conflicts or fails validation."""
    merged = _git(lander.repo, "merge-tree", "--write-tree", "--name-only", "--no-messages", found.tip,
                  found.base_sha, check=False)
    lines = merged.stdout.split()
    if merged.returncode != 0 or not lines:
        found.result, found.files = "conflict", list(dict.fromkeys(lines[1:]))
        found.detail = _summary(merged.stderr) if not found.files else ""
        return None
    from orchestrator.landing.lander import _has_user, failure_detail

    identity = None if _has_user(lander.repo) else _MESH_IDENTITY
    message = (f"Merge {found.base} into {lander.branch}\n\nThe integration branch follows its base.\n\n"
               f"Mesh-Base: {found.base_sha}\n")
    sha = _git(lander.repo, "commit-tree", lines[0], "-p", found.tip, "-p", found.base_sha, "-F", "-",
               input=message, env=identity).stdout.strip()
    if commands:
        started = time.monotonic()
        results, passed = lander.validate(sha, list(commands))
        found.validation_s = time.monotonic() - started
        if not passed:
            found.result, found.detail = "validation_failed", failure_detail(results)
            return None
    return sha


def follow_scope(tracker: Tracker, lander: Lander, tasks: Sequence[dict], configured: str | None) -> FollowResult:
    """``follow_base`` for a scope's ``tasks``: its base (``base_branch``), re-validated with the
    commands of the work landed on the branch. Raises ``BaseProblem`` when no task may start."""
    base = base_branch(tracker, lander.repo, lander.branch, configured)
    result = follow_base(tracker, lander, base, landed_commands(tracker, tasks, lander.branch) if base else [])
    if not result.ok:
        raise BaseProblem(result)
    return result
