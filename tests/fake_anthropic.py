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
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeAnthropic",
    "Recorded",
    "Reply",
    "RoleScript",
    "api_error",
    "count_tokens",
    "hang",
    "malformed",
    "message",
    "segments",
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


class FakeAnthropic:
    """The fake server. Use as a context manager; ``url`` is what ANTHROPIC_BASE_URL takes."""

    def __init__(self, replies: Sequence[Reply] | Callable[[Recorded], Reply] = ()):
        if callable(replies):
            self._responder: Callable[[Recorded], Reply] | None = replies
            self._queue: deque[Reply] = deque()
        else:
            self._responder = None
            self._queue = deque(replies)
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._seen_prefixes: set[str] = set()
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
        """The recorded POSTs to /v1/messages."""
        return [r for r in self.requests if r.path.startswith("/v1/messages")]

    # ------------------------------------------------------------------ serving

    def _next_reply(self, request: Recorded) -> Reply:
        if self._responder is not None:
            return self._responder(request)
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return api_error(500, "api_error", "no scripted reply left", {"x-should-retry": "false"})

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

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                record = Recorded(method="POST", path=self.path,
                                  headers={k.lower(): v for k, v in self.headers.items()}, body=body, raw=raw)
                with fake._lock:
                    fake.requests.append(record)
                reply = fake._next_reply(record)
                if reply.delay_s and fake._released.wait(reply.delay_s):
                    return
                payload = reply.body
                if isinstance(payload, dict) and payload.get("type") == "message":
                    payload = dict(payload)
                    payload.setdefault("id", f"msg_{len(fake.requests):04d}")
                    payload["model"] = payload.get("model") or (body or {}).get("model") or _MODEL_DEFAULT
                    text_out = "".join(json.dumps(b) if b.get("type") != "text" else b["text"]
                                       for b in payload.get("content") or [])
                    payload["usage"] = reply.usage or fake._usage(body or {}, text_out)
                    record.usage = payload["usage"]
                streamed = (reply.status == 200 and isinstance(payload, dict) and payload.get("type") == "message"
                            and bool((body or {}).get("stream")))
                if streamed:
                    data = sse_events(payload)
                else:
                    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "text/event-stream" if streamed else "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

        return Handler


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
