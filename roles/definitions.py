"""The protocol's rounds and roles: names, role briefs, and who answers which round.

Names are the profile's: the round names are what a backend is told (``MESH_ROUND``,
a replay response's ``round``), the role names are the artifact bus keys.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ROUNDS",
    "FULL_ROLES",
    "FALLBACK_ROLES",
    "REVIEWER",
    "CRITIC_ROLES",
    "ALL_ROLES",
    "CANDIDATE_BRIEF",
    "ROLE_BRIEFS",
    "OUTBOX_ROUNDS",
    "critics_for",
    "round_owner",
    "round_roles",
]

ROUNDS: tuple[str, ...] = (
    "hydration",
    "proposal",
    "critique",
    "synthesis",
    "vote",
    "review",
    "revision-plan",
    "revision",
    "choice",
)

FULL_ROLES: tuple[str, ...] = ("proposer", "critic_a", "critic_b", "skeptic", "synthesizer")
FALLBACK_ROLES: tuple[str, ...] = ("proposer", "skeptic", "synthesizer")
REVIEWER = "reviewer"
CRITIC_ROLES: tuple[str, ...] = ("critic_a", "critic_b", "skeptic")
ALL_ROLES: tuple[str, ...] = FULL_ROLES + (REVIEWER,)

ROLE_BRIEFS: dict[str, str] = {
    "proposer": (
        "Proposer: you own the plan. Propose the smallest change that meets every acceptance "
        "criterion, in the codebase's existing style, and state its assumptions and risk "
        "honestly. In later rounds, judge whether the result still serves the task."
    ),
    "critic_a": (
        "Critic A, correctness: check that the plan or patch actually works. Look for logic "
        "errors, wrong or misused APIs, unhandled edge cases and failure paths, acceptance "
        "criteria left unmet, and tests that are missing or would not catch the bug. Back "
        "every objection with concrete evidence."
    ),
    "critic_b": (
        "Critic B, scope: check that the change does what the task asks and no more. Look for "
        "scope creep, required pieces left out, needless churn or refactoring, and conflicts "
        "with the task's design notes and the codebase's conventions and boundaries."
    ),
    "skeptic": (
        "Skeptic, risk: ask what could go wrong. Look for regressions, data loss, security "
        "holes, performance and concurrency problems, hard-to-undo steps, and assumptions "
        "that may be false. Rate risk realistically, neither alarmist nor complacent."
    ),
    "synthesizer": (
        "Synthesizer: integrate the proposal and the critiques into one decision. Accept or "
        "reject every critique point with a reason, produce exactly one unified diff (or "
        "NO_DIFF:<reason>), and name the validation commands that prove it works. After a "
        "review you also write the revision plan and the revision."
    ),
    REVIEWER: (
        "Reviewer: an independent third party who did not write this change; the quality gate "
        "before the task closes. Look for bugs, spec deviations, regressions, security, "
        "performance and missing tests, and for deviations from the codebase's conventions "
        "(naming, responsibility boundaries, exception handling, test style); weigh the "
        "technical judgement calls and whether the chosen option beats the alternatives. Do "
        "not reopen the design debate: route design changes through findings."
    ),
}

# A role other than the synthesizer writing a synthesis: one of the ``candidates`` profile's
# authors (each role answers with its own model or agent CLI, so the candidates differ).
CANDIDATE_BRIEF = (
    "Candidate author: write one complete change that does the task, on your own. Other authors "
    "write theirs at the same time; each is validated, and the one whose validation passes is "
    "kept (the reviewer chooses between several that pass). Prefer the smallest change that "
    "meets every acceptance criterion, with the tests that prove it."
)

# The profile gives an optional outbox (notes to other roles) to the planning rounds only.
OUTBOX_ROUNDS: tuple[str, ...] = ("proposal", "critique", "synthesis", "revision-plan", "revision")

# Rounds answered by one fixed role; critique and vote fan out to several roles.
_ROUND_OWNERS: dict[str, str | None] = {
    "hydration": "proposer",
    "proposal": "proposer",
    "critique": None,
    "synthesis": "synthesizer",
    "vote": None,
    "review": REVIEWER,
    "revision-plan": "synthesizer",
    "revision": "synthesizer",
    "choice": REVIEWER,
}


def critics_for(roles: Sequence[str]) -> tuple[str, ...]:
    """Return the critic roles present in ``roles``, in the profile's order.

    The full set yields ``("critic_a", "critic_b", "skeptic")``; the fallback set
    yields ``("skeptic",)``.
    """
    present = set(roles)
    return tuple(role for role in CRITIC_ROLES if role in present)


def round_owner(round: str) -> str | None:
    """Return the role that answers ``round`` alone, or None when several roles answer it.

    Raises ValueError for a name that is not one of ``ROUNDS``.
    """
    try:
        return _ROUND_OWNERS[round]
    except KeyError:
        raise ValueError(f"unknown round {round!r}; expected one of {', '.join(ROUNDS)}") from None


def round_roles(round: str) -> tuple[str, ...]:
    """Return every role that may answer ``round``, in the profile's order.

    Critique goes to the critics, a vote to the five full roles, a synthesis to the
    synthesizer first and then to any other full role (the ``candidates`` profile's authors) (the fallback set asks a
    subset of both), any other round to its owner. Raises ValueError for an unknown round.
    """
    owner = round_owner(round)
    if round == "synthesis":
        # The candidates profile asks several roles for a synthesis each.
        return (owner,) + tuple(role for role in FULL_ROLES if role != owner)
    if owner is not None:
        return (owner,)
    return CRITIC_ROLES if round == "critique" else FULL_ROLES
