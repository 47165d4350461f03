"""Bad input gets a clear one-line error of the right kind, and changes nothing."""

from __future__ import annotations

import io

import pytest

from tracker.errors import ConflictError, CycleError, InvalidValueError, NotFoundError, TrackerError
from tracker.jsonl import export_jsonl


def snapshot(tracker) -> tuple:
    """Everything a failed call could have touched: every issue, comment, edge, label and event."""
    out = io.StringIO()
    export_jsonl(tracker, out)
    counts = tuple(tracker.db.read(f"SELECT count(*) FROM {table}")[0][0]
                   for table in ("issues", "labels", "dependencies", "comments", "events", "idempotency"))
    state = [tuple(r) for r in tracker.db.read("SELECT id, blocked, defer_eff, updated_at FROM issues ORDER BY id")]
    return out.getvalue(), counts, state


@pytest.fixture
def world(tracker):
    """A small workspace: a blocks chain a -> b -> c, an agent holding a hook, claimed and closed tasks."""
    a, b, c = (tracker.create(name) for name in "abc")
    tracker.add_dependency(a["id"], b["id"])
    tracker.add_dependency(b["id"], c["id"])
    agent = tracker.ensure_agent("worker-1")
    tracker.slot_set(agent["id"], "hook", c["id"])
    claimed = tracker.create("claimed")
    tracker.claim(claimed["id"], actor="alice")
    epic = tracker.create("epic", issue_type="epic")
    child = tracker.create("child", parent=epic["id"])
    tracker.add_label(a["id"], "plan")
    closed = tracker.create("done")
    tracker.close_issue(closed["id"])
    return {"a": a["id"], "b": b["id"], "c": c["id"], "agent": agent["id"], "claimed": claimed["id"],
            "epic": epic["id"], "child": child["id"], "closed": closed["id"]}


BAD_CALLS = {
    # unknown ids
    "show unknown": (NotFoundError, lambda t, w: t.get("tt-nope")),
    "update unknown": (NotFoundError, lambda t, w: t.update("tt-nope", title="x")),
    "close unknown": (NotFoundError, lambda t, w: t.close_issue("tt-nope")),
    "reopen unknown": (NotFoundError, lambda t, w: t.reopen("tt-nope")),
    "claim unknown": (NotFoundError, lambda t, w: t.claim("tt-nope")),
    "comment unknown": (NotFoundError, lambda t, w: t.add_comment("tt-nope", "hi")),
    "comments of unknown": (NotFoundError, lambda t, w: t.comments("tt-nope")),
    "label unknown": (NotFoundError, lambda t, w: t.add_label("tt-nope", "x")),
    "child of unknown": (NotFoundError, lambda t, w: t.create("x", parent="tt-nope")),
    "ready under unknown": (NotFoundError, lambda t, w: t.ready(parent="tt-nope")),
    "list under unknown": (NotFoundError, lambda t, w: t.list(parent="tt-nope")),
    "remove missing label": (NotFoundError, lambda t, w: t.remove_label(w["a"], "nope")),
    "remove missing edge": (NotFoundError, lambda t, w: t.remove_dependency(w["a"], w["c"])),
    # invalid values
    "update invalid status": (InvalidValueError, lambda t, w: t.update(w["a"], status="done")),
    "create invalid status": (InvalidValueError, lambda t, w: t.create("x", status="done")),
    "update tombstone status": (InvalidValueError, lambda t, w: t.update(w["a"], status="tombstone")),
    "update priority 7": (InvalidValueError, lambda t, w: t.update(w["a"], priority=7)),
    "update priority -1": (InvalidValueError, lambda t, w: t.update(w["a"], priority=-1)),
    "create priority high": (InvalidValueError, lambda t, w: t.create("x", priority="high")),
    "create priority bool": (InvalidValueError, lambda t, w: t.create("x", priority=True)),
    "create invalid type": (InvalidValueError, lambda t, w: t.create("x", issue_type="saga")),
    "create empty title": (InvalidValueError, lambda t, w: t.create("  ")),
    "update empty title": (InvalidValueError, lambda t, w: t.update(w["a"], title="")),
    "update unknown field": (InvalidValueError, lambda t, w: t.update(w["a"], colour="red")),
    "list invalid status": (InvalidValueError, lambda t, w: t.list(status="done")),
    "empty label": (InvalidValueError, lambda t, w: t.add_label(w["a"], " ")),
    "empty comment": (InvalidValueError, lambda t, w: t.add_comment(w["a"], "")),
    "gate bad await": (InvalidValueError, lambda t, w: t.gate_create("g", blocks=w["a"], await_type="email")),
    "timer gate no timeout": (InvalidValueError, lambda t, w: t.gate_create("g", blocks=w["a"], await_type="timer")),
    "gate blocking unknown": (NotFoundError, lambda t, w: t.gate_create("g", blocks="tt-nope")),
    "resolve a non-gate": (InvalidValueError, lambda t, w: t.gate_resolve(w["a"])),
    # dependencies
    "depend on missing": (NotFoundError, lambda t, w: t.add_dependency(w["a"], "tt-missing")),
    "missing depends": (NotFoundError, lambda t, w: t.add_dependency("tt-missing", w["a"])),
    "blocks cycle": (CycleError, lambda t, w: t.add_dependency(w["c"], w["a"])),
    "blocks 2-cycle": (CycleError, lambda t, w: t.add_dependency(w["b"], w["a"])),
    "self dependency": (CycleError, lambda t, w: t.add_dependency(w["a"], w["a"])),
    "parent-child cycle": (CycleError, lambda t, w: t.add_dependency(w["epic"], w["child"], "parent-child")),
    "second parent": (ConflictError, lambda t, w: t.add_dependency(w["child"], w["a"], "parent-child")),
    "empty dependency type": (InvalidValueError, lambda t, w: t.add_dependency(w["a"], w["c"], " ")),
    # state conflicts
    "hook slot held": (ConflictError, lambda t, w: t.slot_set(w["agent"], "hook", w["b"])),
    "claim claimed": (ConflictError, lambda t, w: t.claim(w["claimed"], actor="bob")),
    "claim closed": (ConflictError, lambda t, w: t.claim(w["closed"])),
    # A plain close of a closed issue closes it anew, as bd does; the orchestrator's
    # compare-and-set close still loses to a close that came first.
    "close closed expecting open": (ConflictError, lambda t, w: t.close_issue(w["closed"],
                                                                             expect_status=("open", "in_progress"))),
    "close with blockers": (ConflictError, lambda t, w: t.close_issue(w["b"])),
    "close expecting status": (ConflictError, lambda t, w: t.close_issue(w["c"], expect_status=("closed",))),
    "reopen open issue": (ConflictError, lambda t, w: t.reopen(w["a"])),
    "update expectation": (ConflictError, lambda t, w: t.update(w["a"], expect={"status": "in_progress"},
                                                                 title="x")),
    "existing explicit id": (ConflictError, lambda t, w: t.create("x", issue_id=w["a"])),
    # agents and slots
    "slot on a non-agent": (InvalidValueError, lambda t, w: t.slot_set(w["a"], "hook", w["b"])),
    "state of a non-agent": (InvalidValueError, lambda t, w: t.agent_state(w["a"], "working")),
    "slots of a non-agent": (InvalidValueError, lambda t, w: t.slot_show(w["a"])),
    "clear slot of a non-agent": (InvalidValueError, lambda t, w: t.slot_clear(w["a"], "hook")),
    "unknown agent": (NotFoundError, lambda t, w: t.agent_state("tt-nope", "working")),
    "invalid agent state": (InvalidValueError, lambda t, w: t.agent_state(w["agent"], "sleeping")),
    "invalid slot name": (InvalidValueError, lambda t, w: t.slot_set(w["agent"], "pocket", w["b"])),
    "slot to unknown issue": (NotFoundError, lambda t, w: t.slot_set(w["agent"], "role", "tt-nope")),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_input_is_refused_and_changes_nothing(world, tracker, name):
    error, call = BAD_CALLS[name]
    before = snapshot(tracker)
    with pytest.raises(error) as caught:
        call(tracker, world)
    message = str(caught.value)
    assert message and "\n" not in message and len(message) < 200
    assert isinstance(caught.value, TrackerError) and caught.value.code
    assert snapshot(tracker) == before, f"{name} changed the database"


def test_failed_transaction_rolls_back_every_step(tracker, world):
    """Calls made inside one transaction are all or nothing."""
    before = snapshot(tracker)
    with pytest.raises(CycleError):
        with tracker.transaction():
            tracker.create("made inside")
            tracker.add_comment(world["a"], "inside")
            tracker.update(world["b"], status="closed")
            tracker.add_dependency(world["c"], world["a"])
    assert snapshot(tracker) == before
