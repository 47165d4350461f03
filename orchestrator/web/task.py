"""What a task's page and its review page show, and how the person's review form is read.

The transcript is the task's ``[orch:*]`` checkpoints, one card each
(``orchestrator.views.report_html.checkpoint_card``), grouped by run, the newest run first; a
card is keyed by its comment's id, which the page's stream continues from
(``orchestrator.web.events``). Costs are the calls the task's runs logged, per role and per
round.

The review page shows the diff a waiting run asks a person to review
(``orchestrator.protocol.human_review.waiting_review``) with a comment box on every line a
comment can point at (``new_side_lines``). ``review_from_form`` reads the submitted form back
into ``submit_review``'s arguments: paths come from the waiting run's own diff (the form only
names a file by its number), so a forged form cannot point a finding at a file the diff does
not hold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tracker.errors import TrackerError
from tracker.store import Tracker

from orchestrator.ledger.calls import calls_for
from orchestrator.ledger.usage import UsageError, call_cost, money
from orchestrator.protocol.checkpoint import Checkpoint, checkpoint_comments
from orchestrator.protocol.human_review import LineComment, ReviewRefused, WaitingReview, new_side_lines
from orchestrator.protocol.idle import last_block
from orchestrator.config import PriceTable, user_price_table
from orchestrator.views.report_html import checkpoint_card, sub_issue_views, task_costs
from orchestrator.web.board import safe

__all__ = ["task_page", "task_status", "new_cards", "round_costs", "review_page", "review_from_form", "SEVERITIES"]

SEVERITIES = ("Critical", "High", "Medium", "Low")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_FIELD = re.compile(r"^c\.(\d+)\.(\d+)$")


def _checkpoints(tracker: Tracker, task_id: str) -> list[tuple[int, Checkpoint]]:
    out = []
    for cp, _ in checkpoint_comments(tracker, task_id):
        if isinstance(cp.comment_id, int):
            out.append((cp.comment_id, cp))
    return out


def new_cards(tracker: Tracker, task_id: str, after: int, key: bytes | None,
              skip: set[int] | frozenset[int] = frozenset()) -> list[tuple[int, dict[str, Any]]]:
    """The cards of the task's checkpoints written after comment ``after`` (none of ``skip``),
    oldest first, each with its comment id."""
    found = _checkpoints(tracker, task_id)
    fresh = [(cid, cp) for cid, cp in found if cid > after and cid not in skip]
    if not fresh:
        return []
    issues = sub_issue_views(tracker, [cp for _, cp in found])
    return [(cid, checkpoint_card(cp, key=key, task_id=task_id, issues=issues)) for cid, cp in fresh]


def round_costs(tracker: Tracker, task_id: str, prices: PriceTable | None = None) -> list[dict[str, Any]]:
    """Calls, tokens and cost of the task per run and round, in the order the rounds ran."""
    table = prices if prices is not None else user_price_table()
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        calls = calls_for(tracker, task_id=task_id)
    except (UsageError, TrackerError):
        return []
    for call in calls:
        usage = call.get("usage") or {}
        group = groups.setdefault((str(call.get("run_id")), str(call.get("round"))),
                                  {"run_id": safe(call.get("run_id")), "round": safe(call.get("round")), "calls": 0,
                                   "input_tokens": 0, "output_tokens": 0, "usd": 0.0})
        group["calls"] += 1
        for name in ("input_tokens", "output_tokens"):
            value = usage.get(name)
            group[name] += value if isinstance(value, int) and not isinstance(value, bool) else 0
        group["usd"] += call_cost(usage, call.get("model"), table).usd or 0.0
    return [{**g, "cost": money(g.pop("usd"))} for g in groups.values()]


def task_status(tracker: Tracker, task_id: str, *, prices: PriceTable | None = None) -> dict[str, Any]:
    """The head of a task's page, which the page redraws after each new checkpoint: the task,
    what a person can do on it now, and its costs."""
    task = tracker.get(task_id)
    found = _checkpoints(tracker, task["id"])
    block = last_block(tracker, task["id"]) if task["status"] == "blocked" else None
    return {
        "task": {name: safe(task.get(name)) for name in ("id", "title", "status", "priority", "assignee",
                                                          "close_reason", "description", "acceptance_criteria")},
        "waits_for_review": bool(found) and found[-1][1].kind == "review-request",
        "block": {"reason": safe(block[0]), "detail": safe(block[1])} if block else None,
        "costs": task_costs(tracker, task["id"], prices),
        "rounds": round_costs(tracker, task["id"], prices),
    }


def task_page(tracker: Tracker, task_id: str, key: bytes | None, *, prices: PriceTable | None = None) -> dict[str, Any]:
    """``task_status``, and the task's runs as transcripts (newest run first, each in the order it
    ran) with the id the page's stream continues from."""
    status = task_status(tracker, task_id, prices=prices)
    cards = new_cards(tracker, status["task"]["id"], 0, key)
    runs: dict[str, dict[str, Any]] = {}
    for _, card in cards:
        runs.setdefault(card["run_id"], {"run_id": card["run_id"], "cards": []})["cards"].append(card)
    return {**status, "runs": list(reversed(runs.values())), "last_event_id": cards[-1][0] if cards else 0}


def _review_files(diff: str) -> list[dict[str, Any]]:
    """The diff by file, each line with its class and, when a comment can point at it, its line
    number on the new side (``new_side_lines``'s numbering)."""
    commentable = new_side_lines(diff)
    files: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    number = 0
    for text in diff.splitlines():
        if text.startswith("diff --git"):
            current = None
            continue
        if text.startswith("--- "):
            continue
        if text.startswith("+++ "):
            target = text[4:].strip()
            path = target[2:] if target.startswith("b/") else target
            current = {"index": len(files), "path": safe(path), "lines": []}
            files.append(current)
            shown = commentable.get(path, {})
            continue
        if current is None:
            continue
        hunk = _HUNK.match(text)
        if hunk:
            number = int(hunk.group(1))
            current["lines"].append({"css": "hunk", "text": safe(text), "line": None})
            continue
        if text.startswith("-"):
            current["lines"].append({"css": "del", "text": safe(text), "line": None})
            continue
        if text.startswith("\\"):
            current["lines"].append({"css": "meta", "text": safe(text), "line": None})
            continue
        css = "add" if text.startswith("+") else "ctx"
        current["lines"].append({"css": css, "text": safe(text), "line": number if number in shown else None})
        number += 1
    return files


def review_page(wait: WaitingReview) -> dict[str, Any]:
    """What the person reviews: the run, its commit, its validation and its diff by file."""
    return {"task": safe(wait.task_id), "title": safe(wait.title), "run_id": safe(wait.run_id), "cycle": wait.cycle,
            "commit": safe(wait.commit), "branch": safe(wait.branch),
            "validation": [{"command": safe(r.get("command")), "passed": r.get("passed") is True}
                           for r in wait.validation if isinstance(r, dict)],
            "files": _review_files(wait.diff), "severities": SEVERITIES}


def review_from_form(form: Mapping[str, str], wait: WaitingReview) -> tuple[str, str, list[LineComment]]:
    """The decision, the summary and the line comments of a submitted review form.

    ReviewRefused when the form is for another run or cycle than the one waiting now (the page
    was older than the wait), names no decision, or points at a file the diff does not hold.
    """
    if form.get("run_id") != wait.run_id or form.get("cycle") != str(wait.cycle):
        raise ReviewRefused("task", "this review page was for an earlier wait of the run; reload it and review again")
    decision = form.get("decision") or ""
    if decision not in ("approve", "request_changes"):
        raise ReviewRefused("decision", "choose approve or request changes")
    paths = sorted(new_side_lines(wait.diff))
    files = {f["index"]: f for f in _review_files(wait.diff)}
    comments = []
    for name, value in form.items():
        match = _FIELD.match(name)
        if not match or not value.strip():
            continue
        index, line = int(match.group(1)), int(match.group(2))
        if index not in files:
            raise ReviewRefused("comments", f"file {index} is not a file of the diff ({len(paths)} file(s))")
        severity = form.get(f"s.{index}.{line}") or "Medium"
        path = _raw_path(wait.diff, index)
        comments.append(LineComment(path=path, line=line, text=value.strip(), severity=severity))
    comments.sort(key=lambda c: (c.path, c.line))
    words = {"approve": "Approved by a person.", "request_changes": "Changes requested by a person."}
    summary = (form.get("summary") or "").strip() or words[decision]
    return decision, summary, comments


def _raw_path(diff: str, index: int) -> str:
    """The path of the diff's ``index``-th file as the diff spells it (``new_side_lines``' keys)."""
    seen = -1
    for text in diff.splitlines():
        if text.startswith("+++ "):
            seen += 1
            if seen == index:
                target = text[4:].strip()
                return target[2:] if target.startswith("b/") else target
    raise ReviewRefused("comments", f"file {index} is not a file of the diff")
