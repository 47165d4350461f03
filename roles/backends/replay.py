"""The ``replay`` backend: scripted answers, for tests and the demo.

A script is a JSON object mapping each role name to the list of its responses, consumed
in order, one per call to that role. A response is either a string (the raw model text)
or an object with these keys:

- ``text``: the raw model text;
- ``text_json``: any JSON value, sent as its ``json.dumps`` text; a convenience so a
  script can write an envelope or artifact as an object instead of an escaped string
  (give ``text`` or ``text_json``, not both);
- ``error``: ``no_response`` or ``timeout`` (also ``refusal`` or ``max_tokens``, to
  exercise the handling of the API backend's errors);
- ``delay_s``: seconds to sleep before answering;
- ``round``: the round this response is meant for; a call for another round raises
  ``ReplayMismatch``, so a script that drifts out of step fails loudly.

An object needs ``text``, ``text_json`` or ``error``; any other key is an error. A role
whose list is used up (or that the script does not name) gets ``no_response``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..definitions import ROUNDS
from .base import ERROR_KINDS, Backend, BackendError, WorkerRequest, WorkerResponse

__all__ = ["ReplayBackend", "ReplayMismatch"]

_RESPONSE_KEYS = ("text", "text_json", "error", "delay_s", "round")


class ReplayMismatch(BackendError):
    """A scripted response was meant for another round than the one being called."""

    def __init__(self, role: str, expected: str, got: str, index: int):
        super().__init__(
            f"replay script out of step: response {index} of role {role!r} is for round "
            f"{expected!r}, but the call is for round {got!r}"
        )
        self.role = role
        self.expected = expected
        self.got = got
        self.index = index


@dataclass(frozen=True)
class _Response:
    text: str | None
    error: str | None
    delay_s: float
    round: str | None


class ReplayBackend(Backend):
    """Answer each role from its scripted list, in order; thread-safe per role."""

    name = "replay"

    def __init__(self, script: Path | str | Mapping[str, Any]):
        if isinstance(script, (str, os.PathLike)):
            data: Any = _read_script(Path(script))
            source = f"replay script {script}"
        else:
            data = script
            source = "replay script"
        self._responses = _validate_script(data, source)
        self._next_index = {role: 0 for role in self._responses}
        # One lock per role: concurrent critics and voters are different roles and must
        # not wait for each other, while two calls to one role must take distinct answers.
        self._locks = {role: threading.Lock() for role in self._responses}

    def call(self, request: WorkerRequest) -> WorkerResponse:
        """Return the role's next scripted response (``no_response`` once the list is used up)."""
        started = time.monotonic()
        lock = self._locks.get(request.role)
        if lock is None:
            return self._exhausted(request.role, started, "names no responses for")
        with lock:
            index = self._next_index[request.role]
            responses = self._responses[request.role]
            if index >= len(responses):
                return self._exhausted(request.role, started, "has no responses left for")
            self._next_index[request.role] = index + 1
        response = responses[index]
        if response.round is not None and response.round != request.round:
            raise ReplayMismatch(request.role, response.round, request.round, index)
        if response.delay_s:
            time.sleep(response.delay_s)
        return WorkerResponse(
            text=response.text,
            error=response.error,
            model="replay",
            duration_s=time.monotonic() - started,
        )

    def remaining(self) -> dict[str, int]:
        """How many scripted responses each role has left."""
        counts = {}
        for role, lock in self._locks.items():
            with lock:
                counts[role] = len(self._responses[role]) - self._next_index[role]
        return counts

    def _exhausted(self, role: str, started: float, what: str) -> WorkerResponse:
        return WorkerResponse(
            text=None,
            error="no_response",
            model="replay",
            duration_s=time.monotonic() - started,
            detail=f"the replay script {what} role {role!r}",
        )


def _read_script(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BackendError(f"cannot read replay script {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BackendError(f"replay script {path} is not UTF-8 text") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BackendError(f"replay script {path} is not valid JSON: {exc}") from None


def _validate_script(data: Any, source: str) -> dict[str, list[_Response]]:
    if not isinstance(data, Mapping):
        raise BackendError(f"{source} must be a JSON object mapping role names to lists of responses")
    script: dict[str, list[_Response]] = {}
    for role, responses in data.items():
        if not isinstance(role, str) or not role:
            raise BackendError(f"{source}: role names must be non-empty strings, got {role!r}")
        if isinstance(responses, (str, bytes)) or not isinstance(responses, Sequence):
            raise BackendError(f"{source}: the responses of role {role!r} must be a list")
        script[role] = [
            _validate_response(response, f"{source}: {role}[{index}]")
            for index, response in enumerate(responses)
        ]
    return script


def _validate_response(response: Any, where: str) -> _Response:
    if isinstance(response, str):
        return _Response(text=response, error=None, delay_s=0.0, round=None)
    if not isinstance(response, Mapping):
        raise BackendError(f"{where} must be a string or an object, got {type(response).__name__}")
    unknown = sorted(str(key) for key in response if key not in _RESPONSE_KEYS)
    if unknown:
        raise BackendError(f"{where} has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_RESPONSE_KEYS)}")
    if "text" in response and "text_json" in response:
        raise BackendError(f"{where} gives both text and text_json; give one")
    if not any(key in response for key in ("text", "text_json", "error")):
        raise BackendError(f"{where} needs text, text_json or error")

    text = response.get("text")
    if text is not None and not isinstance(text, str):
        raise BackendError(f"{where}: text must be a string (use text_json for a JSON value)")
    if "text_json" in response:
        try:
            text = json.dumps(response["text_json"], ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise BackendError(f"{where}: text_json is not serialisable as JSON: {exc}") from None

    error = response.get("error")
    if error is not None and error not in ERROR_KINDS:
        raise BackendError(f"{where}: error must be one of {', '.join(ERROR_KINDS)}, got {error!r}")

    delay = response.get("delay_s", 0)
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay < 0:
        raise BackendError(f"{where}: delay_s must be a non-negative number of seconds, got {delay!r}")

    round_name = response.get("round")
    if round_name is not None and round_name not in ROUNDS:
        raise BackendError(f"{where}: round must be one of {', '.join(ROUNDS)}, got {round_name!r}")
    return _Response(text=text, error=error, delay_s=float(delay), round=round_name)
