"""Claims: taking ready work.

``ReadyWork`` is one part of ``store.Tracker``: the claims (``reader.Reader`` reads ready work). ``blocked`` and ``defer_eff`` are kept
current by every write (``db.refresh_ready_state``), so ready work is one indexed query;
a claim is one compare-and-set ``UPDATE`` that exactly one claimer wins.
"""

from __future__ import annotations

from .errors import ConflictError, InvalidValueError, NotFoundError
from .issues import _drop_kept_originals
from .model import now_iso
from .rows import _ISSUE_COLUMNS

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any
    from .rows import Conn

__all__ = ["ReadyWork"]



class ReadyWork:
    """Claims: one issue, or the next ready one."""

    def claim(self, issue_id: str, actor: str | None = None) -> dict:
        """Compare-and-set: take an open, unassigned issue (or one already the actor's).

        One ``UPDATE ... WHERE`` on the values just read decides: of two claimers of
        one issue, on any engine and any machine, exactly one gets it, and neither
        waits for writers of other issues.
        """
        who = actor or self.actor
        if self.db.engine == "postgresql":
            # One statement: the row is locked (a concurrent claimer waits, then sees the new
            # values), checked, claimed and answered; only a refusal reads it again, to say why.
            claimed = self._claim_in_one(
                who, "WITH ", "SELECT i.id, i.status, i.assignee FROM issues i WHERE i.id = ? AND ((i.status = 'open'"
                " AND (i.assignee IS NULL OR i.assignee = '' OR i.assignee = ?)) OR (i.status = 'in_progress'"
                " AND i.assignee = ?)) FOR UPDATE OF i", (issue_id, who, who))
            if claimed is not None:
                return claimed
            raise _unclaimable(issue_id, self.get(issue_id))
        with self.transaction(exclusive=False) as c:
            if not self._claim_in(c, issue_id, who):
                raise _unclaimable(issue_id, self._row(c, issue_id))
        return self.get(issue_id)

    def claim_next(self, actor: str | None = None, *, labels: Sequence[str] = (),
                   issue_type: str | Sequence[str] | None = None,
                   parent: str | None = None, skip: Iterable[str] = (),
                   gate: tuple[str, Sequence[Any]] | None = None) -> dict | None:
        """Claim the first ready issue (ready order) that no one else is claiming, or None.

        On PostgreSQL the candidates are read ``FOR UPDATE SKIP LOCKED``: N runners asking at
        once each lock a different row instead of queueing behind the first one.

        ``gate`` (PostgreSQL only): ``(sql, params)`` of a data-modifying statement over the
        candidate ``cand`` (its ``id``, locked) returning the ``id`` it admits, such as the
        ``INSERT ... ON CONFLICT ... RETURNING`` of a lease on it; it runs in the claim's own
        statement, and only a candidate it admits is claimed: one round trip for both, all or
        nothing. A candidate it refuses is passed over, the next one tried.
        """
        who = actor or self.actor
        avoid = set(skip)
        if self.db.engine == "postgresql":
            while True:
                taken = self._claim_next_in_one(who, labels=labels, issue_type=issue_type, parent=parent,
                                                avoid=avoid, gate=gate)
                if not isinstance(taken, str):
                    return taken
                avoid.add(taken)  # refused by the gate
        if gate is not None:
            raise InvalidValueError("claim_next's gate is PostgreSQL's (data-modifying CTEs)")
        sql, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent,
                                      limit=len(avoid) + 8, now=None, columns="i.id")
        with self.transaction(exclusive=False) as c:
            for (issue_id,) in c.execute(sql, params).fetchall():
                if issue_id not in avoid and self._claim_in(c, issue_id, who):
                    break
            else:
                return None
        return self.get(issue_id)

    def _claim_next_in_one(self, who: str, *, labels: Sequence[str], issue_type: str | Sequence[str] | None,
                           parent: str | None, avoid: set[str],
                           gate: tuple[str, Sequence[Any]] | None = None) -> dict | str | None:
        """``claim_next`` on PostgreSQL: one statement, one round trip.

        The first ready issue ``who`` may claim is locked ``FOR UPDATE SKIP LOCKED`` (N claimers
        at once each take a different row), updated, its kept originals of status and assignee
        dropped and its ``claimed`` events written, and returned hydrated: what ``_claim_in``
        and ``get`` do in a dozen statements. The statement commits on its own, all or nothing.
        With a ``gate``, the id of a candidate it refused instead.
        """
        ready, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent, limit=1, now=None,
                                        columns="i.id, i.status, i.assignee",
                                        extra_where=["(i.assignee IS NULL OR i.assignee = '' OR i.assignee = ?)",
                                                     "i.id <> ALL(?::text[])"],
                                        extra_params=[who, sorted(avoid)])
        prefix = "WITH "
        if ready.lstrip().startswith("WITH"):  # a parent's scope: its CTE leads the statement
            head, _, body = ready.partition(") SELECT ")
            prefix, ready = head + "), ", "SELECT " + body
        return self._claim_in_one(who, prefix, f"{ready} FOR UPDATE OF i SKIP LOCKED", params, gate)

    def _claim_in_one(self, who: str, prefix: str, candidate: str, params: Sequence[Any],
                      gate: tuple[str, Sequence[Any]] | None = None) -> dict | str | None:
        """Claim the issue ``candidate`` selects (``id, status, assignee``, locked) in one statement:
        update it, drop its kept originals of status and assignee, write its ``claimed`` events and
        answer it hydrated, as ``_claim_in`` then ``get`` would; None when nothing was selected, the
        candidate's id when ``gate`` (``claim_next``) refused it. PostgreSQL only (data-modifying
        CTEs); the statement commits on its own, all or nothing."""
        now = now_iso()
        sql = _claim_sql(prefix, candidate, gate[0] if gate else None)
        params = (*params, *(gate[1] if gate else ()), who, now, self.actor, now, self.actor, who, now, who)
        with self.db._lock:
            row = self.db.conn.fetch_one(sql, params)
        if row is None:
            return None
        if gate is None:
            return self._hydrated_row(row)
        return row[0] if row[1] is None else self._hydrated_row(row[1:])

    def _claim_in(self, c: Conn, issue_id: str, who: str) -> bool:
        """The claim's compare-and-set inside a transaction: False when the issue is not
        claimable by ``who`` (or someone else changed it first)."""
        row = c.execute("SELECT status, assignee FROM issues WHERE id = ?", (issue_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no issue {issue_id!r}")
        status, assignee = row[0], row[1]
        if not ((status == "open" and (not assignee or assignee == who)) or (status == "in_progress" and assignee == who)):
            return False
        now = now_iso()
        won = c.execute(
            "UPDATE issues SET status = 'in_progress', assignee = ?, updated_at = ?"
            " WHERE id = ? AND status = ? AND COALESCE(assignee, '') = ? RETURNING id",
            (who, now, issue_id, status, assignee or ""),
        ).fetchone()
        if won is None:
            return False
        _drop_kept_originals(c, issue_id, ("status", "assignee"))
        if status != "in_progress":
            self._event(c, issue_id, "claimed", "status", status, "in_progress", at=now)
        if assignee != who:
            self._event(c, issue_id, "claimed", "assignee", assignee, who, at=now)
        return True


_CLAIM_SQL: dict[tuple[str, str, str | None], str] = {}


def _claim_sql(prefix: str, candidate: str, gate: str | None) -> str:
    """The statement of ``_claim_in_one`` (built once per candidate query and gate, of which there
    are as many as ``claim_next``'s option sets: its columns joined at each call were a tenth of
    the client's time)."""
    key = (prefix, candidate, gate)
    if key not in _CLAIM_SQL:
        _CLAIM_SQL[key] = _build_claim_sql(prefix, candidate, gate)
    return _CLAIM_SQL[key]


def _build_claim_sql(prefix: str, candidate: str, gate: str | None) -> str:
    from .pg_functions import RELATED, open_labels_left, without_keys  # here: a SQLite process never loads it

    kept = "ARRAY['status', 'assignee']"  # the kept originals a claim supersedes
    columns = ", ".join(f"u.{c}" for c in _ISSUE_COLUMNS)
    # A gate's statement reads the candidate and returns what it admits, which the update joins:
    # its RETURNING is the one thing a data-modifying CTE shows another.
    admitted = "" if gate is None else " JOIN gate ON gate.id = cand.id"
    answer = f"SELECT {', '.join(_ISSUE_COLUMNS)}, {RELATED} FROM won w"
    if gate is not None:  # the candidate's id, then the issue claimed (NULLs: the gate refused it)
        answer = f"SELECT cand.id, a.* FROM cand LEFT JOIN LATERAL ({answer}) a ON true"
    return (
        f"{prefix}cand AS ({candidate}),"
        + ("" if gate is None else f" gate AS ({gate}),")
        + f" won AS (UPDATE issues u SET status = 'in_progress', assignee = ?, updated_at = ?,"
        f" extra = {without_keys('u.extra', kept)}"
        f" FROM cand{admitted} WHERE u.id = cand.id RETURNING {columns}, cand.status AS old_status,"
        " cand.assignee AS old_assignee),"
        " ev AS (INSERT INTO events(issue_id, event_type, actor, field, old_value, new_value, created_at)"
        " SELECT id, 'claimed', ?, 'status', old_status, 'in_progress', ? FROM won"
        " WHERE old_status <> 'in_progress'"
        " UNION ALL SELECT id, 'claimed', ?, 'assignee', old_assignee, ?, ? FROM won"
        " WHERE old_assignee IS DISTINCT FROM ?),"
        # Its label rows leave ``open_labels`` (tracker.pg_functions) with the open status.
        f" lo AS ({open_labels_left('won')}) {answer}"
    )

def _unclaimable(issue_id: str, row: Any) -> ConflictError:
    assignee = row.get("assignee") if isinstance(row, dict) else row["assignee"]  # an issue object, or a row
    holder = f" by {assignee}" if assignee else ""
    return ConflictError(f"{issue_id} cannot be claimed: it is {row['status']}{holder}")
