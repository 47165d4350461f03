"""The review gate (E): the reviewer's decision, its findings as sub-issues, and revision cycles.

Part of ``Engine`` (a mixin): it uses the engine's bus, checkpoints and worker calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from roles.bounds import PATCH_TOO_LARGE
from roles.definitions import REVIEWER
from roles.parsing import ParseError, ParsedResponse
from roles.schemas import ReviewArtifact
from tracker.errors import ConflictError

from orchestrator.protocol.faults import crash_point
from orchestrator.protocol.proof import brief, failed_detail
from orchestrator.protocol.validation_findings import NOT_ALLOWED, with_validation_finding
from redact import scrub_obj
from orchestrator.protocol.human_review import REQUEST, wait_for_submission
from orchestrator.protocol.tamper_findings import TAMPER_PREFIX, with_tamper_findings
from orchestrator.protocol.outcomes import Attempt, Blocked, ConfigMistake, ForgeChanges, RunReport



class ReviewCycles:
    """The review gate and its revision cycles (mixed into ``Engine``)."""

    # ================================================================== review gate

    def _finding_location_check(self, parsed: ParsedResponse) -> None:
        for finding in getattr(parsed.artifact, "findings", []):
            if not self.worktree.location_exists(finding.location):
                raise ParseError("invalid_finding_shape",
                                 f"finding {finding.finding_id}: location {finding.location} does not exist in the"
                                 " worktree (use path:line of a real line)")

    def _review(self) -> dict:
        cycle = self.bus.review_cycle
        inputs = {"synthesis": self.bus.synthesis, "validation": self.validation, "review_cycle": cycle,
                  "diff": self.worktree.diff_from_base(),
                  "prior_reviews": [self.bus.reviews[c] for c in sorted(self.bus.reviews) if c < cycle]}
        if self._review_on_forge():
            # The person reviews on the pull request ([forge] reviewers): the work lands and is
            # pushed first, and their approval of its head is awaited there (forge_verdict).
            artifact = {"decision": "approve", "findings": [],
                        "summary": "Deferred to the pull request's reviewers (forge.reviewers)."}
            return self._record_review(cycle, artifact, None, extra={
                "reviewer": "deferred/forge", "tampering": [t.to_dict() for t in self._tampering()]})
        if self.human_review:
            artifact, person = self._person_review(cycle)
            return self._record_review(cycle, artifact, None, extra={"reviewer": person})
        artifact, attempt = self._ask_one(REVIEWER, "review", inputs, kind="review", phase=f"r{cycle}",
                                          validate=self._finding_location_check)
        if artifact is None:
            if attempt.failure == "no_response":
                raise Blocked("review_no_response", "reviewer gave no response twice")
            err = attempt.parse_error
            if err is not None and err.kind == "invalid_finding_shape":
                raise Blocked("invalid_finding_shape", err.message)
            raise Blocked("review_unparsable", err.message if err else "")
        return self._record_review(cycle, artifact, attempt)

    def _review_on_forge(self) -> bool:
        """A person's review is asked and given on the pull request: the task lands on a forge
        ([forge] with reviewers listed)."""
        forge = self.config.forge
        return bool(self.human_review and self.lander is not None and forge is not None and forge.reviewers)

    def _record_review(self, cycle: int, artifact: dict, attempt: Attempt | None, *,
                       extra: Mapping[str, Any] | None = None) -> dict:
        self.bus.add_review(cycle, artifact)
        must_fix = [f for f in artifact["findings"] if f["label"] == "MUST_FIX"]
        self._checkpoint("review", REVIEWER, f"r{cycle}",
                         f"decision={artifact['decision']} findings={len(artifact['findings'])}"
                         f" must_fix={len(must_fix)} (review cycle {cycle})", artifact,
                         attempt=attempt, details=artifact["summary"], extra=extra)
        return artifact

    def _tampering(self) -> list:
        """The lines of the task branch's change that reach into the test machinery."""
        from orchestrator.worktree.tamper import scan

        return scan(self.worktree.changed_texts())

    def _person_review(self, cycle: int) -> tuple[dict, str]:
        """Round E given by a person (``human_review``): ask once, wait, check, return the review.

        The request is checkpointed once; a resumed run waits again at the same request, and a
        review already recorded for the cycle is taken from its checkpoint.
        """
        phase = f"r{cycle}"
        stored = self._stored("review", REVIEWER, phase)
        if stored is not None:
            return stored["artifact"], str(stored.get("reviewer") or "person")
        task_id = self.task["id"]
        self._checkpoint(REQUEST, None, phase, f"waiting for a person's review (review cycle {cycle})",
                         {"cycle": cycle, "commit": self.worktree.head(), "branch": self.worktree.branch,
                          "base": self.worktree.base, "diff": self.worktree.diff_from_base(),
                          "validation": [brief(v) for v in self.validation],
                          "tampering": [t.to_dict() for t in self._tampering()]})
        self.echo(f"waiting for a person's review: mesh review {task_id}")
        review, person = wait_for_submission(self.tracker, task_id, self.run_id, cycle, self.key,
                                             poll_s=self.config.human_review_poll_s, still_mine=self._check_lease)
        try:
            review = ReviewArtifact.model_validate(review).model_dump(mode="json")
        except ValidationError as exc:
            raise Blocked("review_unparsable", f"the person's review: {exc.errors()[0].get('msg')}") from None
        missing = [f["location"] for f in review["findings"] if not self.worktree.location_exists(f["location"])]
        if missing:
            raise Blocked("invalid_finding_shape", "the person's review names lines the worktree does not have: "
                          + ", ".join(missing))
        return review, f"person/{person}"

    def _review_gate(self) -> RunReport:
        """Round E, repeated through revision cycles until approval or ``review_max_cycles``."""
        while True:
            self.bus.set_review_cycle(self.bus.review_cycle + 1)
            cycle = self.bus.review_cycle
            review = self._review()
            if not self.validation_pass:
                # A failing validation is a MUST_FIX finding, whatever the reviewer said.
                review = with_validation_finding(review, self.validation)
            tampering = [] if self.human_review else self._tampering()  # a person was shown them
            if tampering:
                # Code reaching into the test machinery: only a person may approve it.
                review = with_tamper_findings(review, tampering)
            must_fix = [f for f in review["findings"] if f["label"] == "MUST_FIX"]
            approved = review["decision"] == "approve" and not must_fix
            self._sync_findings(review, approved)
            self._checkpoint("review-cycle", None, f"r{cycle}",
                             f"cycle {cycle}: {'approved' if approved else 'changes requested'}",
                             {"cycle": cycle, "decision": review["decision"], "approved": approved,
                              "open_must_fix": len(must_fix), "review_issue": self.bus.review_issue,
                              "subtasks": dict(self.bus.review_subtasks)})
            if approved:
                try:
                    return self._close()
                except ForgeChanges as changes:
                    # Landed and pushed, and the forge asks for changes: they are this cycle's
                    # findings (sub-issues), and a revision follows as after any review.
                    review, must_fix = changes.review, changes.review["findings"]
                    # The cycle's review is now what the pull request asked: its findings are what
                    # the revision fixes (and what the next landing's commit says it fixed).
                    self.bus.add_review(cycle, review)
                    self._sync_findings(review, False)
                    self._checkpoint("review-cycle", None, f"r{cycle}f",
                                     f"cycle {cycle}: changes asked on the pull request",
                                     {"cycle": cycle, "decision": review["decision"], "approved": False,
                                      "open_must_fix": len(must_fix), "review_issue": self.bus.review_issue,
                                      "subtasks": dict(self.bus.review_subtasks), "forge": True})
                    if cycle >= self.config.review_max_cycles:
                        raise Blocked("validation_failed" if any(f["finding_id"] == "VALIDATION" for f in must_fix)
                                      else "review_not_approved",
                                      f"{review['summary']} after {cycle} review cycle(s); the work is on"
                                      f" {self.lander.branch}, not closed") from None
                    self.profile.revise(self, review)
                    continue
            if cycle >= self.config.review_max_cycles and not self.validation_pass:
                raise Blocked("validation_failed", f"the validation still fails after {cycle} review cycle(s): "
                              + failed_detail(self.validation))
            if cycle >= self.config.review_max_cycles:
                suspected = [f["location"] for f in must_fix if f["finding_id"].startswith(TAMPER_PREFIX)]
                raise Blocked("review_not_approved", f"{len(must_fix)} MUST_FIX finding(s) open after {cycle}"
                              " review cycle(s)" + (f", {len(suspected)} of them suspected forgery of the test verdict"
                                                    f" ({', '.join(suspected[:3])}): only a person's review can approve"
                                                    " such a change (reviewer = \"human\", or the label review:human)"
                                                    if suspected else ""))
            self.profile.revise(self, review)

    def _revise(self, review: Mapping[str, Any]) -> None:
        """revision_plan -> critique + vote -> revision patch -> validation (the profile's steps 1-4)."""
        cycle = self.bus.review_cycle
        diff = self.worktree.diff_from_base()
        for plan_cycle in range(self.config.consensus_retries + 1):
            phase = f"r{cycle}p{plan_cycle}"
            inputs: dict[str, Any] = {"review": review, "diff": diff}
            if plan_cycle:
                inputs.update(revision_plan=self.bus.revision_plan, prior_votes=dict(self.bus.votes),
                              critiques=dict(self.bus.critiques))
            artifact, attempt = self._ask_one("synthesizer", "revision-plan", inputs, kind="revision-plan",
                                              phase=phase)
            if artifact is None:
                if attempt and attempt.failure == "unparsable":
                    raise Blocked("revision_plan_unparsable", attempt.parse_error.message if attempt.parse_error else "")
                raise Blocked("no_response", "synthesizer gave no revision plan")
            self.bus.set_revision_plan(artifact)
            self._checkpoint("revision-plan", "synthesizer", phase,
                             f"{len(artifact['steps'])} step(s) for review cycle {cycle}", artifact,
                             attempt=attempt, details=artifact["summary"])
            self.bus.reset_round(critiques=True, votes=True)
            self._critique({"subject": "revision_plan", "revision_plan": artifact, "review": review},
                           phase=phase, subject="revision_plan")
            if self._vote({"subject": "revision_plan", "revision_plan": artifact, "review": review,
                           "critiques": self.bus.critiques}, phase=phase):
                break
        else:
            raise Blocked("no_consensus", f"no consensus on the revision plan of review cycle {cycle}")
        inputs = {"review": review, "revision_plan": self.bus.revision_plan, "critiques": self.bus.critiques,
                  "diff": diff}
        artifact, attempt = self._ask_patch("synthesizer", "revision", inputs, kind="revision", phase=f"r{cycle}")
        if not artifact["validation_commands"]:
            artifact = {**artifact, "validation_commands": list(self.bus.synthesis["validation_commands"])}
        self.bus.set_synthesis(artifact, event="revision")
        self._checkpoint("revision", "synthesizer", f"r{cycle}",
                         f"revision for review cycle {cycle}", artifact, attempt=attempt)
        self._integrate(artifact, phase=f"r{cycle}", step_name="revision")
        self._validate(phase=f"r{cycle}")

    @staticmethod
    def _unparsable_patch(attempt: Attempt) -> None:
        message = attempt.parse_error.message if attempt.parse_error else ""
        if message.startswith(NOT_ALLOWED):
            # Twice now the synthesizer wrote commands the allowlist does not admit: the
            # allowlist is what to fix (the message says which token fell outside which entry).
            raise ConfigMistake(f"{message}. Fix validation.allow in mesh.toml (the task is left open)")
        if message.startswith(PATCH_TOO_LARGE):
            # Twice a patch past patch.max_bytes: what the patch check would have refused.
            raise Blocked("patch_refused", f"too_large: {message}")
        raise Blocked("no_diff_parsed", message)

    def _sync_findings(self, review: Mapping[str, Any], approved: bool) -> None:
        """The review-findings issue flow: one parent review issue, one child per finding
        (parent-child only); children closed as findings are resolved, the parent after all."""
        findings = review["findings"]
        open_ids = {f["finding_id"] for f in findings if f["label"] != "CAN_IGNORE"}
        task_id = self.task["id"]
        if not approved and findings and self.bus.review_issue is None:
            self._check_lease()
            parent = self.tracker.create(
                f"Review findings for {task_id}: {self.task['title']}"[:200], issue_type="chore",
                labels=["mesh:review"], parent=task_id,
                description=f"Findings of the mesh reviewer on {task_id} (run {self.run_id}).",
                idempotency_key=f"{self.run_id}:review-issue")
            crash_point("review-issue")
            self.bus.set_review_issue(parent["id"])
            self.mutations.append(f"created review issue {parent['id']}")
        if not approved:
            for f in findings:
                if f["finding_id"] in self.bus.review_subtasks:
                    continue
                f = scrub_obj(f)  # model text becomes issue text: no secret may land there
                self._check_lease()
                child = self.tracker.create(
                    f"[{f['severity']}/{f['label']}] {f['issue']}"[:200], issue_type="chore",
                    labels=["mesh:finding", f"severity:{f['severity']}", f"label:{f['label']}"],
                    parent=self.bus.review_issue,
                    description=f"{f['issue']}\n\nLocation: {f['location']}\nEvidence: {f['evidence']}\n"
                                f"Minimal fix: {f['minimal_fix']}\n\n```\n{f['code_context']}\n```",
                    metadata={"finding_id": f["finding_id"], "task_id": task_id, "run_id": self.run_id},
                    idempotency_key=f"{self.run_id}:finding:{f['finding_id']}")
                crash_point("finding-issue")
                self.bus.add_review_subtask(f["finding_id"], child["id"])
                self.mutations.append(f"created finding issue {child['id']} ({f['finding_id']})")
        # A finding is resolved once a later review no longer raises it (or approves).
        ignored = {f["finding_id"] for f in findings if f["label"] == "CAN_IGNORE"}
        for finding_id, issue_id in self.bus.review_subtasks.items():
            resolved = approved or finding_id not in open_ids
            if resolved and self.tracker.get(issue_id)["status"] != "closed":
                why = "CAN_IGNORE: no action needed" if finding_id in ignored else "resolved and re-reviewed"
                self._close_quietly(issue_id, f"{why} (review cycle {self.bus.review_cycle})")
        if approved and self.bus.review_issue and self.tracker.get(self.bus.review_issue)["status"] != "closed":
            children = [self.tracker.get(i)["status"] for i in self.bus.review_subtasks.values()]
            if all(s == "closed" for s in children):
                self._close_quietly(self.bus.review_issue, "all findings resolved")

    def _close_quietly(self, issue_id: str, reason: str) -> None:
        self._check_lease()
        try:
            self.tracker.close_issue(issue_id, reason=reason, force=True, expect_status=("open", "in_progress",
                                                                                      "blocked"))
            self.mutations.append(f"closed {issue_id} ({reason})")
        except ConflictError:
            pass  # closed by an earlier attempt of this run: the CAS keeps it once
