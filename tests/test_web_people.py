"""What the web view says of people and empty numbers: the review form's reviewer is the person
(their git user.name, else the actor), and the usage page says "no cost yet" instead of drawing
an empty grid. A real run waiting for a person's review, the real app through Starlette's client."""

from __future__ import annotations

import time

from starlette.testclient import TestClient

from orchestrator.web import app as web
from tests.drainkit import git
from tests.runkit import TASK, happy_script, make_workspace, without_reviewer
from tests.servekit import start_run


def _client(ws, **extra):
    settings = web.Settings(target=ws.db, actor="mesh", **extra)
    return TestClient(web.create_app(settings), base_url=f"http://127.0.0.1:{settings.port}")


def test_the_review_form_names_the_person_and_an_empty_usage_says_no_cost_yet(tmp_path):
    ws = make_workspace(tmp_path)
    with _client(ws) as client:
        usage = client.get("/usage").text
    assert "No cost yet" in usage and '<svg class="chart"' not in usage
    git(ws.repo, "config", "user.name", "Ada Lovelace")
    assert web.git_user_name(ws.repo) == "Ada Lovelace"
    proc = start_run(ws, without_reviewer(happy_script()), "--label", "plan:demo", "--ids", TASK,
                     "--reviewer", "human")
    try:
        deadline = time.monotonic() + 180
        while not any(cp.kind == "review-request" for cp in ws.checkpoints(TASK)):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no review request"
            time.sleep(0.2)
        with _client(ws, reviewer=web.git_user_name(ws.repo)) as client:
            form = client.get(f"/task/{TASK}/review").text
        assert 'name="reviewer" value="Ada Lovelace"' in form
        with _client(ws) as client:  # git has no name for the person: the actor
            assert 'name="reviewer" value="mesh"' in client.get(f"/task/{TASK}/review").text
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_times_read_as_how_long_ago_with_the_exact_time_on_hover():
    from datetime import datetime, timedelta, timezone

    from orchestrator.web.times import ago, when

    now = datetime(2026, 11, 28, 15, 0, 0, tzinfo=timezone.utc)
    assert [ago(now - timedelta(seconds=s), now) for s in (2, 42, 300, 3 * 3600, 86400, 3 * 86400)] == [
        "just now", "42 s ago", "5 min ago", "3 h ago", "1 day ago", "3 days ago"]
    assert ago(now + timedelta(minutes=5), now) == "in 5 min"
    html = str(when("2026-11-28T14:54:30.123456+00:00", now))  # stored with microseconds
    assert html == ('<time datetime="2026-11-28T14:54:30.123456+00:00" title="2026-11-28 14:54:30 UTC">5 min ago'
                    '</time>')
    assert str(when("<not a time>", now)) == "&lt;not a time&gt;"


def test_the_task_page_shows_relative_times(tmp_path):
    ws = make_workspace(tmp_path)
    path = ws.write_script(happy_script())
    assert ws.mesh("run", "--label", "plan:demo", "--ids", TASK, "--backend", "replay", "--script", str(path),
                   "--repo", str(ws.repo)).exit_code == 0
    with _client(ws) as client:
        page = client.get(f"/task/{TASK}").text
    assert '<span class="when"><time datetime="' in page and (" ago</time>" in page or "just now</time>" in page)


def test_without_a_signing_key_no_step_carries_an_unsigned_badge(tmp_path, monkeypatch):
    from orchestrator.views.report_html import report_data

    monkeypatch.delenv("MESH_SIGNING_KEY", raising=False)
    ws = make_workspace(tmp_path)
    path = ws.write_script(happy_script())
    assert ws.mesh("run", "--label", "plan:demo", "--ids", TASK, "--backend", "replay", "--script", str(path),
                   "--repo", str(ws.repo)).exit_code == 0
    with ws.tracker() as tracker:
        data = report_data(tracker, TASK)
    assert {s["trust"]["state"] for rnd in data["runs"][0]["rounds"] for s in rnd["steps"]} == {""}
    with _client(ws) as client:
        page = client.get(f"/task/{TASK}").text
    assert "<span class=\"kind\">proposal</span>" in page and ">unsigned<" not in page
    report = tmp_path / "report.html"
    assert ws.mesh("report", TASK, "-o", str(report)).exit_code == 0
    assert ">unsigned<" not in report.read_text()
