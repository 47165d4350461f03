"""The run: one task from ready to closed (or to a reasoned ``blocked``), per mesh-profile.md.

Reads top to bottom in the order of the profile: preflight, ownership,
hydration, proposal (A), critique (B), synthesis (C), vote (D), integration and
validation, review gate (E) with the review-findings issue flow and revision
cycles, close rule, outcome.

Every round result is checkpointed as an ``[orch:*]`` comment keyed by
``(run_id, seq)`` and by a step key ``(kind, role, phase)``. A resumed run
replays the same deterministic control flow; steps whose checkpoint exists are
taken from it instead of asking a worker again, so no model cost is paid twice
and no checkpoint is written twice.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from roles.backends.base import Backend, BackendError, Usage, WorkerRequest, WorkerResponse
from roles.definitions import CRITIC_ROLES, REVIEWER
from roles.parsing import ParseError, ParsedResponse, parse_response
from roles.prompts import build_prompt
from roles.schemas import ARTIFACT_SCHEMAS
from tracker.errors import ConflictError
from tracker.store import Tracker

from orchestrator.protocol.agents import hook_role_agent
from orchestrator.protocol.bus import ArtifactBus
from orchestrator.ledger.calls import ensure_calls_table, log_call, mark_rejected
from orchestrator.protocol.checkpoint import Checkpoint, checkpoint_problem, write_checkpoint, signing_key
from orchestrator.config import MeshConfig
from orchestrator.protocol.faults import crash_point
from orchestrator.protocol.lease import lease_is_live
from orchestrator.protocol.proof import failed_detail
from orchestrator.protocol.scope import Scope
from orchestrator.protocol.runhead import RUN_HEAD
from orchestrator.protocol.watch import RunWatch, call_error
from redact import scrub, scrub_obj
from orchestrator.protocol.human_review import wants_human_review
from orchestrator.protocol.outcomes import Attempt, Blocked, ConfigMistake, RunReport, SendBack, TaskTaken, new_run_id
from orchestrator.protocol.closing import Closing
from orchestrator.protocol.profiles.table import profile_for
from orchestrator.protocol.review import ReviewCycles
from orchestrator.protocol.rounds import Rounds

__all__ = ["Engine"]

class Engine(Rounds, ReviewCycles, Closing):
    """Drives one task through the profile's rounds. One instance, one task, one run."""

    def __init__(
        self,
        tracker: Tracker,
        backend: Backend,
        config: MeshConfig,
        *,
        scope: Scope,
        task: dict,
        selection_reason: str,
        repo: Path | None,
        run_id: str | None = None,
        ids: Sequence[str] = (),
        echo: Callable[[str], None] | None = None,
        resume_from: Sequence[Checkpoint] = (),
    ):
        self.tracker = tracker
        self.backend = backend
        self.config = config
        self.scope = scope
        self.task = task
        self.selection_reason = selection_reason
        self.repo = repo
        self.run_id = run_id or new_run_id()
        self.ids = list(ids)
        self.echo = echo or (lambda line: print(line, file=sys.stderr))
        self.integrate = config.integrate
        self.human_review = wants_human_review(config.reviewer, tracker, task)  # round E given by a person
        self.strict = config.strict_output
        self.key = signing_key()
        self.watch = RunWatch(self.echo, fallback_roles=config.fallback_roles)  # failed calls, waits, fallback
        self.bus = ArtifactBus(task_id=task["id"], task_meta=_task_meta(task), on_fallback=self.watch.fallback)
        self.usage = Usage()
        # Budget accounting: what finished calls used plus the worst case of calls in flight,
        # so that critics or voters asked at the same time cannot overshoot together.
        self._budget_lock = threading.Lock()
        self._budget_tokens = 0
        self._budget_usd = 0.0
        self._held_tokens = 0
        self._held_usd = 0.0
        # While a round's roles are asked at once: the spend settled when the round started. Each
        # of its calls is admitted against that (plus the worst cases held), so how many calls a
        # round makes never depends on which of them happens to finish first.
        self._round_spent: tuple[int, float] | None = None
        self.calls = 0
        self._agents: dict[str, str] = {}
        self.mutations: list[str] = []
        self.validation: list[dict[str, Any]] = []
        self.validation_pass: bool | None = None
        self.base_tests = None  # proof.BaseTests: the base tree's test counts, counted once per run
        self.worktree = None
        # Set by the caller: ``lander`` (orchestrator.landing.lander) cuts the worktree from and lands
        # approved work onto an integration branch; ``lease`` is re-checked before tracker writes;
        # ``environment`` is the project's Python environment validation runs in.
        self.lander = None
        self.lease = None
        self.environment = None
        self.notes: list[str] = []  # preflight's lines about the sandboxes, printed after its own
        # The base check's outcome (orchestrator.toolchains.base_check.BaseCheck), set by the
        # caller when the base tree was checked: with allow_failing_base it judges validation.
        self.base_check = None
        self.profile = profile_for(config.profile)  # the rounds up to the patch, and the answer to a review
        self.candidates: dict[str, dict] = {}  # the candidates profile's patches, by author role
        self.tally: dict[str, int] = {"agree": 0, "disagree": 0}
        self.consensus_ok = False
        # Resume: checkpoints of this run by step key, and the next free seq.
        self.memo: dict[tuple, Checkpoint] = {}
        self.seq = 0
        # With a signing key, a checkpoint of this run that does not verify is never reused:
        # the first one found stops the run (tampered_checkpoint), naming its comment.
        self.tampered: str | None = None
        for cp in resume_from:
            if cp.run_id == self.run_id:
                if isinstance(cp.seq, int):
                    self.seq = max(self.seq, cp.seq)
                why = checkpoint_problem(cp, self.key, task_id=task["id"]) if self.key else None
                if why:
                    self.tampered = self.tampered or why
                    continue
                step = cp.payload.get("step")
                if isinstance(step, list) and len(step) == 3:
                    self.memo[tuple(step)] = cp
        self.resumed = bool(self.memo)
        self.preflight = self._preflight_line()
        ensure_calls_table(tracker)

    # ================================================================== entry

    def execute(self) -> RunReport:
        """Run the task to its outcome; never raises for a worker's bad answer."""
        if self.integrate:
            self._start()  # before anything is written: a lost claim leaves no trace (TaskTaken)
        self.echo(self.preflight)
        for note in self.notes:
            self.echo(note)
        self._checkpoint("preflight", None, "preflight", self.preflight, {"line": self.preflight,
                         "selection_reason": self.selection_reason, "scope": self.scope.to_dict(),
                         "sandbox": self.config.validation.sandbox,
                         "onto": self.lander.branch if self.lander else None})
        try:
            if self.tampered:
                raise Blocked("tampered_checkpoint", self.tampered)
            if self.integrate:
                self._prepare_worktree()
            self._hydrate()
            self.profile.decide(self)
            if not self.integrate:
                return self._finish("synthesis_only")
            self.profile.first_patch(self)
            if not self.config.review_required_for_close:
                # No review gate configured: consensus and a passing validation close the task.
                if not self.validation_pass:
                    raise Blocked("validation_failed", f"the validation did not pass: {failed_detail(self.validation)}")
                return self._close()
            return self._review_gate()
        except Blocked as blocked:
            return self._block(blocked)
        except ConfigMistake as mistake:
            return self._stop_for_config(mistake)
        except BackendError as exc:
            # A worker that cannot be called at all (a program that cannot start, a missing key)
            # is the configuration's mistake: every later call would fail the same way.
            return self._stop_for_config(ConfigMistake(str(exc)))
        except SendBack:
            return self._finish("sent_back")

    # ================================================================== preflight & ownership

    def _preflight_line(self) -> str:
        roles = self.profile.roles(self.config)
        return (
            f"orch_preflight orch_run_id={self.run_id} scope_mode={self.scope.mode}"
            f" plan_label={self.scope.plan_label or ''} parent_epic={self.scope.parent_epic or ''}"
            f" selected_adapter=local selection_reason=fixed_local_profile requested_workers={len(roles)}"
            f" local_cap=1 ids={','.join(self.ids)}"
            f" overrides=max_tasks=1,parallel_tasks=1,adapter=local profile={self.config.profile}"
            f" sandbox={self.config.validation.sandbox}"
        )

    def _start(self) -> None:
        """Claim the task and attach every role's agent to it (agent/slot/role model)."""
        task_id = self.task["id"]
        actor = self.tracker.actor
        status, assignee = self.task["status"], self.task.get("assignee")
        landed = (self.memo[("land", "", "land")].payload.get("artifact") or {}).get("result") \
            if ("land", "", "land") in self.memo else None
        decided = (self.memo[(RUN_HEAD, "", RUN_HEAD)].payload.get("artifact") or {}).get("outcome") \
            if (RUN_HEAD, "", RUN_HEAD) in self.memo else None
        # Killed between closing (or blocking) the task and writing its outcome: that status
        # change was this run's own, so it is not claimed again.
        ended_here = (status == "closed" and landed == "landed") or (status == "blocked" and decided == "blocked")
        self._check_lease()
        try:
            if status == "in_progress" and assignee != actor:
                # This run holds the task's lease, so the earlier holder's run is gone: take over.
                self.task = self.tracker.update(task_id, expect={"status": "in_progress", "assignee": assignee},
                                                assignee=actor)
                self.mutations.append(f"{task_id}: taken over from {assignee or 'nobody'} by {actor}")
            elif status != "in_progress" and not ended_here:
                self.task = self.tracker.claim(task_id)
                self.mutations.append(f"{task_id}: status -> in_progress (claimed by {actor})")
        except ConflictError as exc:
            raise TaskTaken(str(exc)) from None
        for role in self._all_roles():
            agent = hook_role_agent(self.tracker, role, task_id,
                                    is_live=lambda other: lease_is_live(self.tracker, other))
            self._agents[role] = agent["id"]
            role_issue = self.tracker.ensure_role(role)
            if self.tracker.slot_show(agent["id"])["role"] != role_issue["id"]:
                self.tracker.slot_set(agent["id"], "role", role_issue["id"])
            self.tracker.agent_state(agent["id"], "working")
        self.mutations.append(f"agents mesh-<role> hooked to {task_id}")

    def _release_agents(self, state: str) -> None:
        for role in self._all_roles():
            agent = {"id": self._agents[role]} if role in self._agents else self.tracker.ensure_agent(f"mesh-{role}")
            if self.tracker.slot_show(agent["id"])["hook"] == self.task["id"]:
                self.tracker.slot_clear(agent["id"], "hook")
            self.tracker.agent_state(agent["id"], state)

    def _all_roles(self) -> list[str]:
        """The roles the profile asks, reviewer last (their agents are hooked to the task)."""
        return self.profile.roles(self.config)

    def _voters(self) -> list[str]:
        roles = self.config.fallback_roles if self.bus.mode == "fallback" else self.config.roles
        return [r for r in roles if r != REVIEWER]

    def _critics(self) -> list[str]:
        return [r for r in self._voters() if r in CRITIC_ROLES]

    # ================================================================== checkpoints

    def _checkpoint(self, kind: str, role: str | None, phase: str, summary: str, artifact: Any,
                    *, attempt: "Attempt | dict | None" = None, details: str = "",
                    extra: Mapping[str, Any] | None = None) -> dict:
        """Persist one checkpoint (once: a step already checkpointed is not written again).

        ``attempt`` is the worker answer behind it: its usage and outbox are recorded so a
        resumed run can rebuild the bus (mail included) without asking again.
        """
        step = (kind, role or "", phase)
        if step in self.memo:
            return self.memo[step].payload
        usage = attempt.usage if isinstance(attempt, Attempt) else None
        outbox = ([m.model_dump() for m in attempt.parsed.outbox] if isinstance(attempt, Attempt) and attempt.parsed
                  else [])
        self.seq += 1
        payload: dict[str, Any] = {
            "v": 1,
            "run_id": self.run_id,
            "seq": self.seq,
            "kind": kind,
            "task_id": self.task["id"],
            "role": role,
            "consensus_cycle": self.bus.consensus_cycle,
            "review_cycle": self.bus.review_cycle,
            "mode": self.bus.mode,
            "step": list(step),
            "artifact": scrub_obj(artifact),
            "usage": (usage or Usage()).to_dict(),
        }
        if outbox:
            payload["outbox"] = scrub_obj(outbox)
        if extra:
            payload.update(scrub_obj(dict(extra)))
        self._check_lease()
        payload, text, _ = write_checkpoint(self.tracker, self.task["id"], kind, scrub(summary), payload, key=self.key,
                                         author=f"mesh/{role or 'orchestrator'}", details=scrub(details))
        self.memo[step] = Checkpoint(kind=kind, summary=summary, payload=payload)
        crash_point("checkpoint")
        if kind != "preflight":  # the preflight line itself was already printed
            self.echo(text.split("\n", 1)[0])
        return payload

    def _check_lease(self) -> None:
        """Refuse to write for a task whose lease was taken over (TaskTaken)."""
        if self.lease is not None and not self.lease.holds(self.tracker):
            raise TaskTaken(f"{self.task['id']}: the lease of run {self.run_id} was taken over")

    def _stored(self, kind: str, role: str | None, phase: str) -> dict | None:
        """The payload of a step this run already checkpointed (a resumed run), else None.

        Taking a stored step replays its side effects on the bus: the role's pending mail
        counts as delivered, the step's outbox is posted again, and a fallback switch that
        happened in the original run is adopted.
        """
        cp = self.memo.get((kind, role or "", phase))
        if cp is None:
            return None
        payload = cp.payload
        if payload.get("usage"):
            self.usage = self.usage + Usage(**payload["usage"])
        if role and kind not in ("review-cycle", "proof", "outcome", "preflight"):
            self.bus.take_mail(role)
            if payload.get("outbox"):
                self.bus.post_mail(role, payload["outbox"])
        self._adopt_mode(payload)
        return payload

    def _adopt_mode(self, payload: Mapping[str, Any]) -> None:
        if payload.get("mode") == "fallback" and self.bus.mode == "full":
            self.bus.switch_to_fallback("resumed: the interrupted run had switched to fallback")

    def _stored_phase_roles(self, kind: str, phase: str) -> list[str]:
        """Roles with a stored checkpoint of ``kind`` in ``phase``; adopts their mode first."""
        found = [step[1] for step in self.memo if step[0] == kind and step[2] == phase]
        for role in found:
            self._adopt_mode(self.memo[(kind, role, phase)].payload)
        return found

    # ================================================================== asking workers

    def _check_budget(self, request: WorkerRequest) -> tuple[int, float]:
        """Block before a call that could cross the budget; else hold its worst case."""
        budget = self.config.budget
        if budget.max_usd is None and budget.max_tokens is None:
            return 0, 0.0
        worst = self.backend.worst_case(request)
        worst_tokens = _tokens(worst)
        with self._budget_lock:
            settled_tokens, settled_usd = self._round_spent or (self._budget_tokens, self._budget_usd)
            spent_tokens = settled_tokens + self._held_tokens
            spent_usd = settled_usd + self._held_usd
            if budget.max_tokens is not None and spent_tokens + worst_tokens > budget.max_tokens:
                raise Blocked("budget_exceeded", f"{spent_tokens} tokens spent, next call may take {worst_tokens}"
                              f" (budget {budget.max_tokens})")
            if budget.max_usd is not None and spent_usd + worst.cost_usd > budget.max_usd:
                raise Blocked("budget_exceeded", f"${spent_usd:.4f} spent, next call may cost"
                              f" ${worst.cost_usd:.4f} (budget ${budget.max_usd:.2f})")
            self._held_tokens += worst_tokens
            self._held_usd += worst.cost_usd
        return worst_tokens, worst.cost_usd

    def _settle_budget(self, held: tuple[int, float], used: Usage) -> None:
        """Replace a finished call's held worst case by what it used."""
        with self._budget_lock:
            self._held_tokens -= held[0]
            self._held_usd -= held[1]
            self._budget_tokens += _tokens(used)
            self._budget_usd += used.cost_usd

    def _call(self, role: str, round_name: str, inputs: Mapping[str, Any], *, attempt: int,
              parse_error: str | None, outbox: Sequence[Mapping[str, str]]) -> WorkerResponse:
        prompt = build_prompt(round_name, role, task=self.bus.task_meta, inputs=inputs,
                              repo_context=self._repo_context(), strict=self.strict, attempt=attempt,
                              parse_error=parse_error, outbox=outbox)
        request = WorkerRequest(role=role, round=round_name, task_id=self.task["id"], run_id=self.run_id,
                                attempt=attempt, prompt=prompt, schema=ARTIFACT_SCHEMAS[round_name],
                                strict=self.strict, worktree=self.worktree.path if self.worktree else None)
        if self.resumed:
            logged = self._logged_answer(role, round_name, attempt, prompt.text)
            if logged is not None:
                return logged
        held = self._check_budget(request)
        response = None
        try:
            with self.watch.call(role, round_name, attempt) as timer:
                response = self.backend.call(request)
        finally:
            self._settle_budget(held, response.usage if response is not None else Usage())
        response.duration_s = response.duration_s or timer.elapsed()
        log_call(self.tracker, run_id=self.run_id, task_id=self.task["id"], role=role, round=round_name,
                 attempt=attempt, backend=self.backend.name, model=response.model, prompt=prompt.text,
                 response=response.text, usage=response.usage.to_dict(), duration_s=response.duration_s,
                 error=call_error(response))
        return response

    def _logged_answer(self, role: str, round_name: str, attempt: int, prompt: str) -> WorkerResponse | None:
        """A resumed run's answer to a call the interrupted run already made and paid for
        (answered, but killed before its checkpoint): the same prompt gets the logged answer."""
        from orchestrator.ledger.calls import logged_response

        row = logged_response(self.tracker, run_id=self.run_id, role=role, round=round_name, attempt=attempt,
                              prompt=scrub(prompt))
        if row is None:
            return None
        self.bus.note("reused_logged_answer", {"round": round_name, "attempt": attempt}, role)
        return WorkerResponse(text=row["response"], usage=Usage(**row["usage"]), model=row["model"])

    def _repo_context(self) -> str:
        """The repository context pack shared by every role of a round (the task branch's
        worktree when integrating, the repo itself otherwise)."""
        from orchestrator.protocol.context import build_repo_context

        root = self.worktree.path if self.worktree else self.repo
        if root is None:
            return ""
        patch = (self.bus.synthesis or {}).get("patch")
        return build_repo_context(Path(root), task=self.bus.task_meta, patch=patch,
                                  budget_tokens=self.config.anthropic.context_tokens)

    def _ask(self, role: str, round_name: str, inputs: Mapping[str, Any], *,
             outbox: Sequence[Mapping[str, str]] = (),
             validate: Callable[[ParsedResponse], None] | None = None) -> Attempt:
        """Ask one role, with the profile's retries: one retry on no response, one strict
        follow-up on an unparsable answer. Safe to run in a worker thread (no bus writes)."""
        result = Attempt(role=role)
        attempt, parse_error, no_response_left, follow_up_left = 1, None, 1, 1
        while True:
            response = self._call(role, round_name, inputs, attempt=attempt, parse_error=parse_error,
                                  outbox=outbox if attempt == 1 else ())
            result.usage = result.usage + response.usage
            error = response.error
            if error == "refusal":
                error = "no_response"
            if error in ("no_response", "timeout") or (error is None and not (response.text or "").strip()):
                self.watch.failed(role, round_name, attempt, call_error(response) or "an empty answer",
                                  then="asking again" if no_response_left else "no retry left")
                if no_response_left:
                    no_response_left -= 1
                    result.worker_retries += 1
                    attempt += 1
                    continue
                result.failure = "no_response"
                return result
            try:
                if error == "max_tokens":
                    raise ParseError("unparsable", "the answer was cut off at max_tokens; answer shorter")
                parsed = parse_response(response.text or "", round_name, role=role, task_id=self.task["id"],
                                        strict=self.strict, bounds=self.config.answer_bounds)
                if validate:
                    validate(parsed)
            except ParseError as exc:
                self.watch.failed(role, round_name, attempt, f"{exc.kind}: {exc.message}",
                                  then="one strict follow-up" if follow_up_left else "no follow-up left")
                # The call answered, but mesh refused the answer: it counts as a failed call, by reason.
                mark_rejected(self.tracker, run_id=self.run_id, role=role, round=round_name, attempt=attempt,
                              reason=f"{exc.kind}: {exc.message}")
                if follow_up_left:
                    follow_up_left -= 1
                    result.parse_retries += 1
                    parse_error = exc.message
                    attempt += 1
                    continue
                result.failure = "unparsable"
                result.parse_error = exc
                return result
            result.parsed = parsed
            return result

    def _account(self, attempt: Attempt) -> None:
        """Main-thread bookkeeping after an ask: counters, usage, outbox."""
        for _ in range(attempt.worker_retries):
            self.bus.count_retry("worker_retry")
        for _ in range(attempt.parse_retries):
            self.bus.count_retry("parse_retry")
        self.usage = self.usage + attempt.usage
        self.calls += 1 + attempt.worker_retries + attempt.parse_retries
        if attempt.parsed and attempt.parsed.outbox:
            self.bus.post_mail(attempt.role, [m.model_dump() for m in attempt.parsed.outbox])

    def _ask_one(self, role: str, round_name: str, inputs: Mapping[str, Any], *, kind: str, phase: str,
                 validate: Callable[[ParsedResponse], None] | None = None) -> tuple[dict | None, Attempt | None]:
        """Ask (or take from a checkpoint) one role's artifact for a step."""
        stored = self._stored(kind, role, phase)
        if stored is not None:
            return stored["artifact"], None
        attempt = self._ask(role, round_name, inputs, outbox=self.bus.take_mail(role), validate=validate)
        self._account(attempt)
        if attempt.failure == "no_response":
            attempt = self._after_no_response(role, round_name, inputs, attempt, validate)
        return (attempt.parsed.artifact.model_dump() if attempt.parsed else None), attempt

    def _after_no_response(self, role: str, round_name: str, inputs: Mapping[str, Any], attempt: Attempt,
                           validate: Callable[[ParsedResponse], None] | None) -> Attempt:
        """``no_response`` twice: switch to the 3-role fallback; a fallback role is asked once more."""
        if self.bus.mode == "full" and role != REVIEWER:
            self.bus.switch_to_fallback(f"{role} gave no response in {round_name}")
            if role in self.config.fallback_roles:
                again = self._ask(role, round_name, inputs, validate=validate)
                self._account(again)
                return again
        return attempt

    def _ask_many(self, roles: Sequence[str], round_name: str, inputs: Mapping[str, Any], *, kind: str,
                  phase: str, validate: Callable[[ParsedResponse], None] | None = None) -> dict[str, Attempt | dict]:
        """Ask several roles of one round at the same time; stored steps are not asked again."""
        results: dict[str, Attempt | dict] = {}
        pending = []
        for role in roles:
            stored = self._stored(kind, role, phase)
            if stored is not None:
                results[role] = stored["artifact"]
            else:
                pending.append(role)
        mail = {role: self.bus.take_mail(role) for role in pending}
        if pending:
            with self._budget_lock:
                self._round_spent = (self._budget_tokens, self._budget_usd)
            try:
                with concurrent.futures.ThreadPoolExecutor(max_workers=len(pending)) as pool:
                    futures = {role: pool.submit(self._ask, role, round_name, inputs, outbox=mail[role],
                                                 validate=validate)
                               for role in pending}
                    for role in pending:
                        results[role] = futures[role].result()
            finally:
                with self._budget_lock:
                    self._round_spent = None
            for role in pending:
                self._account(results[role])
        return {role: results[role] for role in roles}

    # ================================================================== hydration

    def _hydrate(self) -> None:
        meta = self.bus.task_meta
        missing = [k for k in ("acceptance_criteria", "design", "notes") if not (meta.get(k) or "").strip()]
        if not missing:
            return
        artifact, attempt = self._ask_one("proposer", "hydration", {}, kind="hydration", phase="h")
        if artifact is None:
            self.bus.note("hydration_failed", {"missing": missing, "failure": attempt.failure if attempt else None})
            return
        fill = {"acceptance_criteria": scrub(artifact["acceptance"]), "design": scrub(artifact["design"]),
                "notes": scrub(artifact["notes"])}
        changes = {k: v for k, v in fill.items() if k in missing and v.strip()}
        self._checkpoint("hydration", "proposer", "h", f"filled {', '.join(sorted(changes)) or 'nothing'}", artifact,
                         attempt=attempt)
        if changes:
            current = self.tracker.get(self.task["id"])
            still_missing = {k: v for k, v in changes.items() if not (current.get(k) or "").strip()}
            if still_missing:
                self._check_lease()
                self.tracker.update(self.task["id"], **still_missing)
                self.mutations.append(f"{self.task['id']}: hydrated {', '.join(sorted(still_missing))}")
        meta.update(changes)
        self.bus.set_task_meta(meta)


def _tokens(usage: Usage) -> int:
    """Every token a call is billed for, cached or not."""
    return usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_write_tokens


def _task_meta(task: Mapping[str, Any]) -> dict[str, Any]:
    return {k: task.get(k) or "" for k in ("id", "title", "description", "design", "acceptance_criteria", "notes")}


