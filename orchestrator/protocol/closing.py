"""How a run ends: the close rule, a reasoned block, the outcome checkpoint, the signed run head
and the run report.

Part of ``Engine`` (a mixin): it uses the engine's bus, checkpoints and tracker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tracker.errors import ConflictError

from orchestrator.protocol.faults import crash_point
from orchestrator.protocol.proof import brief, state
from orchestrator.protocol.runhead import RUN_HEAD, run_head_artifact, validated_commit
from orchestrator.protocol.supersede import close_superseded
from orchestrator.protocol.outcomes import CLOSE_REASON, Blocked, ConfigMistake, RunReport



class Closing:
    """The close, the block and the outcome of one run (mixed into ``Engine``)."""

    # ================================================================== outcomes

    def _close(self) -> RunReport:
        last_review = self.bus.reviews.get(self.bus.review_cycle)
        conditions = {
            "vote_consensus": self.consensus_ok,
            "validation_pass": bool(self.validation_pass),
            "review_decision": (last_review is not None and last_review["decision"] == "approve")
            or not self.config.review_required_for_close,
            "open_must_fix_findings": sum(1 for f in (last_review or {}).get("findings", [])
                                          if f["label"] == "MUST_FIX"),
        }
        ok = (conditions["vote_consensus"] and conditions["validation_pass"] and conditions["review_decision"]
              and conditions["open_must_fix_findings"] == 0)
        if not ok:
            raise Blocked("review_not_approved", f"close conditions not met: {conditions}")
        if self.lander is not None:
            # Under --onto / mesh drain the close rule gains: the work is on the integration branch.
            conditions["on_integration_branch"] = self.lander.land(self)
            if self.config.forge is not None:
                published = self.lander.publish(self, conditions["on_integration_branch"])
                # The forge's checks and reviewers on the pushed head: changes asked raise
                # ForgeChanges (a revision cycle); the state is a close condition of "forge" mode.
                conditions["forge_checks"] = self.lander.forge_verdict(self, published)
        # The signed run head comes before the close (or the CI gate): a CI closer racing this
        # close, or a resume after a kill here, finds the approval bound to its commit and tree.
        # "forge": closed here when the head's required checks passed, else left to the CI gate
        # (mesh forge sync closes it once they pass, or on the merge).
        waits = self.config.close_mode == "ci" or (
            self.config.close_mode == "forge" and conditions.get("forge_checks") != "passed")
        head = self._write_close_head("awaiting_ci" if waits else "closed", conditions)
        task_id = self.task["id"]
        if waits:
            self._check_lease()
            gate = self.tracker.gate_create(f"CI close for {task_id}", blocks=task_id, await_type="ci",
                                            await_id=self.run_id, idempotency_key=f"{self.run_id}:ci-gate")
            self.mutations.append(f"gate {gate['id']} (await ci) blocks {task_id}")
            return self._finish("awaiting_ci", conditions=conditions)
        # Earlier attempts' review and finding issues: this attempt fixed what they asked. Closed
        # before the task (a resume after a kill in between closes what is left).
        attempt = (head.get("artifact") or {}).get("attempt")
        for issue in close_superseded(self.tracker, task_id, f"superseded: run {self.run_id}"
                                      + (f" (attempt {attempt})" if attempt else "") + f" closed {task_id}",
                                      keep={self.bus.review_issue}, before_write=self._check_lease):
            self.mutations.append(f"closed {issue} (superseded by run {self.run_id})")
        crash_point("close")
        self._check_lease()
        try:
            self.tracker.close_issue(task_id, reason=CLOSE_REASON, expect_status=("in_progress",))
            self.mutations.append(f"{task_id}: closed ({CLOSE_REASON})")
            crash_point("closed")
        except ConflictError as exc:
            if self.tracker.get(task_id)["status"] != "closed":
                raise
            self.bus.note("close_conflict", str(exc))
        return self._finish("closed", conditions=conditions)

    def _block(self, blocked: Blocked) -> RunReport:
        task_id = self.task["id"]
        self.bus.note("blocked", {"reason": blocked.reason, "detail": blocked.detail})

        def mark_blocked() -> None:
            # After the run head: a run killed right after this is found by its head and
            # resumed to write its outcome (mesh resume, mesh drain), never left without one.
            if self.integrate:
                current = self.tracker.get(task_id)
                if current["status"] not in ("blocked", "closed"):
                    self._check_lease()
                    self.tracker.update(task_id, status="blocked")
                    self.mutations.append(f"{task_id}: status -> blocked ({blocked.reason})")
                    crash_point("block")

        return self._finish("blocked", block=blocked, before_outcome=mark_blocked)

    def _stop_for_config(self, mistake: ConfigMistake) -> RunReport:
        """End the run on a configuration mistake: the task back to open (it is not its fault),
        the outcome ``config_mistake`` naming what did not match (exit 2)."""
        task_id = self.task["id"]

        def reopen() -> None:
            if self.integrate and self.tracker.get(task_id)["status"] == "in_progress":
                self._check_lease()
                self.tracker.update(task_id, status="open", assignee="")
                self.mutations.append(f"{task_id}: status -> open (a configuration mistake, not the task's)")

        return self._finish("config_mistake", block=Blocked("config_mistake", mistake.detail), before_outcome=reopen)

    def _finish(self, outcome: str, *, block: Blocked | None = None, conditions: Mapping[str, Any] | None = None,
                before_outcome: Callable[[], None] | None = None) -> RunReport:
        if self.integrate:
            self._release_agents("done" if outcome in ("closed", "awaiting_ci") else "stopped")
        last_review = self.bus.reviews[max(self.bus.reviews)] if self.bus.reviews else None
        lines = [
            f"outcome: {outcome}" + (f" ({block.reason}: {block.detail})" if block else ""),
            f"votes: {self.tally['agree']} agree / {self.tally['disagree']} disagree"
            f" (consensus cycles {self.bus.consensus_cycle + 1}, mode {self.bus.mode})",
        ]
        lines += [f"validation: {v['command']} -> {state(v)}" for v in self.validation]
        if self.bus.reviews:
            last = self.bus.reviews[max(self.bus.reviews)]
            lines.append(f"review: {last['decision']} after {self.bus.review_cycle} cycle(s)")
        if self.bus.review_issue:
            lines.append(f"review issue: {self.bus.review_issue} with {len(self.bus.review_subtasks)} finding issue(s)")
        summary = {"outcome": outcome, "block_reason": block.reason if block else None,
                   "block_detail": block.detail if block else None, "tally": self.tally,
                   "validation": self.validation, "review_decision": last_review["decision"] if last_review else None,
                   "review_cycles": self.bus.review_cycle, "review_issue": self.bus.review_issue,
                   "review_subtasks": self.bus.review_subtasks, "conditions": dict(conditions or {}),
                   "usage": self.usage.to_dict()}
        self._write_run_head(summary)
        if before_outcome is not None:
            before_outcome()
        self._checkpoint("outcome", None, "outcome", lines[0], summary, details="\n".join(lines[1:]))
        return self.report(outcome, block)

    def report(self, outcome: str, block: Blocked | None = None) -> RunReport:
        votes = {role: v["vote"] for role, v in self.bus.votes.items()}
        last_review = self.bus.reviews[max(self.bus.reviews)] if self.bus.reviews else None
        task = self.tracker.get(self.task["id"])
        return RunReport(
            orch_run_id=self.run_id,
            preflight=self.preflight,
            scope=self.scope.to_dict(),
            task={"id": task["id"], "title": task["title"], "final_status": task["status"]},
            outcome=outcome,
            block_reason=block.reason if block else None,
            block_detail=block.detail if block else None,
            consensus={"cycles": self.bus.consensus_cycle + 1, "mode": self.bus.mode, "tally": dict(self.tally),
                       "votes": votes},
            validation=[brief(v, output=True) for v in self.validation],
            review={"decision": last_review["decision"] if last_review else None, "cycles": self.bus.review_cycle,
                    "review_issue": self.bus.review_issue, "subtasks": dict(self.bus.review_subtasks)},
            mutations=list(self.mutations),
            usage={"calls": self.calls, "input_tokens": self.usage.input_tokens,
                   "output_tokens": self.usage.output_tokens, "cache_read_tokens": self.usage.cache_read_tokens,
                   "cache_write_tokens": self.usage.cache_write_tokens, "cost_usd": round(self.usage.cost_usd, 6),
                   "prices_as_of": self.config.prices.as_of},
            synthesis=self.bus.synthesis if outcome == "synthesis_only" else None,
        )

    # ================================================================== the run head

    def _write_run_head(self, outcome_artifact: Mapping[str, Any]) -> dict:
        """Write the run's ``[orch:run-head]`` (once: a resumed run reuses it) from its stored
        outcome; returns its payload."""
        proofs = [cp for step, cp in self.memo.items() if step[0] == "proof"]
        commit = validated_commit(proofs) if self.integrate else None
        summary, artifact = run_head_artifact(self.tracker, self.task["id"], self.run_id, self.key, repo=self.repo,
                                              commit=commit, outcome_artifact=outcome_artifact)
        return self._checkpoint(RUN_HEAD, None, RUN_HEAD, summary, artifact)

    def _write_close_head(self, outcome: str, conditions: Mapping[str, Any]) -> dict:
        """Write the run head of an approved run before it closes or waits for CI (once)."""
        last = self.bus.reviews[max(self.bus.reviews)] if self.bus.reviews else None
        return self._write_run_head({"outcome": outcome, "conditions": dict(conditions),
                                     "review_decision": last["decision"] if last else None,
                                     "validation": self.validation,
                                     "review_subtasks": dict(self.bus.review_subtasks)})
