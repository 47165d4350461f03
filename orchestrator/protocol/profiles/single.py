"""``single``: one agent with the tests as feedback.

The synthesizer alone writes the patch from the task (no proposal, critique or vote); it is
applied and validated, and while the validation fails the agent gets the failures back as a
MUST_FIX finding and writes the next patch on top, up to ``[profiles] single_attempts``
patches in all. Then the review gate, as in every profile; a review that requests changes is
answered by one revision written straight from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.protocol.profiles.base import answer_review, ask_synthesis, with_reviewer
from orchestrator.protocol.validation_findings import with_validation_finding

__all__ = ["Single"]

_FEEDBACK = {"decision": "request_changes", "findings": [],
             "summary": "The validation of your patch fails: make it pass (the failures are below)."}


class Single:
    name = "single"

    def roles(self, config) -> list[str]:
        return with_reviewer(["synthesizer"])

    def decide(self, engine: Any) -> None:
        engine.bus.set_synthesis(ask_synthesis(engine, "synthesizer", {}, phase="c0"))
        engine.consensus_ok = True

    def first_patch(self, engine: Any) -> None:
        engine._integrate(engine.bus.synthesis, phase="c", step_name="synthesis")
        engine._validate(phase="r0")
        for attempt in range(2, engine.config.profiles.single_attempts + 1):
            if engine.validation_pass:
                return
            feedback = with_validation_finding(_FEEDBACK, engine.validation)
            answer_review(engine, feedback, phase=f"a{attempt}", step_name="attempt",
                          summary=f"attempt {attempt} of {engine.config.profiles.single_attempts}"
                                  " after failing validation")

    def revise(self, engine: Any, review: Mapping[str, Any]) -> None:
        cycle = engine.bus.review_cycle
        answer_review(engine, review, phase=f"r{cycle}", summary=f"revision for review cycle {cycle}")
