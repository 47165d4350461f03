"""Role agents: which ``mesh-<role>`` agent a run hooks its task to.

The profile's hook slot holds 0..1 tasks, yet several runs (two ``mesh run`` processes, or a
drain with ``--jobs N``) work different tasks at once with the same roles. Each role therefore
has lanes: ``mesh-<role>`` is lane 1, ``mesh-<role>-2`` lane 2, and so on. A run hooks each role
to the first lane that is free, already hooked to its own task, or hooked to a task no live run
holds (a crashed run left it). Taking a lane is a compare-and-set on the hook slot, so two runs
racing for one lane never both get it: the loser moves on to the next lane.
"""

from __future__ import annotations

from collections.abc import Callable

from tracker.errors import ConflictError
from tracker.store import Tracker

__all__ = ["agent_name", "hook_role_agent", "MAX_LANES"]

MAX_LANES = 256


def agent_name(role: str, lane: int) -> str:
    """The title of ``role``'s agent on ``lane`` (1-based)."""
    return f"mesh-{role}" if lane == 1 else f"mesh-{role}-{lane}"


def hook_role_agent(tracker: Tracker, role: str, task_id: str, *, is_live: Callable[[str], bool]) -> dict:
    """Hook ``task_id`` to a lane agent of ``role`` and return that agent.

    ``is_live(task)`` tells whether a run still works a task another lane is hooked to.
    """
    for lane in range(1, MAX_LANES + 1):
        agent = tracker.ensure_agent(agent_name(role, lane))
        held = tracker.slot_show(agent["id"])["hook"]
        if held == task_id:
            return agent
        if held and is_live(held):
            continue
        try:
            tracker.slot_set(agent["id"], "hook", task_id, replace=held)
        except ConflictError:
            continue  # another run took this lane between our look and our write
        return agent
    raise ConflictError(f"all {MAX_LANES} lanes of role {role} are hooked to live runs")
