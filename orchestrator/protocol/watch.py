"""What a run shows while it happens, beyond its checkpoint lines.

A checkpoint line is written once a round is over. Between two of them a run can spend
minutes: a worker that crashed and is asked again, a hung one that runs into
``worker_timeout_s``, the switch to the 3-role fallback. Those used to be visible only
afterwards (``mesh logs --errors -v``); ``RunWatch`` prints them as they happen, through
the run's echo (stderr lines, the live view's lines above its table):

- each failed call, with the worker's own error (``worker exited with status 1: ...``), its
  role, round and attempt, and what happens next;
- the fallback switch, with its reason;
- a line each ``every_s`` seconds while a call is still outstanding;
- the output tail of each failing validation command, under the proof's line.

Listeners (the live view) also get ``call_started`` and ``call_finished`` events, so a table
can show how long each outstanding call has been waiting. Every line quotes worker or model
text: it is scrubbed and made printable on one line here, whatever the echo does.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from redact import scrub
from redact.controls import strip_terminal

from orchestrator.protocol.proof import output_tail
from roles.validation_text import failing_tests, failure_lines, lost_tests, verdict_notes
from orchestrator.safe_text import clip

__all__ = ["CallTimer", "RunWatch", "call_error"]

_ERROR_WIDTH = 300
WAIT_LINE_EVERY_S = 60.0


def call_error(response: Any) -> str | None:
    """A worker answer's error as the calls log keeps it: ``no_response: worker exited with
    status 1: ...``; a note for an answer that came with a diagnostic; else None."""
    if response.error is None:
        return f"note: {response.detail}" if response.detail else None
    return f"{response.error}: {response.detail}" if response.detail else response.error


def _safe(text: str, width: int = _ERROR_WIDTH) -> str:
    """Worker text on one printable line: colours and other terminal sequences dropped, the
    rest of what a terminal would act on shown as escapes, secrets scrubbed, clipped."""
    return clip(scrub(" ".join(strip_terminal(str(text)).split())), width)


class CallTimer:
    """The time one call has taken so far (``elapsed``)."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class RunWatch:
    """The run's lines about calls, the fallback and failing validations (see the module).

    ``echo`` is the run's; ``fallback_roles`` name the roles the fallback keeps;
    ``every_s`` is how often an outstanding call is reported (None: never). Thread-safe:
    critics and voters are asked at the same time."""

    def __init__(self, echo: Callable[[str], None], *, fallback_roles: Sequence[str] = (),
                 every_s: float | None = WAIT_LINE_EVERY_S) -> None:
        self.echo = echo
        self.fallback_roles = list(fallback_roles)
        self.every_s = every_s
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._outstanding: dict[int, dict[str, Any]] = {}

    def listen(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """Also send ``call_started`` / ``call_finished`` events (dicts) to ``listener``."""
        self._listeners.append(listener)

    def _tell(self, event: dict[str, Any]) -> None:
        for listener in list(self._listeners):
            listener(dict(event))

    def outstanding(self) -> list[dict[str, Any]]:
        """The calls under way: role, round, attempt and seconds waited so far, oldest first."""
        now = time.monotonic()
        with self._lock:
            calls = sorted(self._outstanding.values(), key=lambda c: c["started"])
        return [{"role": c["role"], "round": c["round"], "attempt": c["attempt"],
                 "waited_s": round(now - c["started"], 1)} for c in calls]

    @contextmanager
    def call(self, role: str, round_name: str, attempt: int) -> Iterator[CallTimer]:
        """Around one worker call: reported as outstanding until it returns."""
        timer = CallTimer()
        call_id = next(self._ids)
        fields = {"call": call_id, "role": role, "round": round_name, "attempt": attempt}
        with self._lock:
            self._outstanding[call_id] = {**fields, "started": timer.started}
        self._tell({"event": "call_started", **fields})
        done = threading.Event()
        ticker = None
        if self.every_s:
            ticker = threading.Thread(target=self._tick, args=(done, timer, role, round_name, attempt), daemon=True,
                                      name=f"mesh-wait-{role}")
            ticker.start()
        try:
            yield timer
        finally:
            done.set()
            with self._lock:
                self._outstanding.pop(call_id, None)
            self._tell({"event": "call_finished", **fields, "elapsed_s": round(timer.elapsed(), 3)})
            if ticker is not None:
                ticker.join()

    def _tick(self, done: threading.Event, timer: CallTimer, role: str, round_name: str, attempt: int) -> None:
        while not done.wait(self.every_s):
            self.echo(f"waiting: {role} ({round_name}, attempt {attempt}) has not answered for"
                      f" {timer.elapsed():.0f}s")

    def failed(self, role: str, round_name: str, attempt: int, error: str, *, then: str) -> None:
        """One failed call: the worker's own error and what the run does next (``then``)."""
        self.echo(f"call failed: {role} ({round_name}, attempt {attempt}): {_safe(error)}; {then}")

    def fallback(self, reason: str) -> None:
        """The switch to the 3-role fallback (the bus calls this when it switches)."""
        roles = f" ({', '.join(self.fallback_roles)})" if self.fallback_roles else ""
        self.echo(f"fallback: switching to the 3-role fallback{roles}: {_safe(reason)}")

    def validation(self, results: Sequence[Mapping[str, Any]]) -> None:
        """Under a proof's line: each failing command's verdict, failing tests and output tail;
        mesh's word on a pass it allowed (a flaky test, a failure the base shares)."""
        for result in results:
            if result.get("passed"):
                for note in verdict_notes(result):
                    self.echo(f"`{_safe(result.get('command') or '', 120)}`: {_safe(note, 400)}")
                continue
            if result.get("rejected"):
                continue
            tail = output_tail(result)
            named = verdict_notes(result) or failing_tests(result) or lost_tests(result) or failure_lines(result)
            self.echo(f"output of `{_safe(result.get('command') or '', 120)}`"
                      + ((" (mesh's verdict, failing tests, then the output's last lines):" if named
                          else f" (last {len(tail)} lines):") if tail else ": (none)"))
            for line in tail:
                self.echo(f"  | {line}")
