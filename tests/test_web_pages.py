"""What ``mesh serve``'s pages show, read from a real tracker without a server; the stream's
framing, the guard's rules and SQLite's change watch, as plain functions."""

from __future__ import annotations

import json
import threading

import pytest

from orchestrator.protocol.human_review import ReviewRefused, WaitingReview
from orchestrator.web.board import board, drain_view, parse_scope, scope_choices, scope_param
from orchestrator.web.events import last_event_id, sse
from orchestrator.web.security import Guard, needs_token
from orchestrator.web.task import new_cards, review_from_form, review_page, task_page
from tests.runkit import PATCH_FEATURE, TASK, demo_script, make_workspace
from tracker.changes import change_seq, watch_changes

LABEL = parse_scope("label:plan:demo")


@pytest.fixture(scope="module")
def landed(tmp_path_factory):
    """The demo task run to its close and landed, with a review cycle and a revision."""
    ws = make_workspace(tmp_path_factory.mktemp("pages"))
    code, report, res = ws.run(demo_script(), "--onto", "mesh/land/demo")
    assert code == 0, res.output
    return ws


def test_scope_parameters_round_trip():
    for text in ("label:plan:demo", "epic:demo-7kq"):
        assert scope_param(parse_scope(text)) == text
    assert parse_scope("") is None and parse_scope("nonsense") is None and parse_scope("label:") is None


def test_the_board_puts_each_task_in_its_column_with_its_commit_and_epic_progress(landed):
    with landed.tracker() as t:
        t.update("demo-7kq.4", status="blocked")
        data = board(t, LABEL)
        choices = scope_choices(t)
        t.update("demo-7kq.4", status="open")
    columns = {name: [c["id"] for c in cards] for name, cards in data["columns"].items()}
    assert columns["landed"] == [TASK] and columns["ready"] == ["demo-7kq.2"]
    assert columns["waiting"] == ["demo-7kq.3"] and columns["blocked"] == ["demo-7kq.4"]
    [card] = data["columns"]["landed"]
    assert card["landed"]["branch"] == "mesh/land/demo" and len(card["landed"]["sha"]) == 40
    assert data["columns"]["blocked"][0]["reason"] == "blocked"  # no mesh run blocked it: the plain word
    [epic] = data["epics"]
    assert (epic["id"], epic["closed"], epic["total"], epic["percent"]) == ("demo-7kq", 1, 4, 25)
    assert choices["labels"][0]["value"] == "label:plan:demo"
    assert [e["value"] for e in choices["epics"]] == ["epic:demo-7kq"]
    assert sum(data["counts"].values()) == data["total"] == 4


def test_a_long_column_shows_its_first_cards_and_counts_the_rest(landed):
    with landed.tracker() as t:
        data = board(t, None, limit=1)
    assert all(len(cards) <= 1 for cards in data["columns"].values())
    assert data["counts"]["ready"] >= 2 and len(data["columns"]["ready"]) == 1


def test_the_task_page_holds_every_checkpoint_once_by_run_and_the_costs(landed):
    with landed.tracker() as t:
        page = task_page(t, TASK, None)
        after = new_cards(t, TASK, page["last_event_id"], None)
        middle = new_cards(t, TASK, 10, None)
        view = drain_view(t, LABEL)
    [run] = page["runs"]
    ids = [int(c["comment_id"]) for c in run["cards"]]
    assert ids == sorted(ids) and page["last_event_id"] == ids[-1] and after == []
    assert [cid for cid, _ in middle] == [i for i in ids if i > 10]
    kinds = [c["kind"] for c in run["cards"]]
    assert kinds[0] == "preflight" and kinds[-1] == "outcome" and "review-cycle" in kinds
    cycle = next(c for c in run["cards"] if c["kind"] == "review-cycle")
    assert cycle["subtasks"] and cycle["subtasks"][0]["issue"]["status"] == "closed"
    synthesis = next(c for c in run["cards"] if c["kind"] == "synthesis")
    assert {line["css"] for line in synthesis["diff"]["lines"]} >= {"add", "hunk", "meta"}
    assert page["costs"]["total"]["calls"] == sum(r["calls"] for r in page["rounds"]) > 0
    assert {r["round"] for r in page["rounds"]} >= {"proposal", "critique", "synthesis", "vote", "review"}
    [row] = view["rows"]
    assert row["id"] == TASK and row["state"] == "closed" and row["calls"] == page["costs"]["total"]["calls"]
    assert [land["task"] for land in view["landings"]] == [TASK]


def _wait() -> WaitingReview:
    return WaitingReview(task_id=TASK, title="t", run_id="run-1", cycle=2, commit="c" * 40, branch="mesh/x",
                         diff=PATCH_FEATURE)


def test_the_review_form_reads_back_into_line_comments_on_the_waiting_diff():
    wait = _wait()
    page = review_page(wait)
    lines = {(f["path"], line["line"]) for f in page["files"] for line in f["lines"] if line["line"]}
    assert ("temperature.py", 8) in lines
    index = next(f["index"] for f in page["files"] if f["path"] == "temperature.py")
    form = {"run_id": "run-1", "cycle": "2", "decision": "request_changes", "summary": "",
            f"c.{index}.8": "  below absolute zero  ", f"s.{index}.8": "High", f"c.{index}.9": ""}
    decision, summary, comments = review_from_form(form, wait)
    assert decision == "request_changes" and summary == "Changes requested by a person."
    assert [(c.path, c.line, c.text, c.severity) for c in comments] == [("temperature.py", 8, "below absolute zero",
                                                                          "High")]
    for bad, field in (({**form, "cycle": "1"}, "task"), ({**form, "run_id": "run-0"}, "task"),
                       ({**form, "decision": "merge"}, "decision"), ({**form, "c.99.1": "x"}, "comments")):
        with pytest.raises(ReviewRefused) as refused:
            review_from_form(bad, wait)
        assert refused.value.field == field


def test_an_event_is_one_line_of_json_whatever_the_text_holds():
    text = sse("checkpoint", {"html": "a\n\ndata: forged\r\nid: 99\n"}, 7)
    assert text.count("\n\n") == 1 and text.endswith("\n\n")
    head, data = text.rstrip("\n").split("\ndata: ")
    assert head == "event: checkpoint\nid: 7" and json.loads(data)["html"].startswith("a\n\ndata")
    assert last_event_id({"last-event-id": "12"}, {"last_event_id": "3"}) == 12
    assert last_event_id({}, {"last_event_id": "3"}) == 3
    assert last_event_id({"last-event-id": "x"}, {}) is None


def test_the_guard_needs_a_token_off_127_0_0_1_and_a_page_of_its_own_for_a_write():
    assert not needs_token("127.0.0.1")
    assert all(needs_token(h) for h in ("0.0.0.0", "127.0.0.2", "::1", "localhost", "192.168.1.5"))
    guard = Guard(host="127.0.0.1", port=80, token=None)
    host = {"host": "127.0.0.1:80"}
    assert guard.check("GET", "/", {}, host, {}).status == 0
    assert guard.check("POST", "/drain/stop", {}, {**host, "sec-fetch-site": "same-origin"}, {}).status == 0
    assert guard.check("POST", "/drain/stop", {}, {**host, "sec-fetch-site": "cross-site",
                                                   "origin": "http://127.0.0.1:80"}, {}).status == 403
    assert guard.check("POST", "/drain/stop", {}, {**host, "origin": "http://127.0.0.1:80"}, {}).status == 0
    assert guard.check("POST", "/drain/stop", {}, {**host, "origin": "null"}, {}).status == 403
    ro = Guard(host="127.0.0.1", port=80, token=None, read_only=True)
    assert ro.check("POST", "/drain/stop", {}, {**host, "sec-fetch-site": "same-origin"}, {}).status == 403
    token = Guard(host="0.0.0.0", port=80, token="s3cret")
    redirect = token.check("GET", "/task/x", {"token": "s3cret", "a": "b c"}, {"host": "h:80"}, {})
    assert redirect.set_cookie == "s3cret" and redirect.location == "/task/x?a=b+c"
    assert token.check("GET", "/", {}, {"host": "h:80"}, {"mesh_token": "s3cret"}).status == 0
    assert token.check("GET", "/", {}, {"host": "h:80", "authorization": "Bearer s3cre"}, {}).status == 401


def test_sqlite_changes_wake_a_watcher_and_move_the_change_sequence(tmp_path):
    ws = make_workspace(tmp_path)
    seen = threading.Semaphore(0)
    stop = threading.Event()
    ready = threading.Event()
    watcher = threading.Thread(target=watch_changes, args=(ws.db, seen.release, stop, ready),
                               daemon=True)
    watcher.start()
    assert ready.wait(30)  # a change committed before the watch is in place may go unseen
    try:
        with ws.tracker() as t:
            before = change_seq(t)
            t.add_comment(TASK, "a change")
            assert seen.acquire(timeout=30)
            assert change_seq(t) > before
    finally:
        stop.set()
        watcher.join(timeout=10)


def test_mesh_help_and_serve_help_import_no_web_stack():
    import subprocess
    import sys

    code = ("import sys\nfrom click.testing import CliRunner\nfrom orchestrator.cli.main import cli\n"
            "for args in (['--help'], ['serve', '--help']):\n"
            "    assert CliRunner().invoke(cli, args).exit_code == 0\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'jinja2')"
            " or m.startswith('orchestrator.web')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_typed_label_or_epic_lands_on_the_scoped_board_and_drain_view(tmp_path):
    """``/?label=plan:demo`` or ``/drain?epic=ID``, as a person types them, redirect to the pages'
    own ``?scope=`` addresses, which show that scope."""
    import http.client

    from tests.servekit import Server

    ws = make_workspace(tmp_path)
    with ws.tracker() as t:
        epic = t.get(TASK)["parent"]
    server = Server(ws)
    try:
        for path, scope, shown in (("/?label=plan:demo", "label%3Aplan%3Ademo", TASK),
                                   (f"/drain?epic={epic}", f"epic%3A{epic}", epic)):
            conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            assert answer.status == 303 and answer.getheader("Location").endswith(f"?scope={scope}"), path
            conn.request("GET", answer.getheader("Location"))
            page = conn.getresponse()
            assert page.status == 200 and shown in page.read().decode(), path
            conn.close()
    finally:
        server.stop()
