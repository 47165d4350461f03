"""``mesh eval report``: an eval folder's results, per profile, as numbers a person can act on.

Per profile: cases, finished runs, resolved (with the Wilson 95% interval of the rate; how many of
those runs also ended closed, the rest blocked with a tree that passes all the same), the
paired comparison with the first profile (cases one resolves and the other does not, McNemar's
exact test, over the cases both finished), tokens in and out, cost, wall time, calls and review
cycles in total and per finished case. ``report_data`` is the one dict every form is made from:
``--json`` prints it, ``lines`` writes the terminal's table, ``page.render_eval_page`` the page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.evals.stats import mcnemar_exact, wilson

__all__ = ["ReportError", "lines", "report_data"]

FIGURES = ("tokens_in", "tokens_out", "cost_usd", "wall_s", "calls", "review_cycles")


class ReportError(Exception):
    """No eval in the folder (exit 2)."""


def report_data(folder: Path) -> dict[str, Any]:
    """The report of the eval in ``folder`` (``eval.json`` and ``results/``)."""
    from orchestrator.evals.suite import read_suite

    meta_path = Path(folder) / "eval.json"
    if not meta_path.is_file():
        raise ReportError(f"{folder} holds no eval (no eval.json); run mesh eval run first")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    profiles: list[str] = meta["profiles"]
    titles: dict[str, str] = {}
    try:
        suite = read_suite(Path(meta["suite"]))
        case_ids = [case.id for case in suite]
        titles = {case.id: case.title or case.task.splitlines()[0] for case in suite}
    except (OSError, ValueError):  # the suite moved: the cases that have results
        case_ids = sorted(p.name for p in (Path(folder) / "results").glob("*") if p.is_dir())
    cells = []
    results: dict[tuple[str, str], dict] = {}
    for case_id in case_ids:
        for profile in profiles:
            path = Path(folder) / "results" / case_id / f"{profile}.json"
            result = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
            if result is not None:
                results[(case_id, profile)] = result
            cells.append(_cell(case_id, profile, result))
    rows = [_profile_row(profile, profiles[0], case_ids, results) for profile in profiles]
    return {"eval": meta["eval"], "suite": meta["suite"], "created_at": meta["created_at"], "profiles": rows,
            "cases": case_ids, "titles": titles, "cells": cells}


def _cell(case_id: str, profile: str, result: dict | None) -> dict[str, Any]:
    if result is None:
        return {"case": case_id, "profile": profile, "state": "pending", "outcome": None, "detail": "not run yet",
                "task": None, "run_id": None, "report": None}
    return {"case": case_id, "profile": profile, "state": result["state"], "outcome": result.get("outcome"),
            "detail": result.get("detail") or "", "task": result.get("task"), "run_id": result.get("run_id"),
            "report": result.get("report"), **{key: result.get(key) for key in FIGURES}}


def _profile_row(profile: str, first: str, case_ids: list[str], results: dict[tuple[str, str], dict]) -> dict:
    finished = [results[(c, profile)] for c in case_ids if (c, profile) in results]
    resolved = sum(r["state"] == "resolved" for r in finished)
    # A resolved run that ended blocked left a tree that passes, but delivered nothing: said apart.
    closed = sum(r["state"] == "resolved" and r.get("outcome") == "closed" for r in finished)
    low, high = wilson(resolved, len(finished)) if finished else (0.0, 0.0)
    totals = {key: sum(float(r.get(key) or 0) for r in finished) for key in FIGURES}
    for key in ("tokens_in", "tokens_out", "calls", "review_cycles"):
        totals[key] = int(totals[key])
    totals["cost_usd"] = round(totals["cost_usd"], 6)
    totals["wall_s"] = round(totals["wall_s"], 3)
    row = {"profile": profile, "cases": len(case_ids), "finished": len(finished), "resolved": resolved,
           "resolved_closed": closed,
           "rate": round(resolved / len(finished), 4) if finished else None,
           "ci": [round(low, 4), round(high, 4)] if finished else None, "paired": None, **totals,
           "per_case": {key: round(totals[key] / len(finished), 4) if finished else None for key in FIGURES}}
    if profile != first:
        both = [c for c in case_ids if (c, profile) in results and (c, first) in results]
        mine = sum(results[(c, profile)]["state"] == "resolved" and results[(c, first)]["state"] != "resolved"
                   for c in both)
        theirs = sum(results[(c, first)]["state"] == "resolved" and results[(c, profile)]["state"] != "resolved"
                     for c in both)
        row["paired"] = {"against": first, "cases": len(both), "only_this": mine, "only_first": theirs,
                         "p_value": round(mcnemar_exact(mine, theirs), 4)}
    return row


def lines(report: dict[str, Any]) -> list[str]:
    """The report as a terminal table, one profile a line, then what each figure means."""
    out = [f"eval {report['eval']}: {len(report['cases'])} case(s), suite {report['suite']}", ""]
    head = (f"{'profile':<11} {'resolved':>9} {'closed':>6} {'rate':>6} {'95% CI':>13} {'vs first':>20}"
            f" {'tokens in':>10} {'out':>8} {'cost $':>9} {'wall s':>8} {'calls':>6} {'cycles':>6}")
    out += [head, "-" * len(head)]
    for row in report["profiles"]:
        per = row["per_case"]
        rate = f"{row['rate'] * 100:.0f}%" if row["rate"] is not None else "-"
        ci = f"{row['ci'][0] * 100:.0f}-{row['ci'][1] * 100:.0f}%" if row["ci"] else "-"
        paired = row["paired"]
        versus = (f"{paired['only_this']} vs {paired['only_first']}, p={paired['p_value']:.2f}" if paired
                  else "(reference)")
        figure = (lambda key, fmt: format(per[key], fmt) if per[key] is not None else "-")
        closed = row.get("resolved_closed", "-")  # results of an older mesh lack it
        out.append(f"{row['profile']:<11} {row['resolved']:>4}/{row['finished']:<4} {closed:>6} {rate:>6} {ci:>13}"
                   f" {versus:>20}"
                   f" {figure('tokens_in', '.0f'):>10} {figure('tokens_out', '.0f'):>8}"
                   f" {figure('cost_usd', '.4f'):>9} {figure('wall_s', '.1f'):>8} {figure('calls', '.1f'):>6}"
                   f" {figure('review_cycles', '.1f'):>6}")
    pending = sum(cell["state"] == "pending" for cell in report["cells"])
    out += ["", "closed: resolved runs that also ended closed (approved); the others ended blocked, their tree"
                " passing all the same.",
            "tokens, cost, wall time, calls and review cycles are per finished case; 'vs first': cases this"
            " profile resolves and the first does not, against the reverse (McNemar's exact test)."]
    if pending:
        out.append(f"{pending} run(s) not finished yet: mesh eval run continues them.")
    return out
