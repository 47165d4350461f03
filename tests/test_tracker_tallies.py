"""The figures of ``bd stats`` kept by the writes (``tracker.tallies``, SQLite) against the same
figures counted from the tables: after any sequence of writes (the tracker's own, raw SQL with
the foreign keys' cascade, imports large and small), on a migrated tracker, and through
``doctor``. The ``tracker`` fixture also checks the counters after every test that uses it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracker import bd_reads, tallies
from tracker.errors import TrackerError
from tracker.jsonl import import_jsonl
from tracker.model import now_iso
from tracker.store import Tracker

_FIGURES = ("blocked", "pinned", "lead_n", "lead_ms", "epics_done", "ready")


def _agree(t: Tracker) -> None:
    """The kept counters equal both counts of the tables: SQL's (``tallies.stale``) and the
    Python one PostgreSQL uses (``bd_reads._counted``)."""
    assert tallies.stale(t.db) == []
    kept = tallies.read(t.db, now_iso())
    counted = bd_reads._counted(t)
    for name in {*_FIGURES, *(k for k in {*kept, *counted} if k.startswith("status:"))}:
        assert kept.get(name, 0) == counted.get(name, 0), name
    assert t.status()["summary"]["ready_issues"] == len(t.ready()) == kept["ready"]


_TYPES = ("task", "epic", "bug", "agent", "gate")
_STATUSES = ("open", "in_progress", "blocked", "deferred", "closed")
_index = st.integers(min_value=0, max_value=11)
_ops = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(_TYPES), st.sampled_from(_STATUSES), st.none() | _index),
    st.tuples(st.just("status"), _index, st.sampled_from(_STATUSES)),
    st.tuples(st.just("type"), _index, st.sampled_from(_TYPES)),
    st.tuples(st.just("pinned"), _index, st.booleans()),
    st.tuples(st.just("defer"), _index, st.sampled_from(("2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z", None))),
    st.tuples(st.just("close"), _index),
    st.tuples(st.just("reopen"), _index),
    st.tuples(st.just("delete"), _index),
    st.tuples(st.just("claim"), _index),
    st.tuples(st.just("edge"), _index, _index, st.sampled_from(("blocks", "parent-child", "related"))),
    st.tuples(st.just("unedge"), _index, _index),
    st.tuples(st.just("raw_delete"), _index),
)


def _apply(t: Tracker, ids: list[str], op: tuple) -> None:
    kind, *args = op
    pick = (lambda k: ids[k % len(ids)]) if ids else None
    try:
        if kind == "create":
            issue_type, status, parent = args
            made = t.create(f"issue {len(ids)}", issue_type=issue_type, status=status,
                            parent=pick(parent) if pick and parent is not None else None)
            ids.append(made["id"])
        elif pick is None:
            return
        elif kind == "status":
            t.update(pick(args[0]), status=args[1])
        elif kind == "type":
            t.update(pick(args[0]), issue_type=args[1])
        elif kind == "pinned":
            t.update(pick(args[0]), pinned=args[1])
        elif kind == "defer":
            t.update(pick(args[0]), defer_until=args[1])
        elif kind == "close":
            t.close_issue(pick(args[0]), force=True)
        elif kind == "reopen":
            t.reopen(pick(args[0]))
        elif kind == "delete":
            t.delete(pick(args[0]), force=True)
        elif kind == "claim":
            t.claim(pick(args[0]))
        elif kind == "edge":
            t.add_dependency(pick(args[0]), pick(args[1]), args[2])
        elif kind == "unedge":
            t.remove_dependency(pick(args[0]), pick(args[1]))
        elif kind == "raw_delete":  # the foreign keys' cascade takes its labels, edges and comments
            gone = pick(args[0])
            with t.transaction() as c:
                c.execute("DELETE FROM issues WHERE id = ?", (gone,))
            ids.remove(gone)
    except TrackerError:
        pass  # refused (a cycle, a claimed issue, ...): nothing written


@given(st.lists(_ops, min_size=1, max_size=25))
def test_the_kept_figures_follow_every_write(tmp_path_factory, ops):
    root = tmp_path_factory.mktemp("tallies")
    with Tracker.init(root, prefix="tl") as t:
        ids: list[str] = []
        for op in ops:
            _apply(t, ids, op)
            assert tallies.stale(t.db) == [], op
        _agree(t)


def _scripted(t: Tracker) -> list[str]:
    """A small graph with every figure above zero: an epic with closed children, blocked work,
    a pinned issue, a closed issue, deferred ready work whose deferral has passed."""
    epic = t.create("epic", issue_type="epic")["id"]
    kids = [t.create(f"child {k}", parent=epic)["id"] for k in range(3)]
    for kid in kids:
        t.close_issue(kid, force=True)
    blocker = t.create("blocker")["id"]
    held = t.create("held")["id"]
    t.add_dependency(held, blocker, "blocks")
    t.create("pinned", pinned=True)
    t.create("past deferral", defer_until="2001-01-01T00:00:00Z")
    t.create("future deferral", defer_until="2999-01-01T00:00:00Z")
    return [epic, *kids, blocker, held]


def test_every_figure_moves(tmp_path):
    with Tracker.init(tmp_path, prefix="tl") as t:
        epic, *_, blocker, held = _scripted(t)
        summary = bd_reads.statistics(t)["summary"]
        assert summary["epics_eligible_for_closure"] == 1
        assert summary["blocked_issues"] == 1 and summary["pinned_issues"] == 1
        assert summary["closed_issues"] == 3 and summary["average_lead_time_hours"] >= 0
        ready_before = summary["ready_issues"]
        t.close_issue(blocker, force=True)  # the held issue is ready now, the blocker no longer
        summary = bd_reads.statistics(t)["summary"]
        assert summary["blocked_issues"] == 0 and summary["ready_issues"] == ready_before
        t.create("one more child", parent=epic)  # the epic has an open child again
        assert bd_reads.statistics(t)["summary"]["epics_eligible_for_closure"] == 0
        _agree(t)


def test_lead_time_is_exact_for_every_stamp_form(tmp_path):
    """Offsets, nine-digit fractions, no fraction, a space for the T: SQLite's count is the
    Python one to the microsecond; a stamp neither reads counts in neither."""
    stamps = [("2025-01-14T08:18:09.301676-08:00", "2025-01-20T00:00:00Z"),
              ("2025-01-14T16:18:09.123456789Z", "2025-01-14T16:18:10.000000001+05:30"),
              ("2025-01-14 16:18:09", "2025-03-01T00:00:00.5Z"),
              ("not a time", "2025-03-01T00:00:00Z")]
    lines = [{"id": f"lt-{k}", "title": "t", "status": "closed", "priority": 2, "issue_type": "task",
              "created_at": created, "updated_at": closed, "closed_at": closed}
             for k, (created, closed) in enumerate(stamps)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with Tracker.init(tmp_path / "ws", prefix="lt") as t:
        import_jsonl(t, source)
        _agree(t)
        assert tallies.read(t.db, now_iso())["lead_n"] == 3


def test_a_bulk_import_counts_once_and_keeps_its_triggers(tmp_path):
    """An import large enough to drop the indexes drops the triggers too, and counts at its end."""
    lines = []
    for k in range(2100):
        line = {"id": f"bk-{k}", "title": f"i{k}", "status": ("open", "closed", "in_progress")[k % 3],
                "priority": k % 5, "issue_type": "epic" if k % 50 == 0 else "task",
                "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-02T00:00:00Z"}
        if line["status"] == "closed":
            line["closed_at"] = "2025-01-03T12:00:00.25+01:00"
        if k % 7 == 1:
            line["dependencies"] = [{"issue_id": line["id"], "depends_on_id": f"bk-{k - 1}", "type": "blocks"}]
        if k % 50 in (1, 2):
            line["dependencies"] = [{"issue_id": line["id"], "depends_on_id": f"bk-{k - k % 50}",
                                     "type": "parent-child"}]
        lines.append(line)
    source = tmp_path / "big.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with Tracker.init(tmp_path / "ws", prefix="bk") as t:
        triggers = t.db.read("SELECT count(*) FROM sqlite_temp_master WHERE type = 'trigger'")[0][0]
        import_jsonl(t, source)
        assert t.db.read("SELECT count(*) FROM sqlite_temp_master WHERE type = 'trigger'")[0][0] == triggers > 0
        _agree(t)
        assert tallies.read(t.db, now_iso())["blocked"] > 0
        t.close_issue("bk-0", force=True)  # the triggers work after it
        _agree(t)


def test_an_older_tracker_gets_its_counters_when_opened(tmp_path):
    with Tracker.init(tmp_path, prefix="tl") as t:
        _scripted(t)
        expected = bd_reads.statistics(t)
    db = tmp_path / ".beads" / "mesh.db"
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE tallies")
    conn.execute("DELETE FROM schema_version WHERE version = 8")
    conn.commit()
    conn.close()
    with Tracker.open(db) as t:
        assert bd_reads.statistics(t) == expected
        _agree(t)


def test_doctor_finds_a_wrong_counter_and_fix_recounts(tmp_path):
    with Tracker.init(tmp_path, prefix="tl") as t:
        _scripted(t)
        assert t.doctor()["ok"]
        with t.transaction() as c:
            c.execute("UPDATE tallies SET n = n + 5 WHERE name = 'blocked'")
        report = t.doctor()
        [check] = [ch for ch in report["checks"] if ch["name"] == "tallies"]
        assert not report["ok"] and check["detail"] == "blocked: 6 != 1"
        fixed = t.doctor(fix=True)
        assert fixed["ok"] and "stats figures recounted" in fixed["fixed"]
        _agree(t)


@pytest.mark.parametrize("engine", ["postgresql"])
def test_both_engines_report_the_same_figures(tmp_path, pg_url, engine):
    figures = []
    for target in (None, pg_url):
        root = tmp_path / ("pg" if target else "lite")
        with Tracker.init(root, prefix="tl", db_path=target) as t:
            epic, *_, blocker, held = _scripted(t)
            t.update(held, status="in_progress")
            t.delete(epic, force=True)
            summary = bd_reads.statistics(t)["summary"]
            assert summary.pop("average_lead_time_hours") >= 0  # the closes' own moments differ
            figures.append(summary)
    assert figures[0] == figures[1]


def test_the_path_of_a_hot_stats_reads_no_table_scan(tmp_path: Path):
    """The read is the counters and the deferred open issues (an index), nothing else."""
    with Tracker.init(tmp_path, prefix="tl") as t:
        _scripted(t)
        plans = []
        read = t.db.read

        def explain(sql, params=()):
            plans.extend(row[-1] for row in read(f"EXPLAIN QUERY PLAN {sql}", params))
            return read(sql, params)

        t.db.read = explain  # type: ignore[method-assign]
        tallies.read(t.db, now_iso())
        scans = [p for p in plans if p.startswith("SCAN") and "tallies" not in p and "CONSTANT ROW" not in p]
        assert plans and not scans, plans


def test_a_writer_without_the_triggers_is_caught_up(tmp_path):
    """A connection without this writer's triggers (an older mesh, a hand-made one) writes: a read
    counts from the tables instead of trusting the counters, and the next tracker to open counts
    again. The database's own schema holds no trigger (a read parses none)."""
    with Tracker.init(tmp_path, prefix="tl") as t:
        _scripted(t)
        blocker = t.list(status=["open"], limit=20)
        before = bd_reads.statistics(t)["summary"]
    db = tmp_path / ".beads" / "mesh.db"
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'").fetchone()[0] == 0
    conn.execute("UPDATE issues SET status = 'closed', closed_at = '2030-01-01T00:00:00Z' WHERE title = 'blocker'")
    conn.execute("INSERT INTO events(issue_id, event_type, created_at) VALUES ('x', 'closed', '2030-01-01T00:00:00Z')")
    conn.commit()
    conn.close()
    assert blocker
    from tracker.reader import Reader

    with Reader.open(db) as r:  # a read: no triggers, no writes; the figures counted from the tables
        after = bd_reads.statistics(r)["summary"]
        assert after["blocked_issues"] == before["blocked_issues"] - 1
        assert after["closed_issues"] == before["closed_issues"] + 1
    with Tracker.open(db) as t:  # a writer writes: counted again first, the counters trusted again
        assert tallies._behind(t.db.read)
        t.create("after the catch-up")
        assert not tallies._behind(t.db.read)
        after["total_issues"] += 1
        after["open_issues"] += 1
        after["ready_issues"] += 1
        assert bd_reads.statistics(t)["summary"] == after
        _agree(t)


def test_a_writer_that_cannot_count_again_still_reads(tmp_path, monkeypatch):
    """Behind counters and a database this process cannot write (read-only, or busy past the
    timeout): the tracker opens and reads, its figures from the tables."""
    with Tracker.init(tmp_path, prefix="tl") as t:
        _scripted(t)
        expected = bd_reads.statistics(t)["summary"]
        with t.transaction() as c:
            c.execute("UPDATE tallies SET n = n - 1 WHERE name = 'as_of_event'")
            c.execute("UPDATE tallies SET n = n + 7 WHERE name = 'blocked'")

    def refused(self, **_):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    from tracker.db import Database

    monkeypatch.setattr(Database, "transaction", refused)
    with Tracker.open(tmp_path / ".beads" / "mesh.db") as t:
        t._keep_counts()  # what a first write does first: its count again refused, the triggers made
        assert tallies._behind(t.db.read)
        assert bd_reads.statistics(t)["summary"] == expected
