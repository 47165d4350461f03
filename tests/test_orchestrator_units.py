"""Unit tests of the artifact bus, the checkpoint format and scope resolution."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.protocol.bus import ArtifactBus
from orchestrator.protocol.checkpoint import KINDS, dedupe_key, format_checkpoint, parse_checkpoint, sign_payload, verify_payload
from orchestrator.runner import unfinished_run
from orchestrator.protocol.scope import Scope, ScopeError, resolve_scope


# ---------------------------------------------------------------- bus


def test_bus_has_every_field_of_the_profile():
    bus = ArtifactBus(task_id="t", task_meta={})
    fields = set(bus.to_dict())
    assert {"task_id", "task_meta", "proposal", "critiques", "synthesis", "votes", "reviews", "revision_plan",
            "review_issue", "review_subtasks", "mail", "retry_counters", "review_cycle", "history"} <= fields
    assert set(bus.to_dict()["retry_counters"]) == {"worker_retry", "parse_retry", "consensus_cycle"}


def test_every_mutation_is_appended_to_history_and_cycles_never_overwrite():
    bus = ArtifactBus(task_id="t", task_meta={})
    bus.add_critique("critic_a", {"findings": ["first"]})
    bus.set_synthesis({"patch": "one"})
    bus.add_vote("critic_a", {"vote": "disagree"})
    bus.start_consensus_cycle()
    assert bus.critiques == {} and bus.votes == {} and bus.consensus_cycle == 1
    bus.add_critique("critic_a", {"findings": ["second"]})
    bus.set_synthesis({"patch": "two"})
    old = bus.cycle_artifacts("critique", 0)
    new = bus.cycle_artifacts("critique", 1)
    assert [h.data for h in old] == [{"findings": ["first"]}]
    assert [h.data for h in new] == [{"findings": ["second"]}]
    assert [h.data["patch"] for h in bus.history if h.event == "synthesis"] == ["one", "two"]
    assert [h.seq for h in bus.history] == list(range(1, len(bus.history) + 1))


def test_history_holds_copies_not_live_references():
    bus = ArtifactBus(task_id="t", task_meta={})
    artifact = {"plan": ["a"]}
    bus.set_proposal(artifact)
    artifact["plan"].append("mutated later")
    assert bus.history[-1].data == {"plan": ["a"]}


def test_mail_is_delivered_once_to_its_recipient():
    bus = ArtifactBus(task_id="t", task_meta={})
    bus.post_mail("proposer", [{"to": "synthesizer", "message": "m1"}, {"to": "critic_a", "message": "m2"}])
    assert bus.take_mail("synthesizer") == [{"from": "proposer", "message": "m1"}]
    assert bus.take_mail("synthesizer") == []
    assert bus.take_mail("critic_a") == [{"from": "proposer", "message": "m2"}]


# ---------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip_and_unknown_comments():
    payload = {"v": 1, "run_id": "run-1", "seq": 3, "kind": "vote", "artifact": {"vote": "agree", "reason": "ok"}}
    text = format_checkpoint("vote", "agree 4/5 (cycle 0)", payload, details="critic_a: ok")
    assert text.startswith("[orch:vote] agree 4/5 (cycle 0)\ncritic_a: ok\n```json orch\n")
    cp = parse_checkpoint(text)
    assert cp.kind == "vote" and cp.payload == payload and cp.seq == 3 and cp.run_id == "run-1"
    assert parse_checkpoint("just a comment") is None
    hand = parse_checkpoint("[orch:review] decision=approve")
    assert hand.kind == "review" and hand.payload == {}


def test_format_rejects_unknown_kinds():
    with pytest.raises(ValueError):
        format_checkpoint("approval", "x", {})
    assert set(KINDS) >= {"proposal", "critique", "synthesis", "vote", "proof", "review", "review-cycle",
                          "revision-plan", "revision", "preflight", "hydration", "outcome"}


@given(st.text(), st.text())
def test_payload_strings_cannot_break_out_of_the_fence(summary, value):
    payload = {"v": 1, "run_id": "r", "seq": 1, "artifact": {"text": value}}
    cp = parse_checkpoint(format_checkpoint("proposal", summary, payload, details=value))
    assert cp is not None and cp.payload == payload


def test_signature_binds_content():
    signed = sign_payload({"task_id": "a", "artifact": {"decision": "approve"}}, b"k")
    assert verify_payload(signed, b"k")
    assert not verify_payload({**signed, "artifact": {"decision": "approve", "x": 1}}, b"k")
    assert dedupe_key("run-1", 7) == "orch:run-1:7"


def test_unfinished_run_is_the_latest_run_without_outcome():
    def cp(run, kind):
        return parse_checkpoint(format_checkpoint(kind, "s", {"run_id": run, "seq": 1}))

    assert unfinished_run([cp("a", "preflight"), cp("a", "outcome"), cp("b", "preflight")]) == "b"
    assert unfinished_run([cp("a", "preflight"), cp("a", "outcome")]) is None
    assert unfinished_run([]) is None


# ---------------------------------------------------------------- scope


def test_scope_resolution_order():
    env = {"BD_PLAN_LABEL": "plan:env"}
    assert resolve_scope("plan:x", "epic-1", env=env) == Scope("label", plan_label="plan:x")
    assert resolve_scope(None, "epic-1", env=env) == Scope("label", plan_label="plan:env")
    assert resolve_scope(None, "epic-1", env={}) == Scope("parent", parent_epic="epic-1")
    with pytest.raises(ScopeError):
        resolve_scope(None, None, env={})
    assert json.dumps(Scope("parent", parent_epic="e").to_dict())
