"""The offline HTML page of an eval report (``mesh eval report``'s page).

``render_eval_page(report)`` takes the report as a plain dict (the eval's id, its arms' figures,
the cases and one cell a case and arm; ``orchestrator.evals.report.report_data`` makes it) and
returns one self-contained HTML document: a summary table per arm (its workers, resolved rate with
its interval, errors apart, the paired comparison with the reference arm, pass@k and pass^k with
trials, tokens, cost per run and per resolved run, wall time, calls and review cycles), the runs
in error with their reasons, a cost-versus-resolved chart drawn here as inline SVG, and a case by
arm grid whose cells say their state and its reason in words (no hovering needed: phones) and
link to their runs' reports.

Case ids, details, outcomes and arm names come from git history and from models, so none of
it is trusted, as on the run report (``orchestrator.views.report_html``):

- the view model is plain strings and numbers, whatever types the report holds; every string is
  scrubbed of secrets and shows control and bidi characters as ``\\uXXXX``;
- the template (``templates/eval_report.html.j2``) is rendered with autoescape on and uses no
  ``|safe``; CSS classes come from fixed sets; a cell links only to a relative path (a link with a
  scheme, ``//host`` or a backslash is shown as text);
- the page carries a Content-Security-Policy that allows no script, no network and no form.

May import: ``tracker`` (``tracker.safe_text``), ``redact``, ``orchestrator.evals.report``, the standard
library and jinja2.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from redact import scrub
from tracker.safe_text import printable

__all__ = ["render_eval_page", "STATES"]

# A cell's state: its text mark (the grid never says it by colour alone) and its CSS class.
STATES = {"resolved": ("\u2713", "good"), "partly": ("\u25d0", "mixed"), "unresolved": ("\u2717", "bad"),
          "error": ("!", "bad"), "pending": ("\u2026", "muted"), "skipped": ("\u2013", "muted")}
# How much of a cell's reason the grid shows (the run's report has it whole).
REASON_CHARS = 160
# The chart's box (SVG user units; the SVG scales to the page's width).
WIDTH, HEIGHT = 520, 340
_LEFT, _RIGHT, _TOP, _BOTTOM = 60, 20, 16, 56
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


# ------------------------------------------------------------------ untrusted values, normalised


def _text(value: Any) -> str:
    if value is None:
        return ""
    return printable(scrub(value if isinstance(value, str) else str(value)))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else []


def _link(value: Any) -> str | None:
    """A relative link to a run's report, percent-encoded; None for anything else."""
    if not isinstance(value, str) or not value.strip():
        return None
    if _SCHEME.match(value) or value.startswith("//") or "\\" in value or scrub(value) != value:
        return None
    return quote(value, safe="/._-~#")


# ------------------------------------------------------------------ figures as text


def _count(value: Any) -> str:
    n = _number(value)
    return "-" if n is None else f"{n:,.0f}"


def _fraction(value: Any) -> str:
    n = _number(value)
    return "-" if n is None else (f"{n:,.0f}" if n >= 100 or n == int(n) else f"{n:.2f}")


def _money(value: Any) -> str:
    n = _number(value)
    if n is None:
        return "-"
    return f"${n:,.2f}" if n >= 10 else f"${n:.4f}"


def _seconds(value: Any) -> str:
    n = _number(value)
    if n is None:
        return "-"
    return f"{n:.1f} s" if n < 600 else f"{n / 60:.1f} min"


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def _rate(p: Mapping[str, Any]) -> tuple[str, str]:
    """The rate with its interval, and the count it rests on."""
    rate, ci = _number(p.get("rate")), [_number(v) for v in _list(p.get("ci"))]
    resolved, finished = _count(p.get("resolved")), _count(p.get("finished"))
    if rate is None or not _number(p.get("finished")):
        return "no finished case", f"{resolved} of {finished} finished"
    interval = f" ({_percent(ci[0])} \u2013 {_percent(ci[1])})" if len(ci) == 2 and None not in ci else ""
    closed = _number(p.get("resolved_closed"))
    tail = f", {_count(closed)} of them closed" if closed is not None else ""
    return _percent(rate) + interval, f"{resolved} of {finished} finished{tail}"


def _p(value: Any) -> str:
    """A p-value as computed (0.625, not 0.62)."""
    p = _number(value)
    return "-" if p is None else format(round(p, 4), "g")


def _paired(value: Any) -> str:
    paired = _dict(value)
    if not paired:
        return "reference"
    if not _number(paired.get("cases")):
        return "no common case"
    return f"{_count(paired.get('only_this'))} vs {_count(paired.get('only_reference'))}, p = {_p(paired.get('p_value'))}"


def _interval(value: Any) -> str:
    block = _dict(value)
    rate, ci = _number(block.get("value")), [_number(v) for v in _list(block.get("ci"))]
    if rate is None:
        return "-"
    return _percent(rate) + (f" ({_percent(ci[0])} \u2013 {_percent(ci[1])})" if len(ci) == 2 and None not in ci else "")


def _errors(value: Any) -> dict[str, Any]:
    errors = _dict(value)
    kinds = _dict(errors.get("kinds"))
    runs = [{"case": _text(_dict(r).get("case")), "trial": _count(_dict(r).get("trial")),
             "kind": _text(_dict(r).get("kind")), "reason": _text(_dict(r).get("reason"))[:400]}
            for r in _list(errors.get("runs"))]
    return {"count": _count(errors.get("count") or 0),
            "kinds": ", ".join(f"{_count(n)} {_text(kind)}" for kind, n in sorted(kinds.items())), "runs": runs}


def _arm_row(p: Mapping[str, Any]) -> dict[str, Any]:
    from orchestrator.evals.report import describe

    per = _dict(p.get("per_case"))
    rate, basis = _rate(p)
    trials = int(_number(p.get("trials")) or 1)
    budget = _dict(p.get("budget"))
    unit = "$" if budget.get("by") == "usd" else ""
    return {"name": _text(p.get("arm")), "workers": _text(describe(dict(_dict(p.get("description"))))),
            "rate": rate, "basis": basis, "cases": _count(p.get("cases")), "trials": trials,
            "interval": "Wilson" if trials == 1 else "clustered",
            "pass_at_k": _interval(p.get("pass_at_k")), "pass_hat_k": _interval(p.get("pass_hat_k")),
            "variance": _fraction(p.get("variance")), "errors": _errors(p.get("errors")),
            "cost_per_resolved": _money(p.get("cost_per_resolved")),
            "tokens_per_resolved": _count(p.get("tokens_per_resolved")),
            "budget": (f"budget-matched to {_text(budget.get('against'))}: spent {unit}{_fraction(budget.get('spent'))}"
                       f" of {unit}{_fraction(budget.get('budget'))} ({_fraction(budget.get('attempts'))} attempt(s) a run)"
                       if budget else ""),
            "paired": _paired(p.get("paired")),
            "tokens_in": _count(per.get("tokens_in")), "tokens_out": _count(per.get("tokens_out")),
            "tokens_in_total": _count(p.get("tokens_in")), "tokens_out_total": _count(p.get("tokens_out")),
            "cost": _money(per.get("cost_usd")), "cost_total": _money(p.get("cost_usd")),
            "wall": _seconds(per.get("wall_s")), "wall_total": _seconds(p.get("wall_s")),
            "calls": _fraction(per.get("calls")), "calls_total": _count(p.get("calls")),
            "review_cycles": _fraction(per.get("review_cycles")), "review_cycles_total": _count(p.get("review_cycles"))}


# ------------------------------------------------------------------ the chart


def _ticks(top: float) -> tuple[float, list[float]]:
    """Round ticks from 0 covering ``top``: (the axis's end, the ticks), 1-2-5 steps, 4 to 6 of them."""
    if top <= 0:
        return 1.0, [0.0, 0.25, 0.5, 0.75, 1.0]
    raw = top / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    count = math.ceil(top / step - 1e-9)
    return step * count, [round(step * i, 12) for i in range(count + 1)]


def _decimals(step: float) -> int:
    """How many decimals show every multiple of ``step`` exactly (2.5 -> 1, 0.02 -> 2)."""
    places = 0
    while places < 9 and abs(step * 10 ** places - round(step * 10 ** places)) > 1e-6:
        places += 1
    return places


def _tick_label(value: float, step: float, money: bool) -> str:
    if money:
        return f"${value:,.{max(_decimals(step), 2)}f}"
    if step >= 1000:
        return f"{value / 1000:,.{_decimals(step / 1000)}f}k"
    return f"{value:,.{_decimals(step)}f}"


def _chart(arms: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The cost-versus-resolved chart as numbers for the template; ``points`` empty: nothing to plot."""
    plotted, left_out = [], []
    for p in arms:
        if _number(p.get("finished")) and _number(p.get("rate")) is not None:
            plotted.append(p)
        else:
            left_out.append(_text(p.get("arm")))
    def per_case(*keys: str) -> list[float]:
        return [sum(_number(_dict(p.get("per_case")).get(key)) or 0.0 for key in keys) for p in plotted]

    # What a case cost, by the first measure known: money, else tokens, else calls (an agent CLI
    # reports neither cost nor tokens to mesh), else wall time.
    measures = [(("cost_usd",), "cost per case (USD)"),
                (("tokens_in", "tokens_out"), "tokens per case, in + out (every run cost $0)"),
                (("calls",), "worker calls per case (no cost or tokens known)"),
                (("wall_s",), "wall time per case, seconds (no cost, tokens or calls known)")]
    xs, x_label = per_case("cost_usd"), measures[0][1]
    for keys, label in measures:
        xs, x_label = per_case(*keys), label
        if any(x > 0 for x in xs):
            break
    money = x_label == measures[0][1]
    end, x_ticks = _ticks(max(xs, default=0.0))
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM

    def px(value: float) -> float:
        return round(_LEFT + plot_w * value / end, 2)

    def py(rate: float) -> float:
        return round(_TOP + plot_h * (1 - min(max(rate, 0.0), 1.0)), 2)

    step = x_ticks[1] - x_ticks[0]
    points = []
    for p, x in zip(plotted, xs):
        rate = _number(p.get("rate")) or 0.0
        ci = [_number(v) for v in _list(p.get("ci"))]
        low, high = (ci[0], ci[1]) if len(ci) == 2 and None not in ci else (rate, rate)
        cx = px(x)
        rate_text, _ = _rate(p)
        x_text = _money(x) if money else f"{x:,.0f} tokens"
        points.append({"name": _text(p.get("arm")), "cx": cx, "cy": py(rate), "low": py(low), "high": py(high),
                       "label_x": cx - 8 if cx > _LEFT + plot_w * 0.7 else cx + 8,
                       "anchor": "end" if cx > _LEFT + plot_w * 0.7 else "start",
                       "title": f"{_text(p.get('arm'))}: {rate_text} resolved at {x_text} per case"})
    # Labels of points close together are moved apart vertically, so no name hides another.
    placed: list[tuple[float, float]] = []
    for point in sorted(points, key=lambda q: (q["cy"], q["cx"])):
        y = point["cy"] - 8
        while any(abs(y - py_) < 14 and abs(point["label_x"] - px_) < 120 for px_, py_ in placed):
            y += 14
        placed.append((point["label_x"], y))
        point["label_y"] = round(y, 2)
    return {"width": WIDTH, "height": HEIGHT, "left": _LEFT, "right": WIDTH - _RIGHT, "top": _TOP,
            "bottom": HEIGHT - _BOTTOM, "x_label": x_label, "money": money, "points": points,
            "left_out": left_out, "x_label_x": _LEFT + plot_w / 2, "x_label_y": HEIGHT - 12,
            "x_ticks": [{"x": px(v), "value": v, "label": _tick_label(v, step, money)} for v in x_ticks],
            "y_ticks": [{"y": py(v / 100), "value": v / 100, "label": f"{v}%"} for v in range(0, 101, 20)]}


# ------------------------------------------------------------------ the grid


def _cell(raw: Any) -> dict[str, Any]:
    cell = _dict(raw)
    state = cell.get("state") if cell.get("state") in STATES else "pending"
    mark, css = STATES[state]
    outcome, detail = _text(cell.get("outcome")), _text(cell.get("detail"))
    tip = [f"{state}" + (f" (outcome: {outcome})" if outcome else "")]
    if detail:
        tip.append(detail)
    cost = _number(cell.get("cost_usd"))
    if cost is not None:
        tip.append(f"cost {_money(cost)}, {_count(cell.get('calls'))} call(s), {_seconds(cell.get('wall_s'))}")
    if cell.get("run_id"):
        tip.append(f"run {_text(cell.get('run_id'))}")
    trials = [_dict(t) for t in _list(cell.get("trials"))]
    out = {"state": state, "mark": mark, "css": css, "outcome": outcome, "title": "\n".join(tip),
           "href": _link(cell.get("report")), "trials": [], "count": "",
           "reason": detail if len(detail) <= REASON_CHARS else detail[:REASON_CHARS - 1] + "\u2026"}
    if len(trials) > 1:
        out["count"] = f"{_count(cell.get('resolved'))}/{_count(cell.get('finished'))}"
        out["reason"] = ""
        for trial in trials:
            tstate = trial.get("state") if trial.get("state") in STATES else "pending"
            reason = _text(trial.get("detail"))
            out["trials"].append({"n": _count(trial.get("trial")), "state": tstate, "mark": STATES[tstate][0],
                                  "css": STATES[tstate][1], "href": _link(trial.get("report")),
                                  "outcome": _text(trial.get("outcome")),
                                  "reason": reason if len(reason) <= REASON_CHARS
                                  else reason[:REASON_CHARS - 1] + "\u2026"})
    return out


def _grid(cases: Sequence[Any], arms: Sequence[str], cells: Sequence[Any],
          titles: Mapping[str, Any]) -> list[dict[str, Any]]:
    by_key = {(str(_dict(c).get("case")), str(_dict(c).get("arm"))): c for c in cells}
    return [{"case": _text(case), "title": _text(titles.get(str(case)))[:120],
             "cells": [_cell(by_key.get((str(case), str(name)), {"state": "pending"})) for name in arms]}
            for case in cases]


# ------------------------------------------------------------------ the page


def eval_page_data(report: Mapping[str, Any]) -> dict[str, Any]:
    """The page's view model: plain strings, numbers and lists (every string made safe)."""
    arms = [_dict(p) for p in _list(report.get("arms"))]
    names = [p.get("arm") for p in arms]
    cells = _list(report.get("cells"))
    counts = {state: sum(1 for c in cells if _dict(c).get("state") == state) for state in STATES}
    rows = [_arm_row(p) for p in arms]
    return {"eval": _text(report.get("eval")), "suite": _text(report.get("suite")),
            "created_at": _text(report.get("created_at")), "arms": rows,
            "reference": _text(report.get("reference") or (names[0] if names else "")),
            "trials": max([row["trials"] for row in rows], default=1),
            "errors": [dict(run, arm=row["name"]) for row in rows for run in row["errors"]["runs"]],
            "chart": _chart(arms), "names": [_text(n) for n in names],
            "grid": _grid(_list(report.get("cases")), names, cells, _dict(report.get("titles"))),
            "counts": [{"state": s, "mark": STATES[s][0], "css": STATES[s][1], "n": counts[s]} for s in STATES
                       if counts[s] or s in ("resolved", "unresolved", "error", "pending")]}


def render_eval_page(report: Mapping[str, Any]) -> str:
    """The eval report ``report`` (a plain dict, see ``docs/eval.md``) as one self-contained HTML
    page: nothing fetched, no script, every string from the report escaped."""
    from importlib.resources import files

    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    environment = Environment(loader=FileSystemLoader(str(files("templates"))), autoescape=True,
                              undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return environment.get_template("eval_report.html.j2").render(data=eval_page_data(report))
