"""Reading what an untrusted process writes, in bounded memory.

A worker (or a validation command) may write without end: mesh keeps the last bytes of a
stream it only reports (``Tail``), and reads an answer through a cap (``Capped``) that stops
reading, and says so, once the answer is larger than mesh will ever take. Each stream is
read by a thread of its own (``drain``), so a process blocked on a full pipe never stalls
the other stream or the timeout.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import IO

__all__ = ["Capped", "Tail", "drain", "run_with"]


class Tail:
    """Keeps the last ``limit`` bytes of a stream and counts what it dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0
        self.lock = threading.Lock()

    def feed(self, chunk: bytes) -> bool:
        """Keep ``chunk`` (dropping the oldest bytes beyond the limit); always True: read on."""
        with self.lock:
            self.data += chunk
            excess = len(self.data) - self.limit
            if excess > 0:
                del self.data[:excess]
                self.dropped += excess
        return True

    def text(self) -> str:
        """The kept bytes as text, headed by how many were dropped before them."""
        with self.lock:
            body = bytes(self.data).decode("utf-8", errors="replace")
            dropped = self.dropped
        return f"[... {dropped} bytes truncated ...]\n{body}" if dropped else body


class Capped:
    """Keeps a whole stream up to ``limit`` bytes; one byte more and it stops, calls
    ``on_overflow`` once (which kills the writer) and keeps nothing of the excess."""

    def __init__(self, limit: int, on_overflow: Callable[[], None]) -> None:
        self.limit = limit
        self.data = bytearray()
        self.overflowed = False
        self._on_overflow = on_overflow

    def feed(self, chunk: bytes) -> bool:
        """Keep ``chunk``; False (stop reading) once the stream passed the limit."""
        if len(self.data) + len(chunk) > self.limit:
            self.overflowed = True
            self._on_overflow()
            return False
        self.data += chunk
        return True


def drain(stream: IO[bytes], sink: Tail | Capped, chunk_bytes: int = 65536) -> None:
    """Read ``stream`` to its end (or until ``sink`` stops taking it) into ``sink``; closes it."""
    fd = stream.fileno()
    try:
        while chunk := os.read(fd, chunk_bytes):
            if not sink.feed(chunk):
                break
    except OSError:
        # The pipe went away (the group was killed): what was read so far is what there is.
        pass
    finally:
        stream.close()


def run_with(process: subprocess.Popen, threads: Sequence[threading.Thread], timeout_s: float,
             on_interrupt: Callable[[], None]) -> bool:
    """Start ``threads`` (the process's pipe readers and feeders) and wait for ``process`` at most
    ``timeout_s``; True when it ran past it. An interrupt (Ctrl-C) while waiting calls
    ``on_interrupt`` (which kills the process's group) before it goes on."""
    for thread in threads:
        thread.start()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return True
    except BaseException:
        on_interrupt()
        raise
    return False
