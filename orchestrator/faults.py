"""Fault injection for the crash-safety harness.

``MESH_CRASH_AT=name#n`` makes the process kill itself with SIGKILL the n-th
time it reaches the point ``name`` (``n`` defaults to 1). Points: ``checkpoint``
(after each comment write), ``apply`` (after a patch is applied), ``commit``,
``validation`` (after the commands ran, before their proof is written), ``close``
(before the task is closed), ``block`` (the task was set blocked, its outcome not yet
written), ``review-issue`` and ``finding-issue`` (after each
issue of the review-findings flow is created), ``land-commit`` (a landing's commits are
made, the integration branch not yet moved) and ``land-ref`` (it moved, its ``[orch:land]``
checkpoint not yet written). Unset, it costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["crash_point", "POINTS"]

POINTS = ("checkpoint", "apply", "commit", "validation", "close", "block", "review-issue", "finding-issue",
          "land-commit", "land-ref")
_counts: dict[str, int] = {}
_lock = threading.Lock()


def crash_point(name: str) -> None:
    """SIGKILL this process if ``MESH_CRASH_AT`` names this point and occurrence."""
    spec = os.environ.get("MESH_CRASH_AT")
    if not spec:
        return
    target, _, nth = spec.partition("#")
    if target != name:
        return
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1
        hit = _counts[name] == int(nth or 1)
    if hit:
        os.kill(os.getpid(), signal.SIGKILL)
