"""``mesh logs``: the calls table, newest first, after ``llm logs``.

Filters match columns of the calls table exactly (task, run, role, round, model, backend),
``errors`` keeps the calls that failed, and a search (``-q``) keeps the calls whose prompt or
response holds every word of it: through SQLite's FTS5 index (``mesh_calls_fts``, created by
``orchestrator.ledger.calls.ensure_calls_table`` on first use, kept in sync by triggers), or on
PostgreSQL through a plain substring match both engines accept (``portable_search_clause``).
The one place that tells the two apart is ``search_clause``.

Prompts and responses were scrubbed of secrets when they were logged. They are still model
text: the human form prints control and bidirectional-formatting characters as escapes, and
never reads model text as rich markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tracker.store import Tracker

from orchestrator.safe_text import clip, plain_table, printable
from orchestrator.ledger.usage import (UsageError, call_cost, default_prices, is_failure, load_usage, money,
                                       prepare_calls)

TYPE_CHECKING = False  # typing is a tenth of what `mesh logs` would import
if TYPE_CHECKING:
    from typing import Any

    from orchestrator.config import PriceTable
    from orchestrator.price_rows import Prices

__all__ = ["DEFAULT_LIMIT", "list_calls", "get_call", "call_record", "search_clause", "portable_search_clause",
           "render_calls"]

# A run of the demo task makes 12 to 22 calls: the default shows about the latest run. 0: all.
DEFAULT_LIMIT = 20

_COLUMNS = ("id", "created_at", "run_id", "task_id", "role", "round", "attempt", "model", "backend", "usage",
            "duration_s", "error")
_SOURCES = {"reported": "as reported by the backend", "no_usage": "no tokens used",
            None: "no price for this model"}
_TABLE_COLUMNS = ("id", "time (UTC)", "task", "role", "round", "model", "in/out", "cost", "s", "error")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def list_calls(tracker: Tracker, *, prices: PriceTable | Prices | None = None, task: str | None = None,
               run: str | None = None, role: str | None = None, round_name: str | None = None,
               model: str | None = None, backend: str | None = None, errors: bool = False,
               query: str | None = None, limit: int = DEFAULT_LIMIT, verbose: bool = False) -> list[dict[str, Any]]:
    """Logged calls, newest first, as ``call_record`` objects: at most ``limit`` (0: all),
    matching every filter given. ``query`` keeps the calls whose prompt or response holds
    every word of it; ``verbose`` adds the prompt and the response. ``prices``: the table
    costs are worked out with (default: ``usage.default_prices()``). UsageError for an empty
    search or a calls table the database cannot give."""
    table = prices if prices is not None else default_prices()
    prepare_calls(tracker)
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("task_id", task), ("run_id", run), ("role", role), ("round", round_name),
                          ("model", model), ("backend", backend)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if errors:
        where.append("error IS NOT NULL AND error NOT LIKE ?")
        params.append("note: %")
    source, newest = "mesh_calls", "mesh_calls.id DESC"
    if query is not None:
        source, clause, args, newest = search_clause(tracker, query)
        where.append(clause)
        params.extend(args)
    columns = _COLUMNS + (("prompt", "response") if verbose else ())
    sql = (f"SELECT {', '.join('mesh_calls.' + c for c in columns)} FROM {source}"
           + (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY {newest}" + (" LIMIT ?" if limit else ""))
    if limit:
        params.append(limit)
    rows = tracker.db.read(sql, tuple(params))
    return [call_record(dict(row), table) for row in rows]


def get_call(tracker: Tracker, call_id: int, *, prices: PriceTable | Prices | None = None) -> dict[str, Any] | None:
    """One logged call with its prompt and response (a ``call_record``); None when there is none."""
    prepare_calls(tracker)
    rows = tracker.db.read(f"SELECT {', '.join(_COLUMNS + ('prompt', 'response'))} FROM mesh_calls WHERE id = ?",
                           (call_id,))
    return call_record(dict(rows[0]), prices if prices is not None else default_prices()) if rows else None


def search_clause(tracker: Tracker, query: str) -> tuple[str, str, list[Any], str]:
    """What keeps the calls whose prompt or response holds every word of ``query``: the tables
    to read, the WHERE condition and its parameters, and the order that is newest first. On
    SQLite the FTS5 index drives the read, newest match first, so a search for common words
    stops at the calls it shows (``id IN (matches)`` would gather every match first: 5.9 ms
    against 0.1 ms for two words in a fifth of 100,000 calls); elsewhere the calls table with
    ``portable_search_clause``. Every word is quoted, so FTS syntax (``OR``, ``NEAR``, ``*``,
    ``-``) is searched for as text, never run."""
    words = query.split()
    if not words:
        raise UsageError("-q needs at least one word to search for")
    if tracker.db.engine == "sqlite":
        match = " ".join('"' + word.replace('"', '""') + '"' for word in words)
        return ("mesh_calls_fts JOIN mesh_calls ON mesh_calls.id = mesh_calls_fts.rowid", "mesh_calls_fts MATCH ?",
                [match], "mesh_calls_fts.rowid DESC")
    return ("mesh_calls", *portable_search_clause(words), "mesh_calls.id DESC")


def portable_search_clause(words: Sequence[str]) -> tuple[str, list[Any]]:
    """Every word as a case-insensitive (ASCII) substring of the prompt or the response, in
    SQL that SQLite and PostgreSQL both run (no index: a scan of the calls table)."""
    clauses, params = [], []
    for word in words:
        escaped = word.translate(_ASCII_LOWER).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
        clauses.append("(LOWER(COALESCE(prompt, '')) LIKE ? ESCAPE '\\'"
                       " OR LOWER(COALESCE(response, '')) LIKE ? ESCAPE '\\')")
        params += [pattern, pattern]
    return "(" + " AND ".join(clauses) + ")", params


def call_record(row: Mapping[str, Any], prices: PriceTable | Prices) -> dict[str, Any]:
    """One calls-table row as ``mesh logs --json`` prints it: ``usage`` as logged, ``cost``
    worked out now (``{"usd", "source", "prices_as_of"}``, see ``orchestrator.ledger.usage``), the
    error (None for an answered call; a backend's remark on one is ``note``), and the prompt
    and response when the row has them."""
    usage = load_usage(row.get("usage"))
    cost = call_cost(usage, row.get("model"), prices)
    error = row.get("error")
    note = None
    if error and not is_failure(error):
        note, error = error[len("note: "):], None
    record = {
        "id": row.get("id"),
        "created_at": row.get("created_at"),
        "run_id": row.get("run_id"),
        "task_id": row.get("task_id"),
        "role": row.get("role"),
        "round": row.get("round"),
        "attempt": row.get("attempt"),
        "model": row.get("model"),
        "backend": row.get("backend"),
        "usage": usage,
        "cost": {"usd": None if cost.usd is None else round(cost.usd, 6), "source": cost.source,
                 "prices_as_of": prices.as_of if cost.source == "prices" else None},
        "duration_s": row.get("duration_s"),
        "error": error,
        "note": note,
    }
    for name in ("prompt", "response"):
        if name in row:
            record[name] = row[name]
    return record


def render_calls(records: Sequence[Mapping[str, Any]], *, prices_as_of: str, verbose: bool = False,
                 width: int = 100, color: bool = False) -> str:
    """``list_calls``'s records as text: a table, or with ``verbose`` each call with its prompt
    and response. Costs are titled with the price table's date."""
    if not records:
        return "no calls match"
    dated = f"USD at prices as of {prices_as_of}"
    if verbose:
        return "\n\n".join(_verbose(record, dated) for record in records)
    rows = []
    for r in records:
        usage = r["usage"]
        # The error's kind only (no_response, timeout...): -v and --json give its detail.
        rows.append(((str(r["id"]), clip((r["created_at"] or "")[:16].replace("T", " "), 16), clip(r["task_id"], 24),
                      clip(r["role"], 12), clip(f"{r['round']}#{r['attempt']}", 18), clip(r["model"] or "-", 24),
                      f"{_tokens(usage, 'input_tokens')}/{_tokens(usage, 'output_tokens')}", money(r["cost"]["usd"]),
                      f"{r['duration_s'] or 0:.1f}", clip((r["error"] or "").split(":", 1)[0], 16)),
                     bool(r["error"])))
    # Short columns never fold; the task and the model do on a narrow terminal.
    return plain_table(f"{len(records)} call(s), newest first; {dated}", _TABLE_COLUMNS, rows,
                       right=("id", "in/out", "cost", "s"), fold=("task", "model"), width=width, color=color)


def _tokens(usage: Mapping[str, Any], name: str) -> str:
    value = usage.get(name)
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "0"


def _verbose(r: Mapping[str, Any], dated: str) -> str:
    usage = r["usage"]
    cost = r["cost"]
    cost_text = money(cost["usd"]) + f" ({_SOURCES.get(cost['source'], dated)})"
    lines = [
        f"#{r['id']}  {printable(r['created_at'] or '', one_line=True)}  task {clip(r['task_id'], 80)}"
        f"  run {clip(r['run_id'], 80)}",
        f"{clip(r['role'], 40)}, {clip(r['round'], 40)} attempt {r['attempt']}; model {clip(r['model'] or '-', 80)}"
        f" ({clip(r['backend'], 40)}); {r['duration_s'] or 0:.2f}s",
        f"tokens: {_tokens(usage, 'input_tokens')} in, {_tokens(usage, 'output_tokens')} out,"
        f" {_tokens(usage, 'cache_read_tokens')} cache read, {_tokens(usage, 'cache_write_tokens')} cache write;"
        f" cost {cost_text}",
    ]
    if r["error"]:
        lines.append(f"error: {clip(r['error'], 2000)}")
    if r["note"]:
        lines.append(f"note: {clip(r['note'], 2000)}")
    for name in ("prompt", "response"):
        if name in r:
            body = r[name]
            lines.append(f"--- {name} ---")
            lines.append(printable(body) if body is not None else "(none)")
    return "\n".join(lines)
