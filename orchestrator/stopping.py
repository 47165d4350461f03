"""Stopping a ``mesh run`` at its next checkpoint: the first Ctrl-C (SIGINT) or SIGTERM.

A run killed at any point is resumable, but a kill can land in the middle of a worker call
(paid, not yet recorded) or a landing. Asked to stop, a run instead finishes the step it is
in, writes its checkpoint, and stops right after it: the task stays in progress with its
lease released, and ``mesh resume TASK`` continues from that checkpoint without asking any
worker again. ``mesh mcp``'s ``stop`` tool sends the same SIGINT to a run it started.

The engine prints each checkpoint's line right after writing it (its ``echo``); the stop is
taken there, in the run's own thread, so no engine code knows about it. Once a run has
decided (its run head, landing, close or outcome) it is seconds from its end and is let
finish. A second signal stops the process at once (exit 130), like a crash: resumable too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from orchestrator.views.live import line_kind

__all__ = ["INTERRUPTED_EXIT", "READY_ENV", "RunStopped", "StopRequest", "STOPPABLE", "announce_ready"]

INTERRUPTED_EXIT = 130

# The checkpoints after which a run may stop: every round before the run decides.
STOPPABLE = frozenset({"hydration", "proposal", "critique", "synthesis", "vote", "proof", "review",
                       "review-cycle", "revision-plan", "revision", "choice"})


# A background job (mesh mcp's) is told where to say that its stop handlers are installed: a
# stop sent before then would meet a process still starting (a traceback, not a clean stop).
READY_ENV = "MESH_JOB_READY"


def announce_ready() -> None:
    """Say, when started as a background job, that a stop is now taken as the first Ctrl-C."""
    path = os.environ.get(READY_ENV)
    if path:
        with contextlib.suppress(OSError):
            open(path, "a").close()


class RunStopped(BaseException):
    """The run stopped after a checkpoint because it was asked to (resumable with ``mesh resume``).

    A BaseException, like KeyboardInterrupt: no ``except Exception`` on its way out turns a
    requested stop into a typed failure; ``finally`` blocks still release the lease."""

    def __init__(self, task_id: str | None, kind: str):
        self.task_id, self.kind = task_id, kind
        where = f" of {task_id}" if task_id else ""
        resume = f"mesh resume {task_id}" if task_id else "mesh resume TASK"
        super().__init__(f"stopped after the [orch:{kind}] checkpoint{where}, as asked; continue with: {resume}")


class StopRequest:
    """One run's stop switch: ``armed`` arms the signals, ``echo`` and ``hook`` wrap the
    runner's progress callbacks so the run stops after the next stoppable checkpoint."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.task_id: str | None = None

    def hook(self, engine: Any) -> None:
        """The runner's engine hook: remember the task, for the message."""
        self.task_id = engine.task["id"]

    def echo(self, inner: Callable[[str], None]) -> Callable[[str], None]:
        """``inner`` that, once a stop is requested, raises ``RunStopped`` after a stoppable
        checkpoint's line (only in the main thread: the one the run's checkpoints are written in)."""

        def echo(line: str) -> None:
            inner(line)
            kind = line_kind(line)
            if (self.requested.is_set() and kind in STOPPABLE
                    and threading.current_thread() is threading.main_thread()):
                raise RunStopped(self.task_id, kind)

        return echo

    @contextlib.contextmanager
    def armed(self, say: Callable[[str], None]) -> Iterator[None]:
        """While inside: SIGINT or SIGTERM once stops after the next checkpoint; twice, exit 130 at
        once. The handlers in place before are put back on the way out."""
        count = {"n": 0}

        def handler(signum: int, frame: Any) -> None:
            count["n"] += 1
            if count["n"] == 1:
                self.requested.set()
                say("mesh: stopping after the next checkpoint (the run stays resumable: mesh resume TASK)."
                    " Press Ctrl-C again to stop now.")
                return
            say("mesh: stopping now. The run is resumable: mesh resume TASK.")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(INTERRUPTED_EXIT)

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        announce_ready()
        try:
            yield
        finally:
            for sig, previous in before.items():
                signal.signal(sig, previous)
