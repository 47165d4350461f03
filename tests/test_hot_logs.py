"""``mesh logs`` answered before click (``orchestrator.cli.hot_logs``): the same bytes as the
full command line for every option, with the project's and the user's price tables; anything
else, and every failure, left to the full command line (which reports it); what the fast path
imports; and ``price_rows.plain_prices`` giving the table ``config.config_prices`` validates,
or None, for valid and invalid tables alike."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tempfile

import pytest
from click.testing import CliRunner
from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.cli.hot_logs import answer
from orchestrator.cli.main import cli
from orchestrator.config import config_prices
from orchestrator.ledger.calls import ensure_calls_table, log_call
from orchestrator.price_rows import plain_prices, user_prices_path
from orchestrator.workspace import ConfigError
from tracker.store import Tracker

HEAVY = ("click", "pydantic", "jinja2", "rich", "anthropic", "psycopg", "sqlite_utils", "llm", "redact",
         "orchestrator.config", "orchestrator.cli.main")


@pytest.fixture
def logged(tmp_path, monkeypatch):
    """A workspace (its folder is the current one) whose tracker logged a few varied calls:
    priced and unpriced, failed, with a note, hostile text, a long task id."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MESH_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    tracker = Tracker.init(tmp_path, prefix="hl")
    base = {"run_id": "run-1", "task_id": "hl-1", "role": "proposer", "round": "proposal", "attempt": 1,
            "backend": "command", "model": "claude-haiku-4-5", "prompt": "plan the change", "response": "a plan",
            "usage": {"input_tokens": 1200, "output_tokens": 300}, "duration_s": 2.25, "error": None}
    calls = [base,
             {**base, "role": "critic_a", "round": "critique", "model": "gpt-unknown", "response": None,
              "error": "timeout: no answer in 600 s", "prompt": "critique \x1b[2J the plan"},
             {**base, "role": "critic_b", "round": "critique", "model": "house-model", "error": "note: cached",
              "usage": {"input_tokens": 10, "cost_usd": 0.25}},
             {**base, "task_id": "hl-" + "a" * 40 + "\u202e", "model": "m" * 30, "response": "caf\u00e9 \u2603 plan"},
             {**base, "role": "reviewer", "round": "review", "usage": {}, "response": "approved, quokka"}]
    ensure_calls_table(tracker)
    for fields in calls:
        log_call(tracker, **fields)
    tracker.close()
    return tmp_path


def _full(args: list[str], env: dict | None = None):
    return CliRunner().invoke(cli, ["logs", *args], env=env or {}, catch_exceptions=False)


LINES = [[], ["-n", "0"], ["--count=2"], ["--json"], ["--json", "-v"], ["-v", "-n", "3"], ["-q", "plan"],
         ["--query", "quokka", "--json"], ["--errors"], ["--errors", "--json"], ["--role", "critic_a"],
         ["--task", "hl-1", "--run", "run-1", "--round", "proposal", "--model", "claude-haiku-4-5",
          "--backend", "command", "--json"], ["--model=nobody"], ["--repo", "."]]


@pytest.mark.parametrize("args", LINES, ids=[" ".join(a) or "(none)" for a in LINES])
def test_the_fast_path_prints_what_the_full_command_line_prints(logged, args):
    full = _full(args)
    assert full.exit_code == 0, full.output
    assert answer(args) == full.stdout


def test_the_project_and_the_users_price_tables_are_the_ones_used(logged):
    stored = user_prices_path()
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"as_of": "2026-03-01", "models": {"gpt-unknown": {
        "input": 2.0, "output": 8.0, "cache_read": 0.2, "cache_write": 2.5}}}))
    (logged / "mesh.toml").write_text('[prices]\nas_of = 2026-04-02\n[prices.models."house-model"]\n'
                                      'input = 1\noutput = 4\n')
    for args in (["--json"], []):
        full = _full(args)
        assert full.exit_code == 0 and answer(args) == full.stdout
    costs = {c["model"]: c["cost"] for c in json.loads(answer(["--json"]))}
    assert costs["house-model"] == {"usd": 0.00001, "source": "prices", "prices_as_of": "2026-04-02"}
    assert costs["claude-haiku-4-5"]["source"] == "prices"


@pytest.mark.parametrize("args", [["--help"], ["-x"], ["-q"], ["-vq", "plan"], ["-n", "-1"], ["-n", "two"],
                                  ["--json=yes"], ["extra"], ["-q", "--json"]])
def test_other_command_lines_are_left_to_the_full_command_line(logged, args):
    assert answer(args) is None


def test_failures_are_left_to_the_full_command_line_which_reports_them(logged, monkeypatch):
    assert answer(["-q", "  "]) is None
    assert _full(["-q", "  "]).exit_code == 2
    (logged / "mesh.toml").write_text('[prices.models.x]\ninput = "3"\noutput = 1\n')
    full = _full([])  # a price that is not plainly a number: the config decides (it reads "3" as 3)
    assert full.exit_code == 0 and answer([]) == full.stdout
    (logged / "mesh.toml").write_text('[prices.models.x]\ninput = -3\noutput = 1\n')
    assert answer([]) is None
    res = _full([])
    assert res.exit_code == 2 and "prices.models.x.input" in res.stderr
    (logged / "mesh.toml").unlink()
    monkeypatch.setenv("MESH_DB", str(logged / "missing.db"))
    assert answer([]) is None
    assert _full([], {"MESH_DB": str(logged / "missing.db")}).exit_code == 4
    assert not (logged / "missing.db").exists()


def test_logs_reads_only_the_tracker_and_prices_of_the_config(logged):
    """A mistake in a section ``mesh logs`` does not read is the business of the commands that
    read it (as for ``mesh status``); one in ``[tracker] url`` is reported."""
    (logged / "mesh.toml").write_text('consensus_threshold = "banana"\n')
    full = _full(["--json"])
    assert full.exit_code == 0 and answer(["--json"]) == full.stdout
    (logged / "mesh.toml").write_text("[tracker]\nurl = 5\n")
    res = _full([])
    assert res.exit_code == 2 and "tracker.url" in res.stderr and answer([]) is None


def test_mesh_logs_imports_no_heavy_module(logged):
    code = ("import atexit, sys\n"
            "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules))))\n"
            "from orchestrator.cli.start import main\nmain()\n")
    for args in (["logs", "-q", "plan"], ["logs", "--json", "-v"]):
        done = subprocess.run([sys.executable, "-c", code, *args], cwd=logged, capture_output=True, timeout=120,
                              env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        assert done.returncode == 0, done.stderr
        imported = set(done.stderr.decode().rpartition("MODULES ")[2].split())
        assert "orchestrator.cli.hot_logs" in imported
        assert not {m for m in imported if m.split(".")[0] in HEAVY or m in HEAVY}
        assert done.stdout.decode() == _full(args[1:]).stdout


# ------------------------------------------------------------------ the plain price table

_numbers = (st.integers(-5, 10**6) | st.floats(allow_nan=True, allow_infinity=True) | st.booleans()
            | st.sampled_from(["3", "", None]))
_rows = st.dictionaries(st.sampled_from(["input", "output", "cache_read", "cache_write", "cache"]), _numbers,
                        max_size=5)
_names = st.sampled_from(["claude-haiku-4-5", "house-model", "bad name", "", "x" * 201, "é-model"])
_dates = st.sampled_from(["2026-02-03", "2026-02-30", "2026-2-3", datetime.date(2026, 5, 6),
                          datetime.datetime(2026, 5, 6, 7, 8), 20260203, None])
_tables = st.fixed_dictionaries({}, optional={"as_of": _dates, "models": st.dictionaries(_names, _rows, max_size=3)
                                              | st.sampled_from([[], "none"]), "currency": st.just("EUR")})
_plain_rows = st.fixed_dictionaries({"input": st.floats(0, 100), "output": st.integers(0, 100)},
                                    optional={"cache_read": st.floats(0, 10) | st.none(),
                                              "cache_write": st.integers(0, 10)})
_plain_tables = st.fixed_dictionaries({}, optional={"as_of": st.sampled_from(["2026-02-03", datetime.date(2026, 5, 6)]),
                                                    "models": st.dictionaries(st.sampled_from(
                                                        ["claude-haiku-4-5", "house-model"]), _plain_rows)})


def _rates(table) -> tuple:
    return table.as_of, {name: tuple(float(getattr(row, k)) for k in ("input", "output", "cache_read",
                                                                    "cache_write"))
                         for name, row in table.models.items()}


def _both(project: dict, stored: object) -> tuple:
    """``plain_prices`` and ``config_prices`` (None when it refuses) of a project table, with the
    user's stored table (``stored``: a JSON value, or None for no file)."""
    with tempfile.TemporaryDirectory() as home:
        before = os.environ.get("XDG_CONFIG_HOME")
        os.environ["XDG_CONFIG_HOME"] = home
        try:
            if stored is not None:
                user_prices_path().parent.mkdir(parents=True)
                user_prices_path().write_text(json.dumps(stored, default=str))
            plain = plain_prices(project)
            try:
                full = config_prices(project, "mesh.toml")
            except ConfigError:
                full = None
        finally:
            if before is None:
                del os.environ["XDG_CONFIG_HOME"]
            else:
                os.environ["XDG_CONFIG_HOME"] = before
    return plain, full


@given(st.one_of(st.just({}), st.fixed_dictionaries({"prices": _tables}), st.just({"prices": "cheap"})),
       st.one_of(st.none(), _tables, st.just({"prices": {"as_of": "2026-01-01", "models": {"m": {"input": 1,
                                                                                             "output": 2}}}})))
@example({"prices": {"models": {"house-model": {"input": 1, "output": 4}}}}, None)
@example({"prices": {"models": {"house-model": {"input": True, "output": 4}}}}, None)
@example({}, {"as_of": "2026-01-01", "models": {"m": {"input": float("nan"), "output": 2}}})
def test_the_plain_table_is_the_validated_one_or_none(project, stored):
    plain, full = _both(project, stored)
    if plain is not None:
        assert full is not None, "plain_prices accepted a table the config refuses"
        assert _rates(plain) == _rates(full)


@given(st.fixed_dictionaries({}, optional={"prices": _plain_tables}),
       st.one_of(st.none(), _plain_tables.filter(lambda t: t.get("models")).map(
           lambda t: {**t, "as_of": str(t.get("as_of", "2026-01-01"))})))
def test_plainly_valid_tables_are_read_without_the_config(project, stored):
    plain, full = _both(project, stored)
    assert plain is not None and full is not None
    assert _rates(plain) == _rates(full)
