"""The forge's webhook to ``mesh serve``: a pull request event makes mesh sync that scope.

GitHub signs each delivery with the webhook's secret (``X-Hub-Signature-256``: HMAC-SHA256 of
the raw body); GitLab sends the secret itself (``X-Gitlab-Token``). ``verify`` checks that, in
constant time, before anything of the body is read. A verified event only names a branch: the
head of a pull request that was closed or merged, whose checks completed, or that was reviewed.
What happens then is decided by asking the forge, never by the payload: the scope whose tasks
wait on that integration branch is synced as ``mesh forge sync`` does (``forge_sync.sync``), so a
replayed or crafted delivery can at most make mesh look again.

May import what ``orchestrator.landing`` may.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["event_branch", "sync_branch", "verify"]


def verify(provider: str, secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    """True when the delivery carries the webhook's secret (``headers`` lower-case)."""
    if not secret:
        return False
    if provider == "github":
        given = headers.get("x-hub-signature-256") or ""
        want = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(given.encode(), want.encode())
    return hmac.compare_digest((headers.get("x-gitlab-token") or "").encode(), secret.encode())


def event_branch(provider: str, headers: Mapping[str, str], body: bytes) -> str | None:
    """The pull request head branch a verified event is about, or None for an event that
    changes nothing mesh waits on."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict):
        return None
    if provider == "github":
        event = headers.get("x-github-event") or ""
        if event in ("pull_request", "pull_request_review"):
            return _text(((payload.get("pull_request") or {}).get("head") or {}).get("ref"))
        if event in ("check_suite", "check_run"):
            inner = payload.get(event) or {}
            inner = inner if isinstance(inner, dict) else {}
            pulls = inner.get("pull_requests")
            if isinstance(pulls, list) and pulls and isinstance(pulls[0], dict):
                return _text((pulls[0].get("head") or {}).get("ref"))
            # No pull request named (GitHub leaves the list empty in some cases): the branch it ran on.
            suite = inner.get("check_suite") if event == "check_run" else inner
            return _text((suite or {}).get("head_branch") if isinstance(suite, dict) else None)
        if event == "status":  # a commit status (CI reporting through statuses): the branches holding it
            branches = payload.get("branches")
            if isinstance(branches, list):
                return next((_text(b.get("name")) for b in branches if isinstance(b, dict)
                             and str(b.get("name") or "").startswith("mesh/")), None)
        return None
    kind = payload.get("object_kind")
    if kind == "merge_request":
        return _text((payload.get("object_attributes") or {}).get("source_branch"))
    if kind == "pipeline":
        return _text((payload.get("merge_request") or {}).get("source_branch"))
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def sync_branch(tracker: Any, config: Any, repo: Path, branch: str) -> list[dict]:
    """Sync each scope whose waiting tasks landed on ``branch`` (``forge_sync.sync``); what each
    sync found and did."""
    from orchestrator.landing.ci_close import candidates
    from orchestrator.landing.forge_sync import sync
    from orchestrator.landing.records import land_checkpoints
    from orchestrator.protocol.checkpoint import load_checkpoints
    from orchestrator.protocol.scope import Scope

    scopes: dict[str, Scope] = {}
    for task in candidates(tracker, Scope("label")):  # every waiting task, whatever its scope
        lands = land_checkpoints(load_checkpoints(tracker, task["id"]))
        if not lands or (lands[-1].payload.get("artifact") or {}).get("branch") != branch:
            continue
        label = next((lab for lab in task.get("labels") or () if str(lab).startswith("plan:")), None)
        scope = Scope("label", plan_label=label) if label else Scope("parent", parent_epic=task.get("parent"))
        scopes.setdefault(label or str(task.get("parent")), scope)
    return [sync(tracker, config, scope, repo).to_dict() for scope in scopes.values()]
