"""Ready work and claims: what can be worked on now, and taking it.

``ReadyWork`` is one part of ``store.Tracker``. ``blocked`` and ``defer_eff`` are kept
current by every write (``db.refresh_ready_state``), so ready work is one indexed query;
a claim is one compare-and-set ``UPDATE`` that exactly one claimer wins.
"""

from __future__ import annotations

from .errors import ConflictError, InvalidValueError, NotFoundError
from .issues import _descendants_cte, _drop_kept_originals
from .model import BLOCKING_STATUSES, NON_WORK_TYPES, normalize_ts, now_iso
from .rows import _ISSUE_COLUMNS, _ISSUE_SELECT

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any
    from .rows import Conn

__all__ = ["ReadyWork"]

_SQL_BLOCKING = "(" + ",".join(f"'{s}'" for s in BLOCKING_STATUSES) + ")"
_SQL_NON_WORK = "(" + ",".join(f"'{t}'" for t in NON_WORK_TYPES) + ")"


class ReadyWork:
    """Ready work, the issues blocking one, and claims."""

    def ready(
        self,
        *,
        labels: Sequence[str] = (),
        issue_type: str | Sequence[str] | None = None,
        parent: str | None = None,
        limit: int | None = None,
        now: str | None = None,
        hydrate: bool = True,
    ) -> list[dict]:
        """Ready work: open, not pinned or ephemeral, not deferred, not blocked.

        Blocked means a ``blocks`` dependency on an issue whose status is open,
        in_progress, blocked, deferred or hooked, or an ancestor (through
        ``parent-child``) that is blocked; deferral is inherited from ancestors
        the same way. Non-work types (gate, agent, role, molecule, message,
        merge-request, rig) are left out unless ``issue_type`` (one type or several) names one.
        Ordered by (priority, created_at, id). ``parent`` keeps descendants of it
        (an unknown ``parent`` is a ``NotFoundError``, not an empty answer).
        """
        if parent:
            self._require(parent)
        if not hydrate:
            sql, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent, limit=limit,
                                          now=now, columns="i.*")
            return [dict(r) for r in self.db.read(sql, params)]
        sql, params = self._ready_sql(labels=labels, issue_type=issue_type, parent=parent, limit=limit, now=now)
        return self._hydrate(self.db.read_tuples(sql, params)[1])

    def _ready_sql(self, *, labels, issue_type, parent, limit, now, columns: str = _ISSUE_SELECT,
                   extra_where: Sequence[str] = (), extra_params: Sequence[Any] = (),
                   ordered: bool = True) -> tuple[str, tuple]:
        # ``blocked`` and ``defer_eff`` are kept current by every write (see
        # db.refresh_ready_state), so ready work is one indexed pass over the issues.
        labels = list(labels)
        where = [
            "i.status = 'open'",
            "i.blocked = 0",
            "(i.defer_eff IS NULL OR i.defer_eff <= ?)",
            # Not COALESCE(x, 0) = 0: PostgreSQL's planner cannot estimate it, guesses that almost
            # nothing is ready and scans the whole table instead of the ready-order index.
            "(i.ephemeral IS NULL OR i.ephemeral = 0)",
            "(i.pinned IS NULL OR i.pinned = 0)",
        ]
        where += extra_where
        params: list[Any] = [normalize_ts(now) if now else now_iso(), *extra_params]
        if issue_type:
            types = [issue_type] if isinstance(issue_type, str) else list(issue_type)
            where.append(f"i.issue_type IN ({','.join('?' * len(types))})")
            params += types
        else:
            where.append(f"i.issue_type NOT IN {_SQL_NON_WORK}")
        for label in labels[1:]:
            where.append("i.id IN (SELECT issue_id FROM labels WHERE label = ?)")
            params.append(label)
        cte = ""
        if parent:
            cte, sparams = _descendants_cte(parent, True)
            where.append("i.id IN (SELECT id FROM scope)")
            params = sparams + params
        # The plan is chosen here, not left to statistics a fresh workspace lacks. A
        # label drives the search: its issues, each checked in a covering index of the
        # open, unblocked issues (a join, not IN, so SQLite never starts from the other
        # side). A scope does the same through that index. A type alone walks
        # (status, type, ...) in ready order; with no filter the index of open,
        # unblocked issues is already in ready order, so a LIMIT stops after a few rows.
        order = "i.priority, i.created_sort, i.id"
        if labels and self.db.engine == "postgresql":
            # The label's open issues in ready order, from their label rows' copy of it
            # (``open_labels``, tracker.pg_functions): the walk reads the label's open issues only.
            source = "open_labels l0 JOIN issues i ON i.id = l0.issue_id"
            where.append("l0.label = ?")
            params.append(labels[0])
            order = "l0.priority, l0.created_sort, l0.issue_id"
        elif labels:
            source = "labels l0 CROSS JOIN issues i INDEXED BY issues_ready_by_id ON i.id = l0.issue_id"
            where.append("l0.label = ?")
            params.append(labels[0])
        elif parent or not ordered:  # unordered (a count): the covering index, no row read
            source = "issues i INDEXED BY issues_ready_by_id"
        elif issue_type:
            source = "issues i INDEXED BY issues_by_status"
        else:
            source = "issues i INDEXED BY issues_ready_order"
        sql = f"{cte} SELECT {columns} FROM {source} WHERE {' AND '.join(where)}"
        if ordered:
            sql += f" ORDER BY {order}"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return sql, tuple(params)

    def blockers(self, issue_id: str) -> list[dict]:
        """Issues that block ``issue_id`` right now (its own ``blocks`` edges to open work)."""
        _, rows = self.db.read_tuples(
            f"SELECT {_ISSUE_SELECT} FROM dependencies d JOIN issues i ON i.id = d.depends_on_id"
            f" WHERE d.issue_id = ? AND d.type = 'blocks' AND i.status IN {_SQL_BLOCKING} ORDER BY i.id",
            (issue_id,),
        )
        return self._hydrate(rows, counts=False)

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
        with self.db.transaction(exclusive=False) as c:
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
        with self.db.transaction(exclusive=False) as c:
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
