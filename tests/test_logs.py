"""``mesh logs`` on real runs: a replay run of the demo task on a real git repo and a real
SQLite tracker, then the calls table read back through the library and the CLI; the FTS
index on databases made before it existed; hostile text in the human form."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from orchestrator.ledger.calls import calls_for, ensure_calls_table, has_search_index, log_call
from orchestrator.cli.main import cli
from orchestrator.ledger.logs import DEFAULT_LIMIT, list_calls, portable_search_clause, render_calls
from orchestrator.config import PriceTable
from orchestrator.ledger.usage import CallsUnavailable, UsageError, usage_summary
from tests.runkit import TASK, critique, happy_script, make_workspace, r, review
from tracker.store import Tracker

# Words that appear in exactly the answers the script below gives them to (and in the
# prompts that quote those answers), so a search can be checked against the text itself.
CRITIC_WORD = "quokkafinding"
REVIEW_WORD = "zanzibarsummary"

# The columns of the calls table as the first versions of mesh created it, before the index.
OLD_SCHEMA = """
CREATE TABLE mesh_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, task_id TEXT NOT NULL, role TEXT NOT NULL,
    round TEXT NOT NULL, attempt INTEGER NOT NULL, backend TEXT NOT NULL, model TEXT, prompt TEXT,
    response TEXT, usage TEXT, duration_s REAL, error TEXT, created_at TEXT NOT NULL
)
"""


def logs_script() -> dict[str, list]:
    """The happy path, with critic_a failing once (retried, as the profile says) and two
    marked words in the answers: one in critic_a's critique (quoted by later prompts), both
    in the reviewer's summary."""
    script = happy_script()
    script["critic_a"] = [r("critique", error="no_response"),
                          r("critique", {**critique(), "findings": [f"the {CRITIC_WORD} looks fine"]}),
                          *script["critic_a"][1:]]
    script["reviewer"] = [r("review", {**review(), "summary": f"No issues: {REVIEW_WORD}, {CRITIC_WORD} agreed."})]
    return script


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """One real replay run; the tests only read it."""
    ws = make_workspace(tmp_path_factory.mktemp("logs"))
    code, report, res = ws.run(logs_script())
    assert code == 0, res.output
    with ws.tracker() as t:
        rows = calls_for(t)
    return ws, report, rows


def call(tracker: Tracker, **fields) -> None:
    values = {"run_id": "run-x", "task_id": "tt-1", "role": "proposer", "round": "proposal", "attempt": 1,
              "backend": "command", "model": "claude-haiku-4-5", "prompt": "p", "response": "r",
              "usage": {}, "duration_s": 0.5, "error": None, **fields}
    log_call(tracker, **values)


def names(tracker: Tracker, like: str) -> set[str]:
    return {row[0] for row in tracker.db.read("SELECT name FROM sqlite_master WHERE name LIKE ?", (like,))}


# ------------------------------------------------------------------ listing and filters


def test_newest_first(ran):
    ws, report, rows = ran
    newest = sorted((row["id"] for row in rows), reverse=True)
    with ws.tracker() as t:
        assert [c["id"] for c in list_calls(t, limit=5)] == newest[:5]
        assert [c["id"] for c in list_calls(t, limit=0)] == newest
    assert report["usage"]["calls"] == len(rows)


def test_default_limit_and_zero_for_all(tmp_path):
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        for attempt in range(DEFAULT_LIMIT + 5):
            call(t, attempt=attempt)
        assert [c["attempt"] for c in list_calls(t)] == list(range(DEFAULT_LIMIT + 4, 4, -1))
        assert len(list_calls(t, limit=0)) == DEFAULT_LIMIT + 5


@pytest.mark.parametrize("option, column, value", [
    ("task", "task_id", TASK),
    ("role", "role", "critic_a"),
    ("round_name", "round", "vote"),
    ("model", "model", "replay"),
    ("backend", "backend", "replay"),
])
def test_each_filter_keeps_exactly_the_matching_calls(ran, option, column, value):
    ws, _, rows = ran
    with ws.tracker() as t:
        kept = list_calls(t, limit=0, **{option: value})
        none = list_calls(t, limit=0, **{option: "no-such-" + column})
    assert kept and none == []
    assert {c["id"] for c in kept} == {row["id"] for row in rows if row[column] == value}


def test_run_filter_and_combined_filters(ran):
    ws, report, rows = ran
    with ws.tracker() as t:
        by_run = list_calls(t, limit=0, run=report["orch_run_id"])
        votes_of_critic = list_calls(t, limit=0, run=report["orch_run_id"], role="critic_a", round_name="vote")
    assert len(by_run) == len(rows)
    assert [(c["role"], c["round"]) for c in votes_of_critic] == [("critic_a", "vote")]


def test_errors_keeps_the_failed_call_only(ran):
    ws, _, rows = ran
    with ws.tracker() as t:
        failed = list_calls(t, limit=0, errors=True)
    assert [(c["role"], c["round"], c["attempt"]) for c in failed] == [("critic_a", "critique", 1)]
    assert failed[0]["error"].startswith("no_response")
    # The retry answered: the same round and role has a call without an error.
    assert any(row["role"] == "critic_a" and row["round"] == "critique" and row["error"] is None for row in rows)


def test_a_note_on_an_answered_call_is_not_an_error(tmp_path):
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        call(t, error="note: the CLI printed a warning")
        call(t, error="timeout: no answer in 600s")
        failed = list_calls(t, errors=True)
        noted = [c for c in list_calls(t) if c["note"]]
    assert [c["error"] for c in failed] == ["timeout: no answer in 600s"]
    assert [(c["error"], c["note"]) for c in noted] == [(None, "the CLI printed a warning")]


# ------------------------------------------------------------------ search


def _holding(rows, word: str) -> set[int]:
    word = word.lower()
    return {row["id"] for row in rows
            if re.search(rf"\b{word}\b", (row["prompt"] or "").lower() + "\n" + (row["response"] or "").lower())}


@pytest.mark.parametrize("word", [CRITIC_WORD, REVIEW_WORD])
def test_search_finds_a_word_in_prompts_and_responses(ran, word):
    ws, _, rows = ran
    with ws.tracker() as t:
        found = {c["id"] for c in list_calls(t, limit=0, query=word)}
    assert found == _holding(rows, word) and found
    answered = {row["id"] for row in rows if word in (row["response"] or "")}
    assert answered and answered <= found  # found in the answer itself
    if word == CRITIC_WORD:  # and in later prompts that quote the critique
        assert any(word in (row["prompt"] or "") for row in rows if row["id"] in found)


def test_search_needs_every_word_and_ignores_case(ran):
    ws, _, rows = ran
    with ws.tracker() as t:
        both = {c["id"] for c in list_calls(t, limit=0, query=f"{CRITIC_WORD.upper()} {REVIEW_WORD}")}
        critic = {c["id"] for c in list_calls(t, limit=0, query=CRITIC_WORD)}
    assert both and both == _holding(rows, CRITIC_WORD) & _holding(rows, REVIEW_WORD)
    assert both < critic


@pytest.mark.parametrize("query", [f"({CRITIC_WORD}", f"{CRITIC_WORD}*", f'"{CRITIC_WORD}', f"{CRITIC_WORD} -",
                                   f"NEAR({CRITIC_WORD}"])
def test_fts_syntax_is_searched_as_text_never_run(ran, query):
    ws, _, rows = ran
    with ws.tracker() as t:
        found = {c["id"] for c in list_calls(t, limit=0, query=query)}
    expected = _holding(rows, CRITIC_WORD)
    if "NEAR" in query:  # "near" is a word of its own then, which some prompts hold
        expected &= _holding(rows, "near")
    assert found == expected


def test_empty_search_is_a_usage_error(ran):
    ws, _, _ = ran
    with ws.tracker() as t, pytest.raises(UsageError, match="at least one word"):
        list_calls(t, query="   ")


def test_portable_search_finds_what_the_index_finds(ran):
    """The PostgreSQL fallback is plain SQL SQLite runs too: same words, same calls."""
    ws, _, rows = ran
    with ws.tracker() as t:
        for words in ([CRITIC_WORD], [REVIEW_WORD.upper()], [CRITIC_WORD, REVIEW_WORD]):
            clause, params = portable_search_clause(words)
            portable = {row[0] for row in t.db.read(f"SELECT id FROM mesh_calls WHERE {clause}", tuple(params))}
            indexed = {c["id"] for c in list_calls(t, limit=0, query=" ".join(words))}
            assert portable == indexed and portable


def test_portable_search_escapes_like_wildcards(tmp_path):
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        call(t, response="discount of 50% applied")
        call(t, response="discount of 500 applied")
        call(t, response="a_b and axb")
        for word, expected in (("50%", 1), ("a_b", 1), ("%", 1), ("_", 1)):
            clause, params = portable_search_clause([word])
            assert len(t.db.read(f"SELECT id FROM mesh_calls WHERE {clause}", tuple(params))) == expected, word


# ------------------------------------------------------------------ the index on older databases


def _old_database(tmp_path) -> Tracker:
    t = Tracker.init(tmp_path, prefix="tt")
    with t.transaction() as c:
        c.execute(OLD_SCHEMA)
    call(t, response="an ocelot answered")
    call(t, prompt="asked about a tapir", response="fine")
    return t


def test_a_database_without_the_index_gets_it_on_first_use(tmp_path):
    with _old_database(tmp_path) as t:
        assert not has_search_index(t) and names(t, "mesh_calls_fts%") == set()
        assert [c["response"] for c in list_calls(t, query="ocelot", verbose=True)] == ["an ocelot answered"]
        assert [c["prompt"] for c in list_calls(t, query="tapir", verbose=True)] == ["asked about a tapir"]
        assert has_search_index(t)
        assert {"mesh_calls_ai", "mesh_calls_ad", "mesh_calls_au"} <= names(t, "mesh_calls_%")
        schema = t.db.read("SELECT name, sql FROM sqlite_master ORDER BY name")
        ensure_calls_table(t)  # idempotent: nothing changes the second time
        assert t.db.read("SELECT name, sql FROM sqlite_master ORDER BY name") == schema
        # Triggers keep it in sync: calls logged later are found, changed and deleted ones follow.
        call(t, response="a capybara now")
        assert len(list_calls(t, query="capybara")) == 1
        with t.transaction() as c:
            c.execute("UPDATE mesh_calls SET response = 'a wombat' WHERE response = 'a capybara now'")
        assert list_calls(t, query="capybara") == [] and len(list_calls(t, query="wombat")) == 1
        with t.transaction() as c:
            c.execute("DELETE FROM mesh_calls WHERE response = 'a wombat'")
        assert list_calls(t, query="wombat") == []


def test_new_databases_get_the_index_with_the_table(tmp_path):
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        assert has_search_index(t)
        call(t, response="an axolotl")
        assert len(list_calls(t, query="axolotl")) == 1


def test_an_index_missing_its_triggers_is_rebuilt(tmp_path):
    with _old_database(tmp_path) as t:
        ensure_calls_table(t)
        with t.transaction() as c:
            c.execute("DROP TRIGGER mesh_calls_ai")
        call(t, response="a pangolin, unindexed")
        assert not has_search_index(t)
        assert len(list_calls(t, query="pangolin")) == 1  # rebuilt from the rows, triggers back
        assert has_search_index(t)


def test_creating_the_index_is_all_or_nothing(tmp_path):
    """A failure half-way (a trigger name already taken) leaves no index behind, the calls
    whole, and one typed error."""
    with _old_database(tmp_path) as t:
        with t.transaction() as c:
            c.execute("CREATE TABLE other(x)")
            c.execute("CREATE TRIGGER mesh_calls_au AFTER INSERT ON other BEGIN SELECT 1; END")
        with pytest.raises(CallsUnavailable, match="cannot prepare the calls table"):
            list_calls(t, query="ocelot")
        assert names(t, "mesh_calls_fts%") == set()
        assert names(t, "mesh_calls_a_") == {"mesh_calls_au"}
        assert len(calls_for(t)) == 2
        call(t)  # the table still takes calls


# ------------------------------------------------------------------ the CLI


def test_cli_json_is_an_array_of_call_objects(ran):
    ws, report, rows = ran
    res = ws.mesh("logs", "--json", "-n", "3")
    assert res.exit_code == 0, res.output
    calls = json.loads(res.stdout)
    assert len(calls) == 3 and [c["id"] for c in calls] == sorted((row["id"] for row in rows), reverse=True)[:3]
    assert set(calls[0]) == {"id", "created_at", "run_id", "task_id", "role", "round", "attempt", "model", "backend",
                             "usage", "cost", "duration_s", "error", "note"}
    assert calls[0]["role"] == "reviewer" and calls[0]["run_id"] == report["orch_run_id"]
    assert set(calls[0]["usage"]) == {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                                      "cost_usd"}
    # Replay answers use no tokens: they cost nothing, and no price table is involved.
    assert calls[0]["cost"] == {"usd": 0.0, "source": "no_usage", "prices_as_of": None}

    verbose = json.loads(ws.mesh("logs", "--json", "-v", "-q", REVIEW_WORD).stdout)
    assert len(verbose) == 1 and REVIEW_WORD in verbose[0]["response"] and "# Task demo-7kq.1" in verbose[0]["prompt"]


def test_cli_filters_and_errors(ran):
    ws, _, rows = ran
    res = ws.mesh("logs", "--json", "--errors", "--role", "critic_a", "--round", "critique", "--backend", "replay",
                  "--model", "replay", "--task", TASK)
    assert [(c["role"], c["attempt"]) for c in json.loads(res.stdout)] == [("critic_a", 1)]
    assert json.loads(ws.mesh("logs", "--json", "--role", "nobody").stdout) == []
    assert len(json.loads(ws.mesh("logs", "--json", "-n", "0").stdout)) == len(rows)


def test_cli_human_table_dates_the_costs(ran):
    ws, _, rows = ran
    res = ws.mesh("logs", "-n", "4")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "4 call(s), newest first; USD at prices as of 2025-10-15"
    ids = [int(line.split()[0]) for line in lines[2:]]
    assert ids == sorted((row["id"] for row in rows), reverse=True)[:4]
    verbose = ws.mesh("logs", "-v", "-q", REVIEW_WORD).stdout
    assert "--- prompt ---" in verbose and "--- response ---" in verbose and REVIEW_WORD in verbose


def test_cli_usage_errors_are_one_line(ran):
    ws, _, _ = ran
    res = ws.mesh("logs", "-q", " ")
    assert res.exit_code == 2 and res.stderr == "mesh: -q needs at least one word to search for\n"
    res = ws.mesh("logs", "--json", "-q", " ")
    assert res.exit_code == 2 and json.loads(res.stderr)["code"] == 2


def mesh(db, *args: str):
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def test_cli_on_a_tracker_that_never_ran(tmp_path):
    Tracker.init(tmp_path, prefix="tt").close()
    res = mesh(tmp_path / ".beads" / "mesh.db", "logs")
    assert res.exit_code == 0 and res.stdout == "no calls match\n"


def test_cli_without_a_tracker_exits_4(tmp_path):
    res = mesh(tmp_path / "missing.db", "logs")
    assert res.exit_code == 4 and res.stderr.startswith("mesh: tracker unavailable")


# ------------------------------------------------------------------ hostile text


HOSTILE = "\x1b[2J\x1b[31mred [bold]markup[/bold] [/oops] :skull: \u202eevil\u202c\nnext line"


def test_human_form_prints_model_text_inert(tmp_path):
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        call(t, response=HOSTILE, model="m\x1b[5mx", error="no_response: " + HOSTILE)
        records = list_calls(t, verbose=True)
    table = render_calls(records, prices_as_of="2025-10-15", width=200)
    verbose = render_calls(records, prices_as_of="2025-10-15", verbose=True)
    for text in (table, verbose):
        assert "\x1b" not in text and "\u202e" not in text and "\\u001b" in text
    assert "\\u202e" in verbose
    assert "[/oops]" in verbose and "[bold]markup[/bold]" in verbose and ":skull:" in verbose
    assert "next line" in verbose.split("--- response ---")[1].splitlines()[2]  # newlines kept in bodies
    # JSON escapes control characters by itself.
    assert "\x1b" not in json.dumps(records)


def test_malformed_usage_json_is_read_as_no_usage(tmp_path):
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        call(t)
        with t.transaction() as c:
            c.execute("UPDATE mesh_calls SET usage = ?", ("{not json",))
        [record] = list_calls(t)
    assert record["usage"] == {} and record["cost"]["source"] == "prices" and record["cost"]["usd"] == 0.0


def test_the_old_schema_matches_what_the_table_is_created_with(tmp_path):
    """OLD_SCHEMA above stands for databases made before the index: it must stay the table's shape."""
    with Tracker.init(tmp_path, prefix="tt") as t:
        ensure_calls_table(t)
        current = [tuple(row)[1:3] for row in t.db.read("PRAGMA table_info(mesh_calls)")]
    old = sqlite3.connect(":memory:")
    old.execute(OLD_SCHEMA)
    assert [row[1:3] for row in old.execute("PRAGMA table_info(mesh_calls)")] == current


# ------------------------------------------------------------------ the commands themselves


@pytest.mark.parametrize("name", ["logs", "usage", "prices"])
def test_commands_have_help_and_start_light(name):
    command = cli.commands[name]
    assert (command.help or "").strip()
    for param in command.params:
        if isinstance(param, click.Option):
            assert (param.help or "").strip(), f"{name} {param.opts} has no help text"
    # --help must stay fast: rich, sqlite-utils and pydantic are imported by the commands only.
    code = ("import sys\nfrom click.testing import CliRunner\nfrom orchestrator.cli.main import cli\n"
            f"assert CliRunner().invoke(cli, [{name!r}, '--help']).exit_code == 0\n"
            "print(sorted(m for m in ('rich', 'sqlite_utils', 'pydantic') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ------------------------------------------------------------------ both engines


def test_listing_search_and_usage_on_each_engine(tracker, db_target, tmp_path):
    """The ``tracker`` fixture runs this on SQLite (the FTS index) and on a throwaway
    PostgreSQL server (the portable substring search): the same calls come back."""
    ensure_calls_table(tracker)
    for attempt, (response, error) in enumerate([("an Ocelot at 50% off", None), ("a tapir", "note: slow"),
                                                  ("OCELOT and tapir", None), (None, "timeout: 600s")]):
        call(tracker, attempt=attempt, response=response, error=error, usage={"input_tokens": 1000 * (attempt + 1)})

    def found(**filters):
        return [c["attempt"] for c in list_calls(tracker, limit=0, **filters)]

    assert found() == [3, 2, 1, 0]
    assert found(query="ocelot") == [2, 0]
    assert found(query="tapir OCELOT") == [2]
    assert found(query="50%") == [0] and found(query="5_%") == []
    assert found(errors=True) == [3]
    assert found(query="ocelot", role="critic_a") == []
    summary = usage_summary(tracker, prices=PriceTable(as_of="2027-01-01", models={"claude-haiku-4-5": {
        "input": 1.0, "output": 5.0}}))
    assert summary["total"]["input_tokens"] == 10_000 and summary["total"]["errors"] == 1
    assert summary["total"]["cost_usd"] == 0.01 and summary["prices_as_of"] == "2027-01-01"
    db = db_target or tmp_path / ".beads" / "mesh.db"
    res = mesh(db, "logs", "--repo", str(tmp_path), "--json", "-q", "ocelot")
    assert res.exit_code == 0, res.output
    assert [c["attempt"] for c in json.loads(res.stdout)] == [2, 0]
    assert json.loads(mesh(db, "usage", "--repo", str(tmp_path), "--json").stdout)["total"]["calls"] == 4
