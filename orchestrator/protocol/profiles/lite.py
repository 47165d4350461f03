"""``lite``: the fewest rounds that keep a plan, one critique and a review.

The proposer plans (A); one critic (``[profiles] lite_critic``, the skeptic by default)
critiques the plan (B); the synthesizer writes the patch weighing that critique (C). There is
no vote: the synthesis, having met its critique, stands (``consensus_ok``), so the close rule
rests on the validation and the review. A review that requests changes is answered by one
revision written straight from the review (no revision plan, critique or vote).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.protocol.profiles.base import answer_review, ask_synthesis, with_reviewer

__all__ = ["Lite"]


class Lite:
    name = "lite"

    def roles(self, config) -> list[str]:
        return with_reviewer(["proposer", config.profiles.lite_critic, "synthesizer"])

    def decide(self, engine: Any) -> None:
        engine._proposal()
        critic = engine.config.profiles.lite_critic
        artifact, attempt = engine._ask_one(critic, "critique", {"subject": "proposal",
                                                                 "proposal": engine.bus.proposal},
                                            kind="critique", phase="c0")
        if artifact is not None:
            engine._record_critique(critic, artifact, attempt, phase="c0", subject="proposal")
        else:  # advice: an unusable critique is dropped (audited), as in the full profile
            engine.bus.note("critique_dropped", {"failure": attempt.failure if attempt else None}, critic)
        engine.bus.set_synthesis(ask_synthesis(engine, "synthesizer", {"proposal": engine.bus.proposal,
                                                                       "critiques": engine.bus.critiques}, phase="c0"))
        engine.consensus_ok = True

    def first_patch(self, engine: Any) -> None:
        engine._integrate(engine.bus.synthesis, phase="c", step_name="synthesis")
        engine._validate(phase="r0")

    def revise(self, engine: Any, review: Mapping[str, Any]) -> None:
        cycle = engine.bus.review_cycle
        answer_review(engine, review, phase=f"r{cycle}", summary=f"revision for review cycle {cycle}")
