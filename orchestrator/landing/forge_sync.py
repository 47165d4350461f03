"""``mesh forge sync``: a scope's tasks closed when its pull request is merged, by anyone.

The scope's integration branch and the branch it follows name its pull request; the forge says
whether it is open, merged (and by which commit) or closed unmerged:

- **merged**: the merge commit is fetched from ``forge.remote`` and checked out, detached, in a
  scratch worktree, and the scope's waiting tasks (``close_mode = "ci"``: approved, their gate
  open) are closed exactly as ``mesh ci-close`` closes them there (``ci_close``): each bound to
  that commit, only when the merged tree holds the tree its signed run head approved (whoever
  merged, with whatever they changed, the approval is of a tree, not of a pull request);
- **closed unmerged**: its tasks stay open, each told so once, in a comment naming the pull
  request;
- **open**: nothing changes, except with ``close_mode = "forge"``: once the required checks of
  its head passed (``[forge] required_checks``, else every check reported; a head with none
  reported does not pass), the head is fetched and checked out the same way and the waiting
  tasks are closed there, bound to the head commit;
- none: nothing changes.

Run again, it does nothing twice: closed tasks are no longer waiting, and the comment carries a
dedupe key. The forge's answer is the only input from outside; the tracker's evidence is
checked as ``ci-close`` checks it.

May import what ``orchestrator.landing`` may.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.forges.model import ForgeError
from orchestrator.forges.table import connect
from orchestrator.landing.catch_up import scope_branch
from orchestrator.landing.ci_close import candidates, ci_close
from orchestrator.landing.records import base_branch
from orchestrator.protocol.scope import Scope, scope_tasks
from orchestrator.worktree.gitops import GitError, _git, _summary

__all__ = ["SyncResult", "sync"]


@dataclass
class SyncResult:
    """What ``sync`` found and did for a scope: its ``branch`` and ``base``, the pull request
    (None: none), what was done (``closed``, ``none_closed``: a task refused, ``nothing_waiting``,
    ``open``, ``closed_unmerged``, ``no_pull_request``) and each task's close check (``ci_close``'s,
    as dicts)."""

    branch: str
    base: str | None
    pull: dict | None = None
    action: str = "no_pull_request"
    checks: list[dict] = field(default_factory=list)
    told: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"branch": self.branch, "base": self.base, "pull_request": self.pull, "action": self.action,
                "tasks": self.checks, "told": self.told}


def _checkout(repo: Path, remote: str, sha: str, scratch: Path) -> Path:
    """A detached worktree of commit ``sha`` (a merge commit, a pull request's head), fetched
    from ``remote``."""
    fetched = _git(repo, "fetch", "--quiet", "--no-tags", "--", remote, sha, check=False)
    if fetched.returncode != 0 and _git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode != 0:
        raise GitError("remote_unavailable", f"git fetch {remote} {sha[:12]}: {_summary(fetched.stderr)}")
    where = scratch / "merged"
    added = _git(repo, "worktree", "add", "--quiet", "--detach", str(where), sha, check=False)
    if added.returncode != 0:
        raise GitError("git_failed", f"git worktree add {sha[:12]}: {_summary(added.stderr)}")
    return where


def sync(tracker: Any, config: Any, scope: Scope, repo: Path, *, revalidate: bool = False,
         require_signed: bool = False, transport: Any = None) -> SyncResult:
    """Close ``scope``'s waiting tasks if its pull request was merged (see the module docstring).
    ``ForgeError``/``GitError`` when the forge or git cannot answer."""
    cfg = config.forge
    if cfg is None:
        raise ForgeError("no [forge] table in the configuration (docs/pull-requests.md)")
    branch = scope_branch(tracker, scope, scope_tasks(tracker, scope), config.drain.onto)
    base = base_branch(tracker, repo, branch, config.drain.base)
    result = SyncResult(branch, base)
    if not base:
        return result
    forge = connect(cfg.provider, cfg.repository, cfg.api_url, cfg.token_env, transport=transport)
    try:
        pull = forge.latest(branch, base)
    finally:
        forge.api.close()
    if pull is None:
        return result
    result.pull = pull.to_dict()
    if pull.state == "open":
        result.action = "open"
        if config.close_mode != "forge" or not pull.head_sha:
            return result
        forge = connect(cfg.provider, cfg.repository, cfg.api_url, cfg.token_env, transport=transport)
        try:
            checks = [c for c in forge.checks(pull.head_sha)
                      if not cfg.required_checks or c.name in cfg.required_checks]
        finally:
            forge.api.close()
        result.pull["checks"] = [c.to_dict() for c in checks]
        named = {c.name for c in checks}
        if not checks or any(c.state != "passed" for c in checks) or not set(cfg.required_checks) <= named:
            return result
        return _close_at(tracker, config, scope, repo, pull.head_sha, result, revalidate, require_signed)
    if pull.state != "merged" or not pull.merge_commit:
        result.action = "closed_unmerged"
        for task in candidates(tracker, scope):
            tracker.add_comment(task["id"], f"mesh: {forge.noun} #{pull.number} ({pull.url}) was closed without being"
                                f" merged; the task stays open: land it again, or close it by hand",
                                dedupe_key=f"forge-closed:{cfg.provider}:{pull.number}")
            result.told.append(task["id"])
        return result
    return _close_at(tracker, config, scope, repo, pull.merge_commit, result, revalidate, require_signed)


def _close_at(tracker: Any, config: Any, scope: Scope, repo: Path, sha: str, result: SyncResult,
              revalidate: bool, require_signed: bool) -> SyncResult:
    """Close ``scope``'s waiting tasks as ``mesh ci-close`` does, on a checkout of ``sha``."""
    scratch = Path(tempfile.mkdtemp(prefix="mesh-forge-sync-"))
    try:
        checkout = _checkout(repo, config.forge.remote, sha, scratch)
        checks = ci_close(tracker, config, scope, repo=checkout, revalidate=revalidate, require_signed=require_signed)
    finally:
        _git(repo, "worktree", "remove", "--force", str(scratch / "merged"), check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    result.checks = [check.to_dict() for check in checks]
    result.action = ("nothing_waiting" if not checks else "closed" if all(check.ok for check in checks)
                     else "none_closed")
    return result
