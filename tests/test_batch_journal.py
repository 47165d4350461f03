"""The batch journal (``roles.backends.batch_journal``): what a later process finds of the batches an
earlier one sent, and what it never finds again."""

from __future__ import annotations

import json
import multiprocessing
import time

from roles.backends import batch_journal
from roles.backends.batch_journal import BatchJournal, fingerprint


def test_an_entry_is_found_until_it_is_used(tmp_path):
    journal = BatchJournal(tmp_path / "j" / "journal.jsonl")
    a, b = fingerprint("http://x", {"model": "m", "messages": [1]}), fingerprint("http://x", {"model": "m"})
    assert a != b != fingerprint("http://y", {"model": "m"})
    assert journal.pending(a) is None
    journal.sent("batch-1", [a, b])
    found = BatchJournal(journal.path).pending(b)  # another process's view
    assert (found.batch, found.custom_id) == ("batch-1", "r1")
    journal.used([found])
    assert journal.pending(b) is None and journal.pending(a).custom_id == "r0"
    journal.sent("batch-2", [a])
    assert journal.pending(a).batch == "batch-2"  # the newest
    assert (journal.path.stat().st_mode & 0o777) == 0o600


def test_a_cut_line_old_entries_and_compaction(tmp_path, monkeypatch):
    journal = BatchJournal(tmp_path / "journal.jsonl")
    journal.sent("batch-1", ["k1"])
    with journal.path.open("a") as out:
        out.write('{"key": "k2", "batch": "b')  # a crash in the middle of a line
    old = time.time() - batch_journal.MAX_AGE_S - 10
    with journal.path.open("a") as out:
        out.write("\n" + json.dumps({"key": "k3", "batch": "b3", "id": "r0", "at": old}) + "\n")
    assert journal.pending("k1").batch == "batch-1" and journal.pending("k2") is None
    assert journal.pending("k3") is None  # past the age the API keeps results
    monkeypatch.setattr(batch_journal, "_COMPACT_LINES", 5)
    journal.sent("batch-2", ["k4", "k5"])
    journal.used([journal.pending("k4")])
    journal.sent("batch-3", ["k6"])  # over the bound: rewritten with the live, unused entries only
    lines = [json.loads(line) for line in journal.path.read_text().splitlines()]
    assert sorted(line["key"] for line in lines) == ["k1", "k5", "k6"]
    assert journal.pending("k4") is None and journal.pending("k5").batch == "batch-2"


def _send_many(path: str, worker: int) -> None:
    journal = BatchJournal(path)
    for index in range(40):
        journal.sent(f"batch-{worker}-{index}", [f"k-{worker}-{index}"])


def test_processes_writing_at_once_lose_no_entry(tmp_path):
    path = str(tmp_path / "journal.jsonl")
    workers = [multiprocessing.get_context("fork").Process(target=_send_many, args=(path, n)) for n in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(30)
    journal = BatchJournal(path)
    assert all(journal.pending(f"k-{w}-{i}").batch == f"batch-{w}-{i}" for w in range(4) for i in range(40))
