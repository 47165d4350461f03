"""``mesh show TASK``: a task's run history rebuilt from its ``[orch:*]`` comments alone.

Anyone with tracker write access can write such a comment: with ``MESH_SIGNING_KEY`` set,
every step says whether its signature verifies (``trust``, as ``mesh serve`` and the HTML
report do), an unsigned or wrongly signed one is printed as ``UNTRUSTED`` with the reason,
and a run's outcome is taken only from a verified ``[orch:outcome]``.
"""

from __future__ import annotations

import textwrap

from typing import Any

from tracker.store import Tracker

from orchestrator.views.preflight import readable_summary
from orchestrator.protocol.checkpoint import load_checkpoints, signing_key, trust_of
from orchestrator.protocol.proof import output_tail, state
from roles.validation_text import verdict_notes
from orchestrator.safe_text import printable

__all__ = ["task_history", "render_history"]


def task_history(tracker: Tracker, task_id: str) -> dict[str, Any]:
    """The task and its runs: every checkpoint's kind, role, cycles and artifact, by run."""
    task = tracker.get(task_id)
    key = signing_key()
    runs: dict[str, dict[str, Any]] = {}
    for cp in load_checkpoints(tracker, task_id):
        # Any comment can carry a checkpoint: a run id that is not a string must not break the page.
        run_id = cp.run_id if isinstance(cp.run_id, str) and cp.run_id else "(unknown run)"
        run = runs.setdefault(run_id, {"run_id": run_id, "steps": [], "outcome": None})
        p = cp.payload
        step = {
            "seq": p.get("seq"),
            "kind": cp.kind,
            "summary": readable_summary(cp.kind, cp.summary),
            "role": p.get("role"),
            "consensus_cycle": p.get("consensus_cycle"),
            "review_cycle": p.get("review_cycle"),
            "artifact": p.get("artifact"),
            "signed": "sig" in p,
            "reviewer": p.get("reviewer"),
            "created_at": cp.created_at,
        }
        step["trust"], step["trust_detail"] = trust_of(cp, key, task_id=task_id)
        run["steps"].append(step)
        if cp.kind == "outcome" and step["trust"] != "untrusted":
            run["outcome"] = p.get("artifact")
    return {
        "task": {k: task.get(k) for k in ("id", "title", "status", "priority", "assignee", "close_reason")},
        "signing": key is not None,
        "untrusted": sum(step["trust"] == "untrusted" for run in runs.values() for step in run["steps"]),
        "runs": list(runs.values()),
    }


def _line(text: str, width: int = 110) -> str:
    """One printable line: model text may hold terminal escapes or bidirectional overrides."""
    text = printable(" ".join(str(text).split()), one_line=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def render_history(history: dict[str, Any]) -> str:
    """Human-readable rendering of ``task_history``: rounds, votes with reasons, findings,
    validation and outcome. Any field can be tracker or model text: every line is printable, on
    its line (a finding id, a command or a branch name cannot start a line of its own)."""
    task = history["task"]
    out = [f"{task['id']}  {_line(task['title'])}", f"  status: {task['status']}"
           + (f"  ({task['close_reason']})" if task.get("close_reason") else "")]
    if history.get("untrusted"):
        out.append(f"  UNTRUSTED: {history['untrusted']} checkpoint(s) unsigned or wrongly signed with MESH_SIGNING_KEY"
                   " set: not written by mesh with this key, marked below")
    if not history["runs"]:
        out.append("  no mesh runs recorded")
    for run in history["runs"]:
        out.append("")
        out.append(f"run {run['run_id']}")
        for step in run["steps"]:
            try:
                out.extend(_render_step(step))
            except (TypeError, AttributeError, ValueError, KeyError, IndexError):
                # A forged or damaged checkpoint (a null seq, a list where a mapping belongs) is
                # shown as such; ``mesh show`` never fails on what the tracker holds.
                out.append(f"  #{_line(str(step.get('seq')), 6):<3} {_line(str(step.get('kind')), 13):<13}"
                           + (" UNTRUSTED" if step.get("trust") == "untrusted" else "")
                           + " (artifact not readable: not in the shape mesh writes)")
    return "\n".join(printable(line, one_line=True) for line in out)


def _render_step(step: dict[str, Any]) -> list[str]:
    kind, art = step["kind"], step["artifact"] or {}
    cyc = f"c{step['consensus_cycle']}/r{step['review_cycle']}"
    seq = step["seq"] if isinstance(step["seq"], int) else "-"  # a person's review has no seq of the run
    lines = [f"  #{seq:<3} {kind:<13} {cyc:<7} {_line(step['summary'], 100)}"]
    if step.get("trust") == "untrusted":
        lines[0] = f"  #{seq:<3} {kind:<13} {cyc:<7} UNTRUSTED {_line(step['summary'], 90)}"
        lines.append(f"        untrusted: {_line(step.get('trust_detail') or '', 96)}")
    if kind == "proposal":
        lines += [f"        - {_line(p, 100)}" for p in art.get("plan", [])]
    elif kind == "critique":
        lines += [f"        must fix: {_line(m, 96)}" for m in art.get("must_fix", [])]
    elif kind in ("synthesis", "revision"):
        for d in art.get("decision_log", []):
            lines.append(f"        {d.get('decision')}: {_line(d.get('point', ''), 70)} ({_line(d.get('reason', ''), 40)})")
        for c in art.get("validation_commands", []):
            lines.append(f"        validate: {c}")
    elif kind == "vote":
        pass  # the summary line already holds vote, tally, role and reason
    elif kind == "proof":
        base = (art.get("base_tests") or {}).get("counts")
        for r in art.get("results", []):
            lines.append(f"        {_line(r.get('command'), 60)}: {_line(state(r, base), 100)}")
            if not r.get("passed") and not r.get("rejected"):
                lines += [f"          | {line}" for line in output_tail(r)]
            elif r.get("passed"):  # mesh's word on a pass it allowed: a flaky test, a failure the base shares
                lines += [f"          | {part}" for note in verdict_notes(r)
                          for part in textwrap.wrap(_line(note, 1500), 100)]
    elif kind == "review":
        if step.get("reviewer"):
            lines.append(f"        reviewed by {_line(step['reviewer'], 60)}")
        for f in art.get("findings", []):
            lines.append(f"        [{f.get('finding_id')}] {f.get('severity')}/{f.get('label')} {f.get('location')}:"
                         f" {_line(f.get('issue', ''), 70)}")
        if art.get("summary"):
            lines.append(f"        summary: {_line(art['summary'], 96)}")
    elif kind == "review-request":
        # Here, not at the top: human_review brings the roles' schemas (pydantic), which every
        # other `mesh show` would pay for at start.
        from orchestrator.protocol.human_review import new_side_lines

        files = sorted(new_side_lines(art.get("diff") or ""))
        lines.append(f"        {len(files)} file(s) at {str(art.get('commit') or '')[:12]} on {_line(art.get('branch') or '', 60)}")
    elif kind == "human-review":
        review = art.get("review") or {}
        lines.append(f"        by {_line(art.get('reviewer') or 'someone', 40)}: {review.get('decision')},"
                     f" {len(review.get('findings') or [])} comment(s)")
    elif kind == "review-cycle":
        subtasks = art.get("subtasks") or {}
        if subtasks:
            lines.append("        issues: " + ", ".join(f"{k} -> {v}" for k, v in subtasks.items()))
    elif kind == "revision-plan":
        lines += [f"        {s.get('finding_id')}: {_line(s.get('change', ''), 90)}" for s in art.get("steps", [])]
    elif kind == "land":
        if art.get("onto"):
            lines.append(f"        onto {art.get('branch')} at {art['onto'][:12]}, attempt {art.get('attempt', 1)}"
                         + (f", {art['duration_s']:.2f}s" if art.get("duration_s") is not None else ""))
        lines += [f"        {_line(r.get('command'), 60)}: {_line(state(r), 100)}" for r in art.get("validation", [])]
        if art.get("detail"):
            lines.append(f"        {_line(art['detail'], 100)}")
    elif kind == "outcome":
        if art.get("block_reason"):
            lines.append(f"        blocked: {art['block_reason']} {_line(art.get('block_detail') or '', 80)}")
        usage = art.get("usage") or {}
        if usage:
            lines.append(f"        usage: {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens,"
                         f" ${usage.get('cost_usd', 0):.4f}")
    return lines
