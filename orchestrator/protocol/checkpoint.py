"""The ``[orch:*]`` comment format (ARCHITECTURE section 4).

A checkpoint is one tracker comment::

    [orch:KIND] summary
    optional human-readable lines
    ```json orch
    {"v": 1, "run_id": "...", "seq": 7, "kind": "vote", ...}
    ```

The payload carries the full artifact, so a run can be rebuilt from comments
alone. With ``MESH_SIGNING_KEY`` set, payloads carry an HMAC-SHA256 ``sig`` over
their canonical JSON (task id and kind included, so a signature cannot be moved
to another task, and the ``[orch:KIND]`` header must name the signed kind).

This module is the one place that reads and writes checkpoints: the engine, the run head,
landing, drains, ``ci-close`` and the views all go through ``load_checkpoints``,
``checkpoint_comments`` and ``write_checkpoint``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracker.store import Tracker

__all__ = [
    "KINDS",
    "Checkpoint",
    "format_checkpoint",
    "parse_checkpoint",
    "sign_payload",
    "verify_payload",
    "dedupe_key",
    "signing_key",
    "checkpoint_problem",
    "trust_of",
    "checkpoint_comments",
    "load_checkpoints",
    "load_checkpoints_of",
    "write_checkpoint",
]

KINDS = (
    "preflight",
    "hydration",
    "proposal",
    "critique",
    "synthesis",
    "vote",
    "proof",
    "review",
    "review-request",
    "human-review",
    "review-cycle",
    "revision-plan",
    "revision",
    "choice",
    "outcome",
    "land",
    "pull-request",
    "forge-verdict",
    "run-head",
)
VERSION = 1
_HEAD = re.compile(r"^\[orch:([a-z-]+)\]")
_BLOCK = re.compile(r"^```json orch[ \t]*\n(.*?)\n```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class Checkpoint:
    """A parsed ``[orch:*]`` comment."""

    kind: str
    summary: str
    payload: dict[str, Any]
    comment_id: Any = None
    author: str | None = None
    created_at: str | None = None

    @property
    def run_id(self) -> str | None:
        return self.payload.get("run_id")

    @property
    def seq(self) -> int | None:
        return self.payload.get("seq")


def signing_key() -> bytes | None:
    """The HMAC key from ``MESH_SIGNING_KEY`` (None when unset)."""
    key = os.environ.get("MESH_SIGNING_KEY")
    return key.encode() if key else None


def _canonical(payload: dict[str, Any]) -> bytes:
    body = {k: v for k, v in payload.items() if k != "sig"}
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def sign_payload(payload: dict[str, Any], key: bytes) -> dict[str, Any]:
    """``payload`` with its ``sig`` (hex HMAC-SHA256 of the canonical JSON without ``sig``)."""
    signed = dict(payload)
    signed["sig"] = hmac.new(key, _canonical(payload), hashlib.sha256).hexdigest()
    return signed


def verify_payload(payload: dict[str, Any], key: bytes) -> bool:
    """True when ``payload`` carries a valid signature for ``key``."""
    sig = payload.get("sig")
    if not isinstance(sig, str):
        return False
    want = hmac.new(key, _canonical(payload), hashlib.sha256).hexdigest()
    return hmac.compare_digest(sig, want)


def dedupe_key(run_id: str, seq: int, kind: str = "", phase: str = "land") -> str:
    """The tracker-level uniqueness key of a checkpoint: ``(run_id, seq)``. A run lands once per
    landing phase (``land``; ``land-rN`` after the forge asked for changes), so its
    ``[orch:land]`` is keyed by the run and phase alone: the tracker checks for it and writes it
    in one transaction, and two writers of the run that disagree on the seq still write one."""
    if kind != "land":
        return f"orch:{run_id}:{seq}"
    return f"orch:{run_id}:land" if phase == "land" else f"orch:{run_id}:{phase}"


def format_checkpoint(kind: str, summary: str, payload: dict[str, Any], *, details: str = "") -> str:
    """The comment text of a checkpoint."""
    if kind not in KINDS:
        raise ValueError(f"unknown checkpoint kind {kind!r}")
    head = f"[orch:{kind}] {' '.join(summary.split())}".rstrip()
    body = json.dumps(payload, ensure_ascii=False, sort_keys=False)
    # A payload can never close the fence early: json.dumps escapes newlines in strings.
    parts = [head]
    if details.strip():
        parts.append(details.strip("\n").replace("```", "'''"))
    parts.append("```json orch\n" + body + "\n```")
    return "\n".join(parts)


def parse_checkpoint(text: str, **meta: Any) -> Checkpoint | None:
    """The checkpoint in a comment, or None for any other comment (or a damaged one)."""
    first = text.split("\n", 1)[0]
    head = _HEAD.match(first)
    if not head:
        return None
    kind = head.group(1)
    summary = first[head.end():].strip()
    block = None
    for m in _BLOCK.finditer(text):
        block = m
    payload: dict[str, Any] = {}
    if block:
        try:
            loaded = json.loads(block.group(1))
        except json.JSONDecodeError:
            loaded = None
        if isinstance(loaded, dict):
            payload = loaded
    return Checkpoint(kind=kind, summary=summary, payload=payload, comment_id=meta.get("id"),
                      author=meta.get("author"), created_at=meta.get("created_at"))


def checkpoint_problem(cp: Checkpoint, key: bytes | None, *, task_id: str | None = None) -> str | None:
    """Why ``cp`` cannot be trusted as this task's checkpoint, or None when it can.

    The header kind must equal the payload's kind, the payload must belong to ``task_id``
    (when given), and with a ``key`` the payload must carry a valid signature. Without a key
    nothing can be verified, so only the consistency checks apply.
    """
    where = f"comment {cp.comment_id}" if cp.comment_id is not None else "checkpoint"
    if cp.payload.get("kind") != cp.kind:
        return f"{where}: header kind {cp.kind!r} differs from the signed kind {cp.payload.get('kind')!r}"
    if task_id is not None and cp.payload.get("task_id") != task_id:
        return f"{where}: belongs to task {cp.payload.get('task_id')!r}, not {task_id!r}"
    if key is not None:
        if "sig" not in cp.payload:
            return f"{where}: {cp.kind} checkpoint is unsigned"
        if not verify_payload(cp.payload, key):
            return f"{where}: {cp.kind} checkpoint has a wrong signature"
    return None


def trust_of(cp: Checkpoint, key: bytes | None, *, task_id: str | None = None) -> tuple[str, str]:
    """``(state, detail)`` of ``cp`` as every view shows it: with a ``key``, ``verified`` or
    ``untrusted`` (the detail says why: unsigned, a wrong signature, another task's or kind's);
    without one ``signed`` or ``unsigned``, not checked."""
    if key is None:
        return ("signed" if "sig" in cp.payload else "unsigned"), "not checked: MESH_SIGNING_KEY is not set"
    problem = checkpoint_problem(cp, key, task_id=task_id)
    return ("untrusted", problem) if problem else ("verified", "signature checked with MESH_SIGNING_KEY")


def checkpoint_comments(tracker: Tracker, task_id: str) -> list[tuple[Checkpoint, str]]:
    """Every ``[orch:*]`` checkpoint on a task with its comment's exact text, in comment order."""
    out = []
    for comment in tracker.comments(task_id):
        cp = parse_checkpoint(comment["text"], id=comment["id"], author=comment.get("author"),
                              created_at=comment.get("created_at"))
        if cp is not None:
            out.append((cp, comment["text"]))
    return out


def load_checkpoints(tracker: Tracker, task_id: str) -> list[Checkpoint]:
    """Every ``[orch:*]`` checkpoint on a task, in comment order."""
    return [cp for cp, _ in checkpoint_comments(tracker, task_id)]


def load_checkpoints_of(tracker: Tracker, task_ids: Sequence[str], *,
                        kinds: Sequence[str] = ()) -> dict[str, list[Checkpoint]]:
    """Every task's checkpoints in comment order (each id given is a key), in one read of the
    tracker; with ``kinds``, only the comments whose header names one of them (the rest are
    neither read nor parsed). For views of a whole scope (``mesh status``)."""
    comments = tracker.comments_of(task_ids, prefixes=[f"[orch:{kind}]" for kind in kinds])
    out: dict[str, list[Checkpoint]] = {}
    for task_id, found in comments.items():
        parsed = (parse_checkpoint(c["text"], id=c["id"], author=c.get("author"), created_at=c.get("created_at"))
                  for c in found)
        out[task_id] = [cp for cp in parsed if cp is not None]
    return out


def write_checkpoint(tracker: Tracker, task_id: str, kind: str, summary: str, payload: dict[str, Any], *,
                     key: bytes | None, author: str, details: str = "",
                     dedupe: str | None = None) -> tuple[dict[str, Any], str, dict]:
    """Sign (with ``key``), format and write one checkpoint; returns the payload and the comment
    text as written, and the comment the tracker holds under its key.

    The comment is keyed by ``dedupe`` (default: ``dedupe_key`` of the payload's run and seq), so
    writing the same step again (a resumed run, a retried write) leaves one comment: the
    returned comment is then the first one.
    """
    if key:
        payload = sign_payload(payload, key)
    text = format_checkpoint(kind, summary, payload, details=details)
    comment = tracker.add_comment(task_id, text, author=author,
                                  dedupe_key=dedupe or dedupe_key(payload["run_id"], payload["seq"], kind,
                                                                 str((payload.get("step") or ["", "", "land"])[-1])))
    return payload, text, comment
