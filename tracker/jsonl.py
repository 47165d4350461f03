"""Import and export of beads JSONL (one issue per line, sorted by id).

Import keeps every field: the ones the model knows go to columns, the rest are
kept verbatim (in their order) and written back on export. Dirty data gets a
warning with its line number, never a crash: a missing priority, a duplicated id
(the last line wins), git conflict-marker lines, a malformed line.

A line the import will not even parse is an error, not a warning: one longer than
``MAX_LINE_CHARS`` (16 MiB of text) or nested deeper than ``MAX_DEPTH`` (512 arrays or
objects). The import is all or nothing: every line is read and checked before the first
write, and the writes are one transaction, so a refused file leaves the tracker exactly
as it was.
"""

from __future__ import annotations

import gc
import json
import operator
import re
from collections.abc import Iterable, Iterator
from itertools import accumulate, repeat
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from . import tallies
from .db import ready_states, refresh_ready_state
from .errors import ImportLineError
from .model import BLOCKING_STATUSES, IMPORT_STATUSES, MODELLED_FIELDS, TEXT_FIELDS, normalize_ts, now_iso
from .rows import _COMMENT_COLUMNS, _DEP_COLUMNS, _ISSUE_SELECT, _build_issue, _comment_obj, _dep_from_tuple, _dump
from .store import Tracker

__all__ = ["ImportReport", "import_jsonl", "export_jsonl", "encode_line", "MAX_LINE_CHARS", "MAX_DEPTH"]

MAX_LINE_CHARS = 16 * 1024 * 1024
MAX_DEPTH = 512

_BLOCK_CHARS = 1 << 20
_FULL_REFRESH_AT = 2000
_BULK_LOAD_AT = 2000
_NESTED = frozenset(("labels", "dependencies", "comments"))
_MODELLED = frozenset(MODELLED_FIELDS)
_TEXT = frozenset(TEXT_FIELDS)
# Columns an import writes: the plain ones straight from the record, then the derived ones.
_PLAIN_COLUMNS = ("id", "priority", *TEXT_FIELDS, "timeout")
_INSERT_COLUMNS = (*_PLAIN_COLUMNS, "metadata", "pinned", "ephemeral", "extra", "created_sort", "defer_sort",
                   "blocked", "defer_eff")
_INSERT_ISSUE = f"INSERT INTO issues({','.join(_INSERT_COLUMNS)}) VALUES ({','.join('?' * len(_INSERT_COLUMNS))})"
_STATUS_AT, _PRIORITY_AT, _SORT_AT, _DEFER_AT = (
    _INSERT_COLUMNS.index(c) for c in ("status", "priority", "created_sort", "defer_sort"))
# What an import into an empty PostgreSQL tracker fills without their constraints and indexes
# (events keep their history: not them).
_BULK_LOAD_TABLES = ("issues", "labels", "dependencies", "comments", "open_labels")
_COMMENT_ROW = ("issue_id", "author", "text", "created_at", "ext_id", "dedupe_key", "extra")
_EVENT_ROW = ("issue_id", "event_type", "actor", "field", "old_value", "new_value", "created_at")
_BLOCKING = frozenset(BLOCKING_STATUSES)
_CONFLICT_MARKERS = ("<<<<<<<", "=======", ">>>>>>>", "|||||||")
_DEP_KEYS = frozenset(("issue_id", "depends_on_id", "type", "created_at", "created_by"))
_COMMENT_KEYS = frozenset(("id", "issue_id", "author", "text", "created_at"))
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# Each bracket as a byte that is its depth step plus one (opening 2, closing 0), so that
# the running depth is summed by C code: accumulate(step - 1).
_BRACKET_STEP = bytes(2 if chr(i) in "[{" else 0 for i in range(256))


@dataclass
class ImportReport:
    """What an import did, and what it had to say about the data."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped_older: int = 0
    lines: int = 0
    warnings: list[dict] = field(default_factory=list)

    def warn(self, line: int, code: str, message: str) -> None:
        self.warnings.append({"line": line, "code": code, "message": message})

    def to_dict(self) -> dict:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped_older": self.skipped_older,
            "lines": self.lines,
            "warnings": self.warnings,
        }


def _bounded_lines(source: Iterable[str]) -> Iterator[str]:
    """The lines of ``source``, read a block at a time when it is a file (split by C code: a
    ``readline`` per line was a sixth of the parsing), never holding more of one line than
    MAX_LINE_CHARS + 1 characters: a longer one is yielded cut there, and nothing after it."""
    read = getattr(source, "read", None)
    if read is None:
        yield from source
        return
    rest = ""
    while block := read(_BLOCK_CHARS):
        lines = (rest + block).split("\n")
        rest = lines.pop()
        yield from lines
        if len(rest) > MAX_LINE_CHARS:
            yield rest[: MAX_LINE_CHARS + 1]
            return
    if rest:
        yield rest


def _too_deep(line: str) -> bool:
    """Whether ``line`` nests arrays and objects deeper than MAX_DEPTH.

    Counted without recursion (json.loads itself recurses, and dies with RecursionError on
    deep input): brackets inside strings are removed, then the running depth is summed.
    """
    if line.count("[") + line.count("{") <= MAX_DEPTH:
        return False
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", line))
    steps = brackets.encode("ascii").translate(_BRACKET_STEP)
    depth = 0
    # In chunks, so that a line that opens thousands of brackets at once stops at the first.
    for start in range(0, len(steps), 1 << 16):
        running = list(accumulate(map(operator.sub, steps[start : start + (1 << 16)], repeat(1)), initial=depth))
        if max(running) > MAX_DEPTH:
            return True
        depth = running[-1]
    return False


_scan = json.JSONDecoder().scan_once


def _decode(line: str) -> Any:
    """``json.loads`` of one stripped line. The decoder's C scanner is called directly: the
    layers ``json.loads`` adds around it (the decoder's call, two whitespace matches) were a
    third of the parsing of a 100,000-issue import. Anything it does not read whole goes to
    ``json.loads``, whose error (or value) is the answer."""
    try:
        obj, end = _scan(line, 0)
    except (StopIteration, ValueError):
        return json.loads(line)
    return obj if end == len(line) else json.loads(line)


def _parse_lines(lines: Iterable[str], report: ImportReport) -> dict[str, tuple[int, dict]]:
    records: dict[str, tuple[int, dict]] = {}
    number = 0
    for number, raw in enumerate(_bounded_lines(lines), start=1):
        if len(raw) > MAX_LINE_CHARS and len(raw.rstrip("\n")) > MAX_LINE_CHARS:
            report.lines = number
            raise ImportLineError(number, f"longer than {MAX_LINE_CHARS} characters (16 MiB)")
        line = raw.strip()
        if not line:
            continue
        if line[0] != "{" and line.startswith(_CONFLICT_MARKERS):
            report.warn(number, "conflict_marker", f"git conflict marker skipped: {line[:40]!r}")
            continue
        # Deeper than MAX_DEPTH takes more brackets than a short line has.
        if len(line) > MAX_DEPTH and _too_deep(line):
            raise ImportLineError(number, f"nested deeper than {MAX_DEPTH} levels")
        try:
            obj = _decode(line)
        except json.JSONDecodeError as exc:
            report.warn(number, "malformed", f"not valid JSON ({exc.msg} at column {exc.colno}); line skipped")
            continue
        except RecursionError:
            # Not deep by the count but too deep for this thread's stack: refused all the same.
            raise ImportLineError(number, "nested too deep to read") from None
        if not isinstance(obj, dict):
            report.warn(number, "malformed", "not a JSON object; line skipped")
            continue
        issue_id = obj.get("id")
        if not isinstance(issue_id, str) or not issue_id.strip():
            report.warn(number, "missing_id", "issue has no id; line skipped")
            continue
        if issue_id in records:
            report.warn(number, "duplicate_id", f"{issue_id} appears again (line {records[issue_id][0]}); the last line wins")
            del records[issue_id]
        records[issue_id] = (number, obj)
    report.lines = number
    return records


def _split(number: int, obj: dict, report: ImportReport) -> tuple[dict, dict, list, list, list]:
    """Columns, extras, labels, dependencies and comments of one JSONL object.

    A value the model cannot store in its column (a null, a number where text is
    expected, a string priority...) is kept among the extras as it came, so that
    an export writes it back; the column gets a usable default where it needs one.
    """
    issue_id = obj["id"]
    record: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    with_nul = []
    for key, value in obj.items():
        # Text fields first: most of a record, so each costs one test. Stored counts and parent
        # are kept verbatim among the extras: real exports carry values that do not match their
        # own dependency lists, and dropping them would lose data.
        if key in _TEXT:
            if isinstance(value, str):
                record[key] = value
                if "\x00" in value:
                    with_nul.append(key)
            else:
                extra[key] = value
        elif key in _NESTED:
            continue
        elif key not in _MODELLED or (value is None and key != "id"):
            extra[key] = value
        else:
            record[key] = value
    for key in with_nul:
        # PostgreSQL stores no NUL character (real beads exports hold some): the column gets a
        # visible stand-in and the extras the original, which the export gives back.
        extra[key] = record[key]
        record[key] = record[key].replace("\x00", "\ufffd")
    if "priority" not in obj:
        report.warn(number, "missing_priority", f"{issue_id} has no priority; default 2 used")
        record["priority"] = 2
    else:
        prio = obj["priority"]
        if isinstance(prio, bool) or not isinstance(prio, int):
            report.warn(number, "invalid_priority", f"{issue_id} priority {prio!r} kept as extra field; default 2 used")
            extra["priority"] = prio
            record["priority"] = 2
    if "title" not in record:
        report.warn(number, "missing_title", f"{issue_id} has no title")
        record["title"] = ""
    status = record.get("status")
    if status is None:
        report.warn(number, "invalid_status", f"{issue_id} status {obj.get('status')!r} is not a status; open used")
        record["status"] = "open"
    elif status not in IMPORT_STATUSES:
        report.warn(number, "invalid_status", f"{issue_id} status {status!r} is not a known status; kept as is")
    if "issue_type" not in record:
        record["issue_type"] = "task"
    if "metadata" in record and not isinstance(record["metadata"], (dict, list)):
        extra["metadata"] = record.pop("metadata")
    if "timeout" in record and (isinstance(record["timeout"], bool) or not isinstance(record["timeout"], int)):
        extra["timeout"] = record.pop("timeout")
    for key in ("pinned", "ephemeral"):
        if key in record and not isinstance(record[key], bool):
            extra[key] = record.pop(key)
    labels = obj.get("labels") or []
    if not isinstance(labels, list):
        report.warn(number, "invalid_labels", f"{issue_id} labels are not a list; ignored")
        labels = []
    deps = obj.get("dependencies") or []
    if not isinstance(deps, list):
        report.warn(number, "invalid_dependencies", f"{issue_id} dependencies are not a list; ignored")
        deps = []
    comments = obj.get("comments") or []
    if not isinstance(comments, list):
        report.warn(number, "invalid_comments", f"{issue_id} comments are not a list; ignored")
        comments = []
    return record, extra, labels, deps, comments


def import_jsonl(tracker: Tracker, source: Path | str | IO[str]) -> ImportReport:
    """Import a beads JSONL file into ``tracker`` in one transaction, all or nothing.

    New ids are created; known ids are replaced when the file's ``updated_at``
    is newer (their local comments missing from the file are kept), and left
    alone otherwise. Raises ``ImportLineError`` (naming the line) for a line that
    is too large or nested too deep, before anything is written.
    """
    # The cyclic garbage collector walks every live object at each of its passes, and an
    # import holds hundreds of thousands (parsed records, rows), none in a cycle: off, a large
    # import takes a sixth less time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _import(tracker, source)
    finally:
        if collecting:
            gc.enable()


def _import(tracker: Tracker, source: Path | str | IO[str]) -> ImportReport:
    report = ImportReport()
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8", errors="replace") as fh:
            records = _parse_lines(fh, report)
    else:
        records = _parse_lines(source, report)
    now = now_iso()
    with _references_unchecked(tracker), tracker.transaction() as c:
        existing = _existing_updated(c, list(records))
        issue_rows, label_rows, dep_rows, comment_rows, numbers, replaced = [], [], [], [], [], []
        actor = tracker.actor
        # Each record leaves the dict as its rows are made: freed while its memory is still in the
        # cache, instead of 100,000 parsed objects all at once at the end (0.3 s).
        for issue_id in list(records):
            number, obj = records.pop(issue_id)
            if issue_id in existing:
                mine, theirs = normalize_ts(existing[issue_id]), normalize_ts(obj.get("updated_at"))
                if theirs is None or (mine is not None and theirs <= mine):
                    if theirs == mine:
                        report.unchanged += 1
                    else:
                        report.skipped_older += 1
                    continue
                replaced.append(issue_id)
                report.updated += 1
            else:
                report.created += 1
            record, extra, labels, deps, comments = _split(number, obj, report)
            get = record.get
            pinned, ephemeral = get("pinned"), get("ephemeral")
            issue_rows.append((
                *map(get, _PLAIN_COLUMNS),
                _dump(get("metadata")),
                None if pinned is None else int(pinned),
                None if ephemeral is None else int(ephemeral),
                _dump(extra) if extra else None,
                normalize_ts(get("created_at")) or "",
                normalize_ts(get("defer_until")),
            ))
            if labels:
                label_rows.extend(zip(repeat(issue_id), dict.fromkeys(map(str, labels))))
            for dep in deps:
                if not isinstance(dep, dict) or not dep.get("depends_on_id"):
                    report.warn(number, "invalid_dependency", f"{issue_id} has a dependency without depends_on_id; ignored")
                    continue
                dep_extra = None if dep.keys() <= _DEP_KEYS else {k: v for k, v in dep.items() if k not in _DEP_KEYS}
                dep_rows.append((issue_id, str(dep["depends_on_id"]), str(dep.get("type") or "blocks"),
                                 dep.get("created_at"), dep.get("created_by"), _dump(dep_extra) if dep_extra else None))
            for comment in comments:
                if not isinstance(comment, dict) or not isinstance(comment.get("text"), str):
                    report.warn(number, "invalid_comment", f"{issue_id} has a comment without text; ignored")
                    continue
                c_extra = {} if comment.keys() <= _COMMENT_KEYS else {
                    k: v for k, v in comment.items() if k not in _COMMENT_KEYS}
                text = comment["text"]
                if "\x00" in text:  # as for issue fields: the original among the extras
                    c_extra["text"] = text
                    text = text.replace("\x00", "\ufffd")
                cid = comment.get("id", None)
                comment_rows.append((issue_id, comment.get("author"), text, comment.get("created_at"),
                                     # Most ids are integers: str() is their JSON, without the encoder.
                                     None if "id" not in comment else str(cid) if type(cid) is int else _dump(cid),
                                     None, _dump(c_extra) if c_extra else None))
            numbers.append(number)
        # A newer file replaces an issue's fields, but comments written here since that file was
        # exported (mesh checkpoints, say) are kept: comments are merged, never lost. Matching
        # comments keep their dedupe key, so a checkpoint stays unique after the round trip.
        in_file = {(row[0], row[2], row[3]) for row in comment_rows} if replaced else set()
        local_keys: dict[tuple, str] = {}
        kept: list[tuple] = []
        for chunk_start in range(0, len(replaced), 500):
            chunk = replaced[chunk_start : chunk_start + 500]
            marks = ",".join("?" * len(chunk))
            for r in c.execute("SELECT issue_id, author, text, created_at, ext_id, dedupe_key, extra FROM comments"
                               f" WHERE issue_id IN ({marks}) ORDER BY id", chunk).fetchall():
                key = (r[0], r[2], r[3])
                if key in in_file:
                    if r[5]:
                        local_keys[key] = r[5]
                else:
                    kept.append(tuple(r))
            # Their labels, edges and comments by name: the foreign keys' cascade may be off.
            for table in ("labels", "dependencies", "comments"):
                c.execute(f"DELETE FROM {table} WHERE issue_id IN ({marks})", chunk)
            c.execute(f"DELETE FROM issues WHERE id IN ({marks})", chunk)
        # The file's own graph gives each issue its ready state; when the file is the whole
        # workspace (nothing else left in the tracker) that is the state, and no pass over the
        # tables is needed after the writes.
        whole = c.execute("SELECT 1 FROM issues LIMIT 1").fetchone() is None
        issue_rows = _with_ready_state(issue_rows, dep_rows)
        if local_keys:
            comment_rows = [(*row[:5], local_keys.get((row[0], row[2], row[3])), row[6]) for row in comment_rows]
        comment_rows += kept
        if tracker.db.engine == "postgresql":
            rebuild = _drop_for_bulk_load(c, whole, len(issue_rows))
            events = [(row[0], "imported", actor, None, None, f"line {n}", now) for row, n in zip(issue_rows, numbers)]
            _copy_in(c, issue_rows, label_rows, dep_rows, comment_rows, events, whole)
        else:
            rebuild = _drop_indexes_for_bulk_load(c, len(issue_rows))
            base = c.execute("SELECT COALESCE(MAX(seq), 0) FROM issues").fetchone()[0]
            c.executemany(_INSERT_ISSUE, issue_rows)
            c.executemany("INSERT INTO labels(issue_id, label) VALUES (?, ?) ON CONFLICT DO NOTHING", label_rows)
            c.executemany(f"INSERT INTO dependencies({_DEP_COLUMNS}) VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                          dep_rows)
            c.executemany(f"INSERT INTO comments({', '.join(_COMMENT_ROW)}) VALUES (?,?,?,?,?,?,?)", comment_rows)
            _imported_events(c, base, issue_rows, numbers, actor, now)
        if not whole:
            touched = [row[0] for row in issue_rows]
            # One pass over the whole graph beats walking from thousands of seeds;
            # a small import into a big workspace only refreshes around what it touched.
            refresh_ready_state(c, None if len(touched) > _FULL_REFRESH_AT else touched)
        for statement in rebuild:  # SQL, or a function of the cursor (``tallies.restore``)
            c.execute(statement) if isinstance(statement, str) else statement(c)
    return report


def _references_unchecked(tracker: Tracker) -> Any:
    """On SQLite, around an import's transaction: its foreign keys unchecked. Every label, edge
    and comment row an import writes names one of the issues it writes in the same transaction
    (its line's own, or a replaced issue's kept comment), so checking them row by row (a search
    of the issues' ids for each of 350,000 rows at 100,000 issues) proves nothing; replaced
    issues' rows are deleted by name, not by the cascade. The setting is the connection's and
    has no effect inside a transaction: none is open then, and it is back on after."""
    import contextlib

    db = tracker.db
    if db.engine != "sqlite" or db._depth:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def off() -> Iterator[None]:
        with db._lock:
            db.conn.execute("PRAGMA foreign_keys = OFF")
            try:
                yield
            finally:
                db.conn.execute("PRAGMA foreign_keys = ON")

    return off()


_INSERT_EVENTS = (f"INSERT INTO events({', '.join(_EVENT_ROW)}) SELECT i.id, 'imported', ?, NULL, NULL,"
                  " 'line ' || n.value, ? FROM json_each(?) n JOIN issues i ON i.seq = ? + 1 + n.key")


def _imported_events(c: Any, base: int, issues: list[tuple], numbers: list[int], actor: str | None,
                     now: str) -> None:
    """Each imported issue's ``imported`` event (its line number), on SQLite: made by one statement
    from the issue rows just written, whose ``seq`` follow ``base`` in the order of ``issues``
    (a new rowid is the largest plus one, and the transaction is the only writer), the line
    numbers sent as one JSON array: a quarter of the time of 100,000 rows sent one by one."""
    if c.execute("SELECT COALESCE(MAX(seq), 0) FROM issues").fetchone()[0] == base + len(issues):
        c.execute(_INSERT_EVENTS, (actor, now, json.dumps(numbers), base))
        return
    c.executemany(f"INSERT INTO events({', '.join(_EVENT_ROW)}) VALUES (?,?,?,?,?,?,?)",
                  [(row[0], "imported", actor, None, None, f"line {n}", now) for row, n in zip(issues, numbers)])


def _with_ready_state(issues: list[tuple], deps: list[tuple]) -> list[tuple]:
    """The issue rows with their ``blocked`` and ``defer_eff`` as the file's graph alone gives
    them (the issues it does not hold never block and defer nothing)."""
    blocking = {row[0] for row in issues if row[_STATUS_AT] in _BLOCKING}
    parents: dict[str, list[str]] = {}
    direct = set()
    for dep in deps:
        kind = dep[2]
        if kind == "parent-child":
            parents.setdefault(dep[0], []).append(dep[1])
        elif kind == "blocks" and dep[1] in blocking:
            direct.add(dep[0])
    defer = {row[0]: row[_DEFER_AT] for row in issues if row[_DEFER_AT] is not None}
    others = parents.keys() | direct | defer.keys()  # the rest are neither blocked nor deferred
    get = dict(zip(others, ready_states(others, parents, direct, defer))).get
    ready = (0, None)
    return [row + get(row[0], ready) for row in issues]


def _copy_in(c: Any, issues: list[tuple], labels: list[tuple], deps: list[tuple], comments: list[tuple],
             events: list[tuple], whole: bool) -> None:
    """The rows of an import into PostgreSQL with one ``COPY`` per table (for 100,000 issues
    several times faster than INSERTs). What the INSERTs leave out with ``ON CONFLICT DO NOTHING``
    (an issue's dependency listed twice) is left out here first. The open issues' label rows in
    ready order (``open_labels``, ``pg_functions``): from the file when it is the whole workspace,
    else rewritten for the issues it holds (a replaced issue's rows were its old ones)."""
    from .pg_functions import sync_open_labels
    from .postgres import copy_rows

    copy_rows(c, "issues", _INSERT_COLUMNS, issues)
    copy_rows(c, "labels", ("issue_id", "label"), labels)
    first: dict[tuple, tuple] = {}
    for row in deps:
        first.setdefault(row[:3], row)
    copy_rows(c, "dependencies", _DEP_COLUMNS.split(", "), list(first.values()))
    copy_rows(c, "comments", _COMMENT_ROW, comments)
    copy_rows(c, "events", _EVENT_ROW, events)
    if whole:
        place = {row[0]: (row[_PRIORITY_AT], row[_SORT_AT]) for row in issues if row[_STATUS_AT] == "open"}
        c.execute("DELETE FROM open_labels")
        copy_rows(c, "open_labels", ("issue_id", "label", "priority", "created_sort"),
                  [(issue_id, label, *place[issue_id]) for issue_id, label in labels if issue_id in place])
    else:
        sync_open_labels(c, [row[0] for row in issues])


def _drop_for_bulk_load(c: Any, whole: bool, rows: int) -> list[str]:
    """On PostgreSQL, when the import writes at least ``_BULK_LOAD_AT`` issues into a tracker that
    holds no other (a new one, or a workspace whose every issue the file replaces), take the
    foreign keys, unique constraints and secondary indexes off the tables it fills and return the
    statements that put them back once the rows are in (``postgres.drop_for_bulk_load``).

    A foreign key checked per copied row and seven indexes on ``issues`` kept up to date row by
    row were most of what the ``COPY``s cost; built once, an index is a sort and a foreign key one
    join. DDL is transactional in PostgreSQL: a failed import leaves every object as it was. Their
    exclusive lock makes readers of those tables wait for the import, where they would have read
    a tracker still empty or about to be replaced; an import beside other issues keeps them."""
    if not whole or rows < _BULK_LOAD_AT:
        return []
    from .postgres import drop_for_bulk_load

    return drop_for_bulk_load(c, _BULK_LOAD_TABLES)


def _drop_indexes_for_bulk_load(c: Any, rows: int) -> list[Any]:
    """On SQLite, when the import writes at least ``_BULK_LOAD_AT`` issues and as many as a
    third of those already there, drop the secondary indexes of the tables it fills and return
    the statements that build them again (run before the transaction commits).

    Building an index once over sorted keys costs a fraction of keeping it up to date through
    100,000 inserts in random order: this is most of what the import of a whole workspace
    costs. DDL is transactional in SQLite, so a failed import leaves every index as it was;
    readers see the old state until the commit. (PostgreSQL: ``_drop_for_bulk_load``.)"""
    if rows < _BULK_LOAD_AT:
        return []
    if rows * 3 < c.execute("SELECT COALESCE(MAX(seq), 0) FROM issues").fetchone()[0]:
        return []
    found = c.execute("SELECT type, name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
                      " AND tbl_name IN ('issues', 'labels', 'dependencies', 'comments', 'events') UNION ALL"
                      " SELECT type, name, sql FROM sqlite_temp_master WHERE type = 'trigger' AND substr(name, 1, ?) = ?",
                      (len(tallies.TRIGGER_PREFIX), tallies.TRIGGER_PREFIX)).fetchall()
    for kind, name, _ in found:
        c.execute(f'DROP {kind.upper()} "{name}"')
    # The counters' triggers too (this connection's own): made again, and everything counted once.
    restore = [tallies.restore] if any(kind == "trigger" for kind, _, _ in found) else []
    return [sql for kind, _, sql in found if kind == "index"] + restore


def _existing_updated(c: Any, ids: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    if c.execute("SELECT 1 FROM issues LIMIT 1").fetchone() is None:
        return found  # a new tracker: no look-up of each id (200 queries for 100,000)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for r in c.execute(f"SELECT id, updated_at FROM issues WHERE id IN ({','.join('?' * len(chunk))})", chunk):
            found[r[0]] = r[1]
    return found


def encode_line(obj: dict) -> str:
    """One JSONL line the way Go's encoder writes it (compact, HTML-safe escapes)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def iter_export(tracker: Tracker) -> Iterable[dict]:
    """Every issue (tombstones included) as its full JSONL object, sorted by id."""
    read = tracker.db.read_tuples
    with tracker.db._lock:
        labels: dict[str, list[str]] = {}
        for issue_id, label in read("SELECT issue_id, label FROM labels ORDER BY rowid")[1]:
            labels.setdefault(issue_id, []).append(label)
        deps: dict[str, list[dict]] = {}
        for r in read(f"SELECT {_DEP_COLUMNS} FROM dependencies ORDER BY rowid")[1]:
            deps.setdefault(r[0], []).append(_dep_from_tuple(r))
        comments: dict[str, list[dict]] = {}
        for r in read(f"SELECT {_COMMENT_COLUMNS} FROM comments ORDER BY id")[1]:
            comments.setdefault(r[1], []).append(_comment_obj(tuple(r)))
        rows = read(f"SELECT {_ISSUE_SELECT} FROM issues i ORDER BY id")[1]
    for row in rows:
        iid = row[0]
        yield _build_issue(row, labels.get(iid), deps.get(iid), comments.get(iid), export=True)


def export_jsonl(tracker: Tracker, out: IO[str]) -> int:
    """Write every issue as beads JSONL to ``out``; returns the number of lines."""
    n = 0
    for issue in iter_export(tracker):
        out.write(encode_line(issue))
        out.write("\n")
        n += 1
    return n
