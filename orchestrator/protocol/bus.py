"""The in-memory artifact bus of one task (the profile's "In-Memory Artifact Bus").

Rounds hand artifacts to each other through this object, not through tracker
comments. Every mutation goes through a method that appends an audit entry to
``history``; a retry or a new cycle never overwrites an earlier artifact
destructively: the earlier one stays queryable in ``history``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ArtifactBus", "RetryCounters", "HistoryEntry"]


@dataclass
class RetryCounters:
    """The profile's ``retry_counters``."""

    worker_retry: int = 0
    parse_retry: int = 0
    consensus_cycle: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"worker_retry": self.worker_retry, "parse_retry": self.parse_retry,
                "consensus_cycle": self.consensus_cycle}


@dataclass(frozen=True)
class HistoryEntry:
    """One append-only audit record of a bus mutation."""

    seq: int
    event: str
    consensus_cycle: int
    review_cycle: int
    role: str | None
    data: Any

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "event": self.event, "consensus_cycle": self.consensus_cycle,
                "review_cycle": self.review_cycle, "role": self.role, "data": self.data}


@dataclass
class ArtifactBus:
    """Per-task state, with every field the profile lists.

    Artifacts are stored as plain dicts (``model_dump`` of the role schemas) so
    that the bus can be rebuilt from checkpoint payloads byte for byte.
    """

    task_id: str
    task_meta: dict[str, Any]
    proposal: dict[str, Any] | None = None
    critiques: dict[str, dict[str, Any]] = field(default_factory=dict)
    synthesis: dict[str, Any] | None = None
    votes: dict[str, dict[str, Any]] = field(default_factory=dict)
    reviews: dict[int, dict[str, Any]] = field(default_factory=dict)
    revision_plan: dict[str, Any] | None = None
    review_issue: str | None = None
    review_subtasks: dict[str, str] = field(default_factory=dict)
    mail: list[dict[str, Any]] = field(default_factory=list)
    retry_counters: RetryCounters = field(default_factory=RetryCounters)
    review_cycle: int = 0
    history: list[HistoryEntry] = field(default_factory=list)
    mode: str = "full"
    # Told of the fallback switch as it happens (the run prints it); not part of the state.
    on_fallback: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ audit

    def _log(self, event: str, data: Any = None, role: str | None = None) -> None:
        self.history.append(
            HistoryEntry(
                seq=len(self.history) + 1,
                event=event,
                consensus_cycle=self.retry_counters.consensus_cycle,
                review_cycle=self.review_cycle,
                role=role,
                data=copy.deepcopy(data),
            )
        )

    @property
    def consensus_cycle(self) -> int:
        return self.retry_counters.consensus_cycle

    # ------------------------------------------------------------------ mutations

    def set_task_meta(self, meta: dict[str, Any]) -> None:
        self.task_meta = dict(meta)
        self._log("task_meta", meta)

    def set_proposal(self, proposal: dict[str, Any]) -> None:
        self.proposal = proposal
        self._log("proposal", proposal, "proposer")

    def add_critique(self, role: str, critique: dict[str, Any]) -> None:
        self.critiques[role] = critique
        self._log("critique", critique, role)

    def set_synthesis(self, synthesis: dict[str, Any], *, event: str = "synthesis") -> None:
        self.synthesis = synthesis
        self._log(event, synthesis, "synthesizer")

    def add_vote(self, role: str, vote: dict[str, Any]) -> None:
        self.votes[role] = vote
        self._log("vote", vote, role)

    def start_consensus_cycle(self) -> None:
        """Begin a new critique -> synthesis -> vote cycle; the old one stays in history."""
        self._log("consensus_cycle_end", {"critiques": self.critiques, "synthesis": self.synthesis,
                                           "votes": self.votes})
        self.retry_counters.consensus_cycle += 1
        self.critiques = {}
        self.votes = {}

    def reset_round(self, *, critiques: bool = False, votes: bool = False) -> None:
        """Clear the active critiques/votes before a new round on a new subject (kept in history)."""
        if critiques:
            self.critiques = {}
        if votes:
            self.votes = {}
        self._log("round_reset", {"critiques": critiques, "votes": votes})

    def add_review(self, cycle: int, review: dict[str, Any]) -> None:
        self.reviews[cycle] = review
        self._log("review", review, "reviewer")

    def set_revision_plan(self, plan: dict[str, Any]) -> None:
        self.revision_plan = plan
        self._log("revision_plan", plan, "synthesizer")

    def set_review_cycle(self, cycle: int) -> None:
        self.review_cycle = cycle
        self._log("review_cycle", cycle)

    def set_review_issue(self, issue_id: str) -> None:
        self.review_issue = issue_id
        self._log("review_issue", issue_id)

    def add_review_subtask(self, finding_id: str, issue_id: str) -> None:
        self.review_subtasks[finding_id] = issue_id
        self._log("review_subtask", {"finding_id": finding_id, "issue_id": issue_id})

    def post_mail(self, sender: str, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            entry = {"from": sender, "to": message["to"], "message": message["message"], "delivered": False}
            self.mail.append(entry)
            self._log("mail", entry, sender)

    def take_mail(self, role: str) -> list[dict[str, str]]:
        """Undelivered messages for ``role``, marked delivered (the profile's outbox rule)."""
        out = []
        for entry in self.mail:
            if entry["to"] == role and not entry["delivered"]:
                entry["delivered"] = True
                out.append({"from": entry["from"], "message": entry["message"]})
        if out:
            self._log("mail_delivered", {"to": role, "count": len(out)}, role)
        return out

    def count_retry(self, kind: str) -> None:
        setattr(self.retry_counters, kind, getattr(self.retry_counters, kind) + 1)
        self._log(f"retry:{kind}", self.retry_counters.to_dict())

    def switch_to_fallback(self, reason: str) -> None:
        self.mode = "fallback"
        self._log("fallback", {"reason": reason})
        if self.on_fallback is not None:
            self.on_fallback(reason)

    def note(self, event: str, data: Any = None, role: str | None = None) -> None:
        """Append a free audit entry (decisions that change no artifact)."""
        self._log(event, data, role)

    # ------------------------------------------------------------------ queries

    def cycle_artifacts(self, event: str, consensus_cycle: int) -> list[HistoryEntry]:
        """Artifacts of ``event`` from a given consensus cycle, including superseded ones."""
        return [h for h in self.history if h.event == event and h.consensus_cycle == consensus_cycle]

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task_meta": self.task_meta,
            "proposal": self.proposal,
            "critiques": self.critiques,
            "synthesis": self.synthesis,
            "votes": self.votes,
            "reviews": {str(k): v for k, v in self.reviews.items()},
            "revision_plan": self.revision_plan,
            "review_issue": self.review_issue,
            "review_subtasks": self.review_subtasks,
            "mail": self.mail,
            "retry_counters": self.retry_counters.to_dict(),
            "review_cycle": self.review_cycle,
            "mode": self.mode,
            "history": [h.to_dict() for h in self.history],
        }
