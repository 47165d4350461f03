"""Attack 11: a JSONL file built to crash ``mesh tracker import`` (a line nested 100,000 levels
deep, a line of more than 16 MiB). The import must answer with one error naming the line,
in the ``--json`` error shape of every other tracker error, and write nothing at all."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tracker import jsonl as jsonl_module
from tracker.errors import ImportLineError
from tracker.jsonl import MAX_DEPTH, MAX_LINE_CHARS, import_jsonl
from tracker.store import Tracker

DEEP = '{"id": "tt-deep", "title": "deep", "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"


def nested(depth: int) -> str:
    """An issue line whose arrays and objects nest ``depth`` levels (the issue object is one)."""
    inner = depth - 1
    return '{"id": "tt-nest", "title": "n", "priority": 1, "metadata": ' + "[" * inner + "]" * inner + "}"


@pytest.fixture
def ws(tmp_path):
    """A workspace with a few issues, one of which the good lines of an import would update."""
    with Tracker.init(tmp_path, prefix="tt", actor="tester") as t:
        first = t.create("first")
        t.create("second", labels=["keep"])
        t.add_comment(first["id"], "a local comment")
        existing = t.get(first["id"])
    return tmp_path, existing


def dump(root) -> list[str]:
    """Every row of every table of the tracker, as SQL."""
    conn = sqlite3.connect(root / ".beads" / "mesh.db")
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def hostile_file(root, existing: dict, bad_line: str):
    """Two good lines (an update of an existing issue and a new issue), then ``bad_line``."""
    update = dict(existing, title="changed by the import", updated_at="2999-01-01T00:00:00Z")
    lines = [json.dumps(update), json.dumps({"id": "tt-new", "title": "new", "priority": 1}), bad_line]
    path = root / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def mesh(root, *args: str):
    return CliRunner().invoke(cli, ["--db", str(root / ".beads" / "mesh.db"), "tracker", *args],
                              catch_exceptions=False)


@pytest.mark.parametrize("bad", ["deep", "large"])
def test_a_hostile_line_3_is_one_json_error_and_the_tracker_is_unchanged(ws, bad):
    root, existing = ws
    bad_line = DEEP if bad == "deep" else json.dumps({"id": "tt-big", "title": "x" * MAX_LINE_CHARS})
    path = hostile_file(root, existing, bad_line)
    before = dump(root)
    result = mesh(root, "import", str(path), "--json")
    assert result.exit_code == 1
    assert result.stdout == ""
    error = json.loads(result.stderr)
    assert set(error) == {"error", "code"} and error["code"] == "invalid_import_line"
    assert error["error"].startswith("line 3: ") and "nothing was imported" in error["error"]
    assert "Traceback" not in result.stderr
    assert dump(root) == before
    # The same file without its bad line does change the tracker: the check above can fail.
    path.write_text("\n".join(path.read_text().splitlines()[:2]) + "\n")
    assert mesh(root, "import", str(path), "--json").exit_code == 0
    assert dump(root) != before


def test_the_human_error_names_the_line_too(ws):
    root, existing = ws
    result = mesh(root, "import", str(hostile_file(root, existing, DEEP)))
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: line 3: nested deeper than {MAX_DEPTH} levels; nothing was imported"


def test_the_depth_limit_is_exact_and_brackets_in_strings_do_not_count(tracker):
    report = import_jsonl(tracker, io.StringIO(nested(MAX_DEPTH) + "\n"))
    assert report.created == 1
    with pytest.raises(ImportLineError) as refused:
        import_jsonl(tracker, io.StringIO("\n" + nested(MAX_DEPTH + 1) + "\n"))
    assert refused.value.line == 2
    text = json.dumps({"id": "tt-str", "title": "[{" * 5000 + '\\"' + "[" * 5000, "priority": 1})
    assert import_jsonl(tracker, io.StringIO(text + "\n")).created == 1
    assert tracker.get("tt-str")["title"].startswith("[{[{")


def test_the_size_limit_is_exact(tracker, monkeypatch):
    monkeypatch.setattr(jsonl_module, "MAX_LINE_CHARS", 200)
    line = json.dumps({"id": "tt-fit", "title": "", "priority": 1})
    fits = line[:-1] + ', "notes": "' + "y" * (200 - len(line) - 13) + '"}'
    assert len(fits) == 200
    assert import_jsonl(tracker, io.StringIO(fits + "\n")).created == 1
    with pytest.raises(ImportLineError) as refused:
        import_jsonl(tracker, io.StringIO(fits + "\n" + fits[:-1] + ' }\n'))
    assert refused.value.line == 2 and "longer than 200" in str(refused.value)


def test_a_recursion_error_inside_the_parser_never_escapes(tracker, monkeypatch):
    # Even if the bracket count let a line through, json.loads' own RecursionError is refused
    # as an import error, not raised.
    monkeypatch.setattr(jsonl_module, "MAX_DEPTH", 10**9)
    with pytest.raises(ImportLineError) as refused:
        import_jsonl(tracker, io.StringIO(DEEP + "\n"))
    assert refused.value.line == 1
    assert tracker.list(include_closed=True) == []
