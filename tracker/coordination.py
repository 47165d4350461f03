"""Gates, slots and agents: the coordination issues of bd (gate, agent and role issues).

``Coordination`` is one part of ``store.Tracker``. A gate is an issue that blocks the
waiting one until it is resolved (by hand, by CI, or when its timer elapses); an agent
issue has a ``hook`` and a ``role`` slot and a state.
"""

from __future__ import annotations

from .errors import ConflictError, InvalidValueError
from .model import AGENT_STATES, normalize_ts, now_iso
from .rows import _row_obj

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Iterable
    from .rows import Conn, Row

__all__ = ["Coordination"]


class Coordination:
    """Gates, agents' slots and states, and finding-or-creating agent and role issues."""

    def gate_create(self, title: str, *, blocks: str, await_type: str = "human",
                    timeout_ns: int | None = None, await_id: str | None = None,
                    idempotency_key: str | None = None) -> dict:
        """A gate issue that ``blocks`` the waiting issue until it is resolved."""
        if await_type not in ("human", "timer", "ci"):
            raise InvalidValueError(f"invalid await type {await_type!r} (human, timer, ci)")
        if await_type == "timer" and not timeout_ns:
            raise InvalidValueError("a timer gate needs --timeout")
        with self.transaction():
            self.get(blocks)
            gate = self.create(title, issue_type="gate", await_type=await_type, await_id=await_id,
                               timeout=timeout_ns, idempotency_key=idempotency_key)
            self.add_dependency(blocks, gate["id"], "blocks")
        return self.get(gate["id"])

    def gate_resolve(self, gate_id: str, *, reason: str = "resolved") -> dict:
        """Resolve a gate: close it, which unblocks what waits on it."""
        with self.transaction():
            gate = self.get(gate_id)
            if gate["issue_type"] != "gate":
                raise InvalidValueError(f"{gate_id} is a {gate['issue_type']}, not a gate")
            return self.close_issue(gate_id, reason=reason, force=True, expect_status=("open", "in_progress", "blocked"))

    def gate_check(self, now: str | None = None) -> list[dict]:
        """Resolve timer gates whose time has come; returns the gates resolved."""
        from .model import add_ns

        moment = normalize_ts(now) if now else normalize_ts(now_iso())
        due = []
        for row in self.db.read(
            "SELECT id, created_at, timeout FROM issues WHERE issue_type = 'gate' AND await_type = 'timer'"
            " AND status NOT IN ('closed','tombstone') AND timeout IS NOT NULL"
        ):
            if add_ns(row["created_at"], row["timeout"]) <= moment:
                due.append(row["id"])
        return [self.gate_resolve(g, reason="timer elapsed") for g in due]

    def _agent(self, c: Conn, agent_id: str) -> Row:
        row = self._row(c, agent_id)
        if row["issue_type"] != "agent":
            raise InvalidValueError(f"{agent_id} is a {row['issue_type']}, not an agent")
        return row

    def slot_set(self, agent_id: str, slot: str, issue_id: str, *, replace: str | None = None) -> dict:
        """Attach ``issue_id`` to an agent's ``hook`` (0..1, refused while held) or ``role`` slot.

        ``replace`` names the hook the caller has seen and means to replace (a compare-and-set:
        refused when the slot holds anything else by then).
        """
        field = _slot_field(slot)
        with self.transaction() as c:
            row = self._agent(c, agent_id)
            self._row(c, issue_id)
            held = row[field]
            if slot == "hook" and held and held != issue_id and held != replace:
                raise ConflictError(f"{agent_id} hook slot is held by {held} (clear it first)")
            self._apply(c, agent_id, _row_obj(row), {field: issue_id}, event_type="slot_set")
        return self.get(agent_id)

    def slot_clear(self, agent_id: str, slot: str) -> dict:
        field = _slot_field(slot)
        with self.transaction() as c:
            row = self._agent(c, agent_id)
            self._apply(c, agent_id, _row_obj(row), {field: None}, event_type="slot_cleared")
        return self.get(agent_id)

    def slot_show(self, agent_id: str) -> dict:
        with self.db._lock:
            row = self._agent(self.db.conn, agent_id)
        return {"agent": agent_id, "hook": row["hook_bead"], "role": row["role_bead"]}

    def agent_state(self, agent_id: str, state: str) -> dict:
        """Set an agent's state and its ``last_activity``."""
        if state not in AGENT_STATES:
            raise InvalidValueError(f"invalid agent state {state!r} (one of: {', '.join(AGENT_STATES)})")
        with self.transaction() as c:
            row = self._agent(c, agent_id)
            self._apply(c, agent_id, _row_obj(row),
                        {"agent_state": state, "last_activity": now_iso()}, event_type="agent_state")
        return self.get(agent_id)

    def ensure_agent(self, name: str, *, labels: Iterable[str] = ("gt:agent",), idempotency_key: str | None = None) -> dict:
        """The agent issue titled ``name``, created if missing."""
        return self._ensure_typed(name, "agent", labels, idempotency_key)

    def ensure_role(self, name: str, *, labels: Iterable[str] = ("gt:role",), idempotency_key: str | None = None) -> dict:
        """The role issue titled ``name``, created if missing."""
        return self._ensure_typed(name, "role", labels, idempotency_key)

    def _ensure_typed(self, name: str, issue_type: str, labels: Iterable[str], key: str | None) -> dict:
        with self.transaction():
            rows = self.db.read(
                "SELECT * FROM issues WHERE issue_type = ? AND title = ? AND status != 'tombstone' ORDER BY seq LIMIT 1",
                (issue_type, name),
            )
            if rows:
                return self._hydrate(rows)[0]
            return self.create(name, issue_type=issue_type, labels=labels,
                               idempotency_key=key or f"{issue_type}:{name}")


def _slot_field(slot: str) -> str:
    if slot == "hook":
        return "hook_bead"
    if slot == "role":
        return "role_bead"
    raise InvalidValueError(f"invalid slot {slot!r} (hook or role)")
