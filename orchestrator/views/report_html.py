"""``mesh report TASK``: one self-contained HTML page of a task's runs.

The page is built from the task's ``[orch:*]`` comments (``orchestrator.views.show.task_history``)
and the calls table, and holds: a summary, the timeline of rounds with each role's artifact
(critiques and decision logs included), the vote tally per cycle, every patch as a coloured
diff, the validation results, the review findings with their sub-issues, the landing
(``[orch:land]``), and the costs per role with every call.

Everything on the page comes from model output, worker output or tracker comments anyone
can write, so nothing of it is trusted:

- the view model is made of plain strings, numbers and lists whatever shape a checkpoint's
  payload has (a forged or damaged comment renders as what it is, never as a traceback);
- every string is scrubbed of secrets and shows control and bidi characters as ``\\uXXXX``;
- the template (``templates/report.html.j2``) is rendered with autoescape on and uses no
  ``|safe``; links are only in-page anchors built from numbers; CSS classes come from fixed
  sets, never from a payload;
- the page carries a Content-Security-Policy that allows no script, no network and no form:
  it needs none, and an escaping mistake would still run nothing.

With ``MESH_SIGNING_KEY`` set each checkpoint is shown as verified or not (and why).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tracker.errors import TrackerError
from tracker.store import Tracker

from redact import scrub

from orchestrator.ledger.calls import calls_for
from orchestrator.protocol.checkpoint import Checkpoint, signing_key, trust_of
from orchestrator.config import KNOWN_ROLES, PriceTable, user_price_table
from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.protocol.proof import output_tail, tests_line
from roles.validation_text import failing_tests
from orchestrator.safe_text import printable
from orchestrator.views.show import task_history
from orchestrator.views.preflight import preflight_text
from orchestrator.sandbox.testcounts import TestCounts, commands_phrase, runner_counts_phrase
from orchestrator.ledger.usage import UsageError, call_cost, usage_summary

__all__ = ["DEFAULT_NAME", "default_report_path", "report_data", "render_report_html", "write_report",
           "checkpoint_card", "task_costs", "sub_issue_views"]

# The file ``mesh report TASK`` writes without ``-o``, in the current directory.
DEFAULT_NAME = "mesh-report-{task}.html"
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_DIFF_CLASSES = ("meta", "hunk", "add", "del", "ctx")
_TASK_FIELDS = ("id", "title", "status", "priority", "issue_type", "assignee", "close_reason", "description",
                "acceptance_criteria", "design", "notes")


def default_report_path(task_id: str) -> Path:
    """``mesh-report-<task>.html`` in the current directory (characters other than letters,
    digits, ``.``, ``_`` and ``-`` in the id become ``-``)."""
    name = _UNSAFE_NAME.sub("-", task_id).strip(".-") or "task"
    return Path(DEFAULT_NAME.format(task=name))


# ------------------------------------------------------------------ untrusted payloads, normalised


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _texts(value: Any) -> list[str]:
    # A list of strings in the schema; a lone string is taken as one item rather than dropped.
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [_text(item) for item in _list(value)]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _role_class(role: Any) -> str:
    return role if role in KNOWN_ROLES else "other"


def _safe(value: Any) -> Any:
    """Every string of the view model scrubbed and made printable (see the module docstring)."""
    if isinstance(value, str):
        return printable(scrub(value))
    if isinstance(value, dict):
        return {key: _safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_safe(item) for item in value]
    return value


# ------------------------------------------------------------------ pieces of the page


def _result(raw: Any, base_counts: Any = None) -> dict[str, Any]:
    r = _dict(raw)
    counts = TestCounts.from_dict(r.get("tests"))
    if r.get("rejected"):
        state, css = "rejected", "bad"
    elif r.get("passed") is True:
        state, css = "pass", "good"
    else:
        code = _int(r.get("exit_code"))
        state, css = ("fail" if code is None else f"fail (exit {code})"), "bad"
    duration = _number(r.get("duration_s"))
    # A failing command shows the end of its output in the table, not behind a click.
    tail = output_tail(r) if css == "bad" and not r.get("rejected") else []
    return {"command": _text(r.get("command")), "state": state, "css": css, "reason": _text(r.get("reason")),
            "duration": "" if duration is None else f"{duration:.2f}s", "tests": tests_line(r, base_counts),
            "ran": counts.ran if counts else None, "counts": counts, "tail": "\n".join(tail), "tail_lines": len(tail),
            "failing": bool(tail and failing_tests(r)),
            "stdout": _text(r.get("stdout_tail")), "stderr": _text(r.get("stderr_tail"))}


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _diff(patch: str) -> dict[str, Any]:
    """A unified diff as classed lines, with the +/- count of each file.

    Inside a hunk its header's line counts decide, so a removed ``-- x`` or an added
    ``++ y`` line is content, not a file header. Text that is not a diff shows as context."""
    lines, files = [], []
    current: dict[str, Any] = {"path": "", "added": 0, "removed": 0}
    old = new = 0
    for line in patch.splitlines():
        if old > 0 or new > 0:
            if line.startswith("+"):
                css, new = "add", new - 1
                current["added"] += 1
            elif line.startswith("-"):
                css, old = "del", old - 1
                current["removed"] += 1
            elif line.startswith("\\"):
                css = "meta"
            else:
                css, old, new = "ctx", old - 1, new - 1
        elif (hunk := _HUNK.match(line)) is not None:
            css = "hunk"
            old, new = (int(n) if n is not None else 1 for n in hunk.groups())
        elif line.startswith(("diff --git ", "--- ", "+++ ", "index ", "new file mode", "deleted file mode",
                              "similarity index", "rename ", "old mode", "new mode", "\\")):
            css = "meta"
            if line.startswith("+++ "):
                path = line[4:].strip()
                current = {"path": path[2:] if path.startswith("b/") else path, "added": 0, "removed": 0}
                files.append(current)
        else:
            css = "ctx"
        lines.append({"css": css, "text": line})
    return {"lines": lines, "files": files}


def _finding(raw: Any, subtasks: Mapping[str, Any], issues: dict[str, dict[str, str]]) -> dict[str, Any]:
    f = _dict(raw)
    fid = _text(f.get("finding_id"))
    sub = subtasks.get(fid)
    label = _text(f.get("label"))
    return {"finding_id": fid, "severity": _text(f.get("severity")), "label": label,
            "css": "bad" if label == "MUST_FIX" else "muted", "location": _text(f.get("location")),
            "issue": _text(f.get("issue")), "evidence": _text(f.get("evidence")),
            "minimal_fix": _text(f.get("minimal_fix")), "code_context": _text(f.get("code_context")),
            "sub_issue": issues.get(sub) if isinstance(sub, str) else None}


def _body(kind: str, art: Any) -> dict[str, Any]:
    """The kind-specific part of a timeline card."""
    a = _dict(art)
    if kind == "proposal":
        return {"plan": _texts(a.get("plan")), "assumptions": _texts(a.get("assumptions")),
                "risk": _text(a.get("risk"))}
    if kind == "critique":
        return {"findings": _texts(a.get("findings")), "must_fix": _texts(a.get("must_fix")),
                "vote_flip_conditions": _texts(a.get("vote_flip_conditions")), "risk": _text(a.get("risk"))}
    if kind in ("synthesis", "revision"):
        return {"decision_log": [{"point": _text(d.get("point")), "decision": _text(d.get("decision")),
                                  "reason": _text(d.get("reason"))} for d in map(_dict, _list(a.get("decision_log")))],
                "validation_commands": _texts(a.get("validation_commands")),
                "has_patch": bool(_text(a.get("patch")).strip())}
    if kind == "vote":
        vote = _text(a.get("vote"))
        return {"vote": vote, "css": "good" if vote == "agree" else "bad", "reason": _text(a.get("reason"))}
    if kind == "proof":
        base = _dict(a.get("base_tests")).get("counts")
        return {"results": [_result(r, base) for r in _list(a.get("results"))]}
    if kind == "review":
        return {"decision": _text(a.get("decision")), "summary": _text(a.get("summary")),
                "findings": len(_list(a.get("findings")))}
    if kind == "revision-plan":
        return {"summary": _text(a.get("summary")),
                "steps": [{"finding_id": _text(s.get("finding_id")), "change": _text(s.get("change"))}
                          for s in map(_dict, _list(a.get("steps")))]}
    if kind == "outcome":
        return {"outcome": _text(a.get("outcome")), "block_reason": _text(a.get("block_reason")),
                "block_detail": _text(a.get("block_detail"))}
    if kind == "preflight":
        return {"line": _text(preflight_text(str(a.get("line") or "")))}
    # hydration, review-cycle, land, run-head and kinds this version does not know: their fields.
    return {"fields": [{"name": _text(k), "value": _text(v)} for k, v in a.items()] if a
            else ([{"name": "artifact", "value": _text(art)}] if art is not None else [])}


_TRUST_CSS = {"untrusted": "bad", "verified": "good", "signed": "muted", "unsigned": "muted"}


def _trust_of(checkpoints: list, key: bytes | None, task_id: str) -> dict[str, dict[str, str]]:
    trust: dict[str, dict[str, str]] = {}
    for cp in checkpoints:
        state, detail = trust_of(cp, key, task_id=task_id)
        if state == "unsigned":
            # Without a key an unsigned checkpoint is the normal case: no badge says so on every step.
            state, detail = "", ""
        trust.setdefault(_step_key(cp.run_id, cp.seq, cp.kind, cp.created_at),
                         {"state": state, "detail": detail, "css": _TRUST_CSS.get(state, "muted")})
    return trust


def _step_key(run_id: Any, seq: Any, kind: Any, created_at: Any) -> str:
    return json.dumps([run_id if isinstance(run_id, str) and run_id else "(unknown run)", seq, kind, created_at],
                      default=str)


def _sub_issues(tracker: Tracker, ids: set[str]) -> dict[str, dict[str, str]]:
    out = {}
    for issue_id in sorted(ids):
        try:
            issue = tracker.get(issue_id)
        except TrackerError:
            out[issue_id] = {"id": issue_id, "title": "(not in the tracker)", "status": "missing"}
            continue
        out[issue_id] = {"id": issue_id, "title": _text(issue.get("title")), "status": _text(issue.get("status"))}
    return out


def _run_view(run: dict[str, Any], trust: dict[str, dict[str, str]], issues: dict[str, dict[str, str]],
              patch_counter: list[int]) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    votes: dict[str, dict[str, Any]] = {}
    run_id = _text(run["run_id"])
    patches, validation, reviews, landings = [], [], [], []
    subtasks_by_cycle: dict[Any, dict[str, Any]] = {}
    for step in run["steps"]:
        if step["kind"] == "review-cycle":
            art = _dict(step["artifact"])
            subtasks_by_cycle[_int(art.get("cycle"))] = _dict(art.get("subtasks"))
    for step in run["steps"]:
        kind, art = _text(step["kind"]), step["artifact"]
        consensus, review = _int(step["consensus_cycle"]), _int(step["review_cycle"])
        cycle = f"review cycle {review if review is not None else '?'}, consensus cycle " \
                f"{consensus if consensus is not None else '?'}"
        card = {"seq": _text(step["seq"]), "kind": kind, "role": _text(step["role"]),
                "role_class": _role_class(step["role"]), "summary": _text(step["summary"]),
                "created_at": _text(step["created_at"]),
                "trust": trust.get(_step_key(step.get("run_id_key"), step["seq"], step["kind"], step["created_at"]),
                                   {"state": "unknown", "detail": "written while the report was read", "css": "muted"}),
                "body": _body(kind, art), "patch_anchor": None}
        if not rounds or rounds[-1]["title"] != cycle:
            rounds.append({"title": cycle, "steps": []})
        rounds[-1]["steps"].append(card)
        a = _dict(art)
        if kind == "vote":
            tally = votes.setdefault(cycle, {"title": cycle, "votes": [], "agree": 0, "disagree": 0})
            tally["votes"].append({"role": card["role"], "role_class": card["role_class"], **card["body"]})
            if card["body"]["vote"] in ("agree", "disagree"):
                tally[card["body"]["vote"]] += 1
        elif kind in ("synthesis", "revision") and card["body"]["has_patch"]:
            patch_counter[0] += 1
            anchor = f"patch-{patch_counter[0]}"
            card["patch_anchor"] = anchor
            patches.append({"anchor": anchor, "title": f"{kind} ({cycle})", "role": card["role"],
                            **_diff(_text(a.get("patch")))})
        elif kind == "proof":
            validation.append({"title": "validation", "run": run_id, "cycle": cycle,
                               "results": card["body"]["results"]})
        elif kind == "review":
            subtasks = subtasks_by_cycle.get(review, {})
            reviews.append({"title": f"review cycle {review if review is not None else '?'}",
                            "decision": card["body"]["decision"], "summary": card["body"]["summary"],
                            "css": "good" if card["body"]["decision"] == "approve" else "bad",
                            "findings": [_finding(f, subtasks, issues) for f in _list(a.get("findings"))]})
        elif kind == "land":
            duration = _number(a.get("duration_s"))
            landings.append({"result": _text(a.get("result")), "css": "good" if a.get("result") == "landed" else "bad",
                             "branch": _text(a.get("branch")), "onto": _text(a.get("onto")),
                             "sha": _text(a.get("sha")), "method": _text(a.get("method")),
                             "attempt": _text(a.get("attempt")), "action": _text(a.get("action")),
                             "detail": _text(a.get("detail")),
                             "duration": "" if duration is None else f"{duration:.2f}s",
                             "validation": [_result(r) for r in _list(a.get("validation"))]})
            if landings[-1]["validation"]:
                validation.append({"title": "landing validation", "run": run_id,
                                   "cycle": f"landing attempt {landings[-1]['attempt'] or '?'}",
                                   "results": landings[-1]["validation"]})
    outcome = _dict(run["outcome"])
    conditions = [{"name": _text(k), "value": _text(v)} for k, v in _dict(outcome.get("conditions")).items()]
    state = _text(outcome.get("outcome")) or "unfinished"
    return {"run_id": run_id, "outcome": state,
            "glance": _glance(list(votes.values()), validation, reviews, landings, len(run["steps"])),
            "css": {"closed": "good", "awaiting_ci": "good", "synthesis_only": "muted", "unfinished": "muted"}
            .get(state, "bad"),
            "block_reason": _text(outcome.get("block_reason")), "block_detail": _text(outcome.get("block_detail")),
            "conditions": conditions, "rounds": rounds, "votes": list(votes.values()), "patches": patches,
            "validation": validation, "reviews": reviews, "landings": landings}


def _glance(votes: list, validation: list, reviews: list, landings: list, steps: int) -> list[dict[str, str]]:
    """The run's facts in a few lines: the last tally, validation, review and landing."""
    out = []
    if votes:
        last = votes[-1]
        out.append({"name": "consensus", "value": f"{last['agree']} agree / {last['disagree']} disagree"
                    f" ({last['title']})", "css": "bad" if last["disagree"] else "good"})
    if validation:
        results = validation[-1]["results"]
        counts = {state: sum(1 for r in results if r["state"].startswith(state)) for state in ("pass", "fail", "rejected")}
        tests = runner_counts_phrase([r["counts"] for r in results if r.get("counts")])
        # Commands and tests apart: "1 of 2 command(s) failed" never reads as one failed test.
        out.append({"name": "validation", "value": (commands_phrase(counts["pass"], counts["fail"], counts["rejected"])
                                                    if results else "no command") + (f"; {tests}" if tests else ""),
                    "css": "bad" if counts["fail"] or not counts["pass"] else "good"})
    if reviews:
        last = reviews[-1]
        found = sum(len(r["findings"]) for r in reviews)
        out.append({"name": "review", "value": f"{last['decision']} after {len(reviews)} cycle(s), {found} finding(s)",
                    "css": last["css"]})
    if landings:
        last = landings[-1]
        out.append({"name": "landing", "value": f"{last['result']} on {last['branch']}"
                    + (f" at {last['sha'][:12]}" if last["sha"] else ""), "css": last["css"]})
    out.append({"name": "checkpoints", "value": str(steps), "css": "muted"})
    return out


def _money(usd: Any) -> str:
    value = _number(usd)
    return "-" if value is None else f"${value:.4f}"


def _costs(tracker: Tracker, task_id: str, prices: PriceTable | None) -> dict[str, Any]:
    try:
        summary = usage_summary(tracker, prices=prices, task_id=task_id)
    except UsageError as exc:
        return {"error": str(exc)}
    table = prices if prices is not None else user_price_table()
    figures = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    roles = [{"role": _text(g["role"]), "role_class": _role_class(g["role"]), "calls": g["calls"],
              "errors": g["errors"], **{f: g[f] for f in figures}, "cost": _money(g["cost_usd"])
              + ("+" if g["unpriced_calls"] else "")} for g in summary["by_role"]]
    total = summary["total"]
    calls = []
    for call in calls_for(tracker, task_id=task_id):
        usage = _dict(call.get("usage"))
        cost = call_cost(usage, call.get("model"), table)
        duration = _number(call.get("duration_s"))
        calls.append({"run_id": _text(call.get("run_id")), "role": _text(call.get("role")),
                      "role_class": _role_class(call.get("role")), "round": _text(call.get("round")),
                      "attempt": _text(call.get("attempt")), "model": _text(call.get("model")),
                      "backend": _text(call.get("backend")),
                      **{f: _int(usage.get(f)) or 0 for f in figures},
                      "cost": _money(cost.usd), "duration": "" if duration is None else f"{duration:.2f}s",
                      "error": _text(call.get("error"))})
    return {"error": None, "prices_as_of": _text(summary["prices_as_of"]), "roles": roles, "calls": calls,
            "total": {"calls": total["calls"], "errors": total["errors"], **{f: total[f] for f in figures},
                      "cost": _money(total["cost_usd"]) + ("+" if total["unpriced_calls"] else "")},
            "unpriced_models": [_text(m) for m in summary["unpriced_models"]]}


# ------------------------------------------------------------------ one checkpoint, for live views


def checkpoint_card(cp: Checkpoint, *, key: bytes | None, task_id: str,
                    issues: Mapping[str, dict[str, str]]) -> dict[str, Any]:
    """One checkpoint as a card of its own, scrubbed and printable: what the report's timeline
    shows of it, with its patch as classed diff lines (a synthesis or revision), its findings (a
    review) and its findings' sub-issues (a review cycle, ``issues`` from ``sub_issue_views``).

    A card depends on its checkpoint alone, so a live view (``mesh serve``) can send each
    checkpoint once, when it is written, and never redraw an earlier one.
    """
    kind, p = _text(cp.kind), cp.payload
    art = p.get("artifact")
    a = _dict(art)
    consensus, review = _int(p.get("consensus_cycle")), _int(p.get("review_cycle"))
    trust = _trust_of([cp], key, task_id).get(_step_key(cp.run_id, cp.seq, cp.kind, cp.created_at))
    card: dict[str, Any] = {
        "comment_id": _text(cp.comment_id), "run_id": _text(cp.run_id) or "(unknown run)",
        "seq": _text(cp.seq), "kind": kind, "role": _text(p.get("role")), "role_class": _role_class(p.get("role")),
        "summary": _text(cp.summary), "created_at": _text(cp.created_at), "reviewer": _text(p.get("reviewer")),
        "cycle": f"review cycle {review if review is not None else '-'}, consensus cycle "
                 f"{consensus if consensus is not None else '-'}",
        "trust": trust, "body": _body(kind, art), "diff": None, "findings": [], "subtasks": []}
    if kind in ("synthesis", "revision", "review-request") and _text(a.get("patch") or a.get("diff")).strip():
        card["diff"] = _diff(_text(a.get("patch") or a.get("diff")))
    if kind == "review-request":  # the diff is the card's diff: the rest is where it stands
        card["body"] = {"fields": [{"name": name, "value": _text(a.get(name))} for name in ("commit", "branch", "cycle")]}
    if kind == "review":
        card["findings"] = [_finding(f, {}, {}) for f in _list(a.get("findings"))]
    if kind == "human-review":
        review_art = _dict(a.get("review"))
        card["body"] = {"decision": _text(review_art.get("decision")), "summary": _text(review_art.get("summary")),
                        "findings": len(_list(review_art.get("findings")))}
        card["findings"] = [_finding(f, {}, {}) for f in _list(review_art.get("findings"))]
    if kind == "review-cycle":
        card["subtasks"] = [{"finding_id": _text(fid), "issue": issues.get(sub) if isinstance(sub, str) else None}
                            for fid, sub in _dict(a.get("subtasks")).items()]
    return _safe(card)


def sub_issue_views(tracker: Tracker, checkpoints: list[Checkpoint]) -> dict[str, dict[str, str]]:
    """The sub-issues the checkpoints' review cycles filed: id -> id, title, status."""
    subs: set[str] = set()
    for cp in checkpoints:
        if cp.kind == "review-cycle":
            subs.update(v for v in _dict(_dict(cp.payload.get("artifact")).get("subtasks")).values()
                        if isinstance(v, str))
    return _safe(_sub_issues(tracker, subs))


def task_costs(tracker: Tracker, task_id: str, prices: PriceTable | None = None) -> dict[str, Any]:
    """The report's costs of a task (per role, every call, the total), scrubbed and printable."""
    return _safe(_costs(tracker, task_id, prices))


# ------------------------------------------------------------------ the page


def report_data(tracker: Tracker, task_id: str, *, prices: PriceTable | None = None) -> dict[str, Any]:
    """The page's view model: plain strings, numbers and lists, scrubbed and printable.

    ``prices``: the price table the costs use (default: the built-in rows with the user's
    stored table over them, like ``mesh usage``). Raises the tracker's ``NotFoundError`` for
    an unknown task; a calls table the database cannot give shows as a note in the costs.
    """
    history = task_history(tracker, task_id)
    checkpoints = load_checkpoints(tracker, task_id)
    trust = _trust_of(checkpoints, signing_key(), task_id)
    # task_history names runs like this; each step is keyed back to its checkpoint's trust.
    for run in history["runs"]:
        for step in run["steps"]:
            step["run_id_key"] = run["run_id"]
    subs: set[str] = set()
    for cp in checkpoints:
        if cp.kind == "review-cycle":
            subs.update(v for v in _dict(_dict(cp.payload.get("artifact")).get("subtasks")).values()
                        if isinstance(v, str))
    issues = _sub_issues(tracker, subs)
    task = tracker.get(task_id)
    counter = [0]
    runs = [_run_view(run, trust, issues, counter) for run in history["runs"]]
    data = {
        "task": {field: _text(task.get(field)) for field in _TASK_FIELDS},
        "runs": runs,
        "landings": sum(len(r["landings"]) for r in runs),
        "costs": _costs(tracker, task_id, prices),
        "signing": signing_key() is not None,
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
    return _safe(data)


def render_report_html(data: Mapping[str, Any]) -> str:
    """``report_data``'s view model as one self-contained HTML page (autoescaped Jinja2)."""
    from importlib.resources import files

    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    environment = Environment(loader=FileSystemLoader(str(files("templates"))), autoescape=True,
                              undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return environment.get_template("report.html.j2").render(data=data, diff_classes=_DIFF_CLASSES)


def write_report(tracker: Tracker, task_id: str, path: Path | None = None, *,
                 prices: PriceTable | None = None) -> Path:
    """Write the task's page to ``path`` (default ``default_report_path``) and return it.

    The file is replaced at once (written beside it, then renamed): a reader never sees half
    a page. Raises ``NotFoundError`` for an unknown task and ``OSError`` when the file cannot
    be written.
    """
    target = Path(path) if path is not None else default_report_path(task_id)
    page = render_report_html(report_data(tracker, task_id, prices=prices))
    folder = target.resolve().parent
    fd, tmp = tempfile.mkstemp(prefix=".mesh-report-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(page)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
