"""Drains in the browser: a real ``mesh drain`` process stopped from the page through the tracker,
and (PostgreSQL) two runner processes streaming into one page.

The drain is stopped by the page's button, which only writes the scope's stop request into the
tracker (``orchestrator.drain.request_stop``): the drain process learns of it the way a drain on
another machine would. Its first task waits for a person's review when the button is pressed,
so what the drain does next is fixed: it finishes and lands that task and starts no other.
"""

from __future__ import annotations

import json
import subprocess

from tests.runkit import TASK, happy_script, make_workspace
from tests.runkit import MESH, finish, without_reviewer
from tests.servekit import Server, config, env, needs_chromium, open_browser, start_run

ROWS = "Array.from(document.querySelectorAll('table.drain-rows tr[data-task]'))"


def _review(ws, task: str) -> None:
    done = subprocess.run([*MESH, "--db", str(ws.db), "review", task, "--approve", "--as", "Ada", "--repo",
                           str(ws.repo), "--config", str(config(ws))], capture_output=True, text=True, env=env(),
                          timeout=120)
    assert done.returncode == 0, done.stderr


@needs_chromium
def test_the_stop_button_stops_a_running_drain_from_starting_new_tasks(tmp_path):
    ws = make_workspace(tmp_path)
    path = ws.write_script(without_reviewer(happy_script()))
    # The task after demo-7kq.1 depends on it: while .1 waits for a person no other task is ready
    # (a task waiting for a person holds no --jobs slot), so the one started is known, and after
    # the stop request .2, ready once .1 landed, must not start.
    drain = subprocess.Popen([*MESH, "--db", str(ws.db), "--actor", "runner", "drain", "--label", "plan:demo",
                              "--ids", "demo-7kq.1,demo-7kq.2",
                              "--jobs", "1", "--backend", "replay", "--script", str(path), "--repo", str(ws.repo),
                              "--config", str(config(ws)), "--reviewer", "human", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=ws.repo)
    server = Server(ws)
    browser = open_browser(tmp_path)
    try:
        browser.goto(f"{server.base}/drain?scope=label:plan:demo")
        browser.wait_for(f"{ROWS}.some(r => r.textContent.includes('review-request'))")
        browser.js("document.getElementById('stop-drain').click()")
        browser.wait_for("document.body.innerText.includes('last stop request by Ada (mesh serve)')")
        started = browser.js(f"{ROWS}.map(r => r.dataset.task)")
        assert len(started) == 1
        _review(ws, started[0])
        out, err = drain.communicate(timeout=240)
        browser.wait_for(f"{ROWS}.every(r => r.textContent.includes('closed'))")
        browser.wait_for("document.body.innerText.includes('Landed on the integration branch') &&"
                         " document.querySelectorAll('code[title]').length === 1")
        assert browser.problems() == []
    finally:
        drain.kill()
        browser.close()
        server.stop()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any(e["event"] == "stop_requested" and e["by"] == "Ada (mesh serve)" for e in events), err
    summary = events[-1]
    assert summary["event"] == "summary" and summary["stop_reason"] == "interrupted"
    assert [t["id"] for t in summary["tasks"]] == started and summary["closed"] == started
    with ws.tracker() as t:
        ready = [task["id"] for task in t.ready(labels=["plan:demo"], issue_type="task")]
    assert ready  # work was left: the drain did not start it


def test_a_stop_request_made_while_no_drain_runs_stops_none_that_starts_later(tmp_path):
    from orchestrator.drain import request_stop
    from orchestrator.protocol.scope import Scope

    ws = make_workspace(tmp_path)
    with ws.tracker() as t:
        request_stop(t, Scope("label", plan_label="plan:demo"), by="someone earlier")
    path = ws.write_script(happy_script())
    done = subprocess.run([*MESH, "--db", str(ws.db), "drain", "--label", "plan:demo", "--ids", TASK,
                           "--backend", "replay", "--script", str(path), "--repo", str(ws.repo), "--json"],
                          capture_output=True, text=True, env=env(), cwd=ws.repo, timeout=240)
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["stop_reason"] == "done" and summary["closed"] == [TASK], done.stderr



@needs_chromium
def test_on_postgresql_two_runner_processes_stream_into_one_page(tmp_path, pg_url):
    ws = make_workspace(tmp_path, db=pg_url)
    second = "demo-7kq.4"  # ready beside demo-7kq.1 (demo-7kq.2 waits for it)
    server = Server(ws)
    browser = open_browser(tmp_path)
    runs = []
    try:
        browser.goto(f"{server.base}/drain?scope=label:plan:demo")
        browser.js("window.meshMarker = 'not reloaded'")
        for task in (TASK, second):
            runs.append(start_run(ws, without_reviewer(happy_script()), "--label", "plan:demo", "--ids", task,
                                  "--reviewer", "human", name=f"{task}.json"))
        # Both runs, each in its own process, reach the review gate: the page shows both, live.
        browser.wait_for(f"{ROWS}.filter(r => r.textContent.includes('review-request')).length === 2")
        for task in (TASK, second):
            _review(ws, task)
        reports = [finish(proc) for proc in runs]
        browser.wait_for(f"{ROWS}.filter(r => r.textContent.includes('closed')).length === 2")
        assert browser.js("window.meshMarker") == "not reloaded"
        assert browser.problems() == []
    finally:
        for proc in runs:
            proc.kill()
        browser.close()
        server.stop()
    assert [r["outcome"] for r in reports] == ["closed", "closed"]


def test_postgresql_notifies_a_listener_of_every_committed_change(pg_url):
    import threading

    from tracker.changes import watch_changes
    from tracker.store import Tracker

    url = pg_url
    with Tracker(url, actor="tester", create=True) as t:
        t.set_config("issue_prefix", "n")
        issue = t.create("watched")
    seen = threading.Semaphore(0)
    stop = threading.Event()
    ready = threading.Event()
    watcher = threading.Thread(target=watch_changes, args=(url, seen.release, stop, ready),
                               daemon=True)
    watcher.start()
    assert ready.wait(30)  # a change committed before the watch is in place may go unseen
    try:
        with Tracker(url, actor="tester") as t:
            # The listener is up once a change it was sent arrives: write until one does.
            for attempt in range(600):
                t.add_comment(issue["id"], f"ping {attempt}")
                if seen.acquire(timeout=0.1):
                    break
            else:
                raise AssertionError("no notification")
            while seen.acquire(timeout=0.5):
                pass
            t.update(issue["id"], title="changed")
            assert seen.acquire(timeout=30)
            with t.transaction():
                t.add_comment(issue["id"], "inside a transaction")
                assert not seen.acquire(timeout=0.5)  # nothing before the commit
            assert seen.acquire(timeout=30)
    finally:
        stop.set()
        watcher.join(timeout=10)
