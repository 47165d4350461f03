"""What the usage and logs pages show: the ledger of worker calls (``orchestrator.ledger``).

Usage is ``usage_summary`` (cost by day, model, role and task) with the cost by day drawn as a
bar chart (``chart``); the logs are ``list_calls`` with its full-text search (SQLite's FTS5
index, a portable scan on PostgreSQL) and one call with its prompt and answer. Prompts and
answers are model and worker text: scrubbed and made printable here, escaped by the templates.
"""

from __future__ import annotations

from typing import Any

from tracker.errors import TrackerError
from tracker.store import Tracker

from orchestrator.config import PriceTable
from orchestrator.ledger.logs import DEFAULT_LIMIT, get_call, list_calls
from orchestrator.ledger.usage import UsageError, money, usage_summary
from orchestrator.web.board import safe
from orchestrator.web.chart import bar_chart

__all__ = ["usage_page", "logs_page", "call_page"]


def _group(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [{"name": safe(row[key]) or "(none)", "calls": row["calls"], "errors": row["errors"],
             "input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"],
             "cost": money(row["cost_usd"]) + ("+" if row["unpriced_calls"] else "")} for row in rows]


def usage_page(tracker: Tracker, prices: PriceTable | None) -> dict[str, Any]:
    """Cost by day (as a chart and a table), by model, by role and by task."""
    try:
        summary = usage_summary(tracker, prices=prices)
    except (UsageError, TrackerError) as exc:
        return {"error": safe(exc)}
    days = summary["by_day"]
    return {"error": None, "prices_as_of": safe(summary["prices_as_of"]),
            "chart": bar_chart([(safe(d["day"]), float(d["cost_usd"] or 0.0)) for d in days], unit="$"),
            "total": {"calls": summary["total"]["calls"], "cost": money(summary["total"]["cost_usd"])},
            "by_day": _group(days, "day"), "by_model": _group(summary["by_model"], "model"),
            "by_role": _group(summary["by_role"], "role"), "by_task": _group(summary["by_task"], "task")[:50],
            "unpriced_models": [safe(m) for m in summary["unpriced_models"]]}


def _record(record: dict[str, Any]) -> dict[str, Any]:
    usage = record.get("usage") or {}
    return {"id": record["id"], "created_at": safe(record.get("created_at")), "task_id": safe(record.get("task_id")),
            "run_id": safe(record.get("run_id")), "role": safe(record.get("role")), "round": safe(record.get("round")),
            "attempt": safe(record.get("attempt")), "model": safe(record.get("model")),
            "backend": safe(record.get("backend")), "input_tokens": safe(usage.get("input_tokens")),
            "output_tokens": safe(usage.get("output_tokens")), "cost": money(record["cost"]["usd"]),
            "duration": f"{record['duration_s']:.2f}s" if isinstance(record.get("duration_s"), (int, float)) else "",
            "error": safe(record.get("error")), "note": safe(record.get("note")),
            "prompt": safe(record.get("prompt")), "response": safe(record.get("response"))}


def logs_page(tracker: Tracker, prices: PriceTable | None, *, query: str = "", task: str | None = None,
              limit: int = DEFAULT_LIMIT * 5) -> dict[str, Any]:
    """The newest logged calls, or those whose prompt or answer holds every word of ``query``."""
    try:
        records = list_calls(tracker, prices=prices, task=task or None, query=query if query.strip() else None,
                             limit=limit)
    except (UsageError, TrackerError) as exc:
        return {"error": safe(exc), "query": safe(query), "calls": []}
    return {"error": None, "query": safe(query), "calls": [_record(r) for r in records], "limit": limit}


def call_page(tracker: Tracker, prices: PriceTable | None, call_id: int) -> dict[str, Any] | None:
    """One logged call with its prompt and answer; None when there is no such call."""
    try:
        record = get_call(tracker, call_id, prices=prices)
    except (UsageError, TrackerError):
        return None
    return None if record is None else _record(record)
