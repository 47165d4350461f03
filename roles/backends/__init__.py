"""Worker backends: ``replay`` (scripted), ``command`` (a program on stdin/stdout) and
``anthropic`` (the Messages API, imported only when chosen through ``get_backend``)."""

from .base import (
    BACKEND_NAMES,
    ERROR_KINDS,
    Backend,
    BackendError,
    Usage,
    WorkerRequest,
    WorkerResponse,
    get_backend,
)
from .command import CommandBackend
from .replay import ReplayBackend, ReplayMismatch

__all__ = [
    "BACKEND_NAMES",
    "ERROR_KINDS",
    "Backend",
    "BackendError",
    "Usage",
    "WorkerRequest",
    "WorkerResponse",
    "get_backend",
    "CommandBackend",
    "ReplayBackend",
    "ReplayMismatch",
]
