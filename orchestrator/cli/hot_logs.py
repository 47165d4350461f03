"""``mesh logs`` answered before click, pydantic, rich and sqlite-utils are imported.

Searching the calls log (``mesh logs -q WORD``) is a question a person or an agent asks again
and again; the full command line spends most of its start importing what it does not need to
answer it. ``answer`` parses exactly ``mesh logs`` with its own options (no option of ``mesh``
itself: the tracker is then the environment's ``MESH_DB``, as the full command line reads it)
and answers with the same functions the full command runs (``ledger_context``,
``ledger.logs.list_calls`` and ``render_calls``), printing what it would print. Anything else
(an unknown option, ``--help``, a value that looks like an option) and any failure (no
tracker, a config or price table that is not plainly valid, an empty search) returns None: the
full command line then does the work again and reports it in its words. So this module
changes how fast an answer comes, never what it is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from tracker.hot_output import option_value

__all__ = ["answer", "ledger_context"]

_FLAGS = {"--errors": "errors", "-v": "verbose", "--verbose": "verbose", "--json": "as_json"}
_VALUES = {"--task": "task", "--run": "run", "--role": "role", "--round": "round_name", "--model": "model",
           "--backend": "backend", "-n": "count", "--count": "count", "-q": "query", "--query": "query",
           "--repo": "repo", "--config": "config_file"}


def _parse(args: Sequence[str]) -> dict | None:
    """The options of a ``mesh logs`` command line (after ``logs``), or None for any other."""
    options: dict = {}
    words = list(args)
    k = 0
    while k < len(words):
        name = words[k].partition("=")[0] if words[k].startswith("--") else words[k]
        if words[k] in _FLAGS:
            options[_FLAGS[name]] = True
        elif name in _VALUES:
            value, k = option_value(words, k)
            if value is None or value.startswith("-"):
                return None
            options[_VALUES[name]] = value
        else:
            return None
        k += 1
    count = options.get("count")
    if count is not None and not (count.isascii() and count.isdigit()):
        return None
    return options


def ledger_context(repo: str | None, config_file: str | None, db: str | None, actor: str | None):
    """The price table and the open tracker of ``mesh logs`` and ``mesh usage``: of the config
    they read only ``[tracker] url`` and ``[prices]`` (a project's other sections are the
    business of the commands that use them). The prices are read as plain data when they
    plainly are (``price_rows``), else validated. Raises ConfigError or TrackerUnavailable."""
    from pathlib import Path

    from orchestrator.ledger.usage import prices_of
    from orchestrator.workspace import config_table, config_text, open_found_tracker

    table, source = config_table(Path(repo) if repo else None, Path(config_file) if config_file else None)
    url = config_text(table, source, "tracker", "url")
    return prices_of(table, source), open_found_tracker(db, actor, url, repo=repo)


def answer(args: Sequence[str]) -> str | None:
    """What ``mesh logs`` with ``args`` (the words after ``logs``) prints on stdout, or None
    when the full command line must answer."""
    options = _parse(args)
    if options is None or sys.stdout is None or (sys.stdout.encoding or "").lower().replace("-", "") != "utf8":
        return None
    from orchestrator.ledger.logs import DEFAULT_LIMIT, list_calls, render_calls

    verbose = options.get("verbose", False)
    count = options.get("count")
    try:
        prices, tracker = ledger_context(options.get("repo"), options.get("config_file"),
                                         os.environ.get("MESH_DB") or None, os.environ.get("MESH_ACTOR") or None)
        with tracker:
            records = list_calls(tracker, prices=prices, task=options.get("task"), run=options.get("run"),
                                 role=options.get("role"), round_name=options.get("round_name"),
                                 model=options.get("model"), backend=options.get("backend"),
                                 errors=options.get("errors", False), query=options.get("query"),
                                 limit=DEFAULT_LIMIT if count is None else int(count), verbose=verbose)
    except Exception:  # every failure is the full command line's to report, in its words
        return None
    if options.get("as_json"):
        from tracker.jsontext import indented

        return indented(records, 2, ensure_ascii=True) + "\n"
    from orchestrator.safe_text import printable, terminal

    width, color = terminal()
    text = render_calls(records, prices_as_of=prices.as_of, verbose=verbose, width=width, color=color)
    # As the full command prints it: colour codes are the table's own (its cells are clipped,
    # hence inert); plain text is made printable whole.
    return (text if color else printable(text)) + "\n"
