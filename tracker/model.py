"""The issue model: field names (beads' JSONL names), allowed values, time handling.

Field values are kept as beads writes them (timestamps verbatim, with their own
offsets and precision) so that an import followed by an export loses nothing;
normalised copies exist only for ordering and comparisons.
"""

from __future__ import annotations

import time

from .errors import InvalidValueError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import datetime

__all__ = [
    "STATUSES",
    "IMPORT_STATUSES",
    "BLOCKING_STATUSES",
    "ISSUE_TYPES",
    "NON_WORK_TYPES",
    "AGENT_STATES",
    "TEXT_FIELDS",
    "EXPORT_ORDER",
    "COMPUTED_FIELDS",
    "now_iso",
    "normalize_ts",
    "parse_duration",
    "check_status",
    "check_priority",
    "check_type",
]

STATUSES = ("open", "in_progress", "blocked", "deferred", "closed", "pinned", "hooked")
IMPORT_STATUSES = STATUSES + ("tombstone",)
# A ``blocks`` dependency on an issue in one of these states keeps the dependent from ready work.
BLOCKING_STATUSES = ("open", "in_progress", "blocked", "deferred", "hooked")
ISSUE_TYPES = ("task", "bug", "feature", "epic", "chore", "gate", "agent", "role")
# Types that are never ready work unless ``--type`` names them.
NON_WORK_TYPES = ("gate", "agent", "role", "molecule", "message", "merge-request", "rig")
# The types bd calls infrastructure (its domain.DefaultInfraTypes): records of who works, not
# work (mesh's ``mesh-<role>`` agents and their roles); listed only with --include-infra, never counted.
INFRA_TYPES = ("agent", "role", "message")
AGENT_STATES = ("idle", "spawning", "running", "working", "stuck", "done", "stopped", "dead")
DEPENDENCY_TYPES = (
    "blocks",
    "parent-child",
    "related",
    "discovered-from",
    "tracks",
    "supersedes",
    "duplicates",
    "relates-to",
    "replies-to",
)

# Columns of the issues table that hold beads fields, in the order beads writes them.
TEXT_FIELDS = (
    "title",
    "description",
    "design",
    "acceptance_criteria",
    "notes",
    "status",
    "issue_type",
    "assignee",
    "owner",
    "created_at",
    "created_by",
    "updated_at",
    "closed_at",
    "close_reason",
    "defer_until",
    "due_at",
    "external_ref",
    "await_type",
    "await_id",
    "agent_state",
    "last_activity",
    "hook_bead",
    "role_bead",
)
MODELLED_FIELDS = TEXT_FIELDS + ("id", "priority", "pinned", "ephemeral", "metadata", "timeout")

# The export order of beads' Go struct (read off real exports); fields the
# model does not know follow in the order they were first seen.
EXPORT_ORDER = (
    "id",
    "title",
    "description",
    "design",
    "acceptance_criteria",
    "notes",
    "status",
    "priority",
    "issue_type",
    "assignee",
    "owner",
    "created_at",
    "created_by",
    "updated_at",
    "closed_at",
    "pinned",
    "close_reason",
    "defer_until",
    "due_at",
    "labels",
    "external_ref",
    "metadata",
    "dependencies",
    "ephemeral",
    "comments",
    "hook_bead",
    "role_bead",
    "agent_state",
    "last_activity",
    "await_type",
    "await_id",
    "timeout",
)
COMPUTED_FIELDS = ("dependency_count", "dependent_count", "comment_count", "parent")

# Patterns, not compiled here: ``re`` is imported and compiles (and keeps) them at first use, which a hot read
# never reaches.
_FRACTION = r"(\.\d{1,6})\d*"


def now_iso() -> str:
    """The current time as RFC 3339 UTC with microseconds (``...Z``), already in
    ``normalize_ts``' form. From ``time``: a hot read compares it with ``defer_until`` and need
    not import ``datetime``."""
    seconds, micro = divmod(time.time_ns() // 1000, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micro:06d}Z"


_dt = None  # the ``datetime`` module, once a timestamp is read (``_datetime``)


def _datetime():
    """The ``datetime`` module, imported at the first timestamp read: a hot read reads none
    (``now_iso`` needs only ``time``), and the module global keeps the many calls of an
    import as cheap as a top-level import would."""
    global _dt
    import datetime

    _dt = datetime
    return datetime


def parse_ts(value: str) -> datetime:
    """Parse an RFC 3339 timestamp of any precision (beads writes up to nanoseconds)."""
    dt_mod = _dt or _datetime()
    try:
        # Python 3.11 reads every RFC 3339 form beads writes (Z, offsets, nanoseconds truncated).
        dt = dt_mod.datetime.fromisoformat(value)
    except ValueError:
        import re

        text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
        text = re.sub(_FRACTION, lambda m: m.group(1), text, count=1)
        dt = dt_mod.datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=dt_mod.timezone.utc)
    return dt


def normalize_ts(value: str | None) -> str | None:
    """A sortable UTC form of ``value`` (``YYYY-MM-DDTHH:MM:SS.ffffffZ``), or None if empty/bad."""
    if not value:
        return None
    dt_mod = _dt or _datetime()
    try:
        # The fast path of an import that normalises 200,000 stamps (see ``parse_ts``).
        dt = dt_mod.datetime.fromisoformat(value)
    except (ValueError, TypeError):
        try:
            dt = parse_ts(value)
        except (ValueError, TypeError, AttributeError):
            return None
    # The UTC wall time is the stamp's minus its offset; its text is isoformat's first 19
    # characters (a 4-digit year always) and the microseconds it leaves out when they are 0.
    # (``astimezone`` and ``isoformat(timespec=...)`` took twice as long: 200,000 stamps a
    # large import normalises.)
    offset = dt.utcoffset()
    if offset:
        dt -= offset
    text = dt.isoformat()
    return f"{text[:26]}Z" if dt.microsecond else f"{text[:19]}.000000Z"


_DURATION = r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)"
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9, "d": 86400 * 10**9}


def parse_duration(text: str) -> int:
    """A Go-style duration (``90s``, ``1h30m``, ``2d``) as nanoseconds, the unit beads stores."""
    spec = text.strip()
    if spec.isdigit():
        return int(spec) * 10**9
    import re

    pos, total = 0, 0.0
    for m in re.finditer(_DURATION, spec):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    if pos != len(spec) or not spec:
        raise InvalidValueError(f"invalid duration {text!r} (use e.g. 30s, 15m, 2h, 1d)")
    return int(total)


def add_ns(ts: str, ns: int) -> str:
    """``ts`` plus ``ns`` nanoseconds, normalised."""
    dt_mod = _dt or _datetime()
    return (parse_ts(ts) + dt_mod.timedelta(microseconds=ns / 1000)).astimezone(dt_mod.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )


def check_status(status: str, *, importing: bool = False) -> str:
    allowed = IMPORT_STATUSES if importing else STATUSES
    if status not in allowed:
        raise InvalidValueError(f"invalid status {status!r} (one of: {', '.join(allowed)})")
    return status


def check_priority(priority: object) -> int:
    if isinstance(priority, bool):
        raise InvalidValueError(f"invalid priority {priority!r} (0-4)")
    try:
        value = int(str(priority).removeprefix("P").removeprefix("p"))
    except ValueError:
        raise InvalidValueError(f"invalid priority {priority!r} (0-4)") from None
    if not 0 <= value <= 4:
        raise InvalidValueError(f"invalid priority {priority!r} (0-4)")
    return value


def check_type(issue_type: str) -> str:
    if issue_type not in ISSUE_TYPES:
        raise InvalidValueError(f"invalid type {issue_type!r} (one of: {', '.join(ISSUE_TYPES)})")
    return issue_type
