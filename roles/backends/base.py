"""The worker backend interface: a request (role, round, prompt) in, raw text out.

Backends return text, never artifacts: parsing belongs to ``roles.parsing``, and only the
orchestrator acts on what a worker says. The orchestrator calls one backend from several
threads at once (critics of a round, votes of a round), so every backend is thread-safe.
"""

from __future__ import annotations

import abc
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..usage import Usage

if TYPE_CHECKING:  # a request's types only: importing a backend does not load pydantic and jinja2
    from pydantic import BaseModel

    from ..prompts import Prompt

__all__ = [
    "ERROR_KINDS",
    "Usage",
    "WorkerRequest",
    "WorkerResponse",
    "BackendError",
    "Backend",
    "BACKEND_NAMES",
    "get_backend",
]

ERROR_KINDS = ("no_response", "timeout", "refusal", "max_tokens")


@dataclass
class WorkerRequest:
    """One call: which role answers which round of which task, with what prompt."""

    role: str
    round: str
    task_id: str
    run_id: str
    attempt: int
    prompt: Prompt
    schema: type[BaseModel] | None = None  # the round's artifact schema
    strict: bool = False
    worktree: Path | None = None  # read-only context root for tool-using backends


@dataclass
class WorkerResponse:
    """What a backend got back: the raw text, or an error kind from ``ERROR_KINDS``.

    ``detail`` carries a human-readable diagnostic for the calls log (a worker's exit
    status and stderr tail, an API error message); it is never shown to a model.
    """

    text: str | None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    duration_s: float = 0.0
    detail: str | None = None

    def __post_init__(self) -> None:
        if self.error is not None and self.error not in ERROR_KINDS:
            raise ValueError(f"unknown worker error {self.error!r}; expected one of {', '.join(ERROR_KINDS)}")


class BackendError(Exception):
    """Configuration/script errors a user must fix (bad script file, missing key...)."""


class Backend(abc.ABC):
    """A way to get a role's answer. Subclasses set ``name`` and implement ``call``."""

    name: str

    @abc.abstractmethod
    def call(self, request: WorkerRequest) -> WorkerResponse:
        """Answer one request; failures a run can recover from come back as ``error``."""

    def worst_case(self, request: WorkerRequest) -> Usage:
        """An upper bound of one call's usage, for budgets; text backends cost nothing."""
        return Usage()

    def close(self) -> None:
        """Release what the backend holds (connections, processes); idempotent."""


BACKEND_NAMES = ("replay", "command", "anthropic", "llm")

# Imported on demand so that choosing one backend never imports another's dependencies
# (the anthropic SDK above all: `mesh --help` must stay cheap).
_BACKEND_CLASSES = {
    "replay": ("roles.backends.replay", "ReplayBackend"),
    "command": ("roles.backends.command", "CommandBackend"),
    "anthropic": ("roles.backends.anthropic", "AnthropicBackend"),
    "llm": ("roles.backends.llm_backend", "LlmBackend"),
}


def get_backend(name: str, **options: Any) -> Backend:
    """Build the backend called ``name`` with ``options``.

    ``replay`` takes ``script`` (a path or a mapping), ``command`` takes ``worker_cmd``,
    ``timeout_s``, ``env_names`` and ``launcher``, ``anthropic`` and ``llm`` take the options
    of their classes. Options whose value is None count as not given, so a CLI can pass all
    of its options through. Raises BackendError for an unknown name, an option the backend
    does not take, or a backend whose module cannot be imported.
    """
    try:
        module_name, class_name = _BACKEND_CLASSES[name]
    except KeyError:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}") from None
    try:
        backend_class = getattr(importlib.import_module(module_name), class_name)
    except ImportError as exc:
        raise BackendError(f"the {name} backend is unavailable: {exc}") from exc
    given = {key: value for key, value in options.items() if value is not None}
    try:
        inspect.signature(backend_class).bind(**given)
    except TypeError as exc:
        raise BackendError(f"bad options for the {name} backend: {exc}") from None
    return backend_class(**given)
