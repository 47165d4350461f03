"""``mesh eval report``: an eval folder's results, per arm, as numbers a person can act on.

Per arm (a profile with its workers, described as it ran): its runs finished (resolved or not),
in error (never counted as finished: a missing CLI, the API's rate limit, ...; each with its
reason) and pending; the resolved rate (pass@1: each case's resolved share of its finished runs,
averaged over cases) with its 95% interval (Wilson's with one run per case, the clustered
interval of ``stats.mean_interval`` with several); with several trials pass@k and pass^k (k the
trials) and the mean per-case outcome variance; the paired comparison with the reference arm
over every trial (``stats.sign_flip_exact``: McNemar's exact test with one trial); tokens in and
out, cost, wall time, calls and review cycles in total and per finished run, the cost and tokens
per resolved run; and for a budget-matched arm its spend against its reference's.
``report_data`` is the one dict every form is made from: ``--json`` prints it, ``lines`` writes
the terminal's table, ``page.render_eval_page`` the page.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from orchestrator.evals.stats import mean_interval, pass_at_k, pass_hat_k, sign_flip_exact, wilson

__all__ = ["ReportError", "count_kinds", "describe", "lines", "p_text", "report_data"]

FIGURES = ("tokens_in", "tokens_out", "cost_usd", "wall_s", "calls", "review_cycles")


class ReportError(Exception):
    """No eval in the folder, or no such reference arm (exit 2)."""


def _slot(arm: str, trial: int) -> str:
    return arm + (f".t{trial}" if trial > 1 else "")


def report_data(folder: Path, reference: str | None = None) -> dict[str, Any]:
    """The report of the eval in ``folder`` (``eval.json`` and ``results/``), every arm compared
    with ``reference`` (default: the eval's)."""
    from orchestrator.evals.suite import read_suite

    meta_path = Path(folder) / "eval.json"
    if not meta_path.is_file():
        raise ReportError(f"{folder} holds no eval (no eval.json); run mesh eval run first")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    order: list[str] = meta.get("order") or meta["profiles"]
    described = meta.get("arms") or {p: {"profile": p} for p in order}
    trials = {arm: int((meta.get("trials") or {}).get(arm, 1)) for arm in order}
    reference = reference or meta.get("reference") or order[0]
    if reference not in order:
        raise ReportError(f"--reference {reference}: no such arm (this eval's: {', '.join(order)})")
    titles: dict[str, str] = {}
    try:
        suite = read_suite(Path(meta["suite"]))
        case_ids = [case.id for case in suite]
        titles = {case.id: case.title or case.task.splitlines()[0] for case in suite}
    except (OSError, ValueError):  # the suite moved: the cases that have results
        case_ids = sorted(p.name for p in (Path(folder) / "results").glob("*") if p.is_dir())
    runs: dict[tuple[str, str], list[dict | None]] = {}
    for case_id in case_ids:
        for arm in order:
            runs[(case_id, arm)] = [_read(Path(folder) / "results" / case_id / f"{_slot(arm, t)}.json")
                                    for t in range(1, trials[arm] + 1)]
    cells = [_cell(case_id, arm, runs[(case_id, arm)]) for case_id in case_ids for arm in order]
    rows = [_arm_row(arm, described.get(arm, {}), trials[arm], reference, case_ids, runs) for arm in order]
    return {"eval": meta["eval"], "suite": meta["suite"], "created_at": meta["created_at"], "reference": reference,
            "arms": rows, "cases": case_ids, "titles": titles, "cells": cells,
            "errors": sum(row["errors"]["count"] for row in rows)}


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _finished(results: list[dict | None]) -> list[dict]:
    return [r for r in results if r is not None and r.get("state") in ("resolved", "unresolved")]


def _cell(case_id: str, arm: str, results: list[dict | None]) -> dict[str, Any]:
    """One case under one arm: each trial's state and reason, and their summary."""
    trials = []
    for number, result in enumerate(results, 1):
        if result is None:
            trials.append({"trial": number, "state": "pending", "outcome": None, "detail": "not run yet",
                           "report": None, "error": None})
            continue
        trials.append({"trial": number, "state": result["state"], "outcome": result.get("outcome"),
                       "detail": result.get("detail") or "", "report": result.get("report"),
                       "error": (result.get("error") or {}).get("kind"), "task": result.get("task"),
                       "run_id": result.get("run_id"), **{key: result.get(key) for key in FIGURES}})
    finished = _finished(results)
    resolved = sum(r["state"] == "resolved" for r in finished)
    errors = sum(t["state"] == "error" for t in trials)
    if len(trials) > 1:  # each trial says its own outcome and reason: none stands for the cell
        first = {"outcome": None, "detail": "", "report": None}
    else:
        first = trials[0]
    if not finished:
        state = "error" if errors else "pending"
    else:
        state = "resolved" if resolved == len(finished) else "unresolved" if resolved == 0 else "partly"
    n = len(finished)
    return {"case": case_id, "arm": arm, "state": state, "resolved": resolved, "finished": n, "errors": errors,
            "trials": trials, "variance": round(resolved * (n - resolved) / (n * (n - 1)), 4) if n > 1 else None,
            "outcome": first["outcome"], "detail": first["detail"], "report": first["report"],
            "task": first.get("task"), "run_id": first.get("run_id")}


def _arm_row(arm: str, description: dict, trials: int, reference: str, case_ids: list[str],
             runs: dict[tuple[str, str], list[dict | None]]) -> dict[str, Any]:
    every = [r for c in case_ids for r in runs[(c, arm)] if r is not None]
    finished = _finished(every)
    errors = [r for r in every if r.get("state") == "error"]
    resolved = sum(r["state"] == "resolved" for r in finished)
    closed = sum(r["state"] == "resolved" and r.get("outcome") == "closed" for r in finished)
    ended_closed = sum(r.get("outcome") == "closed" for r in finished)
    per_case = {c: (len(f), sum(r["state"] == "resolved" for r in f)) for c in case_ids
                if (f := _finished(runs[(c, arm)]))}
    rates = [c / n for n, c in per_case.values()]
    if trials == 1:
        low, high = wilson(resolved, len(finished)) if finished else (0.0, 1.0)
        rate = resolved / len(finished) if finished else None
    else:
        rate, low, high = mean_interval(rates) if rates else (None, 0.0, 1.0)
    totals = {key: sum(float(r.get(key) or 0) for r in finished) for key in FIGURES}
    spent = {key: sum(float(r.get(key) or 0) for r in every) for key in ("cost_usd", "tokens_in", "tokens_out")}
    for key in ("tokens_in", "tokens_out", "calls", "review_cycles"):
        totals[key] = int(totals[key])
    totals["cost_usd"] = round(totals["cost_usd"], 6)
    totals["wall_s"] = round(totals["wall_s"], 3)
    # An agent CLI that reports neither cost nor tokens to mesh (a plain worker command): unknown, not $0.
    known = any(float(r.get("cost_usd") or 0) > 0 or float(r.get("tokens_in") or 0) + float(r.get("tokens_out") or 0)
                > 0 for r in every)
    per_run = {key: round(totals[key] / len(finished), 4) if finished else None for key in FIGURES}
    if not known:
        per_run.update(tokens_in=None, tokens_out=None, cost_usd=None)
    row: dict[str, Any] = {
        "arm": arm, "profile": description.get("profile", arm), "description": description, "trials": trials,
        "cases": len(case_ids), "cases_finished": len(per_case), "runs": len(case_ids) * trials,
        "finished": len(finished), "resolved": resolved, "resolved_closed": closed, "closed": ended_closed,
        # Runs whose change reaches into the test machinery: unresolved, and counted apart.
        "suspected_forgery": {"count": sum(bool(r.get("suspected_forgery")) for r in finished),
                              "runs": [{"case": r["case"], "trial": r.get("trial", 1),
                                        "lines": [f"{t.get('location')}: {t.get('text')}"
                                                  for t in r["suspected_forgery"][:5]]}
                                       for r in finished if r.get("suspected_forgery")]},
        "pending": len(case_ids) * trials - len(every),
        "errors": {"count": len(errors), "kinds": count_kinds(errors),
                   "runs": [{"case": r["case"], "trial": r.get("trial", 1),
                             "kind": (r.get("error") or {}).get("kind") or "run", "reason": r.get("detail") or ""}
                            for r in errors]},
        "rate": round(rate, 4) if rate is not None else None,
        "ci": [round(low, 4), round(high, 4)] if rate is not None else None,
        "paired": None, **totals, "cost_known": known, "per_case": per_run,
        # What one resolved run cost: everything the arm spent here (its runs in error too).
        "cost_per_resolved": round(spent["cost_usd"] / resolved, 6) if resolved and known else None,
        "tokens_per_resolved": (round((spent["tokens_in"] + spent["tokens_out"]) / resolved, 1) if resolved and known
                                else None),
    }
    if trials > 1:
        complete = [(n, c) for n, c in per_case.values() if n >= trials]
        row["variance"] = round(sum(c * (n - c) / (n * (n - 1)) for n, c in per_case.values() if n > 1)
                                / max(1, sum(1 for n, _ in per_case.values() if n > 1)), 4)
        for name, estimator in (("pass_at_k", pass_at_k), ("pass_hat_k", pass_hat_k)):
            values = [estimator(n, c, trials) for n, c in complete]
            mean, lo, hi = mean_interval(values)
            row[name] = {"k": trials, "value": round(mean, 4) if values else None, "ci": [round(lo, 4), round(hi, 4)],
                         "cases": len(values)}
    if arm != reference:
        row["paired"] = _paired(arm, reference, case_ids, runs)
    budgets = [r["budget"] for r in finished if r.get("budget")]
    if budgets:
        row["budget"] = {"against": budgets[0]["against"], "by": budgets[0]["by"], "runs": len(budgets),
                         "budget": round(sum(b["budget"] for b in budgets), 6),
                         "spent": round(sum(b["spent"] for b in budgets), 6),
                         "attempts": round(sum(b["attempts"] for b in budgets) / len(budgets), 2)}
    return row


def _paired(arm: str, reference: str, case_ids: list[str], runs: dict[tuple[str, str], list[dict | None]]) -> dict:
    """Every trial of both arms on the cases both finished: per case, this arm's resolved share
    minus the reference's; the exact sign-flip test of those differences."""
    differences = []
    for case_id in case_ids:
        mine, theirs = _finished(runs[(case_id, arm)]), _finished(runs[(case_id, reference)])
        if mine and theirs:
            differences.append(Fraction(sum(r["state"] == "resolved" for r in mine), len(mine))
                               - Fraction(sum(r["state"] == "resolved" for r in theirs), len(theirs)))
    one_trial = all(len(_finished(runs[(c, a)])) <= 1 for c in case_ids for a in (arm, reference))
    return {"against": reference, "cases": len(differences), "only_this": sum(d > 0 for d in differences),
            "only_reference": sum(d < 0 for d in differences),
            "mean_difference": round(float(sum(differences) / len(differences)), 4) if differences else None,
            "p_value": round(sign_flip_exact(differences), 4),
            "test": "McNemar exact" if one_trial else "sign-flip exact (per-case resolved shares)"}


def count_kinds(errors: list[dict]) -> dict[str, int]:
    """How many results in error there are of each kind."""
    out: dict[str, int] = {}
    for result in errors:
        kind = (result.get("error") or {}).get("kind") or "run"
        out[kind] = out.get(kind, 0) + 1
    return out


def p_text(p: float) -> str:
    """A p-value as computed (rounded to 4 places, no trailing zeros): 0.625, 0.5, 1, 0.0313."""
    return format(round(p, 4), "g")


def _percent(value: float | None) -> str:
    return f"{value * 100:.0f}%" if value is not None else "-"


def describe(description: dict) -> str:
    """An arm's workers in one line: profile, backend, worker or command, the models that differ."""
    parts = [description.get("profile", "?"), description.get("backend") or "?"]
    if description.get("worker"):
        parts.append(f"worker {description['worker']}")
    elif description.get("worker_cmd"):
        parts.append(f"worker-cmd {description['worker_cmd']}")
    models = description.get("models") or {}
    if models:
        distinct = sorted(set(models.values()))
        parts.append("model " + distinct[0] if len(distinct) == 1 else
                     "models " + ", ".join(f"{role}={model}" for role, model in models.items()))
    if description.get("batch"):
        parts.append("batch")
    if description.get("match"):
        parts.append(f"budget-matched to {description['match']} by {description.get('match_by', 'tokens')}")
    if description.get("recorded") is False:
        parts.append("(workers not recorded: an eval of an older mesh)")
    return ", ".join(parts)


def lines(report: dict[str, Any]) -> list[str]:
    """The report as a terminal table, one arm a line, then trials, errors, what each figure means."""
    out = [f"eval {report['eval']}: {len(report['cases'])} case(s), suite {report['suite']};"
           f" reference arm {report['reference']}", ""]
    head = (f"{'arm':<14} {'resolved':>9} {'closed':>9} {'res+cl':>6} {'errors':>6} {'rate':>6} {'95% CI':>13} {'vs reference':>22}"
            f" {'tokens in':>10} {'out':>8} {'cost $':>9} {'$/resolved':>10} {'wall s':>8} {'calls':>6} {'cycles':>6}")
    out += [head, "-" * len(head)]
    for row in report["arms"]:
        per = row["per_case"]
        ci = f"{row['ci'][0] * 100:.0f}-{row['ci'][1] * 100:.0f}%" if row["ci"] else "-"
        paired = row["paired"]
        versus = ("(reference)" if not paired else "no common case" if not paired["cases"] else
                  f"{paired['only_this']} vs {paired['only_reference']}, p={p_text(paired['p_value'])}")
        figure = (lambda key, fmt: format(per[key], fmt) if per[key] is not None else "-")
        per_resolved = (f"{row['cost_per_resolved']:.4f}" if row["cost_per_resolved"] is not None else
                        "unknown" if not row.get("cost_known", True) and row["resolved"] else "-")
        closed = f"{row.get('closed', row['resolved_closed'])}/{row['finished']}"
        out.append(f"{row['arm'][:14]:<14} {row['resolved']:>4}/{row['finished']:<4} {closed:>9} {row['resolved_closed']:>6}"
                   f" {row['errors']['count']:>6} {_percent(row['rate']):>6} {ci:>13} {versus:>22}"
                   f" {figure('tokens_in', '.0f'):>10} {figure('tokens_out', '.0f'):>8}"
                   f" {figure('cost_usd', '.4f'):>9} {per_resolved:>10} {figure('wall_s', '.1f'):>8}"
                   f" {figure('calls', '.1f'):>6} {figure('review_cycles', '.1f'):>6}")
    out.append("")
    for row in report["arms"]:
        out.append(f"{row['arm']}: {describe(row['description'])}")
        if not row.get("cost_known", True) and row["finished"]:
            out.append("  cost and tokens unknown: its workers report neither to mesh (an agent CLI's own command)")
        if row["trials"] > 1 and row["pass_at_k"]["value"] is not None:
            k = row["trials"]
            at, hat = row["pass_at_k"], row["pass_hat_k"]
            out.append(f"  {k} trials: pass@1 {_percent(row['rate'])}, pass@{k} {_percent(at['value'])}"
                       f" ({at['ci'][0] * 100:.0f}-{at['ci'][1] * 100:.0f}%), pass^{k} {_percent(hat['value'])}"
                       f" ({hat['ci'][0] * 100:.0f}-{hat['ci'][1] * 100:.0f}%) over {at['cases']} case(s) with every"
                       f" trial finished; mean per-case variance {row['variance']}")
        if row.get("budget"):
            b = row["budget"]
            unit = "$" if b["by"] == "usd" else "tokens "
            out.append(f"  budget-matched to {b['against']}: spent {unit}{b['spent']:g} against {unit}{b['budget']:g}"
                       f" ({b['runs']} run(s), {b['attempts']:g} attempt(s) per run)")
        if row["paired"] and row["paired"]["cases"] and row["paired"]["test"] != "McNemar exact":
            out.append(f"  vs {row['paired']['against']}: mean difference {row['paired']['mean_difference']}"
                       f" over {row['paired']['cases']} case(s), {row['paired']['test']}")
        for suspect in row.get("suspected_forgery", {}).get("runs", []):
            trial = f" trial {suspect['trial']}" if row["trials"] > 1 else ""
            out.append(f"  suspected forgery {suspect['case']}{trial} (unresolved): {'; '.join(suspect['lines'])[:300]}")
        for error in row["errors"]["runs"]:
            trial = f" trial {error['trial']}" if row["trials"] > 1 else ""
            out.append(f"  error {error['case']}{trial}: {error['kind']}: {error['reason'][:200]}")
    pending = sum(row["pending"] for row in report["arms"])
    out += ["", "resolved/finished counts runs that ended resolved or not; runs in error are apart (errors), never"
                " counted as unresolved. closed: finished runs that ended closed (approved), as each run's line says;"
                " res+cl: resolved runs that also ended closed.",
            "tokens, cost, wall time, calls and review cycles are per finished run; $/resolved is everything the arm"
            " spent over its resolved runs. 'vs reference': cases this arm resolves more often than the reference,"
            " against the reverse, and the exact paired test's p-value."]
    if pending:
        out.append(f"{pending} run(s) not finished yet: mesh eval run continues them.")
    if report["errors"]:
        out.append(f"{report['errors']} run(s) in error: mesh eval run --retry-errors runs them again.")
    return out
