"""The pages' live streams: Server-Sent Events whose ids come from the tracker.

- A task's stream sends each ``[orch:*]`` checkpoint once, as a ``checkpoint`` event whose id is
  its comment's id, with the card's HTML. The page was rendered up to some comment id and asks
  for what came after it; a page that reconnects (a network blip, a restarted server) sends the
  id of the last event it got (``Last-Event-ID``, or ``?last_event_id=`` when the page had to
  open a new stream) and gets exactly the checkpoints after it: comment ids belong to the
  tracker, not to this process, so a restart neither loses nor repeats one. On PostgreSQL two
  transactions may commit their comments out of id order; within one stream every comment
  above the starting id is sent once however late it becomes visible (the stream remembers
  what it sent).
- The board's and the drain view's stream sends a ``changed`` event whose id is the tracker's
  newest change (``tracker.changes.change_seq``); the page then fetches its fragment again.
- After each checkpoint the task stream also sends ``changed`` (without an id, so the resume point
  stays the checkpoint's), for the parts of the page that are redrawn whole (status, costs).

However many pages follow a task, its checkpoints are read and rendered once per change
(``TaskCards``): a card never changes once written, so each is rendered once and kept, for the
tasks followed most recently.

A quiet stream sends a comment line every ``KEEPALIVE_S`` seconds so proxies keep it open and a
closed page is noticed. Data is always one line of JSON (``json.dumps`` escapes newlines), so
model text can never end an event early or forge a field.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool

from tracker.changes import change_seq
from tracker.errors import TrackerError
from tracker.store import Tracker

from orchestrator.web.changes import ChangeFeed
from orchestrator.web.task import new_cards

__all__ = ["KEEPALIVE_S", "TaskCards", "sse", "last_event_id", "task_stream", "change_stream"]

KEEPALIVE_S = 15.0
RETRY_MS = 1000
# How many tasks' rendered cards are kept (the tasks followed most recently).
CACHED_TASKS = 64

Card = tuple[int, str, str, str]  # comment id, run id, kind, the card's HTML


class TaskCards:
    """Each task's rendered checkpoint cards, read from the tracker once per change whatever the
    number of streams that follow the task."""

    def __init__(self, tracker: Tracker, key: bytes | None, render: Callable[[dict[str, Any]], str]) -> None:
        self.tracker, self.key, self.render = tracker, key, render
        self._cards: OrderedDict[str, tuple[int, list[Card]]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    def _read(self, task_id: str, known: list[Card]) -> list[Card]:
        seen = {card[0] for card in known}
        fresh = [(cid, card["run_id"], card["kind"], self.render(card))
                 for cid, card in new_cards(self.tracker, task_id, 0, self.key, seen)]
        return sorted(known + fresh)

    async def get(self, task_id: str, generation: int) -> list[Card]:
        """The task's cards as of the tracker's change ``generation`` (or later)."""
        lock = self._locks.setdefault(task_id, asyncio.Lock())
        async with lock:
            cached = self._cards.get(task_id)
            if cached is not None and cached[0] == generation:
                self._cards.move_to_end(task_id)
                return cached[1]
            cards = await run_in_threadpool(self._read, task_id, cached[1] if cached else [])
            self._cards[task_id] = (generation, cards)
            self._cards.move_to_end(task_id)
            while len(self._cards) > CACHED_TASKS:
                dropped, _ = self._cards.popitem(last=False)
                self._locks.pop(dropped, None)
            return cards


def sse(event: str, data: Any, event_id: int | None = None) -> str:
    """One event: its name, its id (when it has one) and its data as one line of JSON."""
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return head + "data: " + json.dumps(data, ensure_ascii=False) + "\n\n"


def last_event_id(headers: Mapping[str, str], query: Mapping[str, str]) -> int | None:
    """Where a stream resumes: the ``Last-Event-ID`` header (the browser's own reconnection),
    else the ``last_event_id`` parameter (a stream the page opened anew); None when neither is
    a number."""
    for value in (headers.get("last-event-id"), query.get("last_event_id")):
        if value is not None and value.strip().isdigit():
            return int(value.strip())
    return None


async def task_stream(cards: TaskCards, feed: ChangeFeed, task_id: str, after: int) -> AsyncIterator[str]:
    """The task's checkpoints after comment ``after``, as they are written (see the module
    docstring)."""
    yield f"retry: {RETRY_MS}\n\n"
    sent: set[int] = set()
    generation = feed.generation
    while True:
        try:
            fresh = [card for card in await cards.get(task_id, generation) if card[0] > after and card[0] not in sent]
        except TrackerError:
            return  # the tracker went away: the page reconnects and resumes where it was
        for comment_id, run_id, kind, html in fresh:
            sent.add(comment_id)
            yield sse("checkpoint", {"run_id": run_id, "kind": kind, "html": html}, comment_id)
        if fresh:
            yield sse("changed", {"task": task_id})
        seen = generation
        generation = await feed.wait(seen, KEEPALIVE_S)
        if generation == seen:
            yield ": keep-alive\n\n"


async def change_stream(tracker: Tracker, feed: ChangeFeed, after: int | None) -> AsyncIterator[str]:
    """A ``changed`` event each time the tracker changed after change ``after``."""
    yield f"retry: {RETRY_MS}\n\n"
    generation = feed.generation
    while True:
        try:
            seq = await run_in_threadpool(change_seq, tracker)
        except TrackerError:
            return
        if after is None or seq != after:
            yield sse("changed", {"seq": seq}, seq)
            after = seq
        seen = generation
        generation = await feed.wait(seen, KEEPALIVE_S)
        if generation == seen:
            yield ": keep-alive\n\n"
