"""Batch mode of the ``anthropic`` backend: the calls made at the same time go out as one
Message Batch (the Messages API's asynchronous twin, at half the price).

Holds ``BatchCollector``, which gathers the requests of concurrent threads (the engine asks
a round's critics or voters at once, each in its own thread) during a short window and
hands each thread its own result, and ``MessageBatches``, which sends one gathered group
through the official SDK (``client.messages.batches``: create, retrieve until ``ended``,
results by ``custom_id``, cancel) and turns each request's result into what a plain
request gives: the SDK's message, or a failed ``WorkerResponse`` (``errored`` is
``no_response`` with the error's detail, ``expired`` and a batch past ``batch_timeout_s``
are ``timeout``, ``canceled`` is ``no_response``). A batch still running when the backend
is closed is cancelled. ``BATCH_PRICE_FACTOR`` is the discount the backend prices with.

With a journal (``batch_journal.BatchJournal``), each batch's requests are noted when it is
created, and a request that an earlier process sent in a batch it never read (killed while the
batch ran) takes that batch's answer: a resumed run pays no request twice.

May import: the standard library and ``roles.backends`` (the SDK client comes in as an
argument, so nothing here loads the SDK).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .base import BackendError, WorkerResponse
from .batch_journal import BatchJournal, Entry, fingerprint

__all__ = ["BATCH_PRICE_FACTOR", "BatchCollector", "MessageBatches"]

# Message Batches cost half the Messages API's price, for every kind of token (the prompt
# cache's multipliers apply on top of the batch price).
BATCH_PRICE_FACTOR = 0.5

# How long close() waits for a batch being created, to cancel it once it has an id.
_CLOSE_WAIT_S = 10.0

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Group(Generic[Item, Result]):
    """The requests gathered for one batch, and their results once it ended."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.results: list[Result] = []
        self.error: BaseException | None = None
        self.done = threading.Event()


class BatchCollector(Generic[Item, Result]):
    """Gathers the items submitted from several threads into groups sent together.

    The first item of a group opens it; its thread waits ``window_s`` for the others, then
    sends the group with ``send`` (one result per item, in order) and every thread of the
    group gets its own result, or the exception ``send`` raised. An item submitted while
    a group is being sent opens the next group.
    """

    def __init__(self, send: Callable[[list[Item]], Sequence[Result]], window_s: float,
                 closed: threading.Event | None = None):
        self._send = send
        self._window_s = window_s
        self._closed = closed or threading.Event()
        self._lock = threading.Lock()
        self._open: _Group[Item, Result] | None = None

    def submit(self, item: Item) -> Result:
        """Send ``item`` with whatever else is submitted within the window; its result."""
        with self._lock:
            group = self._open
            leader = group is None
            if group is None:
                group = self._open = _Group()
            slot = len(group.items)
            group.items.append(item)
        if leader:
            self._closed.wait(self._window_s)
            with self._lock:
                self._open = None
            try:
                results = list(self._send(group.items))
                if len(results) != len(group.items):
                    raise RuntimeError(f"a batch of {len(group.items)} gave {len(results)} results")
                group.results = results
            except BaseException as exc:  # every thread of the group raises it, the sender too
                group.error = exc
            finally:
                group.done.set()
        group.done.wait()
        if group.error is not None:
            raise group.error
        return group.results[slot]


class MessageBatches:
    """Sends groups of Messages API requests as Message Batches through the SDK client.

    ``guarded(fn, what)`` calls the SDK and turns an API error into a failed
    ``WorkerResponse`` (or raises ``BackendError`` for what a user must fix), as plain
    requests do; ``failed(kind, detail)`` makes a failed response. Each request's result
    is the SDK's ``Message`` or such a failure.
    """

    def __init__(self, client: Any, *, poll_s: float, timeout_s: float, window_s: float,
                 guarded: Callable[[Callable[[], Any], str], Any],
                 failed: Callable[[str, str], WorkerResponse], journal: BatchJournal | None = None):
        self._client = client
        self._journal = journal
        self._poll_s = poll_s
        self._timeout_s = timeout_s
        self._guarded = guarded
        self._failed = failed
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._created = threading.Condition(self._lock)
        self._creating = 0  # batches sent for creation, not yet answered
        self._running: set[str] = set()
        self.collector: BatchCollector[dict[str, Any], Any] = BatchCollector(self.send, window_s, self._closed)

    def submit(self, params: dict[str, Any]) -> Any:
        """One request's ``messages.create`` parameters in, its message or failure out."""
        return self.collector.submit(params)

    def send(self, requests: list[dict[str, Any]]) -> list[Any]:
        """One batch of ``requests``: created, waited for, its results matched by custom_id. With a
        journal, a request an earlier process sent in a batch it never read takes that answer."""
        models = ", ".join(sorted({str(params.get("model")) for params in requests}))
        if self._closed.is_set():
            return self._all_failed(len(requests), "no_response", "the backend was closed before the batch was sent")
        keys = [fingerprint(str(self._client.base_url), params) for params in requests] if self._journal else []
        results: list[Any] = [None] * len(requests)
        if self._journal is not None:
            earlier: dict[str, dict[int, Entry]] = {}
            for index, key in enumerate(keys):
                if (entry := self._journal.pending(key)) is not None:
                    earlier.setdefault(entry.batch, {})[index] = entry
            for batch_id, entries in earlier.items():
                for index, message in self._earlier(batch_id, entries, models).items():
                    results[index] = message
        fresh = [index for index, result in enumerate(results) if result is None]
        if fresh:
            answers = self._send_new([requests[i] for i in fresh], [keys[i] for i in fresh] if keys else [], models)
            for index, answer in zip(fresh, answers):
                results[index] = answer
        return results

    def _earlier(self, batch_id: str, entries: dict[int, Entry], models: str) -> dict[int, Any]:
        """The succeeded answers of an earlier process's batch ``batch_id`` (waited for while it
        runs), by request index; nothing when the batch is gone or its look fails."""
        assert self._journal is not None
        try:
            batch = self._guarded(lambda: self._client.messages.batches.retrieve(batch_id), models)
        except BackendError:  # 404: the API knows no such batch (deleted, or of another account)
            batch = None
        if isinstance(batch, WorkerResponse):
            return {}  # the API did not answer: the entries may serve a later look
        if getattr(batch, "id", None) != batch_id:
            self._journal.used(list(entries.values()))  # gone: not looked for again
            return {}
        with self._lock:
            self._running.add(batch_id)  # close() cancels it like one of ours
        ended = self._wait(batch, models)
        if isinstance(ended, WorkerResponse):
            if self._take(batch_id):
                self._cancel(batch_id)
            return {}
        self._take(batch_id)
        lines = self._guarded(lambda: {line.custom_id: line.result
                                       for line in self._client.messages.batches.results(batch_id)}, models)
        if isinstance(lines, WorkerResponse):
            return {}
        taken = {index: lines[entry.custom_id].message for index, entry in entries.items()
                 if getattr(lines.get(entry.custom_id), "type", None) == "succeeded"}
        self._journal.used(list(entries.values()))  # taken now, or an answer none can take (errored)
        return taken

    def _send_new(self, requests: list[dict[str, Any]], keys: list[str], models: str) -> list[Any]:
        with self._lock:
            self._creating += 1
        batch = None
        try:
            batch = self._guarded(lambda: self._client.messages.batches.create(requests=[
                {"custom_id": f"r{index}", "params": params} for index, params in enumerate(requests)]), models)
        finally:
            # Until it ended, the batch is close()'s to cancel: interrupted while it runs
            # (Ctrl-C in the thread that waits), it stays in the set.
            with self._lock:
                self._creating -= 1
                if batch is not None and not isinstance(batch, WorkerResponse):
                    self._running.add(batch.id)
                self._created.notify_all()
        if isinstance(batch, WorkerResponse):
            return self._copies(batch, len(requests), "the batch was not created: ")
        if self._journal is not None:
            self._journal.sent(batch.id, keys)
        entries = [Entry(key, batch.id, f"r{index}", 0.0) for index, key in enumerate(keys)]
        ended = self._wait(batch, models)
        if isinstance(ended, WorkerResponse):
            if self._take(batch.id):
                self._cancel(batch.id)
            self._used(entries)
            return self._copies(ended, len(requests), f"batch {batch.id}: ")
        self._take(batch.id)
        results = self._guarded(lambda: {line.custom_id: line.result
                                         for line in self._client.messages.batches.results(batch.id)}, models)
        if isinstance(results, WorkerResponse):
            return self._copies(results, len(requests), f"batch {batch.id}, reading its results: ")
        self._used(entries)
        return [self._outcome(results.get(f"r{index}"), batch.id) for index in range(len(requests))]

    def _used(self, entries: list[Entry]) -> None:
        if self._journal is not None and entries:
            self._journal.used(entries)

    def _wait(self, batch: Any, models: str) -> Any:
        """The batch once ended, or a failure: the backend closed, the wait too long, a look failed."""
        deadline = time.monotonic() + self._timeout_s
        while getattr(batch, "processing_status", None) != "ended":
            left = deadline - time.monotonic()
            if left <= 0:
                return self._failed("timeout", f"not ended within batch_timeout_s={self._timeout_s:g}s; cancelled")
            if self._closed.wait(min(self._poll_s, left)):
                return self._failed("no_response", "the backend was closed while the batch ran; cancelled")
            batch_id = batch.id
            batch = self._guarded(lambda: self._client.messages.batches.retrieve(batch_id), models)
            if isinstance(batch, WorkerResponse):
                return batch
        return batch

    def _outcome(self, result: Any, batch_id: str) -> Any:
        """One request's result as a plain request would give it."""
        kind = getattr(result, "type", None)
        if kind == "succeeded":
            return result.message
        if kind == "errored":
            error = getattr(getattr(result, "error", None), "error", None)
            return self._failed("no_response", f"batch {batch_id}: the request errored:"
                                               f" {getattr(error, 'type', 'error')}: {getattr(error, 'message', '')}")
        if kind == "expired":
            return self._failed("timeout", f"batch {batch_id}: the batch expired before the request ran")
        if kind == "canceled":
            return self._failed("no_response", f"batch {batch_id}: the request was canceled")
        return self._failed("no_response", f"batch {batch_id}: no result for the request")

    def _copies(self, failure: WorkerResponse, count: int, prefix: str) -> list[WorkerResponse]:
        """One failure per request (each thread adds its own usage and time to its copy)."""
        return [dataclasses.replace(failure, detail=prefix + (failure.detail or "")) for _ in range(count)]

    def _all_failed(self, count: int, kind: str, detail: str) -> list[WorkerResponse]:
        return [self._failed(kind, detail) for _ in range(count)]

    def _take(self, batch_id: str) -> bool:
        """Whether the batch was still running (no one else is to cancel it now)."""
        with self._lock:
            running = batch_id in self._running
            self._running.discard(batch_id)
        return running

    def _cancel(self, batch_id: str) -> None:
        """Ask the API to cancel a batch; best effort (its results are not waited for)."""
        try:
            self._client.messages.batches.cancel(batch_id)
        except Exception:  # noqa: BLE001 - a failed cancel leaves a batch that expires on its own
            pass

    def close(self) -> None:
        """Stop waiting and cancel every batch still running (a batch being created is
        waited for a little, so that it is cancelled too); idempotent."""
        self._closed.set()
        with self._lock:
            self._created.wait_for(lambda: self._creating == 0, timeout=_CLOSE_WAIT_S)
            running = sorted(self._running)
            self._running.clear()
        for batch_id in running:
            self._cancel(batch_id)
