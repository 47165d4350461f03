"""What a run ends with and the control flow that gets it there.

The profile's block reasons and close reason, the run report (the reporting contract of
ARCHITECTURE section 3, ``--json``), one role's attempt at a round, and the exceptions that end a
run: ``Blocked`` (a reasoned block), ``SendBack`` (approved work that did not land gets a new
attempt) and ``TaskTaken`` (someone else holds the task). Landing, drains, ``ci-close`` and the
views read these without importing the engine.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from redact import scrub_obj
from roles.usage import Usage

if TYPE_CHECKING:  # types only: outcomes are read by views that never parse a worker's answer
    from roles.parsing import ParseError, ParsedResponse

__all__ = ["CLOSE_REASON", "BLOCK_REASONS", "Blocked", "ConfigMistake", "TaskTaken", "SendBack", "new_run_id", "Attempt", "RunReport"]

CLOSE_REASON = "vote consensus + validation pass + review approve + no open MUST_FIX findings"
BLOCK_REASONS = (
    "no_consensus",
    "proposal_unparsable",
    "no_diff_parsed",
    "review_no_response",
    "invalid_finding_shape",
    "review_unparsable",
    "review_not_approved",
    "missing_validation_requirements",
    "no_response",
    "patch_refused",
    "patch_does_not_apply",
    "validation_failed",
    "revision_plan_unparsable",
    "budget_exceeded",
    "merge_conflict",
    "integration_validation_failed",
    "tampered_checkpoint",
    "policy_violation",
    "already_landed",
)


class Blocked(Exception):
    """Control flow: the task ends blocked with one of ``BLOCK_REASONS``."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class ConfigMistake(Exception):
    """Control flow: the run stops on a configuration mistake, not the task's fault (the
    allowlist admits none of the commands the synthesizer proposed, even after its follow-up):
    the task goes back to open and the run exits 2, its detail saying what did not match."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class TaskTaken(Exception):
    """The task was claimed by someone else between selection and start."""


class SendBack(Exception):
    """Control flow: approved work did not land; the task gets a new attempt on the current tip."""


class ForgeChanges(Exception):
    """Control flow: landed and pushed work the forge asks changes of (a failing check, a listed
    reviewer's changes): ``review`` is the review it amounts to, for the revision."""

    def __init__(self, review: dict):
        super().__init__(review.get("summary") or "changes asked on the pull request")
        self.review = review


def new_run_id() -> str:
    """A sortable, unique run id."""
    return "run-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@dataclass
class Attempt:
    """The outcome of asking one role in one round (after the profile's retries)."""

    role: str
    parsed: ParsedResponse | None = None
    failure: str | None = None  # "no_response" or "unparsable"
    parse_error: ParseError | None = None
    usage: Usage = field(default_factory=Usage)
    worker_retries: int = 0
    parse_retries: int = 0


@dataclass
class RunReport:
    """The reporting contract (ARCHITECTURE section 3, ``--json``)."""

    orch_run_id: str
    preflight: str
    scope: dict[str, Any]
    task: dict[str, Any] | None
    outcome: str
    block_reason: str | None = None
    block_detail: str | None = None
    consensus: dict[str, Any] = field(default_factory=dict)
    validation: list[dict[str, Any]] = field(default_factory=list)
    review: dict[str, Any] = field(default_factory=dict)
    mutations: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    synthesis: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return 3 if self.outcome == "blocked" else 2 if self.outcome == "config_mistake" else 0

    def to_dict(self) -> dict[str, Any]:
        out = {
            "orch_run_id": self.orch_run_id,
            "preflight": self.preflight,
            "scope": self.scope,
            "task": self.task,
            "outcome": self.outcome,
            "block_reason": self.block_reason,
            "consensus": self.consensus,
            "validation": self.validation,
            "review": self.review,
            "mutations": self.mutations,
            "usage": self.usage,
        }
        if self.block_detail:
            out["block_detail"] = self.block_detail
        if self.synthesis is not None:
            out["synthesis"] = self.synthesis
        return scrub_obj(out)
