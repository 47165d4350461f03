"""The rounds of consensus and the integration of their patch: proposal (A), critique (B),
synthesis (C), vote (D), then applying the synthesis in the task's worktree and validating it.

Part of ``Engine`` (a mixin): it uses the engine's bus, checkpoints and worker calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roles.definitions import CRITIC_ROLES

from orchestrator.protocol.faults import crash_point
from orchestrator.protocol.validation_findings import allowed_commands_check
from orchestrator.protocol.proof import BaseTests, Proof, retry_flaky
from orchestrator.protocol.outcomes import Attempt, Blocked
from orchestrator.toolchains import base_results
from orchestrator.toolchains.base_check import check_commands, note_validated

if TYPE_CHECKING:
    from orchestrator.sandbox.validation import ValidationResult



class Rounds:
    """Rounds A-D, integration and validation of one run (mixed into ``Engine``)."""

    # ================================================================== rounds A-D

    def _consensus_on_synthesis(self) -> None:
        """Proposal once, then critique -> synthesis -> vote cycles until consensus or retries run out."""
        self._proposal()
        for cycle in range(self.config.consensus_retries + 1):
            if cycle:
                self.bus.start_consensus_cycle()
            phase = f"c{cycle}"
            self._critique({"subject": "proposal", "proposal": self.bus.proposal, **self._previous_cycle()},
                           phase=phase, subject="proposal")
            self._synthesis(phase)
            if self._vote({"subject": "synthesis", "proposal": self.bus.proposal, "synthesis": self.bus.synthesis},
                          phase=phase):
                return
        raise Blocked("no_consensus", f"{self.tally['agree']}/{len(self._voters())} agree after"
                      f" {self.config.consensus_retries + 1} cycle(s)")

    def _previous_cycle(self) -> dict[str, Any]:
        if not self.bus.consensus_cycle:
            return {}
        last = self.bus.cycle_artifacts("consensus_cycle_end", self.bus.consensus_cycle - 1)
        if not last:
            return {}
        return {"prior_votes": last[-1].data.get("votes") or {}}

    def _proposal(self) -> None:
        artifact, attempt = self._ask_one("proposer", "proposal", {}, kind="proposal", phase="p")
        if artifact is None:
            if attempt and attempt.failure == "unparsable":
                raise Blocked("proposal_unparsable", attempt.parse_error.message if attempt.parse_error else "")
            raise Blocked("no_response", "proposer gave no response")
        self.bus.set_proposal(artifact)
        self._checkpoint("proposal", "proposer", "p", f"risk={artifact['risk']} plan={len(artifact['plan'])} step(s)",
                         artifact, attempt=attempt,
                         details="\n".join(f"- {step}" for step in artifact["plan"]))

    def _critique(self, inputs: Mapping[str, Any], *, phase: str, subject: str) -> None:
        stored = self._stored_phase_roles("critique", phase)
        roles = [r for r in CRITIC_ROLES if r in self._critics() or r in stored]
        results = self._ask_many(roles, "critique", inputs, kind="critique", phase=phase)
        failed = [r for r, res in results.items() if isinstance(res, Attempt) and res.failure == "no_response"]
        if failed and self.bus.mode == "full":
            self.bus.switch_to_fallback(f"no response from {', '.join(failed)} in critique")
            for role in failed:
                if role in self.config.fallback_roles:
                    again = self._ask(role, "critique", inputs, outbox=self.bus.take_mail(role))
                    self._account(again)
                    results[role] = again
        for role, res in results.items():
            artifact = res if isinstance(res, dict) else (res.parsed.artifact.model_dump() if res.parsed else None)
            if artifact is None:
                if role in self._critics() and res.failure == "no_response" and self.bus.mode == "fallback":
                    raise Blocked("no_response", f"{role} gave no response in critique")
                # A critique is advice: an unusable one is dropped (audited), not fatal.
                self.bus.note("critique_dropped", {"failure": res.failure,
                                                   "error": res.parse_error.message if res.parse_error else None}, role)
                continue
            self._record_critique(role, artifact, res, phase=phase, subject=subject)

    def _record_critique(self, role: str, artifact: dict, attempt: Any, *, phase: str, subject: str) -> None:
        """A critique on the bus and checkpointed."""
        self.bus.add_critique(role, artifact)
        self._checkpoint("critique", role, phase,
                         f"{role} risk={artifact['risk']} must_fix={len(artifact['must_fix'])} ({subject})",
                         artifact, attempt=attempt, extra={"subject": subject})

    def _ask_patch(self, role: str, round_name: str, inputs: Mapping[str, Any], *, kind: str,
                   phase: str) -> tuple[dict, Attempt | None]:
        """Ask ``role`` for a patch (a synthesis or a revision) with the allowed validation commands,
        checked against the allowlist; none: Blocked ``no_response``, or the configuration's mistake
        when the allowlist admitted none of its commands twice."""
        cfg = self.config.validation
        artifact, attempt = self._ask_one(role, round_name, {**inputs, "allowed_commands": cfg.allow}, kind=kind,
                                          phase=phase, validate=allowed_commands_check(cfg.allow, cfg.required))
        if artifact is None:
            if attempt and attempt.failure == "unparsable":
                self._unparsable_patch(attempt)
            raise Blocked("no_response", f"{role} gave no {round_name}")
        return artifact, attempt

    def _synthesis(self, phase: str) -> None:
        inputs = {"proposal": self.bus.proposal, "critiques": self.bus.critiques, **self._previous_cycle()}
        artifact, attempt = self._ask_patch("synthesizer", "synthesis", inputs, kind="synthesis", phase=phase)
        self.bus.set_synthesis(artifact)
        self._checkpoint("synthesis", "synthesizer", phase, synthesis_line(artifact), artifact, attempt=attempt)

    def _vote(self, inputs: Mapping[str, Any], *, phase: str) -> bool:
        """Round D: every voter at once; invalid shapes get one follow-up, then count as disagree."""
        self._stored_phase_roles("vote", phase)
        voters = self._voters()
        results = self._ask_many(voters, "vote", inputs, kind="vote", phase=phase)
        failed = [r for r, res in results.items() if isinstance(res, Attempt) and res.failure == "no_response"]
        if failed and self.bus.mode == "full":
            self.bus.switch_to_fallback(f"no response from {', '.join(failed)} in vote")
            voters = self._voters()
            for role in failed:
                if role in voters:
                    again = self._ask(role, "vote", inputs)
                    self._account(again)
                    results[role] = again
        votes: dict[str, dict] = {}
        for role in voters:
            res = results.get(role)
            if isinstance(res, dict):
                votes[role] = res
            elif res is not None and res.parsed:
                votes[role] = res.parsed.artifact.model_dump()
            else:
                reason = "invalid_vote_shape" if res is not None and res.failure == "unparsable" else "no_response"
                votes[role] = {"vote": "disagree", "reason": reason}
        agree = sum(1 for v in votes.values() if v["vote"] == "agree")
        needed = len(voters) if self.bus.mode == "fallback" else self.config.consensus_needed
        self.tally = {"agree": agree, "disagree": len(voters) - agree}
        for role in voters:
            self.bus.add_vote(role, votes[role])
            res = results.get(role)
            self._checkpoint("vote", role, phase,
                             f"{votes[role]['vote']} {agree}/{len(voters)} (cycle {self.bus.consensus_cycle}) {role}:"
                             f" {votes[role]['reason']}", votes[role],
                             attempt=res,
                             extra={"subject": inputs.get("subject"), "tally": self.tally, "needed": needed})
        self.consensus_ok = agree >= needed
        self.bus.note("consensus", {"agree": agree, "needed": needed, "ok": self.consensus_ok})
        return self.consensus_ok

    # ================================================================== integration & validation

    def _checked_patch(self, patch: str):
        """The project's patch policy, after ``patch`` passed it and the size caps; Blocked
        (``patch_refused`` or ``policy_violation``) when it does not."""
        from orchestrator.worktree.patchcheck import PatchRefused, check_patch
        from orchestrator.worktree.policy import PatchPolicy, PolicyViolation

        policy = PatchPolicy.from_config(self.config.patch)
        try:
            summary = check_patch(patch, max_bytes=self.config.patch.max_bytes, max_files=self.config.patch.max_files)
            policy.check(summary, root=self.worktree.path)
        except PatchRefused as exc:
            raise Blocked("patch_refused", f"{exc.reason}: {exc.detail}") from None
        except PolicyViolation as exc:
            raise Blocked("policy_violation", exc.detail) from None
        return policy

    def _integrate(self, artifact: Mapping[str, Any], *, phase: str, step_name: str) -> None:
        """Check and apply a patch in the task worktree, then commit it (once, even on resume)."""
        from orchestrator.worktree.gitops import GitError

        patch = artifact["patch"]
        if patch.startswith("NO_DIFF:"):
            self.bus.note("no_diff", {"reason": patch, "step": step_name})
            return
        marker = f"{step_name}:{phase}:{self.bus.review_cycle}"
        if self.worktree.find_commit(run_id=self.run_id, trailer="Mesh-Step", value=marker):
            return
        policy = self._checked_patch(patch)
        if self.worktree.is_applied(patch) and self.worktree.holds_nothing_new():
            # Not a resumed step (its change would be in the worktree or a commit of this branch):
            # the base already holds the change. Nothing to validate, review or land.
            from orchestrator.worktree.patchcheck import check_patch

            files = sorted(check_patch(patch, max_bytes=max(len(patch) * 4, 1), max_files=1 << 30).files)
            holder = self.worktree.last_commit_touching(files)
            raise Blocked("already_landed", f"the change is already on the branch this task starts from"
                                            f" ({self.worktree.base[:12]})" + (f": commit {holder[:12]} holds it"
                                                                                if holder else "")
                          + "; there is nothing to land (close the task if that commit did its work)")
        if not self.worktree.is_applied(patch):
            try:
                self.worktree.apply(patch, policy=policy)
            except GitError as exc:
                # "patch_refused": what the worktree holds (a planted symlink, FIFO, hard link).
                reason = exc.reason if exc.reason in ("patch_refused", "policy_violation") else "patch_does_not_apply"
                raise Blocked(reason, str(exc)) from None
            crash_point("apply")
        sha = self.worktree.commit(
            f"mesh: {self.task['title']}\n\n{step_name} for {self.task['id']} (review cycle {self.bus.review_cycle})",
            task_id=self.task["id"], run_id=self.run_id, extra_trailers={"Mesh-Step": marker},
        )
        self.mutations.append(f"commit {sha[:12]} on {self.worktree.branch}")
        crash_point("commit")

    def _prepare_worktree(self) -> None:
        """The task's worktree on ``mesh/<task-id>`` (reused by a resumed run)."""
        from orchestrator.worktree.gitops import GitError, Worktree

        try:
            base = self.lander.cut_base() if self.lander else "HEAD"
            self.worktree = Worktree.prepare(self.repo, self.task["id"], protected=self.config.protected_branches,
                                             base=base, run_id=self.run_id)
            earlier = [run for run in self.worktree.runs() if run != self.run_id]
            if earlier and not self.resumed:
                # A new run starts from the current HEAD; an earlier attempt's commits are kept
                # on their own branch rather than stacked under this run's patch.
                kept = f"{self.worktree.branch}-{earlier[-1]}"
                self.worktree.set_aside(kept)
                self.mutations.append(f"earlier attempt kept on branch {kept}")
                self.worktree = Worktree.prepare(self.repo, self.task["id"],
                                                 protected=self.config.protected_branches, base=base)
            elif not self.resumed and (left := self.worktree.start_from(base)):
                # An earlier run left the branch without a commit (a configuration mistake stopped
                # it): this run starts where tasks start now, not on that run's older tree.
                self.mutations.append(f"{self.worktree.branch} moved from {left[:12]} to {self.worktree.base[:12]}"
                                      " (it held no commits of its own)")
        except GitError as exc:
            raise Blocked("patch_refused", f"{exc.reason}: {exc}") from None
        self.mutations.append(f"worktree on branch {self.worktree.branch}")

    def _validate(self, *, phase: str) -> None:
        """Run the allowed validation commands; persist the evidence as ``[orch:proof]``."""

        stored = self._stored("proof", None, phase)
        if stored is not None:
            self.validation = stored["artifact"]["results"]
            self.validation_pass = stored["artifact"]["passed"]
            return
        commands = list((self.bus.synthesis or {}).get("validation_commands") or [])
        proof = self._proof_of_this_tree(commands)
        reused = proof is not None
        proof = proof or self._validate_head(commands)
        self.validation, self.validation_pass = proof.results, proof.passed
        self._checkpoint("proof", None, phase, ("same commit as the last proof, not run again: " if reused else "")
                         + proof.summary(), proof.artifact(), details=proof.details())
        self.watch.validation(proof.results)
        if self.config.validation.required and not proof.ran:
            raise Blocked("missing_validation_requirements",
                          "no validation command to run" if not commands
                          else f"none of {len(commands)} validation command(s) is allowed by validation.allow")

    def _proof_of_this_tree(self, commands: list[str]) -> Proof | None:
        """The run's last proof when it judged the commit the branch is at with the same commands
        (a revision that changed nothing): its verdict stands, the tree is not run again."""
        head = self.worktree.head()
        proofs = [cp.payload.get("artifact") or {} for step, cp in self.memo.items() if step[0] == "proof"]
        last = proofs[-1] if proofs else None
        if not last or last.get("commit") != head or not isinstance(last.get("results"), list):
            return None
        if [r.get("command") for r in last["results"] if isinstance(r, Mapping)] != \
                [*commands, *self._covering_checks(commands)]:
            return None
        return Proof(list(last["results"]), bool(last.get("passed")),
                     sum(1 for r in last["results"] if isinstance(r, Mapping) and not r.get("rejected")), head,
                     BaseTests.resumed([last], last["base_tests"]["commit"]) if isinstance(last.get("base_tests"), Mapping)
                     and isinstance(last["base_tests"].get("commit"), str) else None)

    def _covering_checks(self, commands: list[str]) -> list[str]:
        """The project's check commands covering one of ``commands`` (``subset_runs.covering``)."""
        from orchestrator.sandbox.subset_runs import covering

        checks = list(self.base_check.commands) if self.base_check is not None else \
            check_commands(self.config.validation, list(getattr(self.environment, "checks", ()) or ()))
        return covering(commands, checks, self.worktree.path)

    def _validate_head(self, commands: list[str], head: str | None = None) -> Proof:
        """Run ``commands`` on the head of the engine's task branch (or on the commit ``head``);
        with ``validation.compare_base``,
        hold each test runner's counts against the base tree's (counted once per run, and taken
        from the run's stored proofs when it was resumed)."""
        from orchestrator.sandbox.bwrap import tracker_paths
        from orchestrator.sandbox.validation import run_configured

        cfg = self.config.validation

        def run(wanted: list[str], commit: str, since: str | None = None) -> list[ValidationResult]:
            # The sandbox runs exactly this commit's tree: files left uncommitted in the worktree are not there.
            return run_configured(wanted, cfg, cwd=self.worktree.path, commit=commit,
                                  environment=self.environment, hidden=tracker_paths(self.tracker), since=since)

        head = head or self.worktree.head()
        # A command the project's check covers is judged from the check's run, which then also
        # serves as the base check of the task cut from this tree: its tests run once.
        commands = [*commands, *self._covering_checks(commands)]
        # A workspace's packages the change does not reach are not run (the base's run them all).
        results = run(commands, head, self.worktree.base)
        crash_point("validation")
        repo = Path(self.environment.project_root) if getattr(self.environment, "project_root", None) \
            else self.worktree.repo_root
        allow_failing = self.base_check is not None and cfg.allow_failing_base
        if (cfg.compare_base or allow_failing) and self.base_tests is None:
            stored = [cp.payload.get("artifact") for step, cp in self.memo.items() if step[0] == "proof"]
            self.base_tests = BaseTests.resumed(stored, self.worktree.base)
            tree = base_results.tree_of(repo, self.base_tests.commit)
            if tree is not None:  # each test's status on the base, kept on this machine by tree
                self.base_tests.store = (repo, tree, base_results.view_key(self.environment))
                # A command the base check's run covers is read from it, the base not run again.
                self.base_tests.covering = list(self.base_check.commands) if self.base_check is not None else \
                    check_commands(cfg, list(getattr(self.environment, "checks", ()) or ()))
                self.base_tests.tree_path = self.worktree.path
            if self.base_check is not None and self.base_check.commit == self.base_tests.commit:
                # The base check ran these commands on this very tree: its counts serve.
                for result in self.base_check.results:
                    if result.get("passed") and result.get("tests"):
                        self.base_tests.counts.setdefault(result["command"], result["tests"])
        if cfg.compare_base:
            base = self.base_tests

            def rerun(command: str, test_id: str | None) -> ValidationResult:
                return run_configured([command], cfg, cwd=self.worktree.path, commit=head, environment=self.environment,
                                      hidden=tracker_paths(self.tracker), since=self.worktree.base,
                                      select={command: test_id} if test_id else None)[0]

            results = retry_flaky(results, base, lambda wanted: run(wanted, base.commit), rerun, cfg.flaky_retries)
            results = base.judge(results, lambda wanted: run(wanted, base.commit))
        if allow_failing:
            # The base tree fails its check and the user allowed it: only new failures count, test by test.
            results = self.base_check.judge(results, self.base_tests.known)
        proof = Proof.of(results, commit=head, base_tests=self.base_tests)
        if proof.passed:
            # A tree whose check commands passed here is a passed base for the task cut after it lands,
            # and every command's test statuses are its, for the comparison of the task cut after it.
            note_validated(repo, head, results, self.environment, cfg)
            tree = base_results.tree_of(repo, head)
            for result in results if tree is not None else ():
                if result.run is not None and not result.rejected:
                    base_results.save(repo, tree, result.command, base_results.view_key(self.environment), result.run)
        return proof


def synthesis_line(artifact: Mapping[str, Any]) -> str:
    """``12-line diff; 1 validation command(s)``: a synthesis checkpoint's header."""
    patch = artifact["patch"]
    what = patch.split("\n", 1)[0] if patch.startswith("NO_DIFF:") else f"{patch.count(chr(10)) + 1}-line diff"
    return f"{what}; {len(artifact['validation_commands'])} validation command(s)"
