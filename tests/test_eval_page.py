"""The eval report's HTML page (``orchestrator.evals.page``), loaded in real headless Chromium.

A hand-built report (3 arms, 6 cases, every state, hostile text in a detail, a case id, an error's
reason and an arm name) must render inert (no dialog, no injected element, with or without the page's
Content-Security-Policy), put one chart point per arm where its axes say, link each grid cell
to its run's report, fetch nothing but the file itself, fit a 390 px phone without sideways
scroll, and have no axe-core violation. A report whose runs all cost $0 plots tokens per case; one
with no finished case says so instead of drawing a chart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.evals.page import eval_page_data, render_eval_page
from orchestrator.evals.stats import mcnemar_exact, wilson
from tests.cdp import AXE, AXE_RUN, CHROMIUM, Browser

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make chromium)")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
HOSTILE = "<img src=x onerror=alert(1)>"
OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
CASES = ["c01-add-slugify", "c02-fix-parse", "c03-retry", "c04-cache", "c05-<script>alert(2)</script>",
         "c06-unicode"]
# Each profile's cell states, case by case: r resolved, u unresolved, e error, p pending, s skipped.
STATES = {"full": "rruurr", "lite": "rurueu", "single <b>x</b>": "uurups"}
LETTER = {"r": "resolved", "u": "unresolved", "e": "error", "p": "pending", "s": "skipped"}
OUTCOME = {"resolved": "closed", "unresolved": "blocked", "error": "config_mistake", "pending": None, "skipped": None}
COST = {"full": 0.1, "lite": 0.04, "single <b>x</b>": 0.01}


def make_report(*, cost: dict[str, float] = COST, states: dict[str, str] = STATES) -> dict:
    """A report in the shape ``mesh eval report`` gives, its figures computed from its cells."""
    cells = []
    for name, row in states.items():
        for index, (case, letter) in enumerate(zip(CASES, row)):
            state = LETTER[letter]
            ran = state not in ("pending", "skipped")
            cells.append({"case": case, "arm": name, "state": state, "outcome": OUTCOME[state],
                          "detail": HOSTILE if (name, index) == ("lite", 1) else f"{state}: hidden tests",
                          "task": f"ev-{index}", "run_id": f"r-{name[:4]}-{index}" if ran else None,
                          "report": f"runs/{case}/{name}.html" if ran and case.isascii() and "<" not in case else None,
                          "cost_usd": cost[name] if ran else None, "tokens_in": 9000 if ran else None,
                          "tokens_out": 2000 if ran else None, "wall_s": 25.0 if ran else None,
                          "calls": 11 if ran else None, "review_cycles": 1 if ran else None})
    profiles, first = [], None
    for name, row in states.items():
        finished = sum(letter in "ru" for letter in row)
        resolved = row.count("r")
        ran = sum(letter in "rue" for letter in row)
        solved = {i for i, letter in enumerate(row) if letter == "r"}
        paired = None
        if first is None:
            first = solved
        else:
            b, c = len(solved - first), len(first - solved)
            paired = {"against": "full", "cases": len(row), "only_this": b, "only_reference": c,
                      "p_value": mcnemar_exact(b, c),
                      "test": "McNemar exact"}
        per = {"tokens_in": 9000.0, "tokens_out": 2000.0, "cost_usd": cost[name], "wall_s": 25.0, "calls": 11.0,
               "review_cycles": 1.0} if ran else {}
        errors = [{"case": CASES[i], "trial": 1, "kind": "missing_cli", "reason": "mesh run exited 2: no <b>cli</b>"}
                  for i, letter in enumerate(row) if letter == "e"]
        profiles.append({"arm": name, "profile": "full", "cases": len(row), "finished": finished, "resolved": resolved,
                         "description": {"profile": "full", "backend": "command", "worker_cmd": f"agent {name}"},
                         "trials": 1, "errors": {"count": len(errors), "kinds": {"missing_cli": len(errors)} if errors else {},
                                                 "runs": errors},
                         "cost_per_resolved": cost[name] * ran / resolved if resolved else None,
                         "tokens_per_resolved": 11000 * ran / resolved if resolved else None,
                         "rate": resolved / finished if finished else None,
                         "ci": list(wilson(resolved, finished)) if finished else None, "paired": paired,
                         "tokens_in": 9000 * ran, "tokens_out": 2000 * ran, "cost_usd": cost[name] * ran,
                         "wall_s": 25.0 * ran, "calls": 11 * ran, "review_cycles": ran, "per_case": per})
    return {"eval": "ev-20261128-1a2b", "suite": "mesh-eval-suite.jsonl", "created_at": "2026-11-28T17:40:00+00:00",
            "arms": profiles, "reference": "full", "cases": CASES, "cells": cells,
            "titles": {case: f"Fix <i>the</i> parser #{index}" for index, case in enumerate(CASES)}}


# ------------------------------------------------------------------ the page in a browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (make chromium)")
    b = Browser(tmp_path_factory.mktemp("chromium") / "profile")
    yield b
    b.close()


def load(browser: Browser, path: Path, html: str, width: int = 1400, height: int = 1000) -> str:
    """Write ``html`` to ``path``, show it at ``width`` x ``height``; its URL."""
    path.write_text(html, encoding="utf-8")
    browser.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                 mobile=width < 600)
    with browser.cond:
        browser.events.clear()
    url = path.resolve().as_uri()
    browser.goto(url)
    return url


def axe_violations(browser: Browser) -> list[str]:
    if not AXE.is_file():
        return []
    browser.js(AXE.read_text(encoding="utf-8"))  # evaluated by the debugger: no CSP applies
    return browser.js(AXE_RUN)


POINTS = """Array.from(document.querySelectorAll('svg g.point')).map(g => ({
  name: g.dataset.arm, cx: g.querySelector('circle').cx.baseVal.value,
  cy: g.querySelector('circle').cy.baseVal.value,
  bar: [g.querySelector('line.ci').y1.baseVal.value, g.querySelector('line.ci').y2.baseVal.value],
  label: g.querySelector('text.name').textContent}))"""
TICKS = """Array.from(document.querySelectorAll('svg g.tick.AXIS')).map(g => [Number(g.dataset.value),
  g.querySelector('line').COORD.baseVal.value, g.querySelector('text').textContent])"""


def scale(ticks: list) -> tuple:
    """The axis's value -> coordinate map, read from its first and last ticks."""
    (v0, c0, _), (v1, c1, _) = ticks[0], ticks[-1]
    return lambda v: c0 + (c1 - c0) * (v - v0) / (v1 - v0)


def chart_of(browser: Browser) -> tuple[list[dict], list, list]:
    return (browser.js(POINTS), browser.js(TICKS.replace("AXIS", "x").replace("COORD", "x1")),
            browser.js(TICKS.replace("AXIS", "y").replace("COORD", "y1")))


def test_the_page_is_inert_places_its_points_links_its_cells_and_fetches_nothing(browser, tmp_path):
    report = make_report()
    html = render_eval_page(report)
    url = load(browser, tmp_path / "eval.html", html)
    assert browser.js("document.title") == "mesh eval: ev-20261128-1a2b"

    # Hostile text is shown as text, runs nothing and adds no element.
    assert browser.problems() == []
    assert browser.js("document.querySelectorAll('img, script, iframe, object, embed, b').length") == 0
    titles = browser.js("Array.from(document.querySelectorAll('[title]')).map(e => e.title)")
    assert any(HOSTILE in t for t in titles)
    # Shown twice, as text: its row of the grid, and its run in error.
    assert browser.js("document.body.innerText").count("c05-<script>alert(2)</script>") == 2
    assert "single <b>x</b>" in browser.js("document.querySelector('table.arms').innerText")
    # Each case's title (its commit's subject: text from the repository) under its id, as text.
    assert browser.js("document.querySelectorAll('i').length") == 0
    assert "Fix <i>the</i> parser #0" in browser.js("document.querySelector('table.cases').innerText")

    # Nothing but the file itself was asked for.
    assert browser.requests() == [url]

    # One point per profile, where the axes' ticks put it, with its interval as the bar.
    points, x_ticks, y_ticks = chart_of(browser)
    assert [p["name"] for p in points] == [p["label"] for p in points] == list(STATES)
    x, y = scale(x_ticks), scale(y_ticks)
    assert x_ticks[0][2] == "$0.00" and y_ticks[0][2] == "0%" and y_ticks[-1][2] == "100%"
    for point, profile in zip(points, report["arms"]):
        assert point["cx"] == pytest.approx(x(profile["per_case"]["cost_usd"]), abs=0.05)
        assert point["cy"] == pytest.approx(y(profile["rate"]), abs=0.05)
        assert sorted(point["bar"]) == pytest.approx(sorted(y(v) for v in profile["ci"]), abs=0.05)
    assert x_ticks[-1][0] >= max(COST.values())
    assert browser.js("document.querySelector('svg text.axis-label.x').textContent") == "cost per case (USD)"

    # The grid: a row per case, a column per profile, each cell its state in words and its link.
    cells = browser.js("""Array.from(document.querySelectorAll('table.cases tbody tr')).map(tr =>
        [tr.querySelector('th').firstChild.textContent, Array.from(tr.querySelectorAll('td')).map(td =>
         [td.dataset.state, td.querySelector('.state').textContent.trim(),
          td.querySelector('a') ? td.querySelector('a').href : null])])""")
    assert [row[0] for row in cells] == CASES
    expected = {(c["case"], c["arm"]): c for c in report["cells"]}
    for case, row in cells:
        for name, (state, text, href) in zip(STATES, row):
            cell = expected[(case, name)]
            assert state == cell["state"] and text.endswith(cell["state"])
            assert href == (None if cell["report"] is None else (tmp_path / cell["report"]).resolve().as_uri())

    # The summary: the rate as a percentage with its interval, the paired comparison with the first.
    summary = browser.js("Array.from(document.querySelectorAll('table.arms tbody tr')).map(tr =>"
                         " Array.from(tr.children).map(c => c.firstChild.textContent.trim()))")
    low, high = wilson(4, 6)
    assert summary[0][:5] == ["full", "4 of 6 finished", f"66.7% ({100 * low:.1f}% \u2013 {100 * high:.1f}%)",
                              "0", "reference"]
    assert summary[1][4] == "1 vs 3, p = 0.625"  # as computed, not rounded to 0.62
    assert summary[1][3] == "1"  # lite's run in error, apart from its finished ones
    assert summary[0][5] == "$0.1000"
    assert browser.js("document.querySelectorAll('table.arms th[scope=col]')[4].textContent") == "vs full"
    # Each arm's workers under its name; the runs in error listed with their reasons, as text.
    assert "command, worker-cmd agent lite" in browser.js("document.querySelector('table.arms').innerText")
    assert "missing_cli: mesh run exited 2: no <b>cli</b>" in browser.js("document.querySelector('ul.errors').innerText")
    # Every cell's reason is on the page, not only in a tooltip (a phone has no hover).
    reasons = browser.js("Array.from(document.querySelectorAll('table.cases td')).map(td =>"
                         " (td.querySelector('.why') || {}).textContent || '')")
    assert HOSTILE in reasons and sum("hidden tests" in r for r in reasons) >= 10

    # The same page without its CSP is still inert: escaping alone keeps it so.
    bare = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    assert bare != html
    load(browser, tmp_path / "no-csp.html", bare)
    assert browser.problems() == []
    assert browser.js("document.querySelectorAll('img, script, b').length") == 0


@pytest.mark.parametrize("width", [390, 1440])
def test_the_page_fits_a_phone_and_a_desktop_with_no_axe_violation(browser, tmp_path, width):
    load(browser, tmp_path / "eval.html", render_eval_page(make_report()), width=width, height=900)
    assert browser.js("window.innerWidth") == width
    assert browser.js(OVERFLOW) <= 0
    # The wide tables scroll inside their own box on the phone, and the chart fits the screen.
    assert browser.js("document.querySelector('svg').getBoundingClientRect().right") <= width
    browser.screenshot(ARTIFACTS / f"eval-page-{width}.png")
    assert axe_violations(browser) == []


def test_a_report_whose_runs_all_cost_nothing_plots_tokens_per_case(browser, tmp_path):
    report = make_report(cost={name: 0.0 for name in STATES})
    for p in report["arms"][1:]:  # different token counts: the points stand apart
        p["per_case"]["tokens_in"] = 4000.0
    load(browser, tmp_path / "zero.html", render_eval_page(report))
    assert browser.problems() == []
    label = browser.js("document.querySelector('svg text.axis-label.x').textContent")
    assert label.startswith("tokens per case") and "$0" in label
    points, x_ticks, _ = chart_of(browser)
    x = scale(x_ticks)
    assert [p["cx"] for p in points] == pytest.approx([x(11000), x(6000), x(6000)], abs=0.05)
    assert all(not t[2].startswith("$") for t in x_ticks) and x_ticks[-1][0] >= 11000
    assert axe_violations(browser) == []


def test_a_report_with_no_finished_case_says_so_instead_of_a_chart(browser, tmp_path):
    report = make_report(states={name: "ppppss" for name in STATES})
    load(browser, tmp_path / "empty.html", render_eval_page(report), width=390)
    assert browser.js("document.querySelector('svg')") is None
    assert "No case has finished yet" in browser.js("document.getElementById('chart').innerText")
    assert browser.js("document.querySelectorAll('table.cases td[data-state=pending]').length") == 12
    assert browser.js("document.querySelectorAll('table.cases a').length") == 0
    assert "no finished case" in browser.js("document.querySelector('table.arms').innerText")
    assert browser.js(OVERFLOW) <= 0
    assert axe_violations(browser) == []


# ------------------------------------------------------------------ the view model, without a browser


def test_one_profile_is_plotted_alone_with_round_ticks():
    report = make_report(states={"full": STATES["full"]})
    chart = eval_page_data(report)["chart"]
    assert len(chart["points"]) == 1 and chart["points"][0]["name"] == "full"
    assert [t["label"] for t in chart["x_ticks"]] == ["$0.00", "$0.02", "$0.04", "$0.06", "$0.08", "$0.10"]
    assert [t["label"] for t in chart["y_ticks"]] == ["0%", "20%", "40%", "60%", "80%", "100%"]


def test_runs_with_no_cost_and_no_tokens_are_plotted_by_their_calls():
    """Agent CLIs report neither cost nor tokens to mesh: the chart falls back to calls per case."""
    report = make_report(cost={name: 0.0 for name in STATES})
    for index, p in enumerate(report["arms"]):
        p["per_case"].update(tokens_in=0.0, tokens_out=0.0, calls=3.0 + 4 * index)
    chart = eval_page_data(report)["chart"]
    assert chart["x_label"].startswith("worker calls per case") and not chart["money"]
    assert chart["x_ticks"][-1]["value"] >= max(p["per_case"].get("calls", 0) for p in report["arms"]
                                                if p["finished"])
    for p in report["arms"]:
        p["per_case"]["calls"] = 0.0
    assert eval_page_data(report)["chart"]["x_label"].startswith("wall time per case")


def test_the_profile_row_says_how_many_resolved_runs_closed():
    report = make_report(states={"full": STATES["full"]})
    report["arms"][0]["resolved_closed"] = 1
    [row] = eval_page_data(report)["arms"]
    assert row["basis"].endswith(", 1 of them closed")


def test_only_relative_links_are_links_and_every_string_is_made_safe():
    report = make_report()
    cells = report["cells"]
    cells[0]["report"] = "javascript:alert(1)"
    cells[1]["report"] = "//evil.example/x.html"
    cells[2]["report"] = "https://evil.example/x.html"
    cells[3]["report"] = "runs/c 04/full.html"
    cells[4]["detail"] = "line\u202eevil\x1b[2J"
    data = eval_page_data(report)
    row = [cell for row in data["grid"] for cell in row["cells"][:1]]  # the "full" column, case by case
    assert [c["href"] for c in row[:4]] == [None, None, None, "runs/c%2004/full.html"]
    assert "\\u202e" in row[4]["title"] and "\\u001b" in row[4]["title"] and "\x1b" not in row[4]["title"]
    page = render_eval_page(report)
    assert HOSTILE not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>alert(2)" not in page
    assert json.dumps(report)  # the report itself stays plain data
