"""Role agents have lanes: concurrent runs never fight over one hook slot."""

from __future__ import annotations

import pytest

from orchestrator.protocol.agents import agent_name, hook_role_agent
from orchestrator.protocol.lease import Lease
from tracker.errors import ConflictError
from tests.runkit import make_workspace

OTHER = "demo-7kq.4"
TASK = "demo-7kq.1"


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def _hook(t, agent_id):
    return t.slot_show(agent_id)["hook"]


def test_a_second_live_task_takes_the_next_lane(ws):
    with ws.tracker() as t:
        first = hook_role_agent(t, "proposer", TASK, is_live=lambda task: True)
        second = hook_role_agent(t, "proposer", OTHER, is_live=lambda task: True)
        assert first["title"] == agent_name("proposer", 1) == "mesh-proposer"
        assert second["title"] == "mesh-proposer-2"
        assert _hook(t, first["id"]) == TASK and _hook(t, second["id"]) == OTHER
        # The same task again: the lane it already holds.
        assert hook_role_agent(t, "proposer", TASK, is_live=lambda task: True)["id"] == first["id"]


def test_a_hook_left_by_a_dead_run_is_replaced(ws):
    with ws.tracker() as t:
        first = hook_role_agent(t, "critic1", OTHER, is_live=lambda task: True)
        again = hook_role_agent(t, "critic1", TASK, is_live=lambda task: False)
        assert again["id"] == first["id"] and _hook(t, first["id"]) == TASK


def test_replacing_a_hook_is_a_compare_and_set(ws):
    with ws.tracker() as t:
        agent = hook_role_agent(t, "critic2", OTHER, is_live=lambda task: True)
        # A run that saw the slot empty must not overwrite what another run hooked since.
        with pytest.raises(ConflictError):
            t.slot_set(agent["id"], "hook", TASK, replace=None)
        t.slot_set(agent["id"], "hook", TASK, replace=OTHER)
        assert _hook(t, agent["id"]) == TASK


def test_liveness_comes_from_the_task_lease(ws):
    from orchestrator.protocol.lease import lease_is_live

    with ws.tracker() as t:
        assert not lease_is_live(t, TASK)
        lease = Lease.acquire(t, TASK, "run-x", holder="x", ttl_s=30)
        assert lease_is_live(t, TASK)
        assert not lease_is_live(t, TASK, now=10**12)
        lease.release(t)
        assert not lease_is_live(t, TASK)
