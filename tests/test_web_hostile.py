"""Hostile text everywhere a worker or a tracker user writes renders as text in a real browser.

The corpus goes into the task's title, description and labels, an epic's title, and every field
of the model's answers (plan, critiques, decision log, votes' reasons, the review's findings and
summary), which the logged calls then hold too. Every page is opened in headless Chromium, the
task page before the run starts, so its cards arrive through the live stream and are inserted by
the page's script. Nothing may run (no marker set, no dialog), no request may leave for any
other address (every request the page made is recorded), and nothing may be blocked by the
Content-Security-Policy either (no console message or log entry at all): the payloads are inert
because they are text, not because the policy caught them. A control shows the harness sees a
script that does run.
"""

from __future__ import annotations

import json

from tests.runkit import TASK, happy_script, make_workspace
from tests.runkit import finish
from tests.servekit import Server, needs_chromium, open_browser, start_run

EVIL = "127.0.0.9:9"  # nothing listens there; any request to it is in the browser's log
PAYLOADS = [
    f"<script>window.pwned='script';fetch('http://{EVIL}/s')</script>",
    "<img src=x onerror=\"window.pwned='onerror'\">",
    "<a href=\"javascript:window.pwned='js-link'\" id=\"evil-link\">click</a>",
    f"<svg onload=\"window.pwned='svg'\"><image href=\"http://{EVIL}/svg.png\"/></svg>",
    f"<style>body{{background:url(http://{EVIL}/css.png)}}</style>",
    f"<div hx-get=\"http://{EVIL}/hx\" hx-trigger=\"load\">htmx</div>",
    f"<iframe src=\"http://{EVIL}/frame\"></iframe><meta http-equiv=\"refresh\" content=\"0;url=http://{EVIL}/\">",
    "\"><script>window.pwned='attr'</script>",
    "{{ 7*7 }} {% raw %}jinja{% endraw %}",
    "\x1b[31mred\x1b[0m \x1b]8;;http://127.0.0.9/\x07link\x1b]8;;\x07",
    "bidi \u202eevil\u202c and \u2066isolate\u2069",
]
HOSTILE = " | ".join(PAYLOADS)


def _hostile_script() -> dict:
    script = happy_script()
    for role, entries in script.items():
        for entry in entries:
            art = json.loads(entry["text"])
            if entry["round"] == "proposal":
                art["plan"] = [HOSTILE, "step two"]
                art["assumptions"] = [HOSTILE]
            elif entry["round"] == "critique":
                art["findings"] = [HOSTILE]
            elif entry["round"] == "synthesis":
                art["decision_log"] = [{"point": HOSTILE, "decision": "accepted", "reason": HOSTILE}]
            elif entry["round"] == "vote":
                art["reason"] = HOSTILE
            elif entry["round"] == "review":
                art["summary"] = "Fine. " + PAYLOADS[0]
                art["findings"] = [{"finding_id": "F1", "location": "temperature.py:8", "severity": "Low",
                                    "label": "CAN_IGNORE", "issue": HOSTILE, "evidence": HOSTILE,
                                    "minimal_fix": HOSTILE, "code_context": HOSTILE}]
            entry["text"] = json.dumps(art)
    return script


@needs_chromium
def test_the_hostile_corpus_renders_as_text_on_every_page(tmp_path):
    ws = make_workspace(tmp_path)
    with ws.tracker() as t:
        epic = t.get(TASK)["parent"]
        t.update(TASK, title="Add f2c " + HOSTILE, description=HOSTILE, acceptance_criteria=HOSTILE)
        t.update(epic, title=HOSTILE)
        t.add_label(TASK, "x:" + PAYLOADS[1])
    server = Server(ws)
    browser = open_browser(tmp_path)
    try:
        # The control: the harness does see a script that runs, and a message it writes.
        browser.goto(f"{server.base}/usage")
        browser.js("console.log('control')")
        assert browser.problems() == ["console: control"]
        browser.events.clear()

        browser.goto(f"{server.base}/task/{TASK}")
        proc = start_run(ws, _hostile_script(), "--label", "plan:demo", "--ids", TASK)
        browser.wait_for("document.querySelectorAll('#runs article.k-outcome').length === 1")
        assert finish(proc)["outcome"] == "closed"
        streamed = browser.js("document.getElementById('runs').textContent")
        assert "<script>window.pwned='script'" in streamed and "onerror=" in streamed
        pages = ["/", "/?scope=label:plan:demo", f"/?scope=epic:{epic}", f"/task/{TASK}", "/drain?scope=label:plan:demo",
                 "/usage", "/logs", "/logs?q=pwned", "/logs/1", "/logs/5"]
        for page in pages:
            browser.goto(server.base + page)
            text = browser.js("document.body.innerText")
            assert "\u202e" not in text and "\x1b" not in text, page  # shown as \\u202e and \\x1b escapes
            # Nothing the corpus holds became an element or an attribute of the page.
            assert browser.js("document.querySelectorAll('iframe, img, svg image, style, meta[http-equiv],"
                              " #evil-link, [onerror], [onload], [hx-get^=\"http\"]').length") == 0, page
            assert browser.js("document.querySelectorAll('script').length") == 2, page  # htmx and mesh.js
        assert "<script>" in browser.js("document.body.innerText")  # the call's answer, as text
        # The search as you type (htmx swaps the calls in): hostile words find calls, as text.
        browser.goto(f"{server.base}/logs")
        search = "(() => {{ const q = document.querySelector('input[name=q]'); q.value = {word!r};" \
                 " q.dispatchEvent(new Event('input', {{bubbles: true}})); }})()"
        browser.js(search.format(word="zzqqxx"))
        browser.wait_for("document.getElementById('calls').innerText.includes('No call holds every word')")
        browser.js(search.format(word="window.pwned"))
        browser.wait_for("document.querySelectorAll('#calls tbody tr a').length > 0")
        browser.goto(f"{server.base}/task/{TASK}")
        assert "window.pwned" in browser.js("document.getElementById('runs').textContent")
        assert browser.js("typeof window.pwned") == "undefined"
        assert browser.problems() == []
        origin = server.base + "/"
        assert [url for url in browser.requests() if not url.startswith(origin)] == []
    finally:
        browser.close()
        server.stop()
