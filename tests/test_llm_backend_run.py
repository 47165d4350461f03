"""``mesh run --backend llm`` end to end: the demo workspace (a real git repo, a real tracker,
the demo's real tests in the sandbox) with every role played by a real llm model of the
test-only plugin (``tests/llm_test_plugin.py``), registered through llm's plugin manager.

The writers use a model with schema support, the critics one without (so the profile's
tolerant parsing and its one re-ask carry them), the reviewer one that needs a key from
llm's keys.json. Each test checks how the run ends, what the calls table holds, and that
llm's own files get no log and the key goes nowhere.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.ledger.calls import calls_for
from tests.llm_test_plugin import Fault, ProviderError, ProviderTimeout, Script, registered
from tests.runkit import TASK, critique, happy_script, make_workspace, proposal, r

KEY = "scripted-run-key-91c2d7aa40"
WRITER, CRITIC, REVIEWER = "scripted:json", "plain-text", "scripted/keyed"


@pytest.fixture
def ws(tmp_path, monkeypatch):
    llm_home = tmp_path / "llm-user"
    llm_home.mkdir()
    (llm_home / "keys.json").write_text(json.dumps({"scripted": KEY}))
    monkeypatch.setenv("LLM_USER_PATH", str(llm_home))
    workspace = make_workspace(tmp_path)
    workspace.llm_home = llm_home
    return workspace


def config_text(ws, extra: str = "", **models: str) -> str:
    """The demo's mesh.toml with llm model names per role (``models`` overrides), their
    prices and llm settings."""
    names = {"proposer": WRITER, "synthesizer": WRITER, "reviewer": REVIEWER, "critic_a": CRITIC,
             "critic_b": CRITIC, "skeptic": CRITIC, **models}
    return (ws.repo / "mesh.toml").read_text() + "\n[models]\n" + "".join(
        f'{role} = "{name}"\n' for role, name in names.items()) + """
[prices]
as_of = "2026-11-01"

[prices.models."scripted/json"]
input = 2.0
output = 8.0
cache_read = 0.5

[prices.models.plain-text]
input = 1.0
output = 4.0

[prices.models."scripted/keyed"]
input = 3.0
output = 12.0

[llm]
timeout_s = 30
""" + extra


def run_llm(ws, entries: dict, extra: str = ""):
    """Run the demo task with the llm backend; returns (code, report, result, script)."""
    cfg = ws.root / "mesh-llm.toml"
    cfg.write_text(config_text(ws, extra))
    script = Script.of(entries)
    with registered(script):
        res = ws.mesh("run", "--label", "plan:demo", "--backend", "llm", "--repo", str(ws.repo),
                      "--config", str(cfg), "--json")
    report = json.loads(res.stdout) if res.stdout.strip().startswith("{") else None
    return res.exit_code, report, res, script


def calls(ws):
    with ws.tracker() as t:
        return calls_for(t, task_id=TASK)


def assert_no_llm_log_and_no_key(ws, res):
    assert not (ws.llm_home / "logs.db").exists()
    assert KEY not in res.stdout and KEY not in res.stderr
    with ws.tracker() as t:
        rows = calls_for(t)
        comments = [c["text"] for issue in t.list(include_closed=True) for c in t.comments(issue["id"])]
    assert KEY not in json.dumps(rows) and not any(KEY in text for text in comments)
    for path in ws.db.parent.glob(ws.db.name + "*"):  # the database and its WAL
        assert KEY.encode() not in path.read_bytes()


def test_a_run_closes_with_every_role_on_an_llm_model(ws):
    code, report, res, script = run_llm(ws, happy_script())
    assert code == 0, res.output
    assert report["outcome"] == "closed" and report["task"]["final_status"] == "closed"
    assert script.problems == []

    rows = calls(ws)
    assert {row["backend"] for row in rows} == {"llm"}
    assert {(row["role"], row["model"]) for row in rows if row["round"] in ("proposal", "critique", "review")} == {
        ("proposer", "scripted/json"), ("critic_a", "scripted/text"), ("critic_b", "scripted/text"),
        ("skeptic", "scripted/text"), ("reviewer", "scripted/keyed")}
    # Schemas went only to the models that support them.
    assert {seen.model_id for seen in script.seen if seen.schema is not None} == {"scripted/json", "scripted/keyed"}
    assert all(seen.schema is None for seen in script.seen if seen.model_id == "scripted/text")
    assert {seen.key for seen in script.seen if seen.model_id == "scripted/keyed"} == {KEY}

    # Usage and cost per call, priced by the configured name or the model id.
    for row in rows:
        usage = row["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0 and usage["cost_usd"] > 0, row
    critic_row = next(row for row in rows if row["role"] == "critic_a")
    assert critic_row["usage"]["cost_usd"] == pytest.approx(
        (critic_row["usage"]["input_tokens"] * 1.0 + critic_row["usage"]["output_tokens"] * 4.0) / 1e6)
    # The proposer and the synthesizer vote on the same model with the same system prompt:
    # whichever asked second was served the prefix from the (simulated) cache.
    assert report["usage"]["cache_read_tokens"] > 0
    assert report["usage"]["calls"] == len(rows) == len(script.seen)
    assert report["usage"]["cost_usd"] == pytest.approx(sum(row["usage"]["cost_usd"] for row in rows), abs=1e-6)
    assert_no_llm_log_and_no_key(ws, res)


def test_an_unparsable_answer_of_a_model_without_schemas_gets_one_re_ask(ws):
    script = happy_script()
    # Markdown a tolerant parse reads as it is, then prose that no rule reads.
    script["critic_b"][0] = r("critique", "## Findings\n- looks fine\n\n## Must fix\n- none\n\n"
                                          "## Vote flip conditions\n- none\n\nRisk: low\n")
    script["skeptic"][:1] = [r("critique", "I have looked at it and I am not worried at all."),
                             r("critique", critique())]
    code, report, res, seen = run_llm(ws, script)
    assert code == 0, res.output
    assert report["outcome"] == "closed" and seen.problems == []
    log = [(row["role"], row["round"], row["attempt"]) for row in calls(ws) if row["round"] == "critique"]
    assert sorted(log) == [("critic_a", "critique", 1), ("critic_b", "critique", 1), ("skeptic", "critique", 1),
                           ("skeptic", "critique", 2)]
    re_ask = next(s for s in seen.seen if s.role == "skeptic" and s.round == "critique" and "Correction" in s.prompt)
    assert "## Correction (attempt 2)" in re_ask.prompt and re_ask.schema is None
    assert_no_llm_log_and_no_key(ws, res)


def test_provider_failures_follow_the_profile_and_the_run_still_closes(ws):
    script = happy_script()
    script["proposer"][:0] = [Fault(ProviderError(503, "overloaded"), round="proposal")]
    script["critic_a"][:0] = [Fault(ProviderTimeout("read timed out"), round="critique")]
    script["reviewer"][:0] = [Fault(ProviderError(500, f"upstream echoed {KEY}"), round="review")]
    code, report, res, seen = run_llm(ws, script)
    assert code == 0, res.output
    assert report["outcome"] == "closed" and report["consensus"]["mode"] == "full" and seen.problems == []
    assert "Traceback" not in res.output
    errors = {(row["role"], row["attempt"]): row["error"] for row in calls(ws)
              if row["round"] in ("proposal", "critique", "review")}
    assert errors[("proposer", 1)] == "no_response: HTTP 503 ProviderError: overloaded"
    assert errors[("critic_a", 1)] == "timeout: ProviderTimeout: read timed out"
    assert errors[("reviewer", 1)] == "no_response: HTTP 500 ProviderError: upstream echoed [REDACTED]"
    assert errors[("proposer", 2)] is None and errors[("critic_a", 2)] is None and errors[("reviewer", 2)] is None
    assert_no_llm_log_and_no_key(ws, res)


def test_a_refused_key_mid_run_exits_2_with_one_line(ws):
    script = {"proposer": [r("proposal", proposal())],
              "critic_a": [Fault(ProviderError(401, "invalid api key"))]}
    code, report, res, seen = run_llm(ws, script)
    assert code == 2
    assert "the provider refused the API key of model 'plain-text' (HTTP 401)" in res.stderr
    assert "Traceback" not in res.output


@pytest.mark.parametrize("models, keys, expected", [
    ({"proposer": "ollama:qwen3"}, {"scripted": KEY},
     "models.proposer = 'ollama:qwen3': llm knows no such model and has no plugin 'ollama'"),
    ({}, {}, "model 'scripted/keyed' needs an API key: No key found - add one using 'llm keys set scripted'"),
])
def test_an_unknown_model_or_a_missing_key_exits_2_before_any_call(ws, models, keys, expected):
    (ws.llm_home / "keys.json").write_text(json.dumps(keys))
    cfg = ws.root / "mesh-llm.toml"
    cfg.write_text(config_text(ws, **models))
    script = Script.of(happy_script())
    with registered(script):
        res = ws.mesh("run", "--label", "plan:demo", "--backend", "llm", "--repo", str(ws.repo), "--config", str(cfg))
    assert res.exit_code == 2, res.output
    assert expected in res.stderr and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert script.seen == [] and calls(ws) == []


def test_a_budget_too_small_for_one_call_blocks_before_any_call(ws):
    extra = '[llm.options."scripted:json"]\nmax_tokens = 2000\n[llm.options.plain-text]\nmax_tokens = 2000\n' \
            '[llm.options."scripted/keyed"]\nmax_tokens = 2000\n\n[budget]\nmax_tokens = 1000\n'
    code, report, res, script = run_llm(ws, happy_script(), extra)
    assert code == 3, res.output
    assert report["outcome"] == "blocked" and report["block_reason"] == "budget_exceeded"
    assert script.seen == []
