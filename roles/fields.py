"""The fields of each round's artifact as the tolerant reading knows them: their kinds, the
aliases models use for them, and the words a choice field may start with.

Shared by ``parsing`` (which normalises JSON with them) and ``markdown`` (which finds
sections by them); private to ``roles``.
"""

from __future__ import annotations

import re
from typing import Any

# Field kinds decide how a markdown section or a loosely typed JSON value is read.
_TEXT, _LINE, _LIST, _CHOICE, _DECISIONS, _COMMANDS, _FINDINGS, _STEPS, _PATCH = (
    "text",
    "line",
    "list",
    "choice",
    "decisions",
    "commands",
    "findings",
    "steps",
    "patch",
)

_SYNTHESIS_FIELDS = {"decision_log": _DECISIONS, "patch": _PATCH, "validation_commands": _COMMANDS}
_FIELDS: dict[str, dict[str, str]] = {
    "hydration": {"acceptance": _TEXT, "design": _TEXT, "notes": _TEXT},
    "proposal": {"plan": _LIST, "assumptions": _LIST, "risk": _CHOICE},
    "critique": {"findings": _LIST, "must_fix": _LIST, "vote_flip_conditions": _LIST, "risk": _CHOICE},
    "synthesis": _SYNTHESIS_FIELDS,
    "vote": {"vote": _CHOICE, "reason": _LINE},
    "review": {"decision": _CHOICE, "findings": _FINDINGS, "summary": _TEXT},
    "revision-plan": {"summary": _TEXT, "steps": _STEPS},
    "revision": _SYNTHESIS_FIELDS,
    "choice": {"choice": _LINE, "reason": _TEXT},
}
_PATCH_ROUNDS = ("synthesis", "revision")

_SYNTHESIS_ALIASES = {
    "decisions": "decision_log",
    "diff": "patch",
    "validation": "validation_commands",
    "commands": "validation_commands",
}
_ALIASES: dict[str, dict[str, str]] = {
    "hydration": {"acceptance_criteria": "acceptance"},
    "proposal": {"steps": "plan", "risk_level": "risk"},
    "critique": {"risk_level": "risk", "flip_conditions": "vote_flip_conditions"},
    "synthesis": _SYNTHESIS_ALIASES,
    "vote": {"verdict": "vote", "rationale": "reason"},
    "review": {"verdict": "decision"},
    "revision-plan": {"plan": "steps"},
    "revision": _SYNTHESIS_ALIASES,
    "choice": {"chosen": "choice", "candidate": "choice", "rationale": "reason"},
}
_FINDING_KEYS = (
    "finding_id",
    "location",
    "severity",
    "label",
    "issue",
    "evidence",
    "minimal_fix",
    "code_context",
)
_FINDING_ALIASES = {"id": "finding_id", "fix": "minimal_fix", "context": "code_context", "code": "code_context"}
_STEP_ALIASES = {"id": "finding_id", "finding": "finding_id", "description": "change"}
_OUTBOX_ALIASES = {"role": "to", "recipient": "to", "text": "message", "body": "message"}

# Words a markdown value may start with, per choice field (longest first so "disagree"
# is tried before "agree"); the schema maps the aliases to the canonical values.
_CHOICE_WORDS = {
    "risk": ("medium", "high", "low"),
    "vote": ("disagreed", "disagree", "agreed", "agree"),
    "decision": ("changes_requested", "request_changes", "approved", "approve"),
}


def _norm_key(key: Any) -> str:
    """``"Vote Flip Conditions"``, ``"vote-flip-conditions"``, ``"voteFlipConditions"`` -> one key."""
    if not isinstance(key, str):
        return ""
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key.strip().strip("*` :"))
    return re.sub(r"[\s-]+", "_", key.lower())
