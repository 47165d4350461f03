"""The protocol every profile follows, and the steps several profiles share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from roles.definitions import REVIEWER

from orchestrator.protocol.rounds import synthesis_line


if TYPE_CHECKING:
    from orchestrator.config import MeshConfig

__all__ = ["Profile", "answer_review", "ask_synthesis", "synthesis_line", "with_reviewer"]


class Profile(Protocol):
    """One way to take a task to its patch. Every step goes through the engine's checkpoints,
    keyed by (kind, role, phase), so a resumed run replays the same steps from them."""

    name: str

    def roles(self, config: MeshConfig) -> list[str]:
        """The roles the profile asks (their agents are hooked to the task), reviewer last."""

    def decide(self, engine: Any) -> None:
        """Rounds up to a synthesis on the bus (``engine.bus.synthesis``), with
        ``engine.consensus_ok`` set; Blocked when the profile's rule says no."""

    def first_patch(self, engine: Any) -> None:
        """The synthesis applied in the task's worktree and validated (``engine.validation``)."""

    def revise(self, engine: Any, review: Mapping[str, Any]) -> None:
        """The answer to a review that requested changes: a new patch, applied and validated."""


def with_reviewer(roles: list[str]) -> list[str]:
    """``roles`` with the reviewer at the end (once)."""
    return [r for r in roles if r != REVIEWER] + [REVIEWER]


def ask_synthesis(engine: Any, role: str, inputs: Mapping[str, Any], *, phase: str) -> dict:
    """One role's synthesis (asked, or taken from its checkpoint), checkpointed; Blocked when
    it gave none (the allowlist's follow-up and config mistake handled as in the full profile)."""
    artifact, attempt = engine._ask_patch(role, "synthesis", inputs, kind="synthesis", phase=phase)
    engine._checkpoint("synthesis", role, phase, synthesis_line(artifact), artifact, attempt=attempt)
    return artifact


def answer_review(engine: Any, review: Mapping[str, Any], *, phase: str, summary: str,
                  step_name: str = "revision") -> None:
    """The synthesizer's revision answering ``review`` directly (no revision plan, critique or
    vote), applied and validated under ``phase``."""
    inputs = {"review": review, "diff": engine.worktree.diff_from_base()}
    artifact, attempt = engine._ask_patch("synthesizer", "revision", inputs, kind="revision", phase=phase)
    if not artifact["validation_commands"]:
        artifact = {**artifact, "validation_commands": list(engine.bus.synthesis["validation_commands"])}
    engine.bus.set_synthesis(artifact, event="revision")
    engine._checkpoint("revision", "synthesizer", phase, summary, artifact, attempt=attempt)
    engine._integrate(artifact, phase=phase, step_name=step_name)
    engine._validate(phase=phase)
