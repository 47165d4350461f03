"""Which Message Batch holds which request, kept on disk, so a run killed while its batch ran
takes that batch's answers when it is run again instead of paying for them twice.

A batch bills its requests whether or not anyone reads the results: a run stopped hard (SIGKILL,
a second Ctrl-C, a lost machine) leaves its batch running on the API's side. ``BatchJournal``
writes one line per request when its batch is created: the request's fingerprint (a SHA-256 of
the endpoint and the request's exact parameters; no prompt text, no key), the batch id and the
request's ``custom_id``. A later request with the same fingerprint (the resumed run asks the same
round of the same task with the same prompt) is answered from that batch when its result
succeeded; the entry is then marked used, so a request asked again on purpose (a retry after an
answer of the wrong shape) goes out anew. Entries older than ``MAX_AGE_S`` (the API keeps
results 29 days) are dropped when the journal is written.

The file is shared by every mesh process of the user (an eval runs several at once): each
change is appended under an exclusive ``flock``, and the file is compacted when it grows.

May import: the standard library only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BatchJournal", "Entry", "fingerprint"]

MAX_AGE_S = 28 * 86400
_COMPACT_LINES = 4000


def fingerprint(base_url: str, params: dict[str, Any]) -> str:
    """A request's identity: the endpoint and its exact parameters, hashed."""
    text = json.dumps({"url": base_url, "params": params}, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    """A request sent in a batch: its fingerprint, the batch, its ``custom_id`` there."""

    key: str
    batch: str
    custom_id: str
    at: float


class BatchJournal:
    """The journal file at ``path`` (see the module docstring)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def pending(self, key: str) -> Entry | None:
        """The newest unused entry for the request ``key``, if any."""
        entries, used = self._read()
        found = [entry for entry in entries if entry.key == key and _mark(entry) not in used]
        return max(found, key=lambda entry: entry.at) if found else None

    def sent(self, batch: str, keys: list[str]) -> None:
        """Note that the requests ``keys`` went out in ``batch`` as ``r0``, ``r1``, ..."""
        now = time.time()
        self._append([{"key": key, "batch": batch, "id": f"r{index}", "at": now} for index, key in enumerate(keys)])

    def used(self, entries: list[Entry]) -> None:
        """Note that these entries' answers were taken: never handed out again."""
        self._append([{"used": list(_mark(entry))} for entry in entries])

    # ------------------------------------------------------------------ the file

    def _read(self) -> tuple[list[Entry], set[tuple[str, str, str]]]:
        try:
            with self._locked("r") as handle:
                text = handle.read()
        except FileNotFoundError:
            return [], set()
        return _parse(text)

    def _append(self, lines: list[dict[str, Any]]) -> None:
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        added = "".join(json.dumps(line) + "\n" for line in lines)
        with self._locked("a+") as handle:
            handle.seek(0)
            old = handle.read()
            if old.count("\n") + len(lines) > _COMPACT_LINES:
                # Rewritten with what is still live: young entries not used (these lines included).
                entries, used = _parse(old + "\n" + added)
                handle.seek(0)
                handle.truncate()
                added = "".join(json.dumps({"key": e.key, "batch": e.batch, "id": e.custom_id, "at": e.at}) + "\n"
                                for e in entries if _mark(e) not in used)
            handle.write(added)
            handle.flush()
            os.fsync(handle.fileno())

    def _locked(self, mode: str):
        journal = self

        class _Held:
            def __enter__(self):
                journal._lock.acquire()
                try:
                    fd = os.open(journal.path, (os.O_RDWR | os.O_CREAT | os.O_APPEND) if mode == "a+" else os.O_RDONLY,
                                 0o600)
                except BaseException:
                    journal._lock.release()
                    raise
                self.handle = os.fdopen(fd, mode, encoding="utf-8")
                fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX if mode == "a+" else fcntl.LOCK_SH)
                return self.handle

            def __exit__(self, *exc: object) -> None:
                try:
                    self.handle.close()  # the lock goes with the file
                finally:
                    journal._lock.release()

        return _Held()


def _mark(entry: Entry) -> tuple[str, str, str]:
    """What a ``used`` line names: the request and its place (a batch id alone may be reused by
    another endpoint)."""
    return entry.key, entry.batch, entry.custom_id


def _parse(text: str) -> tuple[list[Entry], set[tuple[str, str, str]]]:
    """The live entries of a journal's text (young enough, well formed), and the used ones."""
    entries: list[Entry] = []
    used: set[tuple[str, str]] = set()
    oldest = time.time() - MAX_AGE_S
    for line in text.splitlines():
        try:
            item = json.loads(line)
            if "used" in item:
                key, batch, custom_id = item["used"]
                used.add((str(key), str(batch), str(custom_id)))
            elif float(item["at"]) >= oldest:
                entries.append(Entry(str(item["key"]), str(item["batch"]), str(item["id"]), float(item["at"])))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a crash, or not ours: skipped
    return entries, used
