"""Pydantic models of every round's artifact (ARCHITECTURE section 5).

Every listed field is required and unknown keys are ignored. Validation normalises the
small variations models produce without changing meaning: surrounding whitespace is
stripped, enumerated values match case-insensitively (``"Medium"`` -> ``"medium"``,
``"request changes"`` -> ``"request_changes"``), a vote reason keeps its first line, and
a patch wrapped in a code fence is unwrapped. Anything else that is off is an error.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    field_validator,
)

from .definitions import OUTBOX_ROUNDS

__all__ = [
    "HydrationArtifact",
    "ProposalArtifact",
    "CritiqueArtifact",
    "DecisionLogEntry",
    "SynthesisArtifact",
    "VoteArtifact",
    "Finding",
    "ReviewArtifact",
    "RevisionStep",
    "RevisionPlanArtifact",
    "OutboxMessage",
    "ARTIFACT_SCHEMAS",
    "answer_model",
    "NO_DIFF_PREFIX",
    "looks_like_diff",
]

NO_DIFF_PREFIX = "NO_DIFF:"

# Headers git writes for a file whose only change is its mode, name or existence; such a
# diff has no ---/+++/@@ lines at all.
_GIT_EXTENDED_HEADERS = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
    "similarity index ",
    "dissimilarity index ",
)

_FENCE_OPEN = re.compile(r"\A[ \t]*(`{3,}|~{3,})[^\n`]*\n")


def _choice(*choices: str, aliases: dict[str, str] | None = None) -> BeforeValidator:
    """Match a string to one of ``choices`` ignoring case, spaces vs underscores and hyphens."""
    table = {re.sub(r"[\s-]+", "_", c.lower()): c for c in choices}
    for alias, target in (aliases or {}).items():
        table[alias] = target

    def normalise(value: Any) -> Any:
        if isinstance(value, str):
            key = re.sub(r"[\s-]+", "_", value.strip().strip("`*").strip().lower())
            return table.get(key, value)
        return value

    return BeforeValidator(normalise)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


Text = Annotated[str, StringConstraints(strip_whitespace=True)]
NonEmptyStr = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Risk = Annotated[Literal["low", "medium", "high"], _choice("low", "medium", "high")]


class _Artifact(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HydrationArtifact(_Artifact):
    """Task metadata written when the task lacks it: acceptance criteria, design, notes.

    ``acceptance`` must say something (it is why hydration runs); ``design`` and ``notes``
    may be empty strings when there is nothing to record.
    """

    acceptance: NonEmptyStr
    design: Text
    notes: Text


class ProposalArtifact(_Artifact):
    """Round A: a plan of 1 to 5 steps, its assumptions, and its risk."""

    plan: list[NonEmptyStr] = Field(min_length=1, max_length=5)
    assumptions: list[NonEmptyStr]
    risk: Risk


class CritiqueArtifact(_Artifact):
    """Round B, one per critic role: objections, the must-fix subset, and vote-flip conditions."""

    findings: list[NonEmptyStr]
    must_fix: list[NonEmptyStr]
    vote_flip_conditions: list[NonEmptyStr]
    risk: Risk


class DecisionLogEntry(_Artifact):
    """One critique point the synthesizer accepted or rejected, with the reason."""

    point: NonEmptyStr
    decision: Annotated[
        Literal["accepted", "rejected"],
        _choice("accepted", "rejected", aliases={"accept": "accepted", "reject": "rejected"}),
    ]
    reason: NonEmptyStr


def looks_like_diff(text: str) -> bool:
    """Tell whether ``text`` has the shape of a unified diff.

    True when it has ``--- ``/``+++ `` file headers and at least one ``@@`` hunk, or is a
    git diff whose files change only mode, name or existence (no hunks needed).
    """
    minus = plus = hunk = git = extended = False
    for line in text.splitlines():
        if line.startswith("--- "):
            minus = True
        elif line.startswith("+++ "):
            plus = True
        elif line.startswith("@@"):
            hunk = True
        elif line.startswith("diff --git "):
            git = True
        elif line.startswith(_GIT_EXTENDED_HEADERS):
            extended = True
    return (minus and plus and hunk) or (git and extended)


def _unfence(text: str) -> str:
    """Return the body of ``text`` when all of it is one fenced code block, else ``text``."""
    opening = _FENCE_OPEN.match(text)
    if opening is None:
        return text
    marker = opening.group(1)
    body = text[opening.end() :]
    stripped = body.rstrip()
    last_newline = stripped.rfind("\n")
    closing = stripped[last_newline + 1 :].strip()
    if closing and set(closing) == {marker[0]} and len(closing) >= len(marker):
        return stripped[: last_newline + 1] if last_newline >= 0 else ""
    return text


def _check_patch(value: str) -> str:
    """Normalise a patch to ``NO_DIFF: <reason>`` or a unified diff ending in a newline."""
    # Only whole blank lines go from the front: a diff's trailing context lines may be a
    # lone space, which stripping would corrupt.
    text = re.sub(r"\A(?:[ \t]*\n)+", "", value)
    head = text.lstrip()
    if head.startswith(NO_DIFF_PREFIX):
        reason = head[len(NO_DIFF_PREFIX) :].strip()
        if not reason:
            raise ValueError("NO_DIFF needs a reason: NO_DIFF:<reason>")
        return f"{NO_DIFF_PREFIX} {reason}"
    text = _unfence(text)
    if not looks_like_diff(text):
        raise ValueError(
            "must be one unified diff (---/+++ headers and @@ hunks) or NO_DIFF:<reason>"
        )
    return text if text.endswith("\n") else text + "\n"


class SynthesisArtifact(_Artifact):
    """Round C (and the ``revision`` round): decision log, one patch, validation commands."""

    decision_log: list[DecisionLogEntry]
    patch: Annotated[str, AfterValidator(_check_patch), Field(description=(
        "One unified diff in git format (a/ and b/ prefixes, paths from the repository root; a "
        "whole-answer code fence is unwrapped), or NO_DIFF:<reason> when no change is needed."))]
    validation_commands: Annotated[list[NonEmptyStr], Field(description=(
        "Commands run from the repository root without a shell; each must match the project's "
        "validation.allow."))]

    @property
    def no_diff_reason(self) -> str | None:
        """The reason given with ``NO_DIFF:``, or None when the patch is a diff."""
        if self.patch.startswith(NO_DIFF_PREFIX):
            return self.patch[len(NO_DIFF_PREFIX) :].strip()
        return None


def _first_line(value: str) -> str:
    for line in value.splitlines():
        if line.strip():
            return line.strip()
    raise ValueError("must be one non-empty line")


class VoteArtifact(_Artifact):
    """Round D: ``agree`` or ``disagree`` and a one-line reason (extra lines are dropped)."""

    vote: Annotated[
        Literal["agree", "disagree"],
        _choice("agree", "disagree", aliases={"agreed": "agree", "disagreed": "disagree"}),
    ]
    reason: Annotated[str, AfterValidator(_first_line), Field(description="One line; later lines are dropped.")]


def _check_location(value: str) -> str:
    """Accept ``path:line`` (or ``path:first-last``) with positive line numbers."""
    text = value.strip().strip("`").strip()
    path, sep, lines = text.rpartition(":")
    if not sep or not path.strip() or "\n" in text:
        raise ValueError("must look like path:line")
    first, dash, last = lines.partition("-")
    numbers = [first, last] if dash else [first]
    if not all(n.isascii() and n.isdigit() and int(n) > 0 for n in numbers):
        raise ValueError("must look like path:line with a positive line number")
    if dash and int(last) < int(first):
        raise ValueError("line range must not run backwards")
    return text


class Finding(_Artifact):
    """One review finding; ``finding_id`` stays stable across review cycles."""

    finding_id: Annotated[NonEmptyStr, Field(description=(
        "Unique within the review; reuse an earlier cycle's id for a finding still open."))]
    location: Annotated[str, AfterValidator(_check_location), Field(description=(
        "path:line or path:first-last, line numbers from 1."))]
    severity: Annotated[
        Literal["Critical", "High", "Medium", "Low"],
        _choice("Critical", "High", "Medium", "Low"),
    ]
    label: Annotated[
        Literal["MUST_FIX", "SHOULD_CONSIDER", "CAN_IGNORE"],
        _choice("MUST_FIX", "SHOULD_CONSIDER", "CAN_IGNORE"),
    ]
    issue: NonEmptyStr
    evidence: NonEmptyStr
    minimal_fix: NonEmptyStr
    # Indentation is part of a code excerpt, so only blankness is checked.
    code_context: Annotated[str, AfterValidator(_not_blank)]


def _check_summary(value: str) -> str:
    lines = [line for line in value.strip().splitlines() if line.strip()]
    if not lines:
        raise ValueError("must not be empty")
    if len(lines) > 5:
        raise ValueError("must be 1-5 lines")
    return "\n".join(line.rstrip() for line in lines)


class ReviewArtifact(_Artifact):
    """Round E: the reviewer's decision, findings and a 1-5 line summary."""

    decision: Annotated[
        Literal["approve", "request_changes"],
        _choice(
            "approve",
            "request_changes",
            aliases={"approved": "approve", "changes_requested": "request_changes"},
        ),
    ]
    findings: list[Finding]
    summary: Annotated[str, AfterValidator(_check_summary), Field(description="1 to 5 non-empty lines.")]

    @field_validator("findings")
    @classmethod
    def _unique_ids(cls, findings: list[Finding]) -> list[Finding]:
        # Review sub-issues are keyed by finding_id, so two findings may not share one.
        seen: set[str] = set()
        for finding in findings:
            if finding.finding_id in seen:
                raise ValueError(f"duplicate finding_id {finding.finding_id!r}")
            seen.add(finding.finding_id)
        return findings


class RevisionStep(_Artifact):
    """One change of a revision plan, tied to the finding it answers."""

    finding_id: NonEmptyStr
    change: NonEmptyStr


class RevisionPlanArtifact(_Artifact):
    """The synthesizer's answer to ``request_changes``: a summary and at least one step."""

    summary: NonEmptyStr
    steps: list[RevisionStep] = Field(min_length=1)


class OutboxMessage(_Artifact):
    """A worker's note to another role, delivered before that role's next round."""

    to: NonEmptyStr
    message: NonEmptyStr


class ChoiceArtifact(_Artifact):
    """The reviewer's choice between candidate patches that all pass their validation."""

    choice: Annotated[NonEmptyStr, Field(description="the name of the chosen candidate, as listed")]
    reason: NonEmptyStr


ARTIFACT_SCHEMAS: dict[str, type[BaseModel]] = {
    "hydration": HydrationArtifact,
    "proposal": ProposalArtifact,
    "critique": CritiqueArtifact,
    "synthesis": SynthesisArtifact,
    "vote": VoteArtifact,
    "review": ReviewArtifact,
    "revision-plan": RevisionPlanArtifact,
    "revision": SynthesisArtifact,
    "choice": ChoiceArtifact,
}


class _EnvelopeBase(BaseModel):
    role: str
    task_id: str


@functools.lru_cache(maxsize=64)
def answer_model(schema: type[BaseModel], round_name: str, strict: bool) -> type[BaseModel]:
    """The pydantic model a worker's whole answer to ``round_name`` must match.

    Strict mode: the envelope ``{"role", "task_id", "artifact", "outbox"?}`` around
    ``schema``; otherwise the artifact itself. ``outbox`` (optional) is offered in the
    rounds whose prompt offers it (``OUTBOX_ROUNDS``). ``role`` is a plain string, not a
    constant, so every role of a round gets the same schema and a backend's request prefix
    stays cacheable; the engine's parser checks the role. Backends with structured output
    send its JSON schema; ``mesh schema`` prints it.
    """
    outbox_field: dict[str, Any] = {}
    if round_name in OUTBOX_ROUNDS:
        outbox_field["outbox"] = (list[OutboxMessage] | None, None)
    if strict:
        return create_model(f"{schema.__name__}Envelope", __base__=_EnvelopeBase, artifact=(schema, ...),
                            **outbox_field)
    if outbox_field:
        return create_model(f"{schema.__name__}WithOutbox", __base__=schema, **outbox_field)
    return schema
