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
import secrets
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from roles.backends.base import Backend, Usage, WorkerRequest, WorkerResponse
from roles.definitions import CRITIC_ROLES, REVIEWER
from roles.parsing import ParseError, ParsedResponse, parse_response
from roles.prompts import build_prompt
from roles.schemas import ARTIFACT_SCHEMAS
from tracker.errors import ConflictError
from tracker.store import Tracker

from .agents import hook_role_agent
from .bus import ArtifactBus
from .calls import ensure_calls_table, log_call
from .checkpoint import (Checkpoint, checkpoint_problem, dedupe_key, format_checkpoint, parse_checkpoint,
                         sign_payload, signing_key)
from .config import MeshConfig
from .faults import crash_point
from .lease import lease_is_live
from .proof import brief, failed_detail, state
from .scope import Scope
from .validation_findings import NOT_ALLOWED, allowed_commands_check, with_validation_finding
from .runhead import RUN_HEAD, write_close_head, write_run_head
from .watch import RunWatch, call_error
from redact import scrub, scrub_obj

__all__ = ["CLOSE_REASON", "Engine", "RunReport", "BLOCK_REASONS", "TaskTaken", "new_run_id", "load_checkpoints"]

CLOSE_REASON = "vote consensus + validation pass + review approve + no open MUST_FIX findings"
BLOCK_REASONS = (
    "no_consensus",
    "proposal_unparsable",
    "no_diff_parsed",
    "review_no_response",
    "invalid_finding_shape",
    "review_unparsable",
    "review_not_approved",
    "missing_validation_requirements",
    "no_response",
    "patch_refused",
    "patch_does_not_apply",
    "validation_failed",
    "revision_plan_unparsable",
    "budget_exceeded",
    "merge_conflict",
    "integration_validation_failed",
    "tampered_checkpoint",
    "policy_violation",
)


class Blocked(Exception):
    """Control flow: the task ends blocked with one of ``BLOCK_REASONS``."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class TaskTaken(Exception):
    """The task was claimed by someone else between selection and start."""


class SendBack(Exception):
    """Control flow: approved work did not land; the task gets a new attempt on the current tip."""


def new_run_id() -> str:
    """A sortable, unique run id."""
    return "run-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@dataclass
class Attempt:
    """The outcome of asking one role in one round (after the profile's retries)."""

    role: str
    parsed: ParsedResponse | None = None
    failure: str | None = None  # "no_response" or "unparsable"
    parse_error: ParseError | None = None
    usage: Usage = field(default_factory=Usage)
    worker_retries: int = 0
    parse_retries: int = 0


@dataclass
class RunReport:
    """The reporting contract (ARCHITECTURE section 3, ``--json``)."""

    orch_run_id: str
    preflight: str
    scope: dict[str, Any]
    task: dict[str, Any] | None
    outcome: str
    block_reason: str | None = None
    block_detail: str | None = None
    consensus: dict[str, Any] = field(default_factory=dict)
    validation: list[dict[str, Any]] = field(default_factory=list)
    review: dict[str, Any] = field(default_factory=dict)
    mutations: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    synthesis: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return 3 if self.outcome == "blocked" else 0

    def to_dict(self) -> dict[str, Any]:
        out = {
            "orch_run_id": self.orch_run_id,
            "preflight": self.preflight,
            "scope": self.scope,
            "task": self.task,
            "outcome": self.outcome,
            "block_reason": self.block_reason,
            "consensus": self.consensus,
            "validation": self.validation,
            "review": self.review,
            "mutations": self.mutations,
            "usage": self.usage,
        }
        if self.block_detail:
            out["block_detail"] = self.block_detail
        if self.synthesis is not None:
            out["synthesis"] = self.synthesis
        return scrub_obj(out)


def load_checkpoints(tracker: Tracker, task_id: str) -> list[Checkpoint]:
    """Every ``[orch:*]`` checkpoint on a task, in comment order."""
    out = []
    for comment in tracker.comments(task_id):
        cp = parse_checkpoint(comment["text"], id=comment["id"], author=comment.get("author"),
                              created_at=comment.get("created_at"))
        if cp is not None:
            out.append(cp)
    return out


class Engine:
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
        self.calls = 0
        self._agents: dict[str, str] = {}
        self.mutations: list[str] = []
        self.validation: list[dict[str, Any]] = []
        self.validation_pass: bool | None = None
        self.base_tests = None  # proof.BaseTests: the base tree's test counts, counted once per run
        self.worktree = None
        # Set by the caller: ``lander`` (orchestrator.landing) cuts the worktree from and lands
        # approved work onto an integration branch; ``lease`` is re-checked before tracker writes;
        # ``environment`` is the project's Python environment validation runs in.
        self.lander = None
        self.lease = None
        self.environment = None
        self.notes: list[str] = []  # preflight's lines about the sandboxes, printed after its own
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
            self._consensus_on_synthesis()
            if not self.integrate:
                return self._finish("synthesis_only")
            self._integrate(self.bus.synthesis, phase="c", step_name="synthesis")
            self._validate(phase="r0")
            if not self.config.review_required_for_close:
                # No review gate configured: consensus and a passing validation close the task.
                if not self.validation_pass:
                    raise Blocked("validation_failed", f"the validation did not pass: {failed_detail(self.validation)}")
                return self._close()
            return self._review_gate()
        except Blocked as blocked:
            return self._block(blocked)
        except SendBack:
            return self._finish("sent_back")

    # ================================================================== preflight & ownership

    def _preflight_line(self) -> str:
        roles = self.config.roles
        return (
            f"orch_preflight orch_run_id={self.run_id} scope_mode={self.scope.mode}"
            f" plan_label={self.scope.plan_label or ''} parent_epic={self.scope.parent_epic or ''}"
            f" selected_adapter=local selection_reason=fixed_local_profile requested_workers={len(roles)}"
            f" local_cap=1 ids={','.join(self.ids)}"
            f" overrides=max_tasks=1,parallel_tasks=1,adapter=local"
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
        roles = list(self.config.roles)
        if REVIEWER not in roles:
            roles.append(REVIEWER)
        return roles

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
        if self.key:
            payload = sign_payload(payload, self.key)
        text = format_checkpoint(kind, scrub(summary), payload, details=scrub(details))
        self._check_lease()
        self.tracker.add_comment(self.task["id"], text, author=f"mesh/{role or 'orchestrator'}",
                                 dedupe_key=dedupe_key(self.run_id, self.seq, kind))
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
            spent_tokens = self._budget_tokens + self._held_tokens
            spent_usd = self._budget_usd + self._held_usd
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
        from .calls import logged_response

        row = logged_response(self.tracker, run_id=self.run_id, role=role, round=round_name, attempt=attempt,
                              prompt=scrub(prompt))
        if row is None:
            return None
        self.bus.note("reused_logged_answer", {"round": round_name, "attempt": attempt}, role)
        return WorkerResponse(text=row["response"], usage=Usage(**row["usage"]), model=row["model"])

    def _repo_context(self) -> str:
        """The repository context pack shared by every role of a round (the task branch's
        worktree when integrating, the repo itself otherwise)."""
        from .context import build_repo_context

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
                                        strict=self.strict)
                if validate:
                    validate(parsed)
            except ParseError as exc:
                self.watch.failed(role, round_name, attempt, f"{exc.kind}: {exc.message}",
                                  then="one strict follow-up" if follow_up_left else "no follow-up left")
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
                  phase: str) -> dict[str, Attempt | dict]:
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
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(pending)) as pool:
                futures = {role: pool.submit(self._ask, role, round_name, inputs, outbox=mail[role])
                           for role in pending}
                for role in pending:
                    results[role] = futures[role].result()
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
            self.bus.add_critique(role, artifact)
            self._checkpoint("critique", role, phase,
                             f"{role} risk={artifact['risk']} must_fix={len(artifact['must_fix'])} ({subject})",
                             artifact, attempt=res,
                             extra={"subject": subject})

    def _synthesis(self, phase: str) -> None:
        cfg = self.config.validation
        inputs = {"proposal": self.bus.proposal, "critiques": self.bus.critiques, **self._previous_cycle(),
                  "allowed_commands": cfg.allow}
        artifact, attempt = self._ask_one("synthesizer", "synthesis", inputs, kind="synthesis", phase=phase,
                                          validate=allowed_commands_check(cfg.allow, cfg.required))
        if artifact is None:
            if attempt and attempt.failure == "unparsable":
                self._unparsable_patch(attempt)
            raise Blocked("no_response", "synthesizer gave no response")
        self.bus.set_synthesis(artifact)
        patch = artifact["patch"]
        what = patch.split("\n", 1)[0] if patch.startswith("NO_DIFF:") else f"{patch.count(chr(10)) + 1}-line diff"
        self._checkpoint("synthesis", "synthesizer", phase, f"{what}; {len(artifact['validation_commands'])}"
                         " validation command(s)", artifact, attempt=attempt)

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

    def _integrate(self, artifact: Mapping[str, Any], *, phase: str, step_name: str) -> None:
        """Check and apply a patch in the task worktree, then commit it (once, even on resume)."""
        from .gitops import GitError
        from .patchcheck import PatchRefused, check_patch
        from .policy import PatchPolicy, PolicyViolation

        patch = artifact["patch"]
        if patch.startswith("NO_DIFF:"):
            self.bus.note("no_diff", {"reason": patch, "step": step_name})
            return
        marker = f"{step_name}:{phase}:{self.bus.review_cycle}"
        if self.worktree.find_commit(run_id=self.run_id, trailer="Mesh-Step", value=marker):
            return
        policy = PatchPolicy.from_config(self.config.patch)
        try:
            summary = check_patch(patch, max_bytes=self.config.patch.max_bytes, max_files=self.config.patch.max_files)
            policy.check(summary, root=self.worktree.path)
        except PatchRefused as exc:
            raise Blocked("patch_refused", f"{exc.reason}: {exc.detail}") from None
        except PolicyViolation as exc:
            raise Blocked("policy_violation", exc.detail) from None
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
        from .gitops import GitError, Worktree

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
        except GitError as exc:
            raise Blocked("patch_refused", f"{exc.reason}: {exc}") from None
        self.mutations.append(f"worktree on branch {self.worktree.branch}")

    def _validate(self, *, phase: str) -> None:
        """Run the allowed validation commands; persist the evidence as ``[orch:proof]``."""
        from .proof import validate_head

        stored = self._stored("proof", None, phase)
        if stored is not None:
            self.validation = stored["artifact"]["results"]
            self.validation_pass = stored["artifact"]["passed"]
            return
        commands = list((self.bus.synthesis or {}).get("validation_commands") or [])
        proof = validate_head(self, commands)
        self.validation, self.validation_pass = proof.results, proof.passed
        self._checkpoint("proof", None, phase, proof.summary(), proof.artifact(), details=proof.details())
        self.watch.validation(proof.results)
        if self.config.validation.required and not proof.ran:
            raise Blocked("missing_validation_requirements",
                          "no validation command to run" if not commands
                          else f"none of {len(commands)} validation command(s) is allowed by validation.allow")

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
        artifact, attempt = self._ask_one(REVIEWER, "review", inputs, kind="review", phase=f"r{cycle}",
                                          validate=self._finding_location_check)
        if artifact is None:
            if attempt.failure == "no_response":
                raise Blocked("review_no_response", "reviewer gave no response twice")
            err = attempt.parse_error
            if err is not None and err.kind == "invalid_finding_shape":
                raise Blocked("invalid_finding_shape", err.message)
            raise Blocked("review_unparsable", err.message if err else "")
        self.bus.add_review(cycle, artifact)
        must_fix = [f for f in artifact["findings"] if f["label"] == "MUST_FIX"]
        self._checkpoint("review", REVIEWER, f"r{cycle}",
                         f"decision={artifact['decision']} findings={len(artifact['findings'])}"
                         f" must_fix={len(must_fix)} (review cycle {cycle})", artifact,
                         attempt=attempt, details=artifact["summary"])
        return artifact

    def _review_gate(self) -> RunReport:
        """Round E, repeated through revision cycles until approval or ``review_max_cycles``."""
        while True:
            self.bus.set_review_cycle(self.bus.review_cycle + 1)
            cycle = self.bus.review_cycle
            review = self._review()
            if not self.validation_pass:
                # A failing validation is a MUST_FIX finding, whatever the reviewer said.
                review = with_validation_finding(review, self.validation)
            must_fix = [f for f in review["findings"] if f["label"] == "MUST_FIX"]
            approved = review["decision"] == "approve" and not must_fix
            self._sync_findings(review, approved)
            self._checkpoint("review-cycle", None, f"r{cycle}",
                             f"cycle {cycle}: {'approved' if approved else 'changes requested'}",
                             {"cycle": cycle, "decision": review["decision"], "approved": approved,
                              "open_must_fix": len(must_fix), "review_issue": self.bus.review_issue,
                              "subtasks": dict(self.bus.review_subtasks)})
            if approved:
                return self._close()
            if cycle >= self.config.review_max_cycles and not self.validation_pass:
                raise Blocked("validation_failed", f"the validation still fails after {cycle} review cycle(s): "
                              + failed_detail(self.validation))
            if cycle >= self.config.review_max_cycles:
                raise Blocked("review_not_approved", f"{len(must_fix)} MUST_FIX finding(s) open after {cycle}"
                              " review cycle(s)")
            self._revise(review)

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
        cfg = self.config.validation
        inputs = {"review": review, "revision_plan": self.bus.revision_plan, "critiques": self.bus.critiques,
                  "diff": diff, "allowed_commands": cfg.allow}
        artifact, attempt = self._ask_one("synthesizer", "revision", inputs, kind="revision", phase=f"r{cycle}",
                                          validate=allowed_commands_check(cfg.allow, cfg.required))
        if artifact is None:
            if attempt and attempt.failure == "unparsable":
                self._unparsable_patch(attempt)
            raise Blocked("no_response", "synthesizer gave no revision")
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
            raise Blocked("missing_validation_requirements", message)
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
        # The signed run head comes before the close (or the CI gate): a CI closer racing this
        # close, or a resume after a kill here, finds the approval bound to its commit and tree.
        write_close_head(self, "awaiting_ci" if self.config.close_mode == "ci" else "closed", conditions)
        task_id = self.task["id"]
        if self.config.close_mode == "ci":
            self._check_lease()
            gate = self.tracker.gate_create(f"CI close for {task_id}", blocks=task_id, await_type="ci",
                                            await_id=self.run_id, idempotency_key=f"{self.run_id}:ci-gate")
            self.mutations.append(f"gate {gate['id']} (await ci) blocks {task_id}")
            return self._finish("awaiting_ci", conditions=conditions)
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
        write_run_head(self, summary)
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


def _tokens(usage: Usage) -> int:
    """Every token a call is billed for, cached or not."""
    return usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_write_tokens


def _task_meta(task: Mapping[str, Any]) -> dict[str, Any]:
    return {k: task.get(k) or "" for k in ("id", "title", "description", "design", "acceptance_criteria", "notes")}


__all__ += ["Blocked", "Attempt", "SendBack"]
