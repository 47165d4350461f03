"""Learning that a tracker changed, without reading its tables again and again.

A reader that shows the tracker live (``mesh serve``) asks two things: *has anything changed
since I last looked?* and *what is the newest change?*. Every write of the tracker appends to the
``events`` table, so the newest change is ``MAX(events.id)`` (``change_seq``), a number that stays
the same across restarts of the reader. Waiting for the next change depends on the engine
(``watch_changes``):

- SQLite: ``PRAGMA data_version`` on a connection of the watcher's own changes whenever another
  connection commits. Asking it reads one page header, not a table, so it is asked often.
- PostgreSQL: the ``mesh_changes`` channel (``LISTEN``), which the schema's trigger notifies after
  every statement that adds to ``events`` (``tracker.schema``, version 4), when its transaction
  commits. A lost server connection is reopened; a change that may have been missed meanwhile is
  reported as one.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .dialect import is_url
from .schema import CHANGE_CHANNEL

if TYPE_CHECKING:
    from .store import Tracker

__all__ = ["change_seq", "watch_changes"]

# SQLite: how often the change counter is read (one page-header read each time).
SQLITE_PERIOD_S = 0.05
# PostgreSQL: how long one wait for a notification lasts before ``stop`` is looked at again, and
# how long to wait before reconnecting after the server went away.
PG_WAIT_S = 1.0
PG_RECONNECT_S = 1.0


def change_seq(tracker: Tracker) -> int:
    """The id of the newest change (row of ``events``) in the tracker; 0 when it has none."""
    rows = tracker.db.read("SELECT MAX(id) FROM events")
    return int(rows[0][0] or 0) if rows else 0


def watch_changes(target: Path | str, on_change: Callable[[], None], stop: threading.Event,
                  ready: threading.Event | None = None) -> None:
    """Call ``on_change()`` after each committed change of the tracker at ``target`` (a SQLite
    path or a PostgreSQL URL) until ``stop`` is set. Blocks: run it in a thread of its own.
    ``ready`` is set once the watch is in place: a change committed after that is reported (one
    committed before may not be: wait for it when that matters).

    Several commits close together may be reported once; a change is never left unreported.
    """
    if is_url(str(target)):
        _watch_postgres(str(target), on_change, stop, ready)
    else:
        _watch_sqlite(Path(target), on_change, stop, ready)


def _watch_sqlite(path: Path, on_change: Callable[[], None], stop: threading.Event,
                  ready: threading.Event | None = None) -> None:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    try:
        seen = conn.execute("PRAGMA data_version").fetchone()[0]
        if ready is not None:
            ready.set()
        while not stop.wait(SQLITE_PERIOD_S):
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            if version != seen:
                seen = version
                on_change()
    finally:
        conn.close()


def _watch_postgres(url: str, on_change: Callable[[], None], stop: threading.Event,
                    ready: threading.Event | None = None) -> None:
    import psycopg

    first = True
    while not stop.is_set():
        try:
            with psycopg.connect(url, autocommit=True, application_name="mesh-watch", connect_timeout=5) as conn:
                conn.execute(f"LISTEN {CHANGE_CHANNEL}")
                if ready is not None:
                    ready.set()
                if not first:
                    on_change()  # changes made while the connection was down were not notified
                first = False
                while not stop.is_set():
                    if any(True for _ in conn.notifies(timeout=PG_WAIT_S, stop_after=1)):
                        on_change()
        except psycopg.Error:
            first = False
            stop.wait(PG_RECONNECT_S)
