"""A fake Anthropic Messages API on 127.0.0.1, for testing the ``anthropic`` backend end to end.

A real threaded HTTP server (``http.server.ThreadingHTTPServer`` on port 0): the official SDK
talks to it through ``ANTHROPIC_BASE_URL`` exactly as it would to the real API, so its
retries, timeouts, headers and error classes are all exercised for real, not patched.

Replies are scripted. ``FakeAnthropic(replies)`` serves a list of ``Reply`` objects in
order; ``FakeAnthropic(responder)`` asks a callable for each request instead
(``RoleScript`` routes by the role and round named in the prompt, so a whole ``mesh run``
can be scripted like a replay script). Every request is recorded: path, headers and
parsed body.

Token usage of a successful message is counted the same way every time, unless a reply
fixes it: ``ceil(chars / 4)`` of the text sent, with a simulated prompt cache keyed by the
exact prefix up to each ``cache_control`` breakpoint (tools, then system, then messages).
A prefix seen before is a cache read, a new one a cache write, the rest plain input.

A request with ``"stream": true`` (Claude Code sends them) gets a successful message as the
API's server-sent events (``message_start``, one ``content_block_*`` trio per block,
``message_delta``, ``message_stop``); errors stay plain JSON, as the real API sends them.

The Message Batches endpoints are served too: ``POST /v1/messages/batches`` records a
``FakeBatch`` (``batches``) and answers ``in_progress``; ``GET .../batches/{id}`` ends the
batch after ``batch_polls`` looks that still say ``in_progress`` (0: the first look ends it);
``GET .../results`` is the JSONL of its results and ``POST .../cancel`` cancels it. Each
request of a batch is answered when the batch ends, by the same replies or responder as a
plain message and with the same usage counting, so a script serves a batched run exactly
like an unbatched one: a 200 message becomes ``succeeded``, an error reply ``errored`` (its
error body inside), and ``batch_result("expired")`` / ``("canceled")`` those results.
``batch_create_errors`` answers the next batch creations with errors instead.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeAnthropic",
    "Recorded",
    "Reply",
    "RoleScript",
    "FakeBatch",
    "api_error",
    "batch_result",
    "count_tokens",
    "hang",
    "malformed",
    "message",
    "segments",
    "serving",
    "sse_events",
    "tool_use",
]

_MODEL_DEFAULT = "claude-test"


def count_tokens(text: str) -> int:
    """The fake's token count: four characters a token, rounded up."""
    return (len(text) + 3) // 4


@dataclass
class Reply:
    """One scripted HTTP answer. ``body`` is JSON-encoded unless it is bytes already.

    ``usage`` left None on a message is filled in by the server's counting; ``delay_s``
    sleeps before answering (a hang, when longer than the client's timeout).
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    usage: dict[str, int] | None = None
    # In a batch: "expired" or "canceled" makes that the request's result.
    batch_result: str | None = None


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes
    usage: dict[str, int] | None = None  # what the fake answered, for a successful message

    @property
    def system_text(self) -> str:
        """The system prompt's text, blocks joined."""
        system = (self.body or {}).get("system") or []
        if isinstance(system, str):
            return system
        return "".join(block.get("text", "") for block in system)

    @property
    def first_user_text(self) -> str:
        """The text of the first user message (the role part of a mesh prompt)."""
        for msg in (self.body or {}).get("messages", []):
            if msg.get("role") == "user":
                content = msg.get("content")
                if isinstance(content, str):
                    return content
                return "".join(b.get("text", "") for b in content if b.get("type") == "text")
        return ""

    @property
    def role(self) -> str | None:
        """The mesh role named in the prompt (``# Your role: X``)."""
        found = re.search(r"^# Your role: (\S+)", self.first_user_text + "\n" + self.system_text, re.M)
        return found.group(1) if found else None

    @property
    def round(self) -> str | None:
        """The mesh round named in the prompt (``# Round: X``)."""
        found = re.search(r"^# Round: ([\w-]+)", self.system_text + "\n" + self.first_user_text, re.M)
        return found.group(1) if found else None

    @property
    def is_tool_continuation(self) -> bool:
        """Whether this request carries tool results (a later turn of one call)."""
        messages = (self.body or {}).get("messages", [])
        return len(messages) > 1


def message(text: str, *, stop_reason: str = "end_turn", usage: Mapping[str, int] | None = None,
            model: str | None = None) -> Reply:
    """A successful Messages API answer holding one text block."""
    return Reply(body={"type": "message", "role": "assistant", "model": model,
                       "content": [{"type": "text", "text": text}],
                       "stop_reason": stop_reason, "stop_sequence": None},
                 usage=dict(usage) if usage else None)


def tool_use(name: str, tool_input: Mapping[str, Any], *, tool_id: str = "toolu_01", text: str | None = None,
             more: Sequence[tuple[str, Mapping[str, Any], str]] = ()) -> Reply:
    """An answer asking for one tool call (or several, with ``more`` = [(name, input, id)])."""
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    content.append({"type": "tool_use", "id": tool_id, "name": name, "input": dict(tool_input)})
    for extra_name, extra_input, extra_id in more:
        content.append({"type": "tool_use", "id": extra_id, "name": extra_name, "input": dict(extra_input)})
    return Reply(body={"type": "message", "role": "assistant", "model": None, "content": content,
                       "stop_reason": "tool_use", "stop_sequence": None})


def api_error(status: int, error_type: str, text: str = "error", headers: Mapping[str, str] | None = None) -> Reply:
    """An API error in the real API's shape (``{"type": "error", "error": {...}}``)."""
    return Reply(status=status, body={"type": "error", "error": {"type": error_type, "message": text}},
                 headers=dict(headers or {}))


def malformed() -> Reply:
    """A 200 whose JSON body is cut off mid-object."""
    return Reply(body=b'{"id": "msg_broken", "type": "message", "content": [{"type": "te')


def batch_result(kind: str) -> Reply:
    """A batch request's ``expired`` or ``canceled`` result (a plain request gets a 500)."""
    reply = api_error(500, "api_error", f"{kind} (a batch-only result)", {"x-should-retry": "false"})
    reply.batch_result = kind
    return reply


def hang(seconds: float) -> Reply:
    """An answer that comes only after ``seconds`` (a hang when past the client's timeout)."""
    return Reply(status=500, body={"type": "error", "error": {"type": "api_error", "message": "too late"}},
                 delay_s=seconds)


class RoleScript:
    """A responder that answers each mesh role from its own queue, like a replay script.

    ``script`` maps a role to a list of entries, consumed one per request of that role
    (tool-result turns included). An entry is a ``Reply``, or a replay-style dict
    ``{"round": ..., "text": ...}`` served as a successful message; a dict's round must
    match the round named in the prompt. A mismatch or an exhausted queue answers 500 and
    is recorded in ``problems`` for the test to assert on.
    """

    def __init__(self, script: Mapping[str, Iterable[Reply | Mapping[str, Any]]]):
        self._queues = {role: deque(entries) for role, entries in script.items()}
        self._lock = threading.Lock()
        self.problems: list[str] = []

    def remaining(self) -> dict[str, int]:
        """How many entries each role has left."""
        with self._lock:
            return {role: len(queue) for role, queue in self._queues.items() if queue}

    def __call__(self, request: Recorded) -> Reply:
        role, round_name = request.role, request.round
        with self._lock:
            queue = self._queues.get(role or "")
            entry = queue.popleft() if queue else None
            if entry is None:
                self.problems.append(f"no scripted reply left for role {role!r} (round {round_name!r})")
                return api_error(500, "api_error", "script exhausted", {"x-should-retry": "false"})
        if isinstance(entry, Reply):
            return entry
        expected = entry.get("round")
        if expected and expected != round_name and not request.is_tool_continuation:
            with self._lock:
                self.problems.append(f"role {role}: scripted round {expected!r}, asked {round_name!r}")
            return api_error(500, "api_error", "round mismatch", {"x-should-retry": "false"})
        return message(entry["text"])


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class FakeBatch:
    """One Message Batch the fake received: its requests (``Recorded`` as if each were a
    plain POST to /v1/messages, ``custom_id`` in ``path``'s fragment) and, once it ended,
    the JSONL result of each."""

    id: str
    custom_ids: list[str]
    requests: list[Recorded]
    polls_left: int
    created_at: str = field(default_factory=_now)
    status: str = "in_progress"  # "canceling", "ended"
    canceled: bool = False
    ended_at: str | None = None
    cancel_initiated_at: str | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def size(self) -> int:
        """How many requests the batch held."""
        return len(self.requests)

    @property
    def rounds(self) -> set[str | None]:
        """The mesh rounds of its requests."""
        return {request.round for request in self.requests}

    def body(self, base_url: str) -> dict[str, Any]:
        """The ``message_batch`` object, as the API answers it."""
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        if self.status == "ended":
            for line in self.results:
                counts[line["result"]["type"]] += 1
        else:
            counts["processing"] = len(self.requests)
        return {"id": self.id, "type": "message_batch", "processing_status": self.status,
                "request_counts": counts, "created_at": self.created_at, "ended_at": self.ended_at,
                "expires_at": self.created_at, "archived_at": None,
                "cancel_initiated_at": self.cancel_initiated_at,
                "results_url": f"{base_url}/v1/messages/batches/{self.id}/results" if self.status == "ended" else None}


class FakeAnthropic:
    """The fake server. Use as a context manager; ``url`` is what ANTHROPIC_BASE_URL takes."""

    def __init__(self, replies: Sequence[Reply] | Callable[[Recorded], Reply] = (), *, batch_polls: int = 0,
                 batch_create_errors: Sequence[Reply] = ()):
        if callable(replies):
            self._responder: Callable[[Recorded], Reply] | None = replies
            self._queue: deque[Reply] = deque()
        else:
            self._responder = None
            self._queue = deque(replies)
        self.requests: list[Recorded] = []
        self.batches: list[FakeBatch] = []
        self.batch_polls = batch_polls
        self.batch_create_errors = deque(batch_create_errors)
        self._lock = threading.Lock()
        self._seen_prefixes: set[str] = set()
        self._serial = 0
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        # A short poll interval keeps shutdown (once per test) from costing half a second.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """The base URL of the server."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving; a reply still sleeping is released at once."""
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def push(self, *replies: Reply) -> None:
        """Queue more replies (list mode)."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def message_requests(self) -> list[Recorded]:
        """The recorded POSTs to /v1/messages (the Message Batches endpoints left out)."""
        return [r for r in self.requests if r.path.startswith("/v1/messages")
                and not r.path.startswith("/v1/messages/batches")]

    @property
    def batched_requests(self) -> list[Recorded]:
        """The requests of every batch, in the order the batches were created."""
        return [request for batch in self.batches for request in batch.requests]

    # ------------------------------------------------------------------ serving

    def _next_reply(self, request: Recorded) -> Reply:
        if self._responder is not None:
            return self._responder(request)
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return api_error(500, "api_error", "no scripted reply left", {"x-should-retry": "false"})

    # ------------------------------------------------------------------ message batches

    def batch(self, batch_id: str) -> FakeBatch | None:
        """The batch of that id, or None."""
        with self._lock:
            return next((batch for batch in self.batches if batch.id == batch_id), None)

    def _batch_post(self, record: Recorded) -> Reply:
        """``POST /v1/messages/batches`` (create) and ``POST .../{id}/cancel``."""
        found = re.fullmatch(r"/v1/messages/batches/([\w-]+)/cancel", record.path)
        if found:
            batch = self.batch(found.group(1))
            if batch is None:
                return api_error(404, "not_found_error", "no such batch")
            with batch.lock:
                if batch.status == "in_progress":
                    batch.status, batch.canceled, batch.cancel_initiated_at = "canceling", True, _now()
                return Reply(body=batch.body(self.url))
        if record.path != "/v1/messages/batches":
            return api_error(404, "not_found_error", f"no endpoint {record.path}")
        with self._lock:
            if self.batch_create_errors:
                return self.batch_create_errors.popleft()
        requests = (record.body or {}).get("requests")
        if not isinstance(requests, list) or not requests:
            return api_error(400, "invalid_request_error", "requests: a non-empty list is required")
        with self._lock:
            batch = FakeBatch(id=f"msgbatch_{len(self.batches) + 1:04d}",
                              custom_ids=[entry["custom_id"] for entry in requests],
                              requests=[Recorded(method="POST", path=f"/v1/messages#{entry['custom_id']}",
                                                 headers=record.headers, body=entry["params"],
                                                 raw=json.dumps(entry["params"]).encode())
                                        for entry in requests],
                              polls_left=self.batch_polls)
            self.batches.append(batch)
        return Reply(body=batch.body(self.url))

    def _batch_get(self, path: str) -> tuple[int, bytes, str]:
        """``GET .../batches/{id}`` (a look that may end it) and ``GET .../{id}/results``."""
        found = re.fullmatch(r"/v1/messages/batches/([\w-]+)(/results)?", path)
        batch = self.batch(found.group(1)) if found else None
        if batch is None:
            return 404, json.dumps(api_error(404, "not_found_error", f"no such batch: {path}").body).encode(), \
                "application/json"
        with batch.lock:
            if found.group(2):
                if batch.status != "ended":
                    error = api_error(400, "invalid_request_error", "the batch has not ended")
                    return 400, json.dumps(error.body).encode(), "application/json"
                data = "".join(json.dumps(line) + "\n" for line in batch.results).encode()
                return 200, data, "application/binary"
            if batch.status == "canceling" or (batch.status == "in_progress" and batch.polls_left <= 0):
                self._end(batch)
            elif batch.status == "in_progress":
                batch.polls_left -= 1
            return 200, json.dumps(batch.body(self.url)).encode(), "application/json"

    def _end(self, batch: FakeBatch) -> None:
        """Answer every request of the batch (none when it was canceled) and end it."""
        for custom_id, request in zip(batch.custom_ids, batch.requests):
            result: dict[str, Any]
            if batch.canceled:
                result = {"type": "canceled"}
            else:
                reply = self._next_reply(request)
                if reply.usage:
                    request.usage = reply.usage
                payload = self._complete(request, reply.body)
                if reply.batch_result:
                    result = {"type": reply.batch_result}
                elif reply.status == 200 and isinstance(payload, dict) and payload.get("type") == "message":
                    result = {"type": "succeeded", "message": payload}
                else:
                    error = payload if isinstance(payload, dict) and payload.get("type") == "error" else \
                        api_error(500, "api_error", "malformed answer").body
                    result = {"type": "errored", "error": {**error, "request_id": None}}
            batch.results.append({"custom_id": custom_id, "result": result})
        batch.status, batch.ended_at = "ended", _now()

    def _complete(self, record: Recorded, payload: Any) -> Any:
        """A scripted message with its id, model and usage filled in (usage counted when
        the reply does not fix it); any other payload as it is."""
        if not (isinstance(payload, dict) and payload.get("type") == "message"):
            return payload
        body = record.body or {}
        payload = dict(payload)
        with self._lock:
            self._serial += 1
            payload.setdefault("id", f"msg_{self._serial:04d}")
        payload["model"] = payload.get("model") or body.get("model") or _MODEL_DEFAULT
        text_out = "".join(json.dumps(b) if b.get("type") != "text" else b["text"]
                           for b in payload.get("content") or [])
        payload["usage"] = record.usage or self._usage(body, text_out)
        record.usage = payload["usage"]
        return payload

    def _usage(self, body: Mapping[str, Any], text_out: str) -> dict[str, int]:
        """Count a request's tokens with the simulated prompt cache."""
        parts = segments(body)
        total = sum(count_tokens(text) for text, _ in parts)
        breakpoints = [i for i, (_, marked) in enumerate(parts) if marked]
        cache_read = cache_write = 0
        if breakpoints:
            digests = []
            hasher = hashlib.sha256(str(body.get("model")).encode())
            for i, (text, _) in enumerate(parts):
                hasher.update(text.encode())
                if i in breakpoints:
                    digests.append((i, hasher.copy().hexdigest()))
            with self._lock:
                hit = max((i for i, d in digests if d in self._seen_prefixes), default=-1)
                self._seen_prefixes.update(d for _, d in digests)
            last = breakpoints[-1]
            cache_read = sum(count_tokens(t) for t, _ in parts[: hit + 1])
            cache_write = sum(count_tokens(t) for t, _ in parts[hit + 1 : last + 1])
        return {
            "input_tokens": total - cache_read - cache_write,
            "output_tokens": count_tokens(text_out),
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_write,
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                return

            def _body(self) -> tuple[bytes, Any]:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    return raw, json.loads(raw)
                except ValueError:
                    return raw, None

            def _record(self, method: str, raw: bytes, body: Any) -> Recorded:
                record = Recorded(method=method, path=self.path,
                                  headers={k.lower(): v for k, v in self.headers.items()}, body=body, raw=raw)
                with fake._lock:
                    fake.requests.append(record)
                return record

            def _send(self, status: int, data: bytes, content_type: str = "application/json",
                      headers: Mapping[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                record = self._record("GET", b"", None)
                status, data, content_type = fake._batch_get(record.path)
                self._send(status, data, content_type)

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw, body = self._body()
                record = self._record("POST", raw, body)
                if record.path.startswith("/v1/messages/batches"):
                    reply = fake._batch_post(record)
                    payload = reply.body
                    self._send(reply.status, payload if isinstance(payload, bytes) else json.dumps(payload).encode(),
                               headers=reply.headers)
                    return
                reply = fake._next_reply(record)
                if reply.delay_s and fake._released.wait(reply.delay_s):
                    return
                if reply.usage:
                    record.usage = reply.usage
                payload = fake._complete(record, reply.body)
                streamed = (reply.status == 200 and isinstance(payload, dict) and payload.get("type") == "message"
                            and bool((body or {}).get("stream")))
                if streamed:
                    data = sse_events(payload)
                else:
                    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self._send(reply.status, data, "text/event-stream" if streamed else "application/json",
                           reply.headers)

        return Handler


def serving(monkeypatch: Any, key: str) -> Iterator[FakeAnthropic]:
    """A fixture's body: a fake with ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY set for it."""
    with FakeAnthropic() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", key)
        yield server


def sse_events(message_body: Mapping[str, Any]) -> bytes:
    """A complete message as the Messages API streams it: server-sent events, text in one
    delta per block and tool input as one ``input_json_delta``."""
    usage = dict(message_body.get("usage") or {})
    start = {**message_body, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message_body.get("content") or []):
        if block.get("type") == "tool_use":
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input") or {})}
        else:
            opening = {**block, "text": ""}
            delta = {"type": "text_delta", "text": block.get("text", "")}
        events += [("content_block_start", {"type": "content_block_start", "index": index,
                                            "content_block": opening}),
                   ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": index})]
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": message_body.get("stop_reason"),
                                            "stop_sequence": message_body.get("stop_sequence")},
                                  "usage": {"output_tokens": usage.get("output_tokens", 0)}}),
               ("message_stop", {"type": "message_stop"})]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def segments(body: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """A request's text in cache order (tools, system, messages), with breakpoint marks."""
    out: list[tuple[str, bool]] = []
    for tool in body.get("tools") or []:
        out.append((json.dumps({k: v for k, v in tool.items() if k != "cache_control"}, sort_keys=True),
                    "cache_control" in tool))
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for block in system:
        out.append((block.get("text", ""), "cache_control" in block))
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content:
            if block.get("type") == "text":
                text = block.get("text", "")
            else:
                text = json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)
            out.append((text, "cache_control" in block))
    return out
