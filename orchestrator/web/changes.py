"""Waking the pages' streams when the tracker changed.

One thread per server watches the tracker (``tracker.changes.watch_changes``: SQLite's change
counter, PostgreSQL's ``LISTEN``) and bumps a generation number in the event loop; every open
stream waits on it and, woken, reads what is new. However many pages are open, the tracker is
watched once, and a stream reads the tracker only after it changed (or after a quiet while, to
send a keep-alive).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tracker.changes import watch_changes

__all__ = ["ChangeFeed"]


class ChangeFeed:
    """The tracker's changes as a generation number streams can wait on."""

    def __init__(self, target: Path | str) -> None:
        self.target = target
        self.generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None

    def start(self) -> None:
        """Start watching (call from the server's event loop)."""
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._thread = threading.Thread(target=watch_changes, args=(self.target, self._notify, self._stop),
                                        name="mesh-serve-changes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; streams still waiting time out as usual."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _notify(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._bump)

    def _bump(self) -> None:
        self.generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        if changed is not None:
            changed.set()

    async def wait(self, seen: int, timeout: float) -> int:
        """The generation after ``seen``: at once when it moved on already, else when the tracker
        next changes, or ``seen`` again after ``timeout`` seconds of quiet."""
        if self.generation != seen or self._changed is None:
            return self.generation
        changed = self._changed
        try:
            await asyncio.wait_for(changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self.generation
