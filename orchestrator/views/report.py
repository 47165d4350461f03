"""The human summary of a run (the profile's "Reporting Contract")."""

from __future__ import annotations

from redact import scrub

from orchestrator.protocol.outcomes import RunReport
from orchestrator.views.preflight import preflight_text
from orchestrator.protocol.idle import IdleReport, idle_lines
from orchestrator.protocol.proof import state
from orchestrator.safe_text import printable

__all__ = ["render_report"]


def render_report(report: RunReport, *, preflight: bool = True) -> str:
    """Selected task and final state, consensus, validation, mutations, preflight (scrubbed,
    like the JSON report: the block detail and commands can quote model output); without
    ``preflight`` when it was printed already."""
    if isinstance(report, IdleReport):
        # Why nothing ran (after what the catch-up landed); task titles and block details are
        # tracker and model text.
        lines = [*report.mutations, *idle_lines(report)]
        return scrub("\n".join(printable(line, one_line=True) for line in lines))
    task = report.task or {}
    lines = [f"task {task.get('id')}: {task.get('title')}",
             f"  outcome:    {report.outcome}" + (f" ({report.block_reason})" if report.block_reason else ""),
             f"  status:     {task.get('final_status')}"]
    if report.block_detail:
        lines.append(f"  detail:     {report.block_detail}")
    c = report.consensus
    if c:
        lines.append(f"  consensus:  {c['tally']['agree']} agree / {c['tally']['disagree']} disagree,"
                     f" {c['cycles']} cycle(s), {c['mode']} mode")
        if c.get("votes"):
            lines.append("  votes:      " + ", ".join(f"{r}={v}" for r, v in c["votes"].items()))
    for v in report.validation:
        lines.append(f"  validation: {v['command']} -> {state(v)}")
        # A failing command's output tail (kept with the report), so the failure is read here.
        lines += [f"              | {line}" for line in v.get("output_tail") or []]
    r = report.review
    if r and r.get("decision"):
        lines.append(f"  review:     {r['decision']} after {r['cycles']} cycle(s)")
        if r.get("review_issue"):
            subs = ", ".join(f"{k}->{v}" for k, v in r["subtasks"].items())
            lines.append(f"  findings:   {r['review_issue']} ({subs})")
    if report.mutations:
        lines.append("  mutations:")
        lines += [f"    - {m}" for m in report.mutations]
    u = report.usage
    if u:
        lines.append(f"  usage:      {u['calls']} call(s), {u['input_tokens']} in / {u['output_tokens']} out tokens,"
                     f" ${u['cost_usd']:.4f}")
    if preflight and report.preflight:
        lines.append(f"  {preflight_text(report.preflight)}")
    # The title, the detail, finding ids, mutations and commands are tracker or model text:
    # every line is printable, on its line (no terminal escapes, no forged lines).
    return scrub("\n".join(printable(line, one_line=True) for line in lines))
