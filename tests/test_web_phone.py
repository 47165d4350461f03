"""``mesh serve`` on a phone and on a wide screen, in real headless Chromium: at 360x740 and at
1440x900 no page scrolls sideways (the board's columns stack on the phone, the running and
blocked ones first) and axe-core finds no violation on any page; what the screen shows of the
board and the task page at both sizes is written to docs/, every whole page to tests/artifacts/."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.runkit import TASK, demo_script, make_workspace
from tests.cdp import AXE, AXE_RUN
from tests.servekit import KEY, Server, needs_chromium, open_browser

DOCS = Path(__file__).resolve().parents[1] / "docs"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SIZES = {"phone": (360, 740, True), "wide": (1440, 900, False)}
PAGES = {"board": "/?scope=label:plan:demo", "task": f"/task/{TASK}", "usage": "/usage", "logs": "/logs",
         "drain": "/drain?scope=label:plan:demo", "call": "/logs/1"}
OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"


@needs_chromium
@pytest.mark.parametrize("size", sorted(SIZES))
def test_no_page_scrolls_sideways_on_a_phone_or_a_wide_screen(tmp_path, size):
    ws = make_workspace(tmp_path)
    # Signed with the server's key: each step says verified.
    code, report, res = ws.run(demo_script(), "--onto", "mesh/land/demo", env={"MESH_SIGNING_KEY": KEY})
    assert code == 0, res.output
    width, height, mobile = SIZES[size]
    server = Server(ws)
    browser = open_browser(tmp_path)
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                     mobile=mobile)
        for name, path in PAGES.items():
            browser.goto(server.base + path)
            browser.wait_for("document.readyState === 'complete'")
            assert browser.js("window.innerWidth") == width
            assert browser.js(OVERFLOW) <= 0, (size, name)
            if name in ("board", "task"):  # what the screen shows, for the docs
                (DOCS / f"serve-{name}-{size}.png").write_bytes(base64.b64decode(
                    browser.call("Page.captureScreenshot", format="png")["data"]))
            browser.screenshot(ARTIFACTS / f"serve-{name}-{size}.png")  # the whole page
            if AXE.is_file():
                browser.js(AXE.read_text(encoding="utf-8"))  # evaluated by the debugger: no CSP applies
                violations = browser.js(AXE_RUN)
                assert violations == [], (size, name, violations)
        if size == "phone":  # stacked, the column where a person may be needed first
            browser.goto(server.base + PAGES["board"])
            browser.wait_for("document.readyState === 'complete'")
            tops = browser.js("Array.from(document.querySelectorAll('.column')).map(c => [c.dataset.column,"
                              " c.getBoundingClientRect().top, c.getBoundingClientRect().left])")
            assert len({left for _, _, left in tops}) == 1  # one column under the other
            order = [name for name, _, _ in sorted(tops, key=lambda t: t[1])]
            assert order[:2] == ["running", "blocked"]
    finally:
        browser.close()
        server.stop()


@needs_chromium
def test_the_review_page_fits_a_phone_and_a_wide_screen_with_no_axe_violation(tmp_path):
    """The page where a person reviews a waiting run: no sideways scroll at either size (its diff
    scrolls within itself), no axe-core violation."""
    from tests.runkit import finish, happy_script, without_reviewer
    from tests.servekit import start_run

    ws = make_workspace(tmp_path)
    proc = start_run(ws, without_reviewer(happy_script()), "--label", "plan:demo", "--ids", TASK, "--reviewer",
                     "human")
    server = Server(ws)
    browser = open_browser(tmp_path)
    try:
        browser.goto(f"{server.base}/task/{TASK}")
        browser.wait_for("!!document.querySelector('#status a.button')")  # "Review it": the run waits
        for size, (width, height, mobile) in sorted(SIZES.items()):
            browser.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                         mobile=mobile)
            browser.goto(f"{server.base}/task/{TASK}/review")
            browser.wait_for("document.readyState === 'complete' && !!document.getElementById('approve')")
            assert browser.js(OVERFLOW) <= 0, size
            browser.screenshot(ARTIFACTS / f"serve-review-{size}.png")
            if AXE.is_file():
                browser.js(AXE.read_text(encoding="utf-8"))
                assert browser.js(AXE_RUN) == [], size
        browser.js("document.getElementById('approve').click()")
        browser.wait_for(f"location.pathname === '/task/{TASK}'")
        assert finish(proc)["outcome"] == "closed"
    finally:
        proc.kill()
        browser.close()
        server.stop()
