"""How ``mesh drain`` takes ready work: ``claim_next_leased`` claims the next ready task of the
scope through ``Tracker.claim_next`` (on PostgreSQL its single statement) and takes the task's
lease in the same transaction, on each engine.

A task is never claimed without its lease (``held_by_person`` would take it for a person's), a
task whose lease another run holds is passed over with its claim undone, a task a person holds
or one assigned to someone else is never taken, the scope and the ready order are kept, and
runners claiming at once never get the same task.
"""

from __future__ import annotations

import threading

from orchestrator.protocol.lease import Lease, claim_next_leased, ensure_lease_table, held_by_person, lease_is_live
from tracker.store import Tracker


def _take(tracker: Tracker, skip: set[str] = frozenset(), labels: list[str] = ("plan:q",), parent=None):
    ensure_lease_table(tracker)
    return claim_next_leased(tracker, labels=list(labels), parent=parent, skip=set(skip), run_id="run-1", ttl_s=60)


def test_the_next_ready_task_comes_with_its_lease(tracker):
    first = tracker.create("first", labels=["plan:q"], priority=1)
    second = tracker.create("second", labels=["plan:q"], priority=2)
    tracker.create("elsewhere", labels=["plan:other"], priority=0)
    tracker.create("a person's", labels=["plan:q"], priority=0, status="in_progress", assignee="bob")
    tracker.create("assigned", labels=["plan:q"], priority=0, assignee="bob")
    task, lease = _take(tracker)
    assert task["id"] == first["id"] and (task["status"], task["assignee"]) == ("in_progress", "tester")
    assert isinstance(lease, Lease) and lease.holds(tracker) and lease_is_live(tracker, first["id"])
    assert not held_by_person(tracker, tracker.get(first["id"]), "someone-else")  # a mesh run's, by its lease
    task, _ = _take(tracker, skip={first["id"]})
    assert task["id"] == second["id"]
    assert _take(tracker) is None


def test_a_task_another_run_leased_is_passed_over_and_left_open(tracker):
    leased = tracker.create("leased elsewhere", labels=["plan:q"], priority=0)
    free = tracker.create("free", labels=["plan:q"], priority=1)
    Lease.acquire(tracker, leased["id"], "other-run", holder="other")
    task, lease = _take(tracker)
    assert task["id"] == free["id"] and lease.holds(tracker)
    kept = tracker.get(leased["id"])
    assert (kept["status"], kept.get("assignee")) == ("open", None)  # its claim was undone with the lease
    assert [e["event_type"] for e in tracker.events(leased["id"])] == ["created"]


def test_the_scope_is_a_parent_epic_too(tracker):
    epic = tracker.create("epic", issue_type="epic")
    child = tracker.create("child", parent=epic["id"])
    tracker.create("outside", priority=0)
    task, _ = _take(tracker, labels=[], parent=epic["id"])
    assert task["id"] == child["id"]


def test_runners_claiming_at_once_never_share_a_task(tracker):
    ids = {tracker.create(f"task {k}", labels=["plan:q"])["id"] for k in range(24)}
    got: dict[str, list[str]] = {}
    start = threading.Barrier(4)

    def runner(name: str) -> None:
        own = Tracker(tracker.path, actor=name)
        ensure_lease_table(own)
        start.wait()
        mine = got.setdefault(name, [])
        while (taken := claim_next_leased(own, labels=["plan:q"], parent=None, skip=set(), run_id=name,
                                          ttl_s=60)) is not None:
            mine.append(taken[0]["id"])
        own.close()

    threads = [threading.Thread(target=runner, args=(f"runner-{k}",)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    claimed = [issue for names in got.values() for issue in names]
    assert sorted(claimed) == sorted(ids) and len(claimed) == len(set(claimed))
    for name, names in got.items():
        for issue in names:
            assert tracker.get(issue)["assignee"] == name
            assert tracker.db.read("SELECT run_id FROM mesh_leases WHERE task_id = ?", (issue,))[0][0] == name
