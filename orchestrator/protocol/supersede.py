"""Review and finding issues of earlier attempts, closed as superseded.

A run whose review requests changes files a review issue under its task (label
``mesh:review``) and one finding issue under it per finding (``mesh:finding``); the run's own
later review cycles close them as the findings are resolved. When the run blocks, they stay
open: the findings are the reason. Once the task is retried, or closed by a later attempt that
fixed them, they describe an attempt nobody will continue, and a closed task with open
``MUST_FIX`` children looks unfinished in any bd client. So they are closed as superseded:
when the task is retried (``mesh retry``) and when it closes, naming the attempt that closed
it. Only what mesh filed is touched (the two labels): an issue a person filed under the task
stays as it is. Each close is a compare-and-set on the issue's open status, so two writers, or
a resume after a kill half way, close each once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from tracker.errors import ConflictError
from tracker.store import Tracker

__all__ = ["REVIEW_LABEL", "FINDING_LABEL", "close_superseded"]

REVIEW_LABEL = "mesh:review"
FINDING_LABEL = "mesh:finding"


def _close(tracker: Tracker, issue: dict, reason: str) -> bool:
    try:
        tracker.close_issue(issue["id"], reason=reason, force=True, expect_status=(issue["status"],))
        return True
    except ConflictError:
        return False  # closed meanwhile (another writer, an earlier attempt of this call)


def close_superseded(tracker: Tracker, task_id: str, reason: str, *, keep: Collection[str] = (),
                     before_write: Callable[[], None] = lambda: None) -> list[str]:
    """Close the open review issues mesh filed under ``task_id`` (except those in ``keep``: the
    running attempt's) and their open finding issues, each with ``reason``; the ids closed.
    ``before_write`` runs before each close (a run checks it still holds its lease)."""
    closed = []
    for review in tracker.list(parent=task_id, labels=[REVIEW_LABEL]):
        if review["id"] in keep:
            continue
        for finding in tracker.list(parent=review["id"], labels=[FINDING_LABEL]):
            before_write()
            if _close(tracker, finding, reason):
                closed.append(finding["id"])
        before_write()
        if _close(tracker, review, reason):
            closed.append(review["id"])
    return closed
