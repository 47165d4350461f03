"""``mesh run --backend anthropic`` end to end: the demo workspace, a real git repo and a
real tracker, the official SDK talking to a fake Messages API on 127.0.0.1.

Each test scripts the fake per role (``RoleScript``, the replay script's shape) and checks
how the run ends under the profile's rules, what was sent, and that the API key is
written nowhere.
"""

from __future__ import annotations

import json
from itertools import groupby

import pytest

from orchestrator.ledger.calls import calls_for
from roles.backends.anthropic import output_model
from roles.schemas import ARTIFACT_SCHEMAS
from tests.fake_anthropic import FakeAnthropic, Reply, RoleScript, api_error, hang, malformed, message, tool_use
from tests.runkit import TASK, demo_script, happy_script, make_workspace, proposal, r

KEY = "mesh-e2e-anthropic-key-7731"
FAST_RETRY = {"retry-after-ms": "1"}


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def config_text(ws, *, anthropic: dict | None = None, budget: str = "") -> str:
    """The demo's mesh.toml plus test models with their own prices and API settings."""
    settings = {"max_retries": 1, "timeout_s": 5.0, "max_tool_turns": 2, **(anthropic or {})}
    return (ws.repo / "mesh.toml").read_text() + f"""
[models]
proposer = "claude-test-writer"
synthesizer = "claude-test-writer"
reviewer = "claude-test-writer"
critic_a = "claude-test-critic"
critic_b = "claude-test-critic"
skeptic = "claude-test-critic"

[prices]
as_of = "2026-11-01"

[prices.models.claude-test-writer]
input = 3.0
output = 15.0

[prices.models.claude-test-critic]
input = 1.0
output = 5.0

[anthropic]
{chr(10).join(f"{name} = {value}" for name, value in settings.items())}

{budget}
"""


def run_anthropic(ws, script, *, anthropic: dict | None = None, budget: str = "", key: str = KEY,
                  args: tuple[str, ...] = (), **fake_options):
    """Run the demo task with the anthropic backend against a fake (``fake_options`` go to
    ``FakeAnthropic``, ``args`` to ``mesh run``); returns (code, report, result, fake)."""
    cfg = ws.root / "mesh-anthropic.toml"
    cfg.write_text(config_text(ws, anthropic=anthropic, budget=budget))
    responder = RoleScript(script)
    with FakeAnthropic(responder, **fake_options) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": key}
        res = ws.mesh("run", "--label", "plan:demo", "--backend", "anthropic", "--repo", str(ws.repo),
                      "--config", str(cfg), "--json", *args, env=env)
    assert responder.problems == []
    report = json.loads(res.stdout) if res.stdout.strip().startswith("{") else None
    return res.exit_code, report, res, fake


def calls(ws):
    with ws.tracker() as t:
        return calls_for(t, task_id=TASK)


def assert_key_written_nowhere(ws, res):
    assert KEY not in res.stdout and KEY not in res.stderr
    with ws.tracker() as t:
        rows = calls_for(t)
        issues = t.list(include_closed=True)
        comments = [c["text"] for issue in issues for c in t.comments(issue["id"])]
    assert rows and comments
    assert KEY not in json.dumps(rows)
    assert not any(KEY in text for text in comments)
    for path in ws.db.parent.glob(ws.db.name + "*"):  # the database and its WAL
        assert KEY.encode() not in path.read_bytes()


# ------------------------------------------------------------------ the demo run


def test_demo_run_closes_over_the_messages_api(ws):
    code, report, res, fake = run_anthropic(ws, demo_script())
    assert code == 0, res.output
    assert report["outcome"] == "closed" and report["task"]["final_status"] == "closed"
    assert report["review"]["cycles"] == 2
    requests = fake.message_requests
    usage = report["usage"]
    assert usage["calls"] == len(requests) == len(calls(ws))
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0 and usage["cost_usd"] > 0
    # Critics and voters of a round share the prefix: the fake's cache served reads.
    assert usage["cache_read_tokens"] > 0 and usage["cache_write_tokens"] > 0

    for req in requests:
        body = req.body
        schema = output_model(ARTIFACT_SCHEMAS[req.round], req.round, False)[1]
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
        # The breakpoints are on the shared blocks (task part, round part), and the role part
        # comes after them.
        assert [block["cache_control"] for block in body["system"]] == [{"type": "ephemeral"}] * 2
        assert body["system"][1]["text"].startswith(f"\n# Round: {req.round}")
        assert body["messages"][0]["role"] == "user"
        assert [block.get("cache_control") for block in body["messages"][0]["content"]] == [None]
        assert "# Your role: " in body["messages"][0]["content"][0]["text"]
        assert "# Your role: " not in req.system_text
        assert [tool["name"] for tool in body["tools"]] == ["read_file", "list_dir", "grep"]
    # The roles of one round (consecutive requests of one round) got a byte-identical prefix.
    fan_outs = 0
    for round_name, group in groupby(requests, key=lambda req: req.round):
        group = list(group)
        if round_name in ("critique", "vote"):
            fan_outs += 1
            assert len({req.role for req in group}) == len(group) > 1
            assert len({json.dumps(req.body["system"]) for req in group}) == 1
            assert len({json.dumps(req.body["tools"]) + json.dumps(req.body["output_config"])
                        for req in group}) == 1
    assert fan_outs >= 4
    # The context pack shows the task's code: temperature.py defines names the task mentions.
    assert "### temperature.py" in requests[0].system_text
    assert_key_written_nowhere(ws, res)


def test_a_tool_turn_reads_the_worktree_then_answers(ws):
    script = happy_script()
    script["proposer"][:1] = [
        tool_use("read_file", {"path": "temperature.py"},
                 more=[("read_file", {"path": "../../etc/passwd"}, "toolu_02")]),
        r("proposal", proposal()),
    ]
    code, report, res, fake = run_anthropic(ws, script)
    assert code == 0, res.output
    assert report["outcome"] == "closed"
    first, second = [req for req in fake.message_requests if req.role == "proposer"][:2]
    assert len(first.body["messages"]) == 1 and len(second.body["messages"]) == 3
    ok, refused = second.body["messages"][2]["content"]
    assert "def celsius_to_fahrenheit" in ok["content"] and not ok.get("is_error")
    assert refused["is_error"] is True and "'..' is refused" in refused["content"]
    # One worker call, two API requests: one calls-table row.
    proposal_calls = [c for c in calls(ws) if c["round"] == "proposal"]
    assert len(proposal_calls) == 1 and proposal_calls[0]["error"] is None
    assert report["usage"]["calls"] == len(calls(ws))


# ------------------------------------------------------------------ faults and the profile's rules


def test_api_faults_end_as_the_profile_says_and_the_run_still_closes(ws):
    script = happy_script()
    script["proposer"][:0] = [api_error(429, "rate_limit_error", "slow down", {"retry-after": "0", **FAST_RETRY})]
    script["critic_a"][:0] = [api_error(529, "overloaded_error", "overloaded", FAST_RETRY)]
    script["critic_b"][:0] = [api_error(500, "api_error", "boom", FAST_RETRY)] * 2
    script["skeptic"][:0] = [malformed()]
    script["synthesizer"][:0] = [message('{"decision_log": [], "patch": "--- a/temp', stop_reason="max_tokens")]
    script["proposer"][2:2] = [message("I won't vote on this.", stop_reason="refusal")]
    script["reviewer"][:0] = [hang(4), hang(4)]
    # A hang is an answer later than timeout_s; every other answer comes in milliseconds.
    code, report, res, fake = run_anthropic(ws, script, anthropic={"timeout_s": 1.0})
    assert code == 0, res.output
    assert report["outcome"] == "closed" and report["consensus"]["mode"] == "full"
    assert "Traceback" not in res.output

    log = [(c["role"], c["round"], c["attempt"], (c["error"] or "").split(":")[0] or None) for c in calls(ws)]
    # 429 and 529: the SDK retried and the engine saw one good answer.
    assert ("proposer", "proposal", 1, None) in log and ("critic_a", "critique", 1, None) in log
    assert ("proposer", "proposal", 2) not in [entry[:3] for entry in log]
    # 500 after the SDK's retries, a malformed body, a refusal: the profile's one retry.
    for role, round_name, error in [("critic_b", "critique", "no_response"), ("skeptic", "critique", "no_response"),
                                    ("proposer", "vote", "refusal"), ("reviewer", "review", "timeout")]:
        assert (role, round_name, 1, error) in log and (role, round_name, 2, None) in log
    # max_tokens: the engine's strict follow-up, with the correction in the prompt.
    assert ("synthesizer", "synthesis", 1, "max_tokens") in log
    follow_up = [c for c in calls(ws) if c["round"] == "synthesis" and c["attempt"] == 2][0]
    assert "## Correction (attempt 2)" in follow_up["prompt"] and "max_tokens" in follow_up["prompt"]

    retries = [req.headers["x-stainless-retry-count"] for req in fake.message_requests if req.role == "proposer"]
    assert retries[:2] == ["0", "1"]
    assert_key_written_nowhere(ws, res)


def _refusals(n):
    return [message("I can't help with that.", stop_reason="refusal")] * n


def _cut_off(n):
    return [message('{"plan": ["half', stop_reason="max_tokens")] * n


@pytest.mark.parametrize("replies, reason, mode", [
    (_cut_off(2), "proposal_unparsable", "full"),
    # Refused twice (no response, retried once) -> the 3-role fallback, whose proposer is
    # asked once more (and retried once): four refusals block the task.
    (_refusals(4), "no_response", "fallback"),
])
def test_persistent_failures_block_with_the_profile_reason(ws, replies, reason, mode):
    script = happy_script()
    script["proposer"][:1] = replies
    code, report, res, fake = run_anthropic(ws, script)
    assert code == 3, res.output
    assert report["outcome"] == "blocked" and report["block_reason"] == reason
    assert report["consensus"]["mode"] == mode
    assert ws.kinds()[-1] == "outcome" and "Traceback" not in res.output


def test_a_refused_key_exits_2_with_one_message(ws):
    script = {"proposer": [api_error(401, "authentication_error", "invalid x-api-key")]}
    code, report, res, fake = run_anthropic(ws, script)
    assert code == 2
    assert "ANTHROPIC_API_KEY" in res.stderr and "Traceback" not in res.output
    assert len(fake.message_requests) == 1


def test_a_missing_key_exits_2_before_any_request(ws):
    code, report, res, fake = run_anthropic(ws, happy_script(), key="")
    assert code == 2
    assert "set ANTHROPIC_API_KEY" in res.stderr and fake.requests == []


# ------------------------------------------------------------------ budgets


@pytest.mark.parametrize("budget", ["[budget]\nmax_tokens = 200000\n", "[budget]\nmax_usd = 1.0\n"])
def test_a_tiny_budget_blocks_before_crossing_it_and_keeps_earlier_checkpoints(ws, budget):
    script = happy_script()
    # The proposal reports ten million input tokens ($30 at the writer's price): within the
    # pre-call check, since the check cannot know, but the next call would cross the budget.
    script["proposer"][0] = Reply(body=message(json.dumps(proposal())).body,
                                  usage={"input_tokens": 10_000_000, "output_tokens": 100})
    code, report, res, fake = run_anthropic(ws, script, anthropic={"max_tokens": 300, "max_tool_turns": 1},
                                            budget=budget)
    assert code == 3, res.output
    assert report["outcome"] == "blocked" and report["block_reason"] == "budget_exceeded"
    assert ws.kinds() == ["preflight", "proposal", "run-head", "outcome"]
    assert [req.role for req in fake.message_requests] == ["proposer"]
    outcome = ws.checkpoints()[-1].payload["artifact"]
    assert outcome["block_reason"] == "budget_exceeded" and outcome["usage"]["input_tokens"] == 10_000_000
