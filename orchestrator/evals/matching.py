"""Equal compute: a budget-matched arm makes attempts on a case until it spent what its reference
arm spent there.

An arm with ``match = "team"`` (``match_by`` tokens or dollars) waits, on each case and trial,
for the ``team`` arm's result there, and takes its spend as its budget. It then runs attempts,
each a fresh ``mesh run`` of its own on the case's base (a task and a repository of its own:
``arm.a2``, ``arm.t2.a3``), while no attempt has ended closed (approved by its own reviewer with
its validation passing: the signal an agent has without the hidden tests), its spend so far is
below the budget, an attempt spent something (one that spent nothing would be repeated forever)
and ``max_attempts`` is not reached. The attempt graded is the first that ended closed, else the
last one; the result's figures (tokens, cost, calls, wall time) are those of all attempts, so
the report compares the arms at the cost each really had. The reference's run ending in an
error gives the matched pair an error too (``reference``): there is no budget to match.
"""

from __future__ import annotations

from typing import Any

__all__ = ["matched_pair", "spend"]


def spend(figures: dict[str, Any], by: str) -> float:
    """What a run (or a result) spent, in tokens (in and out) or dollars."""
    if by == "usd":
        return float(figures.get("cost_usd") or 0.0)
    return float(figures.get("tokens_in") or 0) + float(figures.get("tokens_out") or 0)


def matched_pair(evaluation: Any, pair: Any) -> dict:
    """Run and grade ``pair`` (an ``orchestrator.evals.runs.Pair`` of a budget-matched arm) in
    ``evaluation`` (its ``EvalRun``); returns the result written."""
    arm = pair.arm.config
    reference = evaluation.reference_result(pair)
    if reference is None or reference.get("state") == "error":
        why = ("was not run" if reference is None else
               f"ended in an error ({(reference.get('error') or {}).get('kind', 'run')})")
        return evaluation.error_result(pair, "reference", f"the run of {arm.match} on this case {why}:"
                                                          " no budget to match")
    budget = spend(reference, arm.match_by)
    attempts, spent, note = [], 0.0, "the budget is spent"
    for number in range(1, arm.max_attempts + 1):
        if evaluation.stopping:
            raise KeyboardInterrupt
        attempt = evaluation.attempt(pair, number)
        attempts.append(attempt)
        this = spend(attempt.usage, arm.match_by)
        spent += this
        if attempt.error is not None and attempt.status not in ("closed", "blocked"):
            note = "an attempt ended in an error"
            break
        if attempt.status == "closed":
            note = f"attempt {number} ended closed"
            break
        if this <= 0:
            note = f"attempt {number} spent nothing: another would spend nothing either"
            break
        if spent >= budget:
            break
    else:
        note = f"max_attempts ({arm.max_attempts}) reached"
    chosen = next((a for a in attempts if a.status == "closed"), attempts[-1])
    unit = "usd" if arm.match_by == "usd" else "tokens"
    return evaluation.grade(pair, chosen, attempts, budget={
        "against": arm.match, "by": unit, "budget": round(budget, 6), "spent": round(spent, 6),
        "attempts": len(attempts), "kept": chosen.slot, "stopped": note})
