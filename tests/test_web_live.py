"""``mesh serve`` with a real browser: a run grows on the open page, a person reviews it there.

The server, the runs and the reviews are processes of their own, the page is a real headless
Chromium running the page's own JavaScript (``tests/cdp.py``). Nothing is reloaded: a marker
set in the page at the start must still be there at the end. The run waits at its review gate
for a person (``--reviewer human``), so what the page shows before the person acts is fixed,
not a race.
"""

from __future__ import annotations

import json
import subprocess

from orchestrator.protocol.checkpoint import checkpoint_problem
from orchestrator.protocol.human_review import new_side_lines
from tests.runkit import TASK, demo_script, happy_script, make_workspace
from tests.runkit import MESH, finish, without_reviewer
from tests.servekit import CARD_IDS, KEY, Server, checkpoint_ids, config, env, needs_chromium, open_browser, start_run

KINDS = "Array.from(document.querySelectorAll('#runs article.step')).map(e => e.dataset.kind)"


def _kinds_until(browser, kind: str, count: int = 1) -> list[str]:
    browser.wait_for(f"{KINDS}.filter(k => k === {json.dumps(kind)}).length >= {count}")
    return browser.js(KINDS)


def _comment(browser, path: str, line: int, text: str, severity: str) -> None:
    """Open the line's comment box and fill it, as a person does."""
    found = browser.js(f"""(() => {{
        const box = Array.from(document.querySelectorAll('details.rline')).find(
            d => d.dataset.path === {json.dumps(path)} && d.dataset.line === {json.dumps(str(line))});
        if (!box) return false;
        box.open = true;
        box.querySelector('textarea').value = {json.dumps(text)};
        box.querySelector('select').value = {json.dumps(severity)};
        return true;
    }})()""")
    assert found, f"no comment box on {path}:{line}"


def _review_script() -> dict:
    script = without_reviewer(demo_script())
    plan = json.loads(script["synthesizer"][2]["text"])
    plan["steps"] = [{"finding_id": "human:temperature.py:8", "change": "guard inputs below absolute zero"},
                     {"finding_id": "human:temperature.py:{second}", "change": "name the constant"}]
    script["synthesizer"][2]["text"] = json.dumps(plan)
    return script


@needs_chromium
def test_a_run_grows_on_the_open_page_and_a_persons_browser_review_drives_it_to_close(tmp_path):
    ws = make_workspace(tmp_path)
    server = Server(ws)
    browser = open_browser(tmp_path)
    proc = None
    try:
        browser.goto(f"{server.base}/task/{TASK}")
        assert browser.js(CARD_IDS) == []
        browser.js("window.meshMarker = 'not reloaded'")
        browser.wait_for("document.getElementById('live').textContent === 'live'")

        # The second comment's line: any other line of temperature.py the diff shows.
        from tests.runkit import PATCH_FEATURE

        second = next(n for n in sorted(new_side_lines(PATCH_FEATURE)["temperature.py"]) if n != 8)
        script = json.loads(json.dumps(_review_script()).replace("{second}", str(second)))
        proc = start_run(ws, script, "--label", "plan:demo", "--ids", TASK, "--reviewer", "human")

        # Round by round, without reload, up to the wait for a person.
        kinds = _kinds_until(browser, "review-request")
        assert kinds[:2] == ["preflight", "proposal"] and kinds.count("critique") == 3
        assert kinds.index("synthesis") < kinds.index("vote") < kinds.index("proof") < kinds.index("review-request")
        assert browser.js(CARD_IDS) == checkpoint_ids(ws, TASK)
        browser.wait_for("!!document.querySelector('#status a.button')")  # "Review it", redrawn on the event

        # The person's review in the browser: two line comments, request changes.
        browser.goto(f"{server.base}/task/{TASK}/review")
        _comment(browser, "temperature.py", 8, "accepts temperatures below absolute zero", "High")
        _comment(browser, "temperature.py", second, "name this constant", "Medium")
        browser.js("document.getElementById('request-changes').click()")
        browser.wait_for(f"location.pathname === '/task/{TASK}'")
        browser.js("window.meshMarker = 'not reloaded'")

        # The revision cycle appears live, up to the second wait.
        kinds = _kinds_until(browser, "review-request", 2)
        for kind in ("human-review", "review", "review-cycle", "revision-plan", "revision"):
            assert kind in kinds, kind
        subtasks = browser.js("Array.from(document.querySelectorAll('.k-review-cycle a')).map(a => a.textContent)")
        assert len(subtasks) == 2  # each comment filed as a sub-issue, linked

        browser.goto(f"{server.base}/task/{TASK}/review")
        assert browser.js("document.querySelector('input[name=cycle]').value") == "2"
        browser.js("document.getElementById('approve').click()")
        browser.wait_for(f"location.pathname === '/task/{TASK}'")
        browser.js("window.meshMarker = 'not reloaded'")
        _kinds_until(browser, "outcome")
        report = finish(proc)
        browser.wait_for("document.querySelector('#status .badge').textContent === 'closed'")
        assert browser.js("window.meshMarker") == "not reloaded"
        assert browser.js(CARD_IDS) == checkpoint_ids(ws, TASK)  # every checkpoint once, in order
        assert browser.problems() == []
    finally:
        if proc is not None:
            proc.kill()
        browser.close()
        server.stop()
    assert report["outcome"] == "closed", report
    reviews = [cp for cp in ws.checkpoints() if cp.kind == "review"
               and checkpoint_problem(cp, KEY.encode(), task_id=TASK) is None]
    first, last = reviews[0].payload["artifact"], reviews[-1].payload["artifact"]
    # The form's reviewer is the person at the keyboard: the repository's git user.name, not the actor.
    assert reviews[0].payload["reviewer"] == "person/mesh demo" and first["decision"] == "request_changes"
    assert sorted(f["location"] for f in first["findings"]) == sorted(["temperature.py:8", f"temperature.py:{second}"])
    assert {f["severity"] for f in first["findings"]} == {"High", "Medium"}
    assert last["decision"] == "approve"
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "closed"


@needs_chromium
def test_a_server_restart_with_the_page_open_loses_and_repeats_no_checkpoint(tmp_path):
    ws = make_workspace(tmp_path)
    proc = start_run(ws, without_reviewer(happy_script()), "--label", "plan:demo", "--ids", TASK,
                     "--reviewer", "human")
    server = Server(ws)
    browser = open_browser(tmp_path)
    try:
        browser.goto(f"{server.base}/task/{TASK}")
        browser.js("window.meshMarker = 'not reloaded'")
        _kinds_until(browser, "review-request")
        # The page has redrawn its status for the last card: no request of the page is in flight.
        browser.wait_for("!!document.querySelector('#status a.button')")
        server.stop()
        browser.wait_for("document.getElementById('live').textContent === 'reconnecting'")
        # While no server runs, the person reviews from the terminal and the run goes on to its end.
        done = subprocess.run([*MESH, "--db", str(ws.db), "review", TASK, "--approve", "--as", "Ada", "--repo",
                               str(ws.repo), "--config", str(config(ws))], capture_output=True, text=True, env=env(),
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert finish(proc)["outcome"] == "closed"
        server.start()  # the same address: the page reconnects by itself
        _kinds_until(browser, "outcome")
        browser.wait_for("document.getElementById('live').textContent === 'live'")
        assert browser.js("window.meshMarker") == "not reloaded"
        cards = browser.js(CARD_IDS)
        assert cards == checkpoint_ids(ws, TASK) and len(set(cards)) == len(cards)
        # A status refresh cut by the stop does not leave the status stale: it no longer offers the review.
        browser.wait_for("!document.querySelector('#status a.button')")
        # The stream cut by the stop, the reconnections refused while no server ran, and a status
        # refresh the stop cut (htmx reports it as a send error) are the only problems.
        down = ("net::ERR_INCOMPLETE_CHUNKED_ENCODING", "net::ERR_CONNECTION_REFUSED")
        cut = ("console: htmx:afterRequest, [object HTMLDivElement]", "console: htmx:sendError, [object HTMLDivElement]")
        assert [p for p in browser.problems() if not p.endswith(down) and p not in cut] == []
    finally:
        proc.kill()
        browser.close()
        server.stop()


@needs_chromium
def test_the_board_follows_a_run_from_ready_to_waiting_for_a_person_to_closed(tmp_path):
    ws = make_workspace(tmp_path)
    server = Server(ws)
    browser = open_browser(tmp_path)
    proc = None
    column = "Array.from(document.querySelectorAll('[data-column={name}] article')).map(a => a.dataset.task)"
    try:
        browser.goto(f"{server.base}/?scope=label:plan:demo")
        browser.js("window.meshMarker = 'not reloaded'")
        assert TASK in browser.js(column.format(name="ready"))
        proc = start_run(ws, without_reviewer(happy_script()), "--label", "plan:demo", "--ids", TASK,
                         "--reviewer", "human")
        browser.wait_for(f"{column.format(name='running')}.includes('{TASK}') &&"
                         " document.querySelector('[data-column=running] a.badge') !== null")
        assert browser.js("document.querySelector('[data-column=running] a.badge').textContent") == \
            "waits for your review"
        done = subprocess.run([*MESH, "--db", str(ws.db), "review", TASK, "--approve", "--repo", str(ws.repo),
                               "--config", str(config(ws))], capture_output=True, text=True, env=env(), timeout=120)
        assert done.returncode == 0, done.stderr
        assert finish(proc)["outcome"] == "closed"
        browser.wait_for(f"{column.format(name='closed')}.includes('{TASK}')")  # --no-land: closed, not landed
        assert TASK not in browser.js(column.format(name="running"))
        assert browser.js("window.meshMarker") == "not reloaded"
        assert browser.problems() == []
    finally:
        if proc is not None:
            proc.kill()
        browser.close()
        server.stop()
