"""Fault injection for the crash-safety harness.

``MESH_CRASH_AT=name#n`` makes the process kill itself with SIGKILL the n-th
time it reaches the point ``name`` (``n`` defaults to 1). Points: ``checkpoint``
(after each comment write), ``apply`` (after a patch is applied), ``commit``,
``validation`` (after the commands ran, before their proof is written), ``close``
(before the task is closed), ``closed`` (it was closed, its outcome not yet written),
``block`` (the task was set blocked, its outcome not yet written), ``review-issue`` and
``finding-issue`` (after each issue of the review-findings flow is created), and the steps
of a landing, in order (``LAND_POINTS``): ``land-locked`` (the landing lock is taken),
``land-push-task`` (the task branch was pushed to the remote), ``land-sync`` (the local
integration branch moved to the remote's), ``land-commit`` (a landing's commits are made,
the integration branch not yet moved), ``land-push`` (the remote's integration branch moved,
the local one not yet), ``land-ref`` (the local one moved, its ``[orch:land]`` checkpoint not
yet written), ``land-checkpoint`` (written, the lock still held) and ``land-unlocked`` (the
lock released, the run head not yet written); and of the integration branch following its base
(``FOLLOW_POINTS``): ``follow-commit`` (the merge commit made, the branch not moved) and
``follow-push`` (the remote's branch moved, the local one not yet). Unset, it costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["crash_point", "POINTS", "LAND_POINTS", "FOLLOW_POINTS"]

LAND_POINTS = ("land-locked", "land-push-task", "land-sync", "land-commit", "land-push", "land-ref",
               "land-checkpoint", "land-unlocked")
FOLLOW_POINTS = ("follow-commit", "follow-push")
POINTS = ("checkpoint", "apply", "commit", "validation", "close", "closed", "block", "review-issue",
          "finding-issue", *LAND_POINTS, *FOLLOW_POINTS)
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
