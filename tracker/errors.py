"""The tracker's exception hierarchy.

Every error a user can cause carries a stable ``code`` (used in ``--json`` error
objects) and a one-line message; the CLI turns them into clean messages, never
tracebacks.
"""

from __future__ import annotations

__all__ = [
    "TrackerError",
    "NotFoundError",
    "InvalidValueError",
    "ConflictError",
    "CycleError",
    "WorkspaceError",
    "ImportLineError",
    "AlreadyInitializedError",
]


class TrackerError(Exception):
    """Base class of every error the tracker raises on purpose."""

    code = "tracker_error"

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class NotFoundError(TrackerError):
    """An issue, agent or other object does not exist."""

    code = "not_found"


class InvalidValueError(TrackerError):
    """A field value is outside what the model accepts (status, priority, type...)."""

    code = "invalid_value"


class ConflictError(TrackerError):
    """A write was refused because of the current state (claimed, slot held, open blockers)."""

    code = "conflict"


class CycleError(TrackerError):
    """A dependency would close a cycle."""

    code = "cycle"


class WorkspaceError(TrackerError):
    """No workspace, or a database that cannot be opened or is damaged."""

    code = "workspace_unavailable"


class ImportLineError(InvalidValueError):
    """A line of a JSONL import the tracker will not read (too large or nested too deep);
    the whole import is refused."""

    code = "invalid_import_line"

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}; nothing was imported")
        self.line = line


class AlreadyInitializedError(ConflictError):
    """``init`` on a database that already holds a workspace: refused unless forced, as bd
    refuses, since a client running ``bd init`` with an inherited ``BEADS_DB`` would otherwise
    rewrite the prefix of a live workspace. The message is bd v0.50.3's (cmd/bd/init.go)."""

    code = "already_initialized"

    def __init__(self, where: str, prefix: str | None):
        again = f"bd init --force --prefix {prefix}" if prefix else "bd init --force"
        super().__init__(f"Found existing database: {where}\n\nThis workspace is already initialized.\n\n"
                         "To use the existing database:\n  Just run bd commands normally (e.g., bd list)\n\n"
                         f"To set its issue prefix anyway (its issues keep their ids):\n  {again}\n\nAborting.")
