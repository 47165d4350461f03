"""Rows and objects: how the tracker's tables become issue, dependency and comment dicts.

The store's mixins and ``jsonl`` (import and export) share these: the columns an issue
object is built from, and the builders on the hot path of ``ready`` and ``export``. Issue
objects are plain dicts with beads' field names, in beads' field order.
"""

from __future__ import annotations

from _operator import itemgetter  # the C module: ``operator`` itself is 2% of a hot read's process

from .jsontext import compact, loads
from .model import EXPORT_ORDER, TEXT_FIELDS, normalize_ts

# The columns an issue object is built from (the hot path reads only these).
_ISSUE_COLUMNS = ("id", *TEXT_FIELDS, "priority", "pinned", "ephemeral", "metadata", "timeout", "extra")
_ISSUE_SELECT = ", ".join(f"i.{c}" for c in _ISSUE_COLUMNS)
_DEP_COLUMNS = "issue_id, depends_on_id, type, created_at, created_by, extra"
# The columns a create writes beside the id, and those an update may write (PostgreSQL's
# server-side functions are generated from them: tracker.pg_functions).
INSERT_COLUMNS = ("priority", *TEXT_FIELDS, "metadata", "timeout", "pinned", "ephemeral", "extra", "created_sort",
                  "defer_sort")
UPDATE_COLUMNS = (*TEXT_FIELDS, "priority", "pinned", "ephemeral", "timeout", "metadata", "extra", "defer_sort")
# A connection inside a transaction (sqlite3's, or postgres' adapter) and a row read by
# position or column name (sqlite3.Row, postgres.Row).
TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    Conn = Any
    Row = Any


def _dump(value: Any) -> str | None:
    return None if value is None else compact(value)


def _load(text: str | None) -> Any:
    return None if text is None else loads(text)


def _row_obj(row: Row) -> dict:
    """Every modelled field of an issues row (None where absent): the current values
    that updates compare against and ``expect`` checks."""
    out: dict[str, Any] = {"id": row["id"]}
    for key in TEXT_FIELDS:
        out[key] = row[key]
    out["priority"] = row["priority"]
    for key in ("pinned", "ephemeral"):
        value = row[key]
        out[key] = None if value is None else bool(value)
    out["metadata"] = _load(row["metadata"])
    out["timeout"] = row["timeout"]
    if row["extra"]:
        for key, value in loads(row["extra"]).items():
            out.setdefault(key, value)
    return out


# The sort keys of a label row (issue_id, label, rowid) and of a dependency row (``_DEP_COLUMNS``,
# rowid) by their rowid: C getters, a Python call less per row.
_LABEL_ROWID = itemgetter(2)
_DEP_ROWID = itemgetter(6)


def _build_issue(row: tuple, labels: list[str] | None, deps: list[dict] | None,
                 comments: list[dict] | None = None, *, export: bool = False) -> dict:
    """An issue object from a row of ``_ISSUE_COLUMNS``, in beads' field order, unknown fields last.

    Fields in ``EXPORT_ORDER`` come first (empty ones left out, ``priority``
    always present, ``labels``, ``dependencies`` and ``comments`` in their
    places), then fields an import kept that the model does not know, in their
    original order. This is the hot path of ``ready`` and ``export``: the common
    case is one C-level gather and one comprehension. With ``export`` a kept
    original wins over its column: an import that found an invalid ``priority``
    or a non-string ``title`` stored a usable value in the column and the
    original among the extra fields, and the export gives back the original.
    """
    values = _EXPORT_GETTER(row + (labels or None, deps or None, comments or None))
    out = {key: value for key, value in zip(EXPORT_ORDER, values) if value is not None}
    for key in ("pinned", "ephemeral"):
        if key in out:
            out[key] = bool(out[key])
    if "metadata" in out:
        out["metadata"] = loads(out["metadata"])
    kept = row[_EXTRA_AT]
    if kept:
        extra = loads(kept)
        if not _EXPORT_KEYS.isdisjoint(extra):
            # A kept value for a modelled field goes in that field's place.
            out = {key: extra[key] if key in extra and (key not in out or export) else out[key]
                   for key in EXPORT_ORDER if key in out or key in extra}
        for key, value in extra.items():
            if key not in out:
                out[key] = value
    return out


_EXPORT_KEYS = frozenset(EXPORT_ORDER)
_EXTRA_AT = _ISSUE_COLUMNS.index("extra")
# Where each EXPORT_ORDER field sits in a row of _ISSUE_COLUMNS extended with (labels, deps, comments).
_EXPORT_GETTER = itemgetter(*(
    _ISSUE_COLUMNS.index(key) if key in _ISSUE_COLUMNS
    else len(_ISSUE_COLUMNS) + ("labels", "dependencies", "comments").index(key)
    for key in EXPORT_ORDER
))


def _dep_from_tuple(row: tuple) -> dict:
    """A dependency object from ``_DEP_COLUMNS`` (anything after them is ignored)."""
    dep: dict[str, Any] = {"issue_id": row[0], "depends_on_id": row[1], "type": row[2]}
    if row[3] is not None:
        dep["created_at"] = row[3]
    if row[4] is not None:
        dep["created_by"] = row[4]
    if row[5]:
        dep.update(loads(row[5]))
    return dep


def _dep_obj(row: Row) -> dict:
    dep: dict[str, Any] = {"issue_id": row["issue_id"], "depends_on_id": row["depends_on_id"], "type": row["type"]}
    if row["created_at"] is not None:
        dep["created_at"] = row["created_at"]
    if row["created_by"] is not None:
        dep["created_by"] = row["created_by"]
    if row["extra"]:
        dep.update(loads(row["extra"]))
    return dep


_COMMENT_COLUMNS = "id, issue_id, author, text, created_at, ext_id, extra"


def _comment_obj(row: Row | tuple) -> dict:
    """A comment object from a comments row (``sqlite3.Row``, or a tuple of ``_COMMENT_COLUMNS``).

    ``ext_id`` is the id the comment had in an imported file (an integer in older
    beads files, a UUID string in newer ones), kept as JSON so its type survives.
    """
    local_id, issue_id, author, text, created_at, ext_id, extra = (
        tuple(row[c] for c in ("id", "issue_id", "author", "text", "created_at", "ext_id", "extra"))
        if hasattr(row, "keys") else row
    )
    if ext_id is not None:
        # Most ids are plain integers: skip the JSON decoder for them (export of 100k issues).
        local_id = int(ext_id) if ext_id.isdigit() else loads(ext_id)
    comment: dict[str, Any] = {"id": local_id, "issue_id": issue_id, "author": author, "text": text,
                               "created_at": created_at}
    if extra:
        comment.update(loads(extra))
    return comment


_INSERT_METADATA_AT, _INSERT_EXTRA_AT, _INSERT_CREATED_SORT_AT, _INSERT_DEFER_SORT_AT, _INSERT_PINNED_AT, _INSERT_EPHEMERAL_AT = map(INSERT_COLUMNS.index, (
    "metadata", "extra", "created_sort", "defer_sort", "pinned", "ephemeral"))


def _row_values(record: Mapping[str, Any], extra: Mapping[str, Any] | None) -> list:
    """The values of ``rows.INSERT_COLUMNS`` for a new row of ``record`` (each column as
    given, then those derived: on every create, so written for speed)."""
    get = record.get
    values = list(map(get, INSERT_COLUMNS))
    values[_INSERT_METADATA_AT] = _dump(values[_INSERT_METADATA_AT])
    values[_INSERT_EXTRA_AT] = _dump(dict(extra)) if extra else None
    values[_INSERT_CREATED_SORT_AT] = normalize_ts(get("created_at")) or ""
    values[_INSERT_DEFER_SORT_AT] = normalize_ts(get("defer_until"))
    for at in (_INSERT_PINNED_AT, _INSERT_EPHEMERAL_AT):
        if values[at] is not None:
            values[at] = int(bool(values[at]))
    return values


def _counted_issue(row: tuple, labels: list[str] | None, deps: list[dict] | None, dependents: int,
                   ncomments: int) -> dict:
    """An issue object with its counts and its parent (the target of its parent-child edge)."""
    issue = _build_issue(row, labels, deps)
    issue["dependency_count"] = len(deps) if deps else 0
    issue["dependent_count"] = dependents
    issue["comment_count"] = ncomments
    if deps:
        parent = next((d["depends_on_id"] for d in deps if d["type"] == "parent-child"), None)
        if parent:
            issue["parent"] = parent
    return issue
