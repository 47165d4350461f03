"""``mesh drain``: run every ready task of a scope, up to ``--jobs`` at a time, and land each
approved one on the integration branch through the merge queue (``orchestrator.landing.lander``).

Each task runs in a thread of this process exactly as ``mesh run`` runs it
(``runner.run_task``): its own tracker connection, lease, worktree, branch ``mesh/<task>`` and
checkpoints. Threads rather than processes because the work is waiting (on workers, git and
validation subprocesses), the merge queue is then a plain in-process lock granted in approval
order, and one SIGKILL stops the whole drain at once, which the checkpoints make resumable.

When a slot frees up the scheduler takes the next candidate by ``mesh run``'s selection rules
(scoped in-progress tasks first, then ready ones; ``--ids`` restricts). A blocked task never
stops the drain: its dependents simply never become ready. The drain stops when nothing in
scope is ready or in flight, after ``--max-tasks`` started tasks, or when the budget rule
says so: no task starts once the remaining ``--max-usd`` cannot cover one more task (and the
ones in flight) at the average cost of the finished ones.

A drain is stopped from starting new tasks by Ctrl-C (``DrainControl``), or from anywhere that
reaches its tracker (``mesh serve``'s button, a drain on another machine) by ``request_stop``: a
config key of the scope's, which every drain of that scope reads before it starts a task. A drain
remembers the key's value when it starts and stops once it differs, so a request made while no
drain runs stops none that starts later.
"""

from __future__ import annotations

import concurrent.futures
import secrets
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roles.backends.base import Backend
from tracker.errors import TrackerError, WorkspaceError
from tracker.store import Tracker

from orchestrator.protocol.outcomes import RunReport, new_run_id

from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.worktree.gitops import GitError, _git, repo_root
from orchestrator.landing.catch_up import catch_up, close_landed_epics, scope_branch
from orchestrator.landing.follow import BaseProblem, FollowResult, follow_scope
from orchestrator.landing.lander import Lander
from orchestrator.landing.records import land_checkpoints
from orchestrator.protocol.lease import (Lease, claim_next_leased, ensure_lease_table, held_by_person, holder_is_dead,
                                         lease_is_live)
from orchestrator.protocol.idle import check_scope, last_block, other_types
from orchestrator.views.live import line_kind
from orchestrator.runner import (BASE_FAILING_EXIT, RunError, RunOptions, base_check, interrupted_runs, lease_ttl,
                                 load_run_config, make_backend, make_lander, open_tracker, project_environment,
                                 refuse_nested_run, require_sandbox, run_task, sandbox_notes)
from orchestrator.protocol.scope import Scope, ScopeError, resolve_scope, scope_tasks, scoped_candidates, select_candidates

__all__ = ["DrainOptions", "DrainControl", "DrainReport", "TaskRow", "blocked_in_scope", "budget_allows", "drain",
           "verify_landings", "request_stop", "stop_token"]

Emit = Callable[[dict[str, Any]], None]


# How often a drain with nothing to run looks again at tasks other runners hold.
_OTHERS_POLL_S = 1.0
# Threads beyond --jobs for tasks waiting for a person's review: they hold no slot.
_PERSON_SLOTS = 32

@dataclass
class DrainOptions:
    """``mesh drain``'s options: ``run`` holds what it shares with ``mesh run``."""

    run: RunOptions = field(default_factory=RunOptions)
    jobs: int | None = None
    max_tasks: int | None = None
    max_usd: float | None = None
    backend: Backend | None = None  # library callers (tests, benchmarks) may bring their own


class DrainControl:
    """Ctrl-C from the outside: ``stop_new()`` once means start no new task."""

    def __init__(self) -> None:
        self.stopping = threading.Event()

    def stop_new(self) -> None:
        """Start no new task; the running ones finish and land."""
        self.stopping.set()


def _stop_key(scope: Scope) -> str:
    return f"mesh.drain.stop:{scope.mode}:{scope.plan_label or scope.parent_epic}"


def stop_token(tracker: Tracker, scope: Scope) -> str | None:
    """The scope's current stop request (None when none was ever made)."""
    return tracker.get_config(_stop_key(scope))


def request_stop(tracker: Tracker, scope: Scope, *, by: str) -> str:
    """Ask every drain of ``scope`` running now, on any machine, to start no new task (their
    running tasks finish and land); returns the request's token. ``by`` says who asked."""
    token = f"{secrets.token_hex(8)} {' '.join(by.split())[:80]}"
    tracker.set_config(_stop_key(scope), token)
    return token


@dataclass
class TaskRow:
    """One task of the drain, as the live view and the summary show it."""

    id: str
    title: str
    state: str = "running"  # running, closed, awaiting_ci, blocked, error
    run_id: str = ""
    round: str = ""
    cycle: str = ""
    started: float = 0.0
    ended: float | None = None
    cost_usd: float = 0.0
    calls: int = 0
    tokens: int = 0
    block_reason: str | None = None
    block_detail: str | None = None
    landed: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON (elapsed seconds instead of clock readings)."""
        end = self.ended if self.ended is not None else time.monotonic()
        return {"id": self.id, "title": self.title, "state": self.state, "run_id": self.run_id,
                "round": self.round, "cycle": self.cycle, "elapsed_s": round(end - self.started, 3),
                "cost_usd": round(self.cost_usd, 6), "calls": self.calls, "tokens": self.tokens,
                "block_reason": self.block_reason, "block_detail": self.block_detail, "landed": self.landed}


@dataclass
class DrainReport:
    """The final summary of a drain (``--json``'s last object)."""

    branch: str
    scope: dict[str, Any]
    tasks: list[TaskRow]
    landings: int = 0
    conflicts: int = 0
    wall_s: float = 0.0
    stop_reason: str = "done"
    skipped: list[str] = field(default_factory=list)
    verified: list[dict[str, Any]] = field(default_factory=list)
    blocked_before: dict[str, str] = field(default_factory=dict)  # scope tasks already blocked: id -> reason
    errors: list[str] = field(default_factory=list)  # a task's backend or git failure, one line each
    remote: str | None = None
    base: dict[str, Any] | None = None  # the integration branch's last follow of its base (follow.FollowResult)
    types: list[str] = field(default_factory=lambda: ["task"])  # the issue types the scope runs
    others: list[dict[str, Any]] = field(default_factory=list)  # open issues of other types (idle.other_types)

    @property
    def exit_code(self) -> int:
        """0 when every task of the scope ended closed (or awaiting CI), 2 when a task failed on a
        backend or git error, 5 when the integration branch could not follow its base (a conflict,
        a failing merge: no task started after it), else 3 when any ended blocked (in this drain or
        an earlier one: the same command run again says the same)."""
        if self.errors:
            return 2
        if self.base and self.base.get("result") in ("conflict", "validation_failed"):
            return BASE_FAILING_EXIT
        return 3 if self.blocked_before or any(row.state in ("blocked", "error") for row in self.tasks) else 0

    def to_dict(self) -> dict[str, Any]:
        """The summary object."""
        rows = [row.to_dict() for row in self.tasks]
        return {
            "event": "summary",
            "branch": self.branch,
            "scope": self.scope,
            "closed": [r["id"] for r in rows if r["state"] in ("closed", "awaiting_ci")],
            "blocked": {**self.blocked_before,
                        **{r["id"]: r["block_reason"] for r in rows if r["state"] in ("blocked", "error")}},
            "landings": self.landings,
            "conflicts": self.conflicts,
            "wall_s": round(self.wall_s, 3),
            "task_s": round(sum(r["elapsed_s"] for r in rows), 3),
            "calls": sum(r["calls"] for r in rows),
            "tokens": sum(r["tokens"] for r in rows),
            "cost_usd": round(sum(r["cost_usd"] for r in rows), 6),
            "stop_reason": self.stop_reason,
            "skipped": self.skipped,
            "errors": self.errors,
            "remote": self.remote,
            "base": self.base,
            "types": self.types,
            "others": self.others,
            "tasks": rows,
            "exit_code": self.exit_code,
        }


def budget_allows(max_usd: float | None, *, finished: list[float], running: list[float]) -> bool:
    """May one more task start? ``finished``/``running``: what each finished or running task cost
    so far. Yes while the remaining budget covers one more task at the average cost of the
    finished ones, after the running ones are counted at that average too (at least at what
    they spent). Before any task finished, yes while anything is left."""
    if max_usd is None:
        return True
    spent = sum(finished) + sum(running)
    if not finished:
        return spent < max_usd
    average = sum(finished) / len(finished)
    still_to_spend = sum(max(average - cost, 0.0) for cost in running)
    return spent + still_to_spend + average <= max_usd


def blocked_in_scope(tracker: Tracker, scope: Scope, ids: Sequence[str] = (), *,
                     exclude: Collection[str] = ()) -> dict[str, str]:
    """Blocked tasks of the scope (``ids`` restricts them) outside ``exclude``, with the reason
    of their latest ``[orch:outcome]`` (``blocked`` when no mesh run blocked them)."""
    wanted = set(ids)
    out = {}
    for task in scope_tasks(tracker, scope):
        if task["status"] != "blocked" or task["id"] in exclude or (wanted and task["id"] not in wanted):
            continue
        out[task["id"]] = last_block(tracker, task["id"])[0]
    return out


def verify_landings(tracker: Tracker, lander: Lander, scope: Scope) -> list[dict[str, Any]]:
    """Check each ``[orch:land]`` landing of the scope against the integration branch: a
    recorded landing whose commit is not on the branch any more is reported, never redone."""
    tip = lander.tip()
    out = []
    for task in scope_tasks(tracker, scope):
        for cp in land_checkpoints(load_checkpoints(tracker, task["id"])):
            artifact = cp.payload.get("artifact") or {}
            if artifact.get("result") != "landed" or artifact.get("branch") != lander.branch:
                continue
            on_branch = _git(lander.repo, "merge-base", "--is-ancestor", artifact["sha"], tip,
                             check=False).returncode == 0
            out.append({"task": task["id"], "run_id": cp.run_id, "sha": artifact["sha"], "on_branch": on_branch})
    return out


class _Drain:
    def __init__(self, options: DrainOptions, emit: Emit, control: DrainControl) -> None:
        self.options = options
        self.emit_raw = emit
        self.control = control
        self.t0 = time.monotonic()
        self.rows: dict[str, TaskRow] = {}
        self.retry_at: dict[str, float] = {}  # tasks another run held when we tried: look again then
        self.engines: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.landings = 0
        self.conflicts = 0
        self.environment = None  # the project's Python environment (orchestrator.sandbox.project_env)
        self.followed: FollowResult | None = None  # the integration branch's last follow of its base
        self.waiting_person: set[str] = set()  # tasks of ours waiting for a person's review: no slot
        self.held_elsewhere: set[str] = set()  # scope tasks another run holds (said once, and once released)

    def emit(self, event: str, **fields: Any) -> None:
        self.emit_raw({"event": event, "t": round(time.monotonic() - self.t0, 3), **fields})

    def on_land(self, event: str, fields: dict[str, Any]) -> None:
        if event == "land_done":
            with self.lock:
                if fields.get("result") == "landed":
                    self.landings += 1
                    self.rows[fields["task"]].landed = fields.get("sha")
                elif fields.get("result") == "conflict":
                    self.conflicts += 1
        self.emit(event, **fields)

    def follow(self, tracker: Tracker) -> bool:
        """Bring the integration branch up to date with its base (``landing.follow``); said when
        something changed. False when it cannot follow: no task may start."""
        try:
            result = follow_scope(tracker, self.lander, scope_tasks(tracker, self.scope), self.config.drain.base)
        except BaseProblem as exc:
            result = exc.result
        except GitError as exc:
            raise RunError(f"{self.lander.branch} could not follow its base: {exc}", 2) from None
        last = self.followed
        if last is None or result.result != "current" and (result.result, result.base_sha, result.tip) != (
                last.result, last.base_sha, last.tip):
            self.emit("base_followed", line=result.line(), **result.to_dict())
        self.followed = result
        return result.ok

    # ------------------------------------------------------------------ one task (a worker thread)

    def work(self, task: dict, reason: str, lease: Lease | None = None) -> tuple[RunReport | None, list[str]]:
        task_id = task["id"]
        held: list[str] = []
        tracker = Tracker(self.db, actor=self.actor)

        def hook(engine: Any) -> None:
            with self.lock:
                self.engines[task_id] = engine
                self.rows[task_id].run_id = engine.run_id
            self.emit("task_run", task=task_id, run_id=engine.run_id, resumed=engine.resumed)
            engine.watch.listen(lambda event: self.emit(event.pop("event"), task=task_id, **event))

        def echo(line: str) -> None:
            engine = self.engines.get(task_id)
            row = self.rows[task_id]
            kind = line_kind(line)
            # Waiting for a person's review holds no slot: other ready tasks start meanwhile.
            if kind == "review-request" or line.startswith("waiting for a person's review"):
                self.waiting_person.add(task_id)
            elif kind is not None:
                self.waiting_person.discard(task_id)
            if kind is None:  # a note between checkpoints: a failed call, failing output
                self.emit("note", task=task_id, line=line)
                return
            if engine is not None:
                row.round = kind
                row.cycle = f"c{engine.bus.consensus_cycle}/r{engine.bus.review_cycle}"
                row.cost_usd = engine.usage.cost_usd
                row.calls = engine.calls
            self.emit("checkpoint", task=task_id, kind=kind, cycle=row.cycle, line=line,
                      cost_usd=round(row.cost_usd, 6))

        try:
            report = run_task(tracker, self.backend, self.config, self.scope, task, reason, self.repo,
                              self.options.run, held, echo=echo, engine_hook=hook, lander=self.lander,
                              steal_dead=True, environment=self.environment, lease=lease)
        finally:
            if lease is not None:
                lease.release(tracker)  # (a no-op once the run released it)
            tracker.close()
        return report, held

    # ------------------------------------------------------------------ the scheduler

    def run(self) -> DrainReport:
        options = self.options.run
        self.config = load_run_config(options)
        refuse_nested_run(self.config)
        if not self.config.integrate or not options.land:
            raise RunError("mesh drain lands work: --no-integrate and --no-land do not apply", 2)
        require_sandbox(self.config)
        try:
            self.scope = resolve_scope(options.label, options.parent, types=self.config.runnable_types)
        except ScopeError as exc:
            raise RunError(str(exc), 2) from None
        try:
            self.repo = repo_root(Path(options.repo).resolve() if options.repo else Path.cwd())
        except GitError as exc:
            raise RunError(f"--repo: {exc}", 2) from None
        jobs = self.options.jobs or self.config.drain.jobs
        if jobs < 1:
            raise RunError("--jobs must be at least 1", 2)
        tracker = open_tracker(options.db, options.actor, self.config, repo=options.repo)
        self.db, self.actor = tracker.path, tracker.actor
        try:
            try:
                check_scope(tracker, self.scope)  # a misspelt scope: exit 2, before any branch is made
            except ScopeError as exc:
                raise RunError(str(exc), 2) from None
            tasks = scope_tasks(tracker, self.scope)
            if not tasks:  # a scope with no task: nothing to land, so no branch either
                return DrainReport(branch="", scope=self.scope.to_dict(), tasks=[], stop_reason="empty_scope",
                                   types=list(self.scope.types), others=other_types(tracker, self.scope),
                                   wall_s=time.monotonic() - self.t0)
            branch = scope_branch(tracker, self.scope, tasks, options.onto or self.config.drain.onto)
            self.lander = make_lander(self.repo, branch, self.config, emit=self.on_land,
                                      remote=options.remote or self.config.drain.remote)
            self.emit("drain_started", branch=branch, jobs=jobs, scope=self.scope.to_dict(), repo=str(self.repo))
            verified = verify_landings(tracker, self.lander, self.scope)
            for v in verified:
                self.emit("land_verified" if v["on_branch"] else "land_missing", **v)
            self.environment = project_environment(self.config, self.repo)
            self.lander.environment = self.environment
            if not self.follow(tracker):
                raise RunError(self.followed.line(), BASE_FAILING_EXIT)
            self.backend = self.options.backend or make_backend(self.config, options, tracker)
            for note in sandbox_notes(self.config, self.environment):
                print(note, file=sys.stderr)
            # The tree the first task starts from must pass the project's own check first.
            checked = base_check(self.config, self.repo, self.environment, self.lander.cut_base(), tracker)
            if checked is not None:
                print(checked.line(), file=sys.stderr)
                options.checked_base = checked
            try:
                # Work closed without landing here lands first: no dependent starts without it.
                self.landings += sum(r.result == "landed" for r in catch_up(
                    tracker, self.lander, tasks, emit=lambda event, fields: self.emit(event, **fields)))
                stop_reason, skipped, errors = self.schedule(tracker, jobs)
                for epic in close_landed_epics(tracker, scope_tasks(tracker, self.scope), branch):
                    self.emit("epic_closed", task=epic, reason=tracker.get(epic).get("close_reason"))
                blocked_before = blocked_in_scope(tracker, self.scope, options.ids, exclude=set(self.rows))
            finally:
                if self.options.backend is None:
                    self.backend.close()
        except TrackerError as exc:
            raise RunError(str(exc), 4 if isinstance(exc, WorkspaceError) else 2) from None
        finally:
            tracker.close()
        report = DrainReport(branch=branch, scope=self.scope.to_dict(), tasks=list(self.rows.values()),
                             landings=self.landings, conflicts=self.conflicts, wall_s=time.monotonic() - self.t0,
                             stop_reason=stop_reason, skipped=skipped, verified=verified,
                             blocked_before=blocked_before, errors=errors,
                             remote=options.remote or self.config.drain.remote,
                             base=self.followed.to_dict() if self.followed else None)
        return report

    def is_held_elsewhere(self, tracker: Tracker, task: dict, reason: str) -> bool:
        """True for an in-progress task of the scope another live run holds (its lease; a dead
        holder's is taken over): said once (``task_held``), not started every time it is looked at."""
        task_id = task["id"]
        if reason == "first_ready" or task_id in self.rows:
            return False
        if not lease_is_live(tracker, task_id) or holder_is_dead(tracker, task_id):
            return False
        if task_id not in self.held_elsewhere:
            self.held_elsewhere.add(task_id)
            self.emit("task_held", task=task_id, title=task.get("title") or "", holder=task.get("assignee") or "")
        return True

    def note_released(self, tracker: Tracker) -> None:
        """Say once that a task another run held is released (closed, blocked, or its lease gone)."""
        for task_id in sorted(self.held_elsewhere):
            # Closed or blocked is released, whether or not the holder's lease has been let go yet.
            if tracker.get(task_id)["status"] == "in_progress" and lease_is_live(tracker, task_id) \
                    and not holder_is_dead(tracker, task_id):
                continue
            self.held_elsewhere.discard(task_id)
            self.emit("task_released", task=task_id, status=tracker.get(task_id)["status"])

    def others_hold(self, tracker: Tracker) -> bool:
        """True while a task of the scope is in progress under a live lease of another run
        (asked with nothing of ours in flight: every live lease is another run's)."""
        return any(lease_is_live(tracker, task["id"])
                   for task in scoped_candidates(tracker, self.scope, status="in_progress"))

    def claim_ready(self, tracker: Tracker, skip: set[str]) -> tuple[dict, Lease | None] | None:
        """The next ready task of the scope outside ``skip``, claimed with its lease; None when none."""
        return claim_next_leased(tracker, labels=[self.scope.plan_label] if self.scope.plan_label else [],
                                 parent=self.scope.parent_epic, skip=skip, run_id=new_run_id(),
                                 ttl_s=lease_ttl(self.config), lease=self.config.integrate,
                                 types=self.scope.types)

    def limit_reached(self, started: set[str], task_id: str | None = None) -> str | None:
        """``max_tasks`` or ``budget`` when no new task may start (``task_id``, one that already
        started, may go on past ``--max-tasks``); None when one may."""
        if self.options.max_tasks is not None and task_id not in started and len(started) >= self.options.max_tasks:
            return "max_tasks"
        return None if self.budget_allows() else "budget"

    def budget_allows(self) -> bool:
        return budget_allows(self.options.max_usd,
                             finished=[row.cost_usd for row in self.rows.values() if row.ended is not None],
                             running=[row.cost_usd for row in self.rows.values() if row.ended is None])

    def schedule(self, tracker: Tracker, jobs: int) -> tuple[str, list[str], list[str]]:
        in_flight: dict[concurrent.futures.Future, str] = {}
        left_alone: set[str] = set()
        skipped: list[str] = []
        errors: list[str] = []
        started: set[str] = set()  # a task looked at again after another runner held it counts once
        stop_reason = "done"
        announced = False
        stop_seen = stop_token(tracker, self.scope)
        ensure_lease_table(tracker)  # once: claim_ready takes leases without the writers' lock
        # Runs killed after deciding but before their end are finished first.
        interrupted = interrupted_runs(tracker, self.scope, self.options.run.ids)
        def active() -> int:  # tasks in flight that hold a slot
            return len(set(in_flight.values()) - self.waiting_person)

        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs + _PERSON_SLOTS,
                                                   thread_name_prefix="mesh-drain") as pool:
            while True:
                self.note_released(tracker)
                if not self.control.stopping.is_set() and (asked := stop_token(tracker, self.scope)) != stop_seen:
                    self.emit("stop_requested", by=(asked or "").partition(" ")[2] or "someone")
                    self.control.stop_new()
                if self.control.stopping.is_set():
                    stop_reason = "interrupted"
                    if not announced:
                        announced = True
                        self.emit("interrupt", mode="finish", running=sorted(in_flight.values()))
                elif not errors and self.followed.ok and active() < jobs:
                    busy = set(in_flight.values())
                    candidates = [(task, reason) for task, reason in interrupted + select_candidates(
                        tracker, self.scope, self.options.run.ids) if not self.is_held_elsewhere(tracker, task, reason)]
                    # Before a task is cut, the branch follows its base (it may have moved during the drain).
                    if any(task["id"] not in busy | left_alone | set(self.rows) for task, _ in candidates) \
                            and not self.follow(tracker):
                        stop_reason, candidates = f"base_{self.followed.result}", []
                    for task, reason in candidates:
                        if active() >= jobs:
                            break
                        lease = None
                        if reason == "first_ready" and not self.options.run.ids:
                            # Ready work is claimed the way every runner claims it: the next ready task
                            # of the scope, taken with its lease in one transaction (never one another
                            # runner claimed a moment ago, never one a person holds).
                            limit = self.limit_reached(started)
                            if limit:
                                stop_reason = limit
                                break
                            claimed = self.claim_ready(tracker, busy | left_alone | set(self.rows) | {
                                t for t, at in self.retry_at.items() if at > time.monotonic()})
                            if claimed is None:
                                break
                            task, lease = claimed
                        task_id = task["id"]
                        if task_id in busy or task_id in left_alone or task_id in self.rows:
                            continue
                        if self.retry_at.get(task_id, 0.0) > time.monotonic():
                            continue
                        if not self.options.run.take_over and held_by_person(tracker, task, tracker.actor):
                            left_alone.add(task_id)
                            why = f"{task_id} is in progress by {task['assignee']} (not a mesh run); use --take-over"
                            skipped.append(why)
                            self.emit("task_skipped", task=task_id, why=why)
                            continue
                        limit = self.limit_reached(started, task_id)
                        if limit:
                            stop_reason = limit
                            break
                        started.add(task_id)
                        self.rows[task_id] = TaskRow(id=task_id, title=task["title"], started=time.monotonic())
                        self.emit("task_started", task=task_id, title=task["title"], reason=reason,
                                  branch=self.lander.branch, onto_sha=self.lander.tip(), base=self.followed.base,
                                  base_sha=self.followed.base_sha)
                        in_flight[pool.submit(self.work, task, reason, lease)] = task_id
                        busy.add(task_id)
                if not in_flight:
                    if self.control.stopping.is_set() or errors or stop_reason != "done" \
                            or not self.others_hold(tracker):
                        break
                    # Another runner (here or on another machine) holds a task of the scope: wait,
                    # then take what it frees or leaves behind (its lease runs out if it died).
                    time.sleep(_OTHERS_POLL_S)
                    continue
                done, _ = concurrent.futures.wait(list(in_flight), timeout=0.25,
                                                  return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    task_id = in_flight.pop(future)
                    self.finish(task_id, future, skipped, errors, left_alone)
        self.note_released(tracker)  # a task released between the last look and the end is said too
        return stop_reason, skipped, errors

    def finish(self, task_id: str, future: concurrent.futures.Future, skipped: list[str], errors: list[str],
               left_alone: set[str]) -> None:
        row = self.rows[task_id]
        row.ended = time.monotonic()
        engine = self.engines.get(task_id)
        try:
            report, held = future.result()
        except Exception as exc:  # a thread's failure becomes the task's typed outcome, never a traceback
            row.state, row.block_reason, row.block_detail = "error", "error", str(exc)
            errors.append(f"{task_id}: {exc}")
            self.emit("task_finished", task=task_id, **row.to_dict())
            return
        if report is None:
            # Not ours to run after all: a person's task is left alone for good; one another
            # runner holds (its lease) is looked at again shortly, and taken over once its lease
            # runs out or finished by that runner.
            del self.rows[task_id]
            if any("not a mesh run" in h for h in held):
                left_alone.add(task_id)
                skipped.extend(held)
            else:
                if task_id in self.retry_at:
                    self.retry_at[task_id] = time.monotonic() + _OTHERS_POLL_S
                    return  # said once already
                self.retry_at[task_id] = time.monotonic() + _OTHERS_POLL_S
            self.emit("task_skipped", task=task_id, why="; ".join(held))
            return
        row.state = report.outcome
        row.run_id = report.orch_run_id
        row.block_reason, row.block_detail = report.block_reason, report.block_detail
        usage = report.usage or {}
        row.cost_usd = usage.get("cost_usd", row.cost_usd)
        row.calls = usage.get("calls", row.calls)
        row.tokens = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        if engine is not None:
            row.cycle = f"c{engine.bus.consensus_cycle}/r{engine.bus.review_cycle}"
        self.emit("task_finished", task=task_id, **row.to_dict())


def drain(options: DrainOptions, *, emit: Emit | None = None, control: DrainControl | None = None) -> DrainReport:
    """Drain a scope (see the module docstring). Raises ``RunError`` for usage (2) and tracker (4)
    problems; a backend or git failure of a task is one line of the report's ``errors`` (its
    exit code 2), written after the other tasks finished, with the summary."""
    return _Drain(options, emit or (lambda event: None), control or DrainControl()).run()
