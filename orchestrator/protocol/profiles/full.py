"""``full``: the mesh profile (mesh-profile.md) as it always was.

Proposal (A), critiques by every critic (B), synthesis (C), a vote of every voting role (D)
reaching ``consensus_threshold``, up to ``consensus_retries`` more cycles; then the patch
applied and validated, and each review that requests changes answered by a revision plan
that is critiqued and voted on before the revision is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.protocol.profiles.base import with_reviewer

__all__ = ["Full"]


class Full:
    name = "full"

    def roles(self, config) -> list[str]:
        return with_reviewer(list(config.roles))

    def decide(self, engine: Any) -> None:
        engine._consensus_on_synthesis()

    def first_patch(self, engine: Any) -> None:
        engine._integrate(engine.bus.synthesis, phase="c", step_name="synthesis")
        engine._validate(phase="r0")

    def revise(self, engine: Any, review: Mapping[str, Any]) -> None:
        engine._revise(review)
