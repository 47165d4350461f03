"""The anthropic backend against a fake Messages API on 127.0.0.1: what it sends, how it
reads answers, errors and usage, and its worst case for budgets."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.config import MeshConfig
from roles.backends.anthropic import AnthropicBackend, output_model
from roles.backends.base import BackendError, WorkerRequest, get_backend
from roles.prompts import build_prompt
from roles.schemas import ARTIFACT_SCHEMAS
from tests.fake_anthropic import (
    Reply,
    api_error,
    count_tokens,
    hang,
    malformed,
    message,
    serving,
    tool_use,
)

KEY = "mesh-test-anthropic-key-0451"
TASK = {"id": "t-1", "title": "Add fahrenheit_to_celsius", "description": "see temperature.py"}
PROPOSAL = {"plan": ["add the function", "test it"], "assumptions": ["floats"], "risk": "low"}
CRITIQUE = {"findings": ["ok"], "must_fix": [], "vote_flip_conditions": [], "risk": "low"}
FAST_RETRY = {"retry-after-ms": "1"}


@pytest.fixture
def fake(monkeypatch):
    yield from serving(monkeypatch, KEY)


# Test models with their own prices, so no test depends on the default price table.
MODELS = {"proposer": "claude-test-writer", "synthesizer": "claude-test-writer", "reviewer": "claude-test-writer",
          "critic_a": "claude-test-critic", "critic_b": "claude-test-critic", "skeptic": "claude-test-critic"}
PRICES = {"as_of": "2026-11-01", "models": {"claude-test-writer": {"input": 3.0, "output": 15.0},
                                            "claude-test-critic": {"input": 1.0, "output": 5.0}}}


def config(**anthropic_settings) -> MeshConfig:
    settings = {"max_retries": 1, "timeout_s": 5.0, **anthropic_settings}
    return MeshConfig().with_overrides(models=MODELS, prices=PRICES,
                                       **{f"anthropic__{k}": v for k, v in settings.items()})


def backend(**anthropic_settings) -> AnthropicBackend:
    return AnthropicBackend(config(**anthropic_settings))


def request(round_name="proposal", role="proposer", *, inputs=None, strict=False, worktree=None, attempt=1):
    prompt = build_prompt(round_name, role, task=TASK, inputs=inputs or {}, repo_context="## File tree\nx.py",
                          strict=strict)
    return WorkerRequest(role=role, round=round_name, task_id="t-1", run_id="run-1", attempt=attempt,
                         prompt=prompt, schema=ARTIFACT_SCHEMAS[round_name], strict=strict, worktree=worktree)


# ------------------------------------------------------------------ what is sent


def test_request_carries_schema_model_and_cached_shared_prefix(fake):
    fake.push(message(json.dumps(PROPOSAL)))
    response = backend().call(request())
    assert response.error is None and json.loads(response.text) == PROPOSAL
    body = fake.requests[0].body
    assert fake.requests[0].path == "/v1/messages"
    assert body["model"] == "claude-test-writer"  # the proposer's model
    assert body["max_tokens"] == 8192
    assert "temperature" not in body
    assert body["output_config"] == {"format": {"type": "json_schema",
                                                "schema": output_model(ARTIFACT_SCHEMAS["proposal"], "proposal",
                                                                       False)[1]}}
    schema = body["output_config"]["format"]["schema"]
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"plan", "assumptions", "risk"}
    assert "outbox" in schema["properties"]  # the proposal prompt offers an outbox
    # The shared part is the system prompt, split before the round heading: the task part
    # (same in every round) and the round part, each ending in a breakpoint. The role part
    # follows, in the user message, with no breakpoint of its own.
    prompt = request().prompt
    task_part, round_part = prompt.shared.split("\n# Round: proposal")
    assert body["system"] == [
        {"type": "text", "text": task_part, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "\n# Round: proposal" + round_part, "cache_control": {"type": "ephemeral"}},
    ]
    assert "# Repository context" in task_part
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": prompt.role_part}]}]
    assert "tools" not in body  # no worktree, no tools


def test_strict_mode_sends_the_envelope_schema(fake):
    envelope = {"role": "skeptic", "task_id": "t-1", "artifact": {"vote": "agree", "reason": "fine"}}
    fake.push(message(json.dumps(envelope)))
    inputs = {"proposal": PROPOSAL, "synthesis": {"decision_log": [], "patch": "NO_DIFF: nothing",
                                                  "validation_commands": ["true"]}}
    response = backend().call(request("vote", "skeptic", inputs=inputs, strict=True))
    assert response.error is None and response.detail is None
    schema = fake.requests[0].body["output_config"]["format"]["schema"]
    assert set(schema["required"]) == {"role", "task_id", "artifact"}
    assert "outbox" not in schema["properties"]  # votes carry no outbox
    assert schema["properties"]["role"] == {"type": "string", "title": "Role"}
    assert fake.requests[0].body["model"] == "claude-test-critic"  # the skeptic's model


def test_shared_prefix_is_byte_identical_across_the_roles_of_a_round(fake):
    critics = ("critic_a", "critic_b", "skeptic")
    for _ in critics:
        fake.push(message(json.dumps(CRITIQUE)))
    b = backend()
    for role in critics:
        b.call(request("critique", role, inputs={"proposal": PROPOSAL}))
    bodies = [r.body for r in fake.requests]
    assert len({json.dumps(b["system"]) for b in bodies}) == 1
    assert len({json.dumps(b["output_config"]) for b in bodies}) == 1
    assert len({json.dumps(b["messages"]) for b in bodies}) == 3
    assert {b["model"] for b in bodies} == {"claude-test-critic"}


def test_usage_and_cost_come_from_the_api_and_the_price_table(fake):
    usage = {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 3000,
             "cache_creation_input_tokens": 400}
    fake.push(message(json.dumps(PROPOSAL), usage=usage))
    response = backend().call(request())
    assert response.usage.input_tokens == 1000 and response.usage.output_tokens == 200
    assert response.usage.cache_read_tokens == 3000 and response.usage.cache_write_tokens == 400
    # claude-test-writer: 3 / 15 USD per million, cache reads 0.1x and writes 1.25x of input.
    expected = (1000 * 3 + 200 * 15 + 3000 * 0.30 + 400 * 3.75) / 1_000_000
    assert response.usage.cost_usd == pytest.approx(expected)
    assert response.model == "claude-test-writer"


def test_cache_reads_follow_the_shared_prefix(fake):
    fake.push(message(json.dumps(CRITIQUE)), message(json.dumps({"vote": "agree", "reason": "ok"})),
              message(json.dumps(CRITIQUE)))
    b = backend()
    critique = request("critique", "critic_a", inputs={"proposal": PROPOSAL})
    vote_inputs = {"proposal": PROPOSAL, "synthesis": {"decision_log": [], "patch": "NO_DIFF: nothing",
                                                       "validation_commands": ["true"]}}
    first = b.call(critique)
    vote = b.call(request("vote", "critic_b", inputs=vote_inputs))
    second = b.call(request("critique", "skeptic", inputs={"proposal": PROPOSAL}))
    cut = critique.prompt.shared.index("\n# Round: critique")
    task_tokens = count_tokens(critique.prompt.shared[:cut])
    round_tokens = count_tokens(critique.prompt.shared[cut:])
    assert first.usage.cache_read_tokens == 0 and first.usage.cache_write_tokens == task_tokens + round_tokens
    # Another round on the same model re-reads the task part and writes its own round part
    # (a cache is per model: the writers' rounds do not warm the critics' cache) ...
    assert vote.usage.cache_read_tokens == task_tokens and vote.usage.cache_write_tokens > 0
    # ... and the next role of a round reads all of the shared prefix.
    assert second.usage.cache_read_tokens == task_tokens + round_tokens and second.usage.cache_write_tokens == 0


# ------------------------------------------------------------------ tools


def test_tool_turn_reads_a_file_then_answers(fake, tmp_path):
    (tmp_path / "temperature.py").write_text("ABSOLUTE_ZERO_C = -273.15\n")
    fake.push(tool_use("read_file", {"path": "temperature.py"}, more=[("read_file", {"path": "/etc/passwd"},
                                                                       "toolu_02")]),
              message(json.dumps(PROPOSAL)))
    response = backend().call(request(worktree=tmp_path))
    assert response.error is None and json.loads(response.text) == PROPOSAL
    first, second = (r.body for r in fake.requests)
    assert [t["name"] for t in first["tools"]] == ["read_file", "list_dir", "grep"]
    assert first["tools"] == second["tools"] and first["system"] == second["system"]
    assistant, results = second["messages"][1], second["messages"][2]
    assert assistant["role"] == "assistant" and assistant["content"][0]["type"] == "tool_use"
    ok, refused = results["content"]
    assert ok["tool_use_id"] == "toolu_01" and "ABSOLUTE_ZERO_C = -273.15" in ok["content"]
    assert "is_error" not in ok
    assert refused["tool_use_id"] == "toolu_02" and refused["is_error"] is True
    assert "absolute paths are refused" in refused["content"]
    # The moving breakpoint: on the newest tool result only, besides the shared block.
    assert refused["cache_control"] == {"type": "ephemeral"} and "cache_control" not in ok
    # Usage of both requests is summed.
    assert response.usage.output_tokens > count_tokens(json.dumps(PROPOSAL))


def test_tool_turns_are_capped_and_the_last_request_forbids_tools(fake, tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    fake.push(tool_use("list_dir", {}), tool_use("read_file", {"path": "a.txt"}))
    response = backend(max_tool_turns=1).call(request(worktree=tmp_path))
    assert [r.body["tool_choice"] for r in fake.requests] == [{"type": "auto"}, {"type": "none"}]
    assert response.error == "no_response" and "still asking for tools after 1 tool turn" in response.detail
    second = fake.requests[1].body["messages"]
    assert sum(1 for m in second for b in m["content"] if b.get("cache_control")) == 1


def test_tool_turns_share_max_tokens(fake, tmp_path):
    spending = tool_use("list_dir", {})
    spending.usage = {"input_tokens": 10, "output_tokens": 300}
    fake.push(spending, message(json.dumps(PROPOSAL)))
    response = backend(max_tokens=500).call(request(worktree=tmp_path))
    assert [r.body["max_tokens"] for r in fake.requests] == [500, 200]
    assert response.error is None
    spending.usage = {"input_tokens": 10, "output_tokens": 500}
    fake.push(spending)
    used_up = backend(max_tokens=500).call(request(worktree=tmp_path))
    assert used_up.error == "max_tokens" and "tool turns used all of max_tokens=500" in used_up.detail


# ------------------------------------------------------------------ stop reasons and errors


def test_max_tokens_and_refusal_are_reported_before_parsing(fake):
    fake.push(message('{"plan": ["cut of', stop_reason="max_tokens"), message("I can't", stop_reason="refusal"))
    b = backend()
    cut = b.call(request())
    assert cut.error == "max_tokens" and cut.text == '{"plan": ["cut of'
    refused = b.call(request())
    assert refused.error == "refusal"


def test_rate_limit_and_overload_are_retried_by_the_sdk(fake):
    fake.push(api_error(429, "rate_limit_error", "slow down", {"retry-after": "0", **FAST_RETRY}),
              api_error(529, "overloaded_error", "overloaded", FAST_RETRY),
              message(json.dumps(PROPOSAL)))
    response = backend(max_retries=2).call(request())
    assert response.error is None
    assert [r.headers["x-stainless-retry-count"] for r in fake.requests] == ["0", "1", "2"]


def test_server_errors_after_the_sdk_retries_are_no_response(fake):
    fake.push(*[api_error(500, "api_error", "boom", FAST_RETRY)] * 2)
    response = backend(max_retries=1).call(request())
    assert response.error == "no_response" and response.text is None
    assert response.detail.startswith("HTTP 500 api_error")
    assert len(fake.requests) == 2  # one try and max_retries=1 retry, nothing on top


def test_a_hang_past_the_timeout_is_timeout(fake):
    fake.push(hang(5))
    response = backend(max_retries=0, timeout_s=0.2).call(request())
    assert response.error == "timeout" and "0.2s" in response.detail
    assert response.duration_s < 2


def test_a_malformed_body_is_no_response(fake):
    fake.push(malformed(), Reply(body={"type": "message"}), Reply(body=b"<html>bad gateway</html>"))
    b = backend(max_retries=0)
    cut = b.call(request())
    assert cut.error == "no_response" and cut.detail.startswith("malformed API response")
    empty = b.call(request())  # valid JSON, but no content and no stop_reason
    assert empty.error == "no_response" and "stop_reason None" in empty.detail
    html = b.call(request())
    assert html.error == "no_response" and html.detail.startswith("malformed API response")


def test_a_bad_request_is_no_response_with_detail(fake):
    fake.push(api_error(400, "invalid_request_error", "prompt is too long"))
    response = backend().call(request())
    assert response.error == "no_response" and "prompt is too long" in response.detail


@pytest.mark.parametrize("status, kind, needle", [(401, "authentication_error", "ANTHROPIC_API_KEY"),
                                                  (404, "not_found_error", "claude-test-writer")])
def test_errors_a_user_must_fix_raise_backend_error(fake, status, kind, needle):
    fake.push(api_error(status, kind, f"invalid x-api-key {KEY}"))
    with pytest.raises(BackendError) as raised:
        backend().call(request())
    assert needle in str(raised.value) and KEY not in str(raised.value)
    assert len(fake.requests) == 1  # not retried


def test_details_never_carry_the_key(fake):
    fake.push(api_error(500, "api_error", f"upstream said: x-api-key={KEY}", {"x-should-retry": "false"}))
    response = backend().call(request())
    assert KEY not in response.detail and "[REDACTED]" in response.detail


def test_a_reply_off_schema_is_returned_with_a_detail_for_the_engine(fake):
    fake.push(message('{"plan": [], "risk": "extreme"}'), message("not json"))
    b = backend()
    off = b.call(request())
    assert off.error is None and off.text == '{"plan": [], "risk": "extreme"}'
    assert "does not match the ProposalArtifactWithOutbox schema" in off.detail
    prose = b.call(request())
    assert prose.text == "not json" and "(not JSON)" in prose.detail


# ------------------------------------------------------------------ construction, budgets, imports


def test_missing_key_is_one_clear_backend_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(BackendError, match="set ANTHROPIC_API_KEY"):
        get_backend("anthropic", config=MeshConfig())


def test_usd_budget_needs_a_price_for_every_model(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    unpriced = MeshConfig().with_overrides(budget__max_usd=1.0, models={"reviewer": "claude-unpriced-9"})
    with pytest.raises(BackendError, match="claude-unpriced-9"):
        AnthropicBackend(unpriced)


def test_worst_case_bounds_a_call_with_tool_turns(fake, tmp_path):
    (tmp_path / "big.txt").write_text("word " * 20_000)
    fake.push(tool_use("read_file", {"path": "big.txt"}), tool_use("grep", {"pattern": "word"}),
              message(json.dumps(PROPOSAL)))
    b = backend(max_tool_turns=2, max_tokens=1000)
    req = request(worktree=tmp_path)
    response = b.call(req)
    worst = b.worst_case(req)
    actual_input = (response.usage.input_tokens + response.usage.cache_read_tokens
                    + response.usage.cache_write_tokens)
    assert actual_input < worst.input_tokens
    assert response.usage.output_tokens <= worst.output_tokens == 1000
    assert response.usage.cost_usd < worst.cost_usd
    # Without tools, one request; more tool turns, a higher ceiling.
    assert b.worst_case(request()).input_tokens < worst.input_tokens < backend(
        max_tool_turns=4, max_tokens=1000).worst_case(req).input_tokens


def test_mesh_help_never_imports_the_sdk():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom orchestrator.cli.main import cli\n"
            "assert CliRunner().invoke(cli, ['--help']).exit_code == 0\n"
            "assert CliRunner().invoke(cli, ['run', '--help']).exit_code == 0\n"
            "print('anthropic' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
