"""``mesh usage``: tokens, cache reads and writes, and dollars by task, role, model and day.

Everything comes from the calls table (``orchestrator.ledger.calls``). A call's cost is worked out
the same way everywhere (``call_cost``), so ``mesh usage``, ``mesh logs`` and the HTML report
agree, and every figure is dated by one price table:

- ``prices``: the model has a row in the price table in use (``config.prices``, dated
  ``as_of``): its token counts times that row. Today's table prices yesterday's calls, so
  a ``mesh prices --update-from`` shows at once what the work costs at the new prices;
- ``reported``: no row, but the backend logged a cost of its own (an agent CLI that reports
  its spend): that figure, as logged;
- ``no_usage``: no tokens and no cost logged (replay answers, calls that failed before a
  model answered): 0;
- unpriced (``usd`` None): tokens were used, but neither a row nor a logged cost prices
  them. Totals leave them out and say how many there were and of which models.

Input tokens follow Anthropic's convention: ``input_tokens`` excludes cache reads and
writes, so the input a call sent is their sum, and the share of input served from the cache
is ``cache_read / (input + cache_read + cache_write)``. Days are UTC days.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import namedtuple
from collections.abc import Iterable, Mapping

from tracker.jsontext import loads
from tracker.store import Tracker

from orchestrator.ledger.calls import ensure_calls_table, failure_reason
from orchestrator.price_rows import Prices, plain_prices
from orchestrator.safe_text import clip, render

TYPE_CHECKING = False  # typing and dataclasses are most of what `mesh logs` would import
if TYPE_CHECKING:
    from typing import Any

    from orchestrator.config import PriceTable

__all__ = ["CallsUnavailable", "Cost", "UsageError", "call_cost", "default_prices", "is_failure", "load_usage", "money",
           "parse_since", "prepare_calls", "prices_of", "usage_summary", "render_usage", "TOKEN_FIELDS"]

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_RELATIVE_RE = re.compile(r"^(\d{1,6})([hdw])$")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


class UsageError(Exception):
    """A usage or logs query that cannot be answered (a bad filter); the message is one line."""


class CallsUnavailable(UsageError):
    """The database cannot give the calls table (it refuses to create it or its index)."""


class Cost(namedtuple("Cost", "usd source")):
    """What one call cost: ``usd`` (None when unpriced) and where the figure comes from
    (``prices``, ``reported``, ``no_usage``, or None when unpriced)."""

    __slots__ = ()


def _count(value: Any) -> int:
    # Usage JSON is what a backend parsed from a worker's output: keep only sane counts.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0
    return int(value)


def _dollars(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0.0
    return float(value)


def call_cost(usage: Mapping[str, Any], model: str | None, prices: PriceTable | Prices) -> Cost:
    """The cost of one logged call (see the module docstring for the rules)."""
    tokens = {name: _count(usage.get(name)) for name in TOKEN_FIELDS}
    price = prices.price_for(model) if model else None
    if price is not None:
        return Cost(price.cost_usd(**tokens), "prices")
    reported = _dollars(usage.get("cost_usd"))
    if reported > 0:
        return Cost(reported, "reported")
    if not any(tokens.values()):
        return Cost(0.0, "no_usage")
    return Cost(None, None)


def parse_since(text: str, *, now: dt.datetime | None = None) -> str:
    """A ``--since`` value as the calls table's timestamp form (UTC, ``...Z``): a date
    ``YYYY-MM-DD`` (midnight UTC), an ISO date-time (naive means UTC), or a span back from
    now: ``12h``, ``7d``, ``2w``. UsageError otherwise."""
    value = text.strip()
    match = _RELATIVE_RE.match(value)
    if match:
        start = (now or dt.datetime.now(dt.timezone.utc)) - dt.timedelta(**{_UNITS[match[2]]: int(match[1])})
    else:
        try:
            start = (dt.datetime.combine(dt.date.fromisoformat(value), dt.time()) if len(value) == 10
                     else dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            raise UsageError(f"--since {text!r}: expected YYYY-MM-DD, an ISO date-time, or 12h / 7d / 2w") from None
    if start.tzinfo is None:
        start = start.replace(tzinfo=dt.timezone.utc)
    return start.astimezone(dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def prices_of(config: Mapping[str, Any], source: str = "defaults") -> PriceTable | Prices:
    """The price table in use for a project whose raw config table is ``config``
    (``workspace.config_table``): the built-in rows, the user's stored table over them, the
    project's ``[prices]`` over that; read as plain data when it plainly is (``price_rows``),
    else validated by the config (ConfigError naming ``source`` or the stored table)."""
    table = plain_prices(config)
    if table is not None:
        return table
    from orchestrator.config import config_prices

    return config_prices(dict(config), source)


def default_prices() -> PriceTable | Prices:
    """The price table without a project: the built-in rows with the user's stored table over them."""
    return prices_of({})


def prepare_calls(tracker: Tracker) -> None:
    """Make sure the calls table and its search index exist (the first use on a database
    made before them creates them); CallsUnavailable with one line when the database refuses."""
    try:
        ensure_calls_table(tracker)
    except Exception as exc:  # the engine's own error class (sqlite3, psycopg): read-only file, rights
        raise CallsUnavailable(f"cannot prepare the calls table: {exc}".replace("\n", " ")) from None


def load_usage(raw: Any) -> dict[str, Any]:
    """A call's stored usage JSON as a dict ({} when absent or not an object)."""
    if isinstance(raw, dict):
        return raw
    try:
        value = loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class _Totals:
    """Running sums of one group of calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.errors = 0
        self.reasons: dict[str, int] = {}
        self.tokens = dict.fromkeys(TOKEN_FIELDS, 0)
        self.cost_usd = 0.0
        self.reported_usd = 0.0
        self.unpriced_calls = 0
        self.duration_s = 0.0

    def add(self, usage: Mapping[str, Any], cost: Cost, reason: str | None, duration_s: Any) -> None:
        self.calls += 1
        if reason is not None:
            self.errors += 1
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        for name in TOKEN_FIELDS:
            self.tokens[name] += _count(usage.get(name))
        if cost.usd is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += cost.usd
            if cost.source == "reported":
                self.reported_usd += cost.usd
        self.duration_s += _dollars(duration_s)

    def to_dict(self) -> dict[str, Any]:
        sent = self.tokens["input_tokens"] + self.tokens["cache_read_tokens"] + self.tokens["cache_write_tokens"]
        return {
            "calls": self.calls,
            "errors": self.errors,
            "errors_by_reason": dict(sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
            **self.tokens,
            "cache_share": round(self.tokens["cache_read_tokens"] / sent, 4) if sent else None,
            "cost_usd": round(self.cost_usd, 6),
            "reported_usd": round(self.reported_usd, 6),
            "unpriced_calls": self.unpriced_calls,
            "duration_s": round(self.duration_s, 3),
        }


def is_failure(error: str | None) -> bool:
    """Whether a logged call failed (a note on an answered call is not a failure; an answer mesh
    refused, ``invalid_shape`` and the like, is)."""
    return failure_reason(error) is not None


def usage_summary(tracker: Tracker, *, prices: PriceTable | Prices | None = None, task_id: str | None = None,
                  since: str | None = None) -> dict[str, Any]:
    """Tokens, cache use and dollars of the logged calls, in total and by task, role, model and
    (UTC) day, with the price table's date (``prices_as_of``).

    ``prices``: the table in use (``config.prices``; default: the built-in rows with the
    user's stored table over them). ``task_id`` keeps one task's calls; ``since`` (a
    ``parse_since`` timestamp) the calls logged from then on. Each group is a dict with its
    key (``task``, ``role``, ``model`` or ``day``), ``calls``, ``errors`` (failed calls, an answer
    mesh refused among them) and ``errors_by_reason`` (typed reason -> count), the four token
    counts, ``cache_share`` (None without input), ``cost_usd`` (priced calls only),
    ``reported_usd`` (the part of it backends reported), ``unpriced_calls`` and
    ``duration_s``. Groups are sorted by cost (roles in the profile's order, days by date).
    """
    table = prices if prices is not None else default_prices()
    prepare_calls(tracker)
    where, params = [], []
    if task_id:
        where.append("task_id = ?")
        params.append(task_id)
    if since:
        where.append("created_at >= ?")
        params.append(since)
    rows = tracker.db.read(
        "SELECT task_id, role, model, usage, duration_s, error, created_at FROM mesh_calls"
        + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id", tuple(params))
    total = _Totals()
    groups: dict[str, dict[Any, _Totals]] = {"task": {}, "role": {}, "model": {}, "day": {}}
    unpriced: set[str] = set()
    for row in rows:
        usage = load_usage(row["usage"])
        cost = call_cost(usage, row["model"], table)
        failed = failure_reason(row["error"])
        if cost.usd is None:
            unpriced.add(row["model"] or "(none)")
        keys = {"task": row["task_id"], "role": row["role"], "model": row["model"],
                "day": (row["created_at"] or "")[:10]}
        total.add(usage, cost, failed, row["duration_s"])
        for name, key in keys.items():
            groups[name].setdefault(key, _Totals()).add(usage, cost, failed, row["duration_s"])
    return {
        "prices_as_of": table.as_of,
        "filters": {"task": task_id, "since": since},
        "total": total.to_dict(),
        "by_task": _ordered("task", groups["task"]),
        "by_role": _ordered("role", groups["role"]),
        "by_model": _ordered("model", groups["model"]),
        "by_day": _ordered("day", groups["day"]),
        "unpriced_models": sorted(unpriced),
    }


def _ordered(name: str, group: Mapping[Any, _Totals]) -> list[dict[str, Any]]:
    if name == "day":
        keys: Iterable[Any] = sorted(group)
    elif name == "role":
        from orchestrator.config import KNOWN_ROLES

        rank = {role: i for i, role in enumerate(KNOWN_ROLES)}
        keys = sorted(group, key=lambda role: (rank.get(role, len(rank)), role or ""))
    else:
        keys = sorted(group, key=lambda key: (-group[key].cost_usd, key or ""))
    return [{name: key, **group[key].to_dict()} for key in keys]


# ------------------------------------------------------------------ the human form


def money(usd: float | None) -> str:
    """A dollar figure as printed in mesh's tables."""
    return "-" if usd is None else f"${usd:.4f}"


def render_usage(summary: Mapping[str, Any], *, width: int = 100, color: bool = False) -> str:
    """``usage_summary``'s result as text tables (rich), every cost titled with the price
    table's date."""
    from rich.table import Table

    dated = f"USD at prices as of {summary['prices_as_of']}"
    filters = ", ".join(f"{k} {v}" for k, v in summary["filters"].items() if v)
    total = summary["total"]
    lines = [f"{total['calls']} call(s){' (' + filters + ')' if filters else ''}: "
             f"{money(total['cost_usd'])} ({dated})"]
    if total["errors"]:
        lines.append(f"{total['errors']} failed call(s) by reason: "
                     + ", ".join(f"{reason} {n}" for reason, n in total["errors_by_reason"].items()))
    if not total["calls"]:
        return lines[0]
    tables = []
    for name, title in (("task", "by task"), ("role", "by role"), ("model", "by model"), ("day", "by day (UTC)")):
        table = Table(title=f"{title}, {dated}", title_justify="left", box=None, pad_edge=False)
        table.add_column(name)
        for column in ("calls", "errors", "input", "output", "cache read", "cache write", "cached", "cost"):
            table.add_column(column, justify="right")
        for group in summary[f"by_{name}"]:
            table.add_row(clip(group[name] or "-", 40), *_figures(group))
        table.add_row("total", *_figures(total), style="bold")
        tables.append(table)
    out = "\n".join(lines) + "\n\n" + render(*tables, width=width, color=color)
    notes = []
    if total["reported_usd"]:
        notes.append(f"{money(total['reported_usd'])} of it as reported by the backends of models without a price row")
    if total["unpriced_calls"]:
        notes.append(f"{total['unpriced_calls']} call(s) used tokens but have no price (models: "
                     f"{', '.join(clip(m, 60) for m in summary['unpriced_models'])}): a cost marked + leaves"
                     f" them out; add rows with 'mesh prices --update-from FILE'")
    return out + "".join(f"\nnote: {note}" for note in notes)


def _figures(group: Mapping[str, Any]) -> list[str]:
    share = group["cache_share"]
    cost = money(group["cost_usd"]) + ("+" if group["unpriced_calls"] else "")
    return [str(group["calls"]), str(group["errors"]), f"{group['input_tokens']:,}", f"{group['output_tokens']:,}",
            f"{group['cache_read_tokens']:,}", f"{group['cache_write_tokens']:,}",
            "-" if share is None else f"{share:.0%}", cost]
