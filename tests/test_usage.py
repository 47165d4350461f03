"""``mesh usage`` on a real run: the demo task through the anthropic backend (the official SDK
against the fake Messages API on 127.0.0.1, which counts tokens and simulates the prompt
cache), so the calls carry real token counts; then the sums, groups, filters and dates."""

from __future__ import annotations

import datetime as dt
import json
import math

import pytest

from orchestrator.ledger.calls import calls_for, ensure_calls_table, log_call
from orchestrator.config import KNOWN_ROLES, PriceTable
from orchestrator.ledger.usage import Cost, UsageError, call_cost, parse_since, render_usage, usage_summary
from tests.fake_anthropic import FakeAnthropic, RoleScript
from tests.runkit import TASK, happy_script, make_workspace
from tracker.store import Tracker

AS_OF = "2026-11-01"
WRITER = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
CRITIC = {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_write": 1.25}
KEY = "mesh-usage-test-key-5519"


def config_text(repo) -> str:
    """The demo's mesh.toml, test models, their prices, and quick API settings."""
    return (repo / "mesh.toml").read_text() + f"""
[models]
proposer = "claude-test-writer"
synthesizer = "claude-test-writer"
reviewer = "claude-test-writer"
critic_a = "claude-test-critic"
critic_b = "claude-test-critic"
skeptic = "claude-test-critic"

[prices]
as_of = "{AS_OF}"

[prices.models.claude-test-writer]
{chr(10).join(f"{k} = {v}" for k, v in WRITER.items())}

[prices.models.claude-test-critic]
{chr(10).join(f"{k} = {v}" for k, v in CRITIC.items())}

[anthropic]
max_retries = 1
timeout_s = 5.0
max_tool_turns = 0
"""


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    """One closed run of the demo task over the Messages API; the tests only read it."""
    ws = make_workspace(tmp_path_factory.mktemp("usage"))
    cfg = ws.root / "mesh-api.toml"
    cfg.write_text(config_text(ws.repo))
    responder = RoleScript(happy_script())
    with FakeAnthropic(responder) as fake:
        res = ws.mesh("run", "--label", "plan:demo", "--backend", "anthropic", "--repo", str(ws.repo),
                      "--config", str(cfg), "--json", env={"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": KEY})
    assert res.exit_code == 0, res.output
    assert responder.problems == []
    with ws.tracker() as t:
        rows = calls_for(t)
    return ws, cfg, json.loads(res.stdout), rows


def summary_of(ws, **kw):
    with ws.tracker() as t:
        return usage_summary(t, prices=PriceTable(as_of=AS_OF, models={"claude-test-writer": WRITER,
                                                                         "claude-test-critic": CRITIC}), **kw)


def hand_cost(rows) -> float:
    total = 0.0
    for row in rows:
        u = row["usage"]
        rate = WRITER if row["model"] == "claude-test-writer" else CRITIC
        total += (u["input_tokens"] * rate["input"] + u["output_tokens"] * rate["output"]
                  + u["cache_read_tokens"] * rate["cache_read"] + u["cache_write_tokens"] * rate["cache_write"]) / 1e6
    return total


# ------------------------------------------------------------------ sums and groups


def test_totals_match_the_calls_and_the_runs_own_report(api_run):
    ws, _, report, rows = api_run
    total = summary_of(ws)["total"]
    assert total["calls"] == len(rows) == report["usage"]["calls"]
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert total[name] == sum(row["usage"][name] for row in rows) == report["usage"][name]
        assert total[name] > 0
    # Priced again from the tokens, the calls cost what the backend charged them while running.
    assert math.isclose(total["cost_usd"], report["usage"]["cost_usd"], abs_tol=1e-6)
    assert math.isclose(total["cost_usd"], hand_cost(rows), abs_tol=1e-6)
    assert total["unpriced_calls"] == 0 and total["reported_usd"] == 0 and total["errors"] == 0


def test_cache_share_is_cache_reads_over_all_input(api_run):
    ws, _, _, rows = api_run
    total = summary_of(ws)["total"]
    sent = total["input_tokens"] + total["cache_read_tokens"] + total["cache_write_tokens"]
    assert total["cache_share"] == round(total["cache_read_tokens"] / sent, 4)
    assert 0 < total["cache_share"] < 1


def test_groups_by_task_role_model_and_day(api_run):
    ws, _, _, rows = api_run
    s = summary_of(ws)
    assert s["prices_as_of"] == AS_OF
    assert [g["task"] for g in s["by_task"]] == [TASK]
    assert [g["role"] for g in s["by_role"]] == list(KNOWN_ROLES)
    assert [g["day"] for g in s["by_day"]] == sorted({row["created_at"][:10] for row in rows})
    by_model = {g["model"]: g for g in s["by_model"]}
    assert set(by_model) == {"claude-test-writer", "claude-test-critic"}
    for model, group in by_model.items():
        mine = [row for row in rows if row["model"] == model]
        assert group["calls"] == len(mine)
        assert math.isclose(group["cost_usd"], hand_cost(mine), abs_tol=1e-6)
    assert [g["model"] for g in s["by_model"]] == sorted(by_model, key=lambda m: -by_model[m]["cost_usd"])
    for name in ("by_task", "by_role", "by_model", "by_day"):
        assert sum(g["calls"] for g in s[name]) == s["total"]["calls"]
        assert math.isclose(sum(g["cost_usd"] for g in s[name]), s["total"]["cost_usd"], abs_tol=1e-5)
    roles = {g["role"]: g for g in s["by_role"]}
    assert roles["proposer"]["calls"] == len([row for row in rows if row["role"] == "proposer"])


def test_task_and_since_filters(api_run):
    ws, _, _, rows = api_run
    assert summary_of(ws, task_id=TASK)["total"]["calls"] == len(rows)
    assert summary_of(ws, task_id="demo-none")["total"]["calls"] == 0
    first = min(row["created_at"] for row in rows)
    assert summary_of(ws, since=first)["total"]["calls"] == len(rows)
    assert summary_of(ws, since=parse_since("1d"))["total"]["calls"] == len(rows)
    tomorrow = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)).date().isoformat()
    empty = summary_of(ws, since=parse_since(tomorrow))
    assert empty["total"]["calls"] == 0 and empty["by_role"] == [] and empty["filters"]["since"].startswith(tomorrow)


# ------------------------------------------------------------------ the CLI


def test_cli_json_and_every_cost_dated(api_run):
    ws, cfg, report, rows = api_run
    res = ws.mesh("usage", "--config", str(cfg), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == summary_of(ws)

    text = ws.mesh("usage", "--config", str(cfg), "--task", TASK).stdout
    first, *rest = text.splitlines()
    assert first == f"{len(rows)} call(s) (task {TASK}): ${report['usage']['cost_usd']:.4f} (USD at prices as of {AS_OF})"
    titles = [line for line in rest if line.startswith("by ")]
    assert titles == [f"by {name}, USD at prices as of {AS_OF}" for name in ("task", "role", "model", "day (UTC)")]
    assert any(line.split()[:2] == ["proposer", str(sum(r["role"] == "proposer" for r in rows))] for line in rest)

    logs = json.loads(ws.mesh("logs", "--config", str(cfg), "--json", "-n", "0").stdout)
    for record in logs:
        assert record["cost"]["prices_as_of"] == AS_OF and record["cost"]["source"] == "prices"
    assert math.isclose(sum(r["cost"]["usd"] for r in logs), report["usage"]["cost_usd"], abs_tol=1e-5)
    table = ws.mesh("logs", "--config", str(cfg), "-n", "3").stdout
    assert table.splitlines()[0] == f"3 call(s), newest first; USD at prices as of {AS_OF}"


def test_without_a_price_row_the_logged_cost_counts_until_prices_arrive(api_run, tmp_path, monkeypatch):
    """Without the run's config the test models have no price row: the cost the backend
    logged while running counts, said to be reported. Once ``mesh prices --update-from``
    stores rows for them, today's rows price the calls, and date the figures."""
    ws, _, report, rows = api_run
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    before = json.loads(ws.mesh("usage", "--repo", str(ws.repo), "--json").stdout)
    assert before["total"]["unpriced_calls"] == 0
    assert math.isclose(before["total"]["reported_usd"], report["usage"]["cost_usd"], abs_tol=1e-6)
    assert math.isclose(before["total"]["cost_usd"], report["usage"]["cost_usd"], abs_tol=1e-6)
    text = ws.mesh("usage", "--repo", str(ws.repo)).stdout
    assert "as reported by the backends of models without a price row" in text
    logged = json.loads(ws.mesh("logs", "--repo", str(ws.repo), "--json", "-n", "1").stdout)[0]
    assert logged["cost"]["source"] == "reported" and logged["cost"]["prices_as_of"] is None

    doubled = {name: {k: v * 2 for k, v in rate.items()} for name, rate in
               (("claude-test-writer", WRITER), ("claude-test-critic", CRITIC))}
    update = tmp_path / "prices.json"
    update.write_text(json.dumps({"as_of": "2027-02-01", "models": doubled}))
    assert ws.mesh("prices", "--update-from", str(update)).exit_code == 0
    after = json.loads(ws.mesh("usage", "--repo", str(ws.repo), "--json").stdout)
    assert after["prices_as_of"] == "2027-02-01" and after["total"]["reported_usd"] == 0
    assert math.isclose(after["total"]["cost_usd"], 2 * report["usage"]["cost_usd"], abs_tol=1e-6)
    assert "USD at prices as of 2027-02-01" in ws.mesh("usage", "--repo", str(ws.repo)).stdout


def test_cli_bad_since_is_one_line(api_run):
    ws, _, _, _ = api_run
    res = ws.mesh("usage", "--since", "last tuesday")
    assert res.exit_code == 2
    assert res.stderr == "mesh: --since 'last tuesday': expected YYYY-MM-DD, an ISO date-time, or 12h / 7d / 2w\n"


def test_replay_calls_cost_nothing_and_need_no_price(tmp_path):
    ws = make_workspace(tmp_path)
    code, _, res = ws.run(happy_script())
    assert code == 0, res.output
    s = json.loads(ws.mesh("usage", "--json").stdout)
    assert s["total"]["calls"] > 0 and s["total"]["cost_usd"] == 0 and s["total"]["unpriced_calls"] == 0
    assert s["total"]["cache_share"] is None and [g["model"] for g in s["by_model"]] == ["replay"]


# ------------------------------------------------------------------ pricing one call


PRICES = PriceTable(as_of=AS_OF, models={"priced": {"input": 2.0, "output": 10.0}})


@pytest.mark.parametrize("usage, model, expected", [
    ({"input_tokens": 1_000_000, "output_tokens": 100_000}, "priced", Cost(3.0, "prices")),
    ({"input_tokens": 0, "cache_read_tokens": 1_000_000}, "priced", Cost(0.2, "prices")),
    # A price row wins over what the backend logged: one table dates every figure.
    ({"input_tokens": 1_000_000, "cost_usd": 99.0}, "priced", Cost(2.0, "prices")),
    ({"input_tokens": 500, "cost_usd": 0.25}, "agent-cli-model", Cost(0.25, "reported")),
    ({"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}, "replay", Cost(0.0, "no_usage")),
    ({}, None, Cost(0.0, "no_usage")),
    ({"input_tokens": 10}, "mystery", Cost(None, None)),
    # What a backend parsed from a worker is not trusted: nonsense counts as nothing.
    ({"input_tokens": -5, "output_tokens": "12", "cache_read_tokens": float("nan"), "cost_usd": float("inf")},
     "mystery", Cost(0.0, "no_usage")),
    ({"input_tokens": True, "cost_usd": -1}, "mystery", Cost(0.0, "no_usage")),
])
def test_call_cost_rules(usage, model, expected):
    cost = call_cost(usage, model, PRICES)
    assert cost.source == expected.source
    assert cost.usd == expected.usd or math.isclose(cost.usd, expected.usd)


def test_reported_and_unpriced_calls_in_the_summary(tmp_path):
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        base = {"run_id": "r", "task_id": "tt-1", "round": "proposal", "attempt": 1, "backend": "command",
                "prompt": "p", "response": "r", "duration_s": 1.0, "error": None}
        log_call(t, role="proposer", model="priced", usage={"input_tokens": 1_000_000}, **base)
        log_call(t, role="critic_a", model="agent-cli-model", usage={"output_tokens": 9, "cost_usd": 0.5}, **base)
        log_call(t, role="skeptic", model="mystery", usage={"input_tokens": 7}, **{**base, "error": "timeout"})
        s = usage_summary(t, prices=PRICES)
    total = s["total"]
    assert total["cost_usd"] == 2.5 and total["reported_usd"] == 0.5
    assert total["unpriced_calls"] == 1 and s["unpriced_models"] == ["mystery"] and total["errors"] == 1
    roles = {g["role"]: g for g in s["by_role"]}
    assert roles["skeptic"]["cost_usd"] == 0 and roles["skeptic"]["unpriced_calls"] == 1
    assert [g["role"] for g in s["by_role"]] == ["proposer", "critic_a", "skeptic"]
    text = render_usage(s)
    assert text.splitlines()[0] == f"3 call(s): $2.5000 (USD at prices as of {AS_OF})"
    skeptic_row = next(line for line in text.splitlines() if line.startswith("skeptic"))
    assert skeptic_row.split()[-1] == "$0.0000+"  # its figure leaves the unpriced call out
    assert "note: 1 call(s) used tokens but have no price (models: mystery)" in text
    assert "note: $0.5000 of it as reported by the backends" in text


def test_default_prices_are_the_stored_table(tmp_path, monkeypatch):
    """``usage_summary`` without a table (how ``mesh report`` may call it) prices with the
    built-in rows and the user's stored table."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        log_call(t, run_id="r", task_id="tt-1", role="proposer", round="proposal", attempt=1, backend="anthropic",
                 model="claude-haiku-4-5", prompt="p", response="r", usage={"input_tokens": 1_000_000},
                 duration_s=1.0, error=None)
        built_in = usage_summary(t)
        stored = tmp_path / "p.toml"
        stored.write_text('as_of = 2027-03-01\n[models.claude-haiku-4-5]\ninput = 0.5\noutput = 2\n')
        from orchestrator.ledger.prices import install_prices

        install_prices(stored)
        updated = usage_summary(t, task_id="tt-1")
    assert built_in["total"]["cost_usd"] == 1.0 and built_in["prices_as_of"] == PriceTable().as_of
    assert updated["total"]["cost_usd"] == 0.5 and updated["prices_as_of"] == "2027-03-01"


# ------------------------------------------------------------------ --since


NOW = dt.datetime(2026, 5, 10, 12, 30, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("text, expected", [
    ("2026-05-01", "2026-05-01T00:00:00.000000Z"),
    ("2026-05-01T08:00:00+02:00", "2026-05-01T06:00:00.000000Z"),
    ("2026-05-01T08:00:00Z", "2026-05-01T08:00:00.000000Z"),
    ("2026-05-01T08:00:00", "2026-05-01T08:00:00.000000Z"),
    ("12h", "2026-05-10T00:30:00.000000Z"),
    ("7d", "2026-05-03T12:30:00.000000Z"),
    ("2w", "2026-04-26T12:30:00.000000Z"),
])
def test_parse_since(text, expected):
    assert parse_since(text, now=NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "7", "7y", "2026-13-01", "", "-1d"])
def test_parse_since_refuses(text):
    with pytest.raises(UsageError, match="--since"):
        parse_since(text, now=NOW)
