"""``mesh eval run`` as a library: every (case, arm, trial) of a suite as a real ``mesh run``, graded.

An eval lives in a folder of its own (by default ``<repo>/.mesh/evals/<suite name>/``):

- ``eval.json``: the suite (path and sha256), the source repository, the arms (each one's
  description: profile and workers), their order, the reference arm and each arm's trials;
- ``tracker.db``: the eval's tracker (or the one ``--db`` names, SQLite or PostgreSQL), where
  each run is a task of its own, in a scope of its own (``plan:eval-<case>-<slot>``; a slot names
  an arm, a trial and an attempt: ``orchestrator.evals.arms.slot``);
- ``repos/<case>/<slot>/``: the repository of that run, holding only the case's base history;
  its work goes on ``mesh/<task>`` there, never into the user's repository;
- ``results/<case>/<arm>[.tK].json``: the graded result of a trial, written at once;
- ``runs/<case>/<arm>[.tK].html``: the graded run's report page.

Scheduling, budget and launching are here; grading a finished run is ``grading``'s (a mixin).

Each run is a ``mesh run`` process (``mesh resume --force`` for one a killed eval left in
progress: its checkpoints and calls log make it continue without paying a call twice). A result
file is the mark of a finished trial: a killed eval run again starts where it stopped. One eval
process at a time holds a folder (a lock file). A run that ended in an error (a configuration
mistake, a missing agent CLI, the API's rate limit or overload after its retries, a sandbox or
tracker failure) is ``error``, with its kind and reason: never counted as finished. A
budget-matched arm (``orchestrator.evals.matching``) makes attempts until it spent what its
reference arm spent on the same case and trial.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator.evals import redo
from orchestrator.evals.environments import CaseEnvironments
from orchestrator.evals.arms import Arm, ArmError, arms_from, slot
from orchestrator.evals.cases import case_repo
from orchestrator.evals.grading import Grading
from orchestrator.evals.launch import run_error, timed_run
from orchestrator.evals.matching import matched_pair
from orchestrator.evals.plan import EvalError, EvalPlan
from orchestrator.evals.progress import Progress
from orchestrator.evals.report import count_kinds
from orchestrator.evals.shared import board_for, eval_name, keep_private, meta_url
from orchestrator.evals.suite import Case, read_suite

__all__ = ["EvalError", "EvalOptions", "EvalRun", "Pair", "eval_folder", "pair_label"]

PROFILES = ("full", "lite", "single", "candidates")
ACTOR = "mesh-eval"
# Calls a run of each profile makes when it goes straight through (one review cycle): what the
# first estimate multiplies before any run of the profile has finished.
TYPICAL_CALLS = {"full": 11, "lite": 4, "single": 2}
# Tokens of one call, when nothing was measured yet: a prompt with its repository context, an answer.
TYPICAL_TOKENS = (6000, 1500)
# The kinds of error a run can end in (``error.kind`` of a result): none of them is the arm's doing.
ERROR_KINDS = ("configuration", "missing_cli", "api", "sandbox", "tracker", "base", "run", "eval", "reference")


_POLL_S = 1.0  # how often a shared eval's runner looks again when the pairs left are other runners'


@dataclass
class EvalOptions:
    """What ``mesh eval run`` was asked."""

    suite: Path
    profiles: list[str] = field(default_factory=list)  # --profile P: an arm named P
    arms: list[str] = field(default_factory=list)  # --arm NAME or --arm 'NAME: key=value ...'
    reference: str | None = None  # the arm every other is compared with (default: the first)
    trials: int = 1
    repo: Path | None = None
    config_file: Path | None = None
    out: Path | None = None
    db: str | None = None
    remote: str | None = None  # --remote: the git remote the case repositories are built from
    jobs: int = 1
    max_usd: float | None = None
    batch: bool = False
    retry_errors: bool = False
    redo: list[str] = field(default_factory=list)  # --redo CASE[:ARM[.tK]]: pairs run anew (``redo``)
    eval_name: str | None = None  # --eval NAME: the eval's name in its database (default: ev-<folder name>)
    # --backend/--worker/--worker-cmd: the workers of an arm that names none of its own.
    run_args: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Pair:
    """One trial of one arm on one case: a result file of its own."""

    case: Case
    arm: Arm
    trial: int = 1

    @property
    def slot(self) -> str:
        return slot(self.arm.name, self.trial)

    @property
    def key(self) -> tuple[str, str]:
        return self.case.id, self.slot


@dataclass
class Attempt:
    """One ``mesh run`` of a pair (a budget-matched arm makes several): its slot, repository and task."""

    slot: str
    repo: Path
    task: str
    error: tuple[str, str] | None = None  # (kind, reason) when the run ended in an error
    status: str = "open"
    usage: dict[str, float] = field(default_factory=dict)
    borrowed: bool = False  # a shared eval's run another runner ended: its commits are that runner's


def eval_folder(repo: Path, suite: Path) -> Path:
    """The default folder of an eval of ``suite`` in ``repo``."""
    name = suite.name.removesuffix(".jsonl").removesuffix(".json")
    return repo / ".mesh" / "evals" / name


def pair_label(case_id: str, run_slot: str, eval_id: str | None = None) -> str:
    """The plan label of one run (``run_slot``: ``orchestrator.evals.arms.slot``): its scope. A
    shared eval's (``eval_id``) names the eval: its database may hold other evals' runs."""
    return f"plan:{eval_id}-{case_id}-{run_slot}" if eval_id else f"plan:eval-{case_id}-{run_slot}"


class EvalRun(EvalPlan, Grading):
    """One eval folder: its plan, its pairs, and the runs that grade them."""

    def __init__(self, options: EvalOptions, echo: Callable[[str], None]):
        from orchestrator.config import ConfigError, load_config
        from orchestrator.worktree.gitops import GitError, repo_root

        self.options, self.echo = options, echo
        if options.trials < 1:
            raise EvalError("--trials takes 1 or more")
        try:
            self.source = repo_root(Path(options.repo or Path.cwd()).resolve())
            self.config = load_config(self.source, options.config_file)
        except (GitError, ConfigError) as exc:
            raise EvalError(str(exc)) from None
        try:
            self.arms: list[Arm] = arms_from(self.config, specs=list(options.arms), profiles=list(options.profiles),
                                             run_args=dict(options.run_args))
        except ArmError as exc:
            raise EvalError(str(exc)) from None
        if not self.arms:
            raise EvalError("name what to compare: --arm NAME (an arm of [eval.arms], or 'NAME: profile=...')"
                            f" or --profile {{{','.join(PROFILES)}}}")
        self.config_file = _config_path(self.source, options.config_file)
        suite = Path(options.suite).resolve()
        try:
            self.cases: list[Case] = read_suite(suite)
        except (OSError, ValueError) as exc:
            raise EvalError(f"the suite: {exc}") from None
        if not self.cases:
            raise EvalError(f"{suite} holds no case")
        named = [case.id for case in self.cases if case.reference and len(case.id) >= 7
                 and case.reference.startswith(case.id.lower())]
        if named:
            echo(f"warning: {len(named)} case id(s) name their reference commit ({named[0]}, ...): a worker that"
                 " sees its id can look the fix up; build the suite again (mesh eval suite --from-git) to seal them")
        self.folder = Path(options.out).resolve() if options.out else eval_folder(self.source, suite)
        self.folder.mkdir(parents=True, exist_ok=True)
        keep_private(self.folder)
        self.db = options.db or str(self.folder / "tracker.db")
        # The eval's name: a shared eval's key in its database (--eval, else its folder's).
        try:
            self.eval_id = eval_name(self.folder, options.eval_name)
        except ValueError as exc:
            raise EvalError(str(exc)) from None
        try:
            self.board = board_for(self.folder, self.db, self.eval_id, ttl_s=self.config.lease_ttl_s, actor=ACTOR)
        except Exception as exc:  # the database cannot be reached or refused us
            from redact import scrub

            raise EvalError(f"the eval's database {meta_url(self.db)}: {scrub(str(exc))[:300]}") from None
        # One eval process per folder, unless the eval is shared: then its runners hold the lock
        # together (a status on this machine sees some run), and claim each pair in the database.
        self._lock = _hold(self.folder / ".lock", shared=self.board.shared)
        self.meta = self._meta(suite)
        self.origin = self._origin()
        self._spent_lock = threading.Lock()
        self._stopped_for_budget = False
        self._stopping = threading.Event()
        self._children: set[subprocess.Popen] = set()
        self._children_lock = threading.Lock()
        self._checks: dict[str, tuple[list[str], bool]] = {}  # case -> (check commands, base passes them)
        self._done = threading.Condition()
        self._taking = threading.Lock()
        self._lost = 0  # pairs another runner took over from this one (a shared eval)
        self._queue: list[Pair] = []
        self._taken: set[tuple[str, str]] = set()
        self._scheduled: set[tuple[str, str]] = set()
        self._finished: set[tuple[str, str]] = set()
        self.view = None
        self.environments = CaseEnvironments(self.config.eval.env, echo)
        try:
            self._redo = redo.keys(options.redo, [c.id for c in self.cases], [a.name for a in self.arms],
                                   options.trials)
        except ValueError as exc:
            raise EvalError(str(exc)) from None
        if self._redo and self.board.shared:
            raise EvalError("--redo works on an eval of this machine; a shared eval's pairs are its runners'")
        self._redo_left = set(self._redo)  # to run anew, their results not yet removed

    # ------------------------------------------------------------------ the plan

    def pairs(self) -> list[Pair]:
        """Every (case, arm, trial) of this run: the arms that spend freely first, then the
        budget-matched ones (each waits for its reference's spend on the same case and trial)."""
        free = [a for a in self.arms if not a.config.match]
        matched = [a for a in self.arms if a.config.match]
        return [Pair(case, arm, trial) for group in (free, matched) for case in self.cases for arm in group
                for trial in range(1, self.options.trials + 1)]

    def result(self, case_id: str, run_slot: str) -> dict | None:
        return self.board.result(case_id, run_slot)

    def pending(self) -> list[Pair]:
        out = []
        for pair in self.pairs():
            done = self.result(*pair.key)
            if done is None or (self.options.retry_errors and done.get("state") == "error") or \
                    pair.key in self._redo_left:
                out.append(pair)
        return out

    def errors(self) -> list[dict]:
        """The results of this run's arms that ended in an error (what makes ``mesh eval run`` exit 1)."""
        return [r for pair in self.pairs() if (r := self.result(*pair.key)) and r.get("state") == "error"]

    # ------------------------------------------------------------------ money

    def tracker(self):
        from tracker.store import Tracker

        tracker = Tracker(self.db, actor=ACTOR, create=True)
        if tracker.get_config("issue_prefix") is None:
            tracker.set_config("issue_prefix", "ev")
        return tracker

    def usage_of(self, tracker, task_id: str | None = None) -> dict[str, float]:
        """Calls, tokens and cost of a task's runs (every task's, without one), from the calls log."""
        from orchestrator.ledger.calls import calls_for, ensure_calls_table

        ensure_calls_table(tracker)
        rows = calls_for(tracker, task_id=task_id)
        total = {"calls": len(rows), "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0}
        for row in rows:
            usage = row.get("usage") or {}
            total["tokens_in"] += int(usage.get("input_tokens") or 0) + int(usage.get("cache_read_tokens") or 0) \
                + int(usage.get("cache_write_tokens") or 0)
            total["tokens_out"] += int(usage.get("output_tokens") or 0)
            total["cost_usd"] += float(usage.get("cost_usd") or 0.0)
        return total

    def spent(self) -> float:
        """What the eval spent so far (a shared eval's database may hold other evals' runs: its own
        runs' calls only, by their label)."""
        with self.tracker() as tracker:
            if not self.board.shared:
                return self.usage_of(tracker)["cost_usd"]
            from orchestrator.ledger.calls import ensure_calls_table

            ensure_calls_table(tracker)
            rows = tracker.db.read("SELECT usage FROM mesh_calls WHERE task_id IN (SELECT issue_id FROM labels"
                                   " WHERE label LIKE ?)", (f"plan:{self.eval_id}-%",))
            return sum(float((json.loads(r[0]) if r[0] else {}).get("cost_usd") or 0.0) for r in rows)

    def estimate(self) -> dict[str, Any]:
        """How many runs are left, and what they may cost: per arm, the mean cost of its finished
        runs in this eval; for an arm with none yet, its profile's typical calls at the mean cost
        of a call measured here, else at the price table's price of typical tokens; a
        budget-matched arm spends what its reference arm does."""
        pending = self.pending()
        done = [r for pair in self.pairs() if (r := self.result(*pair.key)) and r.get("state") != "error"]
        by_arm: dict[str, list[float]] = {}
        calls = sum(r.get("calls", 0) for r in done)
        cost = sum(r.get("cost_usd", 0.0) for r in done)
        for r in done:
            by_arm.setdefault(r.get("arm") or r["profile"], []).append(r.get("cost_usd", 0.0))
        per_call = cost / calls if calls else self._priced_call()
        per_run = {a.name: sum(v) / len(v) if (v := by_arm.get(a.name)) else per_call * self._typical_calls(a.profile)
                   for a in self.arms}
        for arm in self.arms:
            if arm.config.match and not by_arm.get(arm.name):
                per_run[arm.name] = per_run.get(arm.config.match, per_run[arm.name])
        basis = {a.name: "measured" if by_arm.get(a.name) else ("measured per call" if calls else "price table")
                 for a in self.arms}
        total = sum(per_run[pair.arm.name] for pair in pending)
        return {"runs": len(pending), "done": len(self.pairs()) - len(pending), "estimated_usd": round(total, 4),
                "per_run_usd": {a: round(v, 4) for a, v in per_run.items()}, "basis": basis}

    def _typical_calls(self, profile: str) -> int:
        """Calls of a run of ``profile`` straight through: the candidates profile's grow with its authors."""
        if profile == "candidates":
            return len(self.config.profiles.candidates) + 2  # the authors, the choice, the review
        return TYPICAL_CALLS[profile]

    def _priced_call(self) -> float:
        price = self.config.prices.price_for(self.config.model_for("synthesizer"))
        if price is None or self.config.backend in ("replay", "command"):
            return 0.0
        return (TYPICAL_TOKENS[0] * price.input + TYPICAL_TOKENS[1] * price.output) / 1e6

    def over_budget(self) -> bool:
        if self.options.max_usd is None:
            return False
        with self._spent_lock:
            if not self._stopped_for_budget and self.spent() >= self.options.max_usd:
                self._stopped_for_budget = True
                self.echo(f"budget: ${self.options.max_usd:.2f} spent; no new run starts")
            return self._stopped_for_budget

    # ------------------------------------------------------------------ running

    def run(self) -> dict[str, Any]:
        """Run every pending pair (``jobs`` at a time) and grade it; returns a summary."""
        self._prepare_environment()
        self._warn_missing_workers()
        for key in sorted(self._redo_left):
            if redo.clear(self.folder, key, self.board):
                self.echo(f"{key[0]} {key[1]}: its result and repository removed, to run anew (--redo)")
        self._redo_left = set()
        pending = self.pending()
        self._scheduled = {pair.key for pair in pending}
        self.progress = self._progress(pending)
        self.progress.write()
        results: list[dict] = []
        skipped = 0
        self._queue, self._taken = list(pending), set()
        jobs = max(1, self.options.jobs)
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(self._work) for _ in range(min(jobs, len(pending)) or 1)]
                try:
                    for future in concurrent.futures.as_completed(futures):
                        for outcome in future.result():
                            if outcome is None:
                                skipped += 1
                            else:
                                results.append(outcome)
                except KeyboardInterrupt:
                    self.stop()
                    pool.shutdown(wait=True, cancel_futures=True)
                    self.progress.write("stopped")
                    raise
            self.progress.write("finished" if not self.pending() else "stopped")
            errors = self.errors()
        finally:
            self.board.close()
        graded = [r for r in results if r["state"] != "error"]
        return {"eval": self.meta["eval"], "folder": str(self.folder), "ran": len(graded),
                "skipped": skipped - self._lost, "taken_over": self._lost,
                "resolved": sum(r["state"] == "resolved" for r in graded),
                "errors_now": len(results) - len(graded),
                "errors": len(errors), "error_kinds": count_kinds(errors)}

    def _work(self) -> list[dict | None]:
        """One of the ``jobs`` threads: take the next pair and run it, until none is left."""
        out = []
        while (pair := self._take()) is not None:
            out.append(self.pair(pair))
        return out

    def _take(self) -> Pair | None:
        """The next pair this runner works, claimed (a local eval's pairs are all its own); a shared
        eval's runner waits while the pairs left are other runners' (one that dies leaves them to
        it) and a budget-matched pair while its reference is not done. None: nothing left."""
        with self._taking:
            while not self._stopping.is_set():
                left = [p for p in self._queue if p.key not in self._taken]
                if not left:
                    return None
                if not self.board.shared:
                    self._taken.add(left[0].key)
                    return left[0]
                states = self.board.pending_keys([p.key for p in left])  # "free", "held"; none: a result
                waiting = False
                for pair in left:
                    state = states.get(pair.key)
                    if state is None:  # done, here or elsewhere (or in error, taken again with --retry-errors)
                        again = self.options.retry_errors and self.board.claim(pair.key, again=True)
                        self._taken.add(pair.key)
                        if again:
                            return pair
                        continue
                    if pair.arm.config.match and self._reference_pending(pair):
                        waiting = True
                    elif state == "free" and self.board.claim(pair.key):
                        self._taken.add(pair.key)
                        return pair
                    else:
                        waiting = True  # another runner's: taken over if that runner dies
                if not waiting:
                    return None
                self._stopping.wait(_POLL_S)
            return None

    def _reference_pending(self, pair: Pair) -> bool:
        """A budget-matched pair's reference is run by this eval and has no result yet."""
        key = (pair.case.id, slot(pair.arm.config.match or "", pair.trial))
        return key in self._scheduled and self.result(*key) is None

    def _progress(self, pending: list[Pair]) -> Progress:
        """The progress of this run of the eval, from the results already written."""
        every = self.pairs()
        waiting = {pair.key for pair in pending}
        done = [r for pair in every if pair.key not in waiting and (r := self.result(*pair.key))]
        per_run = self.estimate()["per_run_usd"]
        return Progress(self.folder, total=len(every), done=len(done),
                        errors=sum(r.get("state") == "error" for r in done), jobs=self.options.jobs,
                        walls=[float(r["wall_s"]) for r in done if r.get("state") != "error" and r.get("wall_s")],
                        cost_left={pair.key: per_run.get(pair.arm.name, 0.0) for pair in pending},
                        spent=self.spent())

    def _warn_missing_workers(self) -> None:
        from orchestrator.evals.launch import missing_workers

        for arm, program in missing_workers(self.meta["arms"], [arm.name for arm in self.arms]):
            self.echo(f"warning: arm {arm}: its worker command {program} is not installed or not"
                      " executable: its runs will end in error (missing_cli)")

    def _prepare_environment(self) -> None:
        """The project's installed environment, found in the user's repository, is the one every
        case's validation uses (a case's repository has no virtualenv of its own, and gets the
        checkout's installed dependency folders)."""
        from orchestrator.sandbox.project_env import EnvironmentMissing, find_environment
        from orchestrator.toolchains.base import DependenciesMissing, ToolchainMissing
        from orchestrator.toolchains.view import inspect

        cfg = self.config.validation
        # Cases that each bring their environment (``[[eval.env]]``, SWE-bench's spec) need none here.
        own = bool(self.cases) and all(case.environment for case in self.cases)
        try:
            self.view = inspect(self.source, cfg).view
        except DependenciesMissing as exc:
            if not own:
                raise EvalError(str(exc)) from None
            self.view = inspect(self.source, cfg, check_installed=False).view
        except ToolchainMissing as exc:
            raise EvalError(str(exc)) from None
        if os.environ.get("VIRTUAL_ENV") or cfg.python:
            return
        try:
            found = find_environment(self.source, None, cfg.env_dir)
        except EnvironmentMissing as exc:
            if own:
                return
            raise EvalError(str(exc)) from None
        if found is not None:
            os.environ["VIRTUAL_ENV"] = found.prefix

    @property
    def stopping(self) -> bool:
        """The eval was asked to stop (Ctrl-C, SIGTERM): no pair or attempt starts any more."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ctrl-C: no pair starts any more, and the runs under way are asked to stop after their
        next checkpoint (SIGINT, as a terminal's Ctrl-C would; ``mesh eval run`` again continues them)."""
        self._stopping.set()
        with self._done:
            self._done.notify_all()
        with self._children_lock:
            children = list(self._children)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGINT)

    def pair(self, pair: Pair) -> dict | None:
        """Run (or resume) and grade one pair; None when the budget kept it from starting."""
        result = None
        started = False
        try:
            if self._stopping.is_set():
                raise KeyboardInterrupt
            if self.over_budget():
                self.board.release(pair.key)  # a shared eval: another runner may take it
                self.progress.finish(pair.key, None)
                return None
            self.progress.start(pair.key)
            started = True
            try:
                if pair.arm.config.match:
                    result = matched_pair(self, pair)
                else:
                    attempt = self.attempt(pair, 1)
                    result = self.grade(pair, attempt, [attempt])
            except (ValueError, OSError) as exc:  # git or the file system failed this pair: said, and the eval goes on
                from redact import scrub

                result = self.error_result(pair, "eval", scrub(f"{type(exc).__name__}: {exc}")[:400])
            return result
        except _ClaimLost:
            self.echo(f"{pair.case.id} {pair.slot}: another runner took this pair over (this runner's claim"
                      " lapsed); its result is that runner's")
            self._lost += 1
            result = None
            return None
        except KeyboardInterrupt:
            self.board.release(pair.key)  # another runner may continue it at once
            raise
        finally:
            with self._done:
                self._finished.add(pair.key)
                self._done.notify_all()
            if started or result is not None:
                self.progress.finish(pair.key, result, self.spent() if result is not None else None)
                if self.board.shared:  # the other runners' results count too
                    self.progress.recount(*self._counts())
                if result is not None:
                    self.echo("  " + self.progress.line())

    def reference_result(self, pair: Pair) -> dict | None:
        """The result of the pair a budget-matched ``pair`` matches (its arm's ``match``, the same case
        and trial), waited for while this eval runs it; None when it is not run."""
        key = (pair.case.id, slot(pair.arm.config.match or "", pair.trial))
        with self._done:
            while key in self._scheduled and key not in self._finished and not self.result(*key):
                if self._stopping.is_set():
                    raise KeyboardInterrupt
                self._done.wait(timeout=1.0)
        return self.result(*key)

    def attempt(self, pair: Pair, number: int) -> Attempt:
        """Run (or resume) the ``number``-th attempt of ``pair``: a task and a repository of its own."""
        run_slot = slot(pair.arm.name, pair.trial, number)
        repo = case_repo(self.folder, self.source, pair.case, run_slot, self.view, origin=self.origin)
        task_id = self._task(pair.case, run_slot)
        with self.tracker() as tracker:
            status = tracker.get(task_id)["status"]
        attempt = Attempt(run_slot, repo, task_id, borrowed=self.board.shared and status in ("closed", "blocked"))
        if self.board.shared:  # a run another runner began: its commits, as far as it shared them
            self.board.take_branch(task_id, repo)
        if status not in ("closed", "blocked"):
            attempt.error = self._mesh_run(pair, attempt, resume=status == "in_progress", number=number)
        with self.tracker() as tracker:
            attempt.status = tracker.get(task_id)["status"]
            attempt.usage = self.usage_of(tracker, task_id)
        return attempt

    def _task(self, case: Case, run_slot: str) -> str:
        with self.tracker() as tracker:
            issue = tracker.create((case.title or case.task.splitlines()[0])[:200], description=case.task,
                                   labels=[self._label(case.id, run_slot)], issue_type="task",
                                   idempotency_key=f"{self.meta['eval']}:{case.id}:{run_slot}"
                                   + (f":r{n}" if (n := redo.generation(self.folder, case.id, run_slot)) else ""))
            return issue["id"]

    def _mesh_run(self, pair: Pair, attempt: Attempt, *, resume: bool, number: int) -> tuple[str, str] | None:
        """One ``mesh run`` (``resume --force`` after a kill) of an attempt; its error's (kind,
        reason), else None. Its wall time so far is noted on the eval's board every few seconds (a
        note per start), so an eval killed during the run still counts the time the run had taken;
        a shared eval's board also gets its task branch then, for a runner that may continue it."""
        # The database by the environment (MESH_DB), never the command line: a PostgreSQL URL may
        # hold a password, and any user of the machine reads a process's arguments.
        command = [sys.executable, "-c", "from orchestrator.cli.main import main; main()", "--actor", ACTOR,
                   *(["resume", attempt.task, "--force"] if resume else ["run"]),
                   "--label", self._label(pair.case.id, attempt.slot), "--repo", str(attempt.repo), "--json",
                   "--no-land", "--allow-failing-base", *pair.arm.run_args(self.config)]
        if self.config_file is not None:
            command += ["--config", str(self.config_file)]
        if self.options.batch and "--batch" not in command:
            command.append("--batch")
        env = {**os.environ, "MESH_DB": self.db, "MESH_EVAL_CASE": pair.case.id,
               "MESH_EVAL_PROFILE": pair.arm.profile, "MESH_EVAL_ARM": pair.arm.name,
               "MESH_EVAL_TRIAL": str(pair.trial), "MESH_EVAL_ATTEMPT": str(number)}
        built = self.environments.for_case(pair.case)
        if built:  # the case's [[eval.env]]: the run's validation finds it as the active environment
            env["VIRTUAL_ENV"] = built["prefix"]
        note = self.board.wall_note(pair.case.id, attempt.slot)

        def wall(seconds: float) -> None:
            note(seconds)
            if self.board.shared:  # its commits so far, for a runner that may have to continue it
                self.board.share_branch(attempt.task, attempt.repo)

        done = timed_run(command, cwd=attempt.repo, env=env, wall=wall, children=(self._children, self._children_lock))
        if done.returncode in (0, 3):  # closed (or nothing to run: finished before), blocked
            return None
        if done.returncode == 130:
            raise KeyboardInterrupt
        return run_error(done.returncode, done.stderr)

    def _label(self, case_id: str, run_slot: str) -> str:
        return pair_label(case_id, run_slot, self.eval_id if self.board.shared else None)

    def _put(self, pair: Pair, result: dict) -> None:
        if not self.board.put(pair.key, result):
            raise _ClaimLost

    def _counts(self) -> tuple[int, int]:
        """Pairs of this run's plan with a result, and those in error (a shared eval: any runner's)."""
        done = [r for pair in self.pairs() if (r := self.result(*pair.key))]
        return len(done), sum(r.get("state") == "error" for r in done)


def _config_path(repo: Path, given: Path | None) -> Path | None:
    if given is not None:
        return Path(given).resolve()
    if (repo / "mesh.toml").is_file():
        return repo / "mesh.toml"
    pyproject = repo / "pyproject.toml"
    if pyproject.is_file() and "[tool.mesh" in pyproject.read_text(encoding="utf-8", errors="replace"):
        return pyproject
    return None


class _ClaimLost(Exception):
    """Another runner took over the pair (this runner's claim lapsed): its result is not written."""


def _hold(path: Path, *, shared: bool = False):
    """A lock on ``path`` for this process's life: exclusive (one eval process per folder), or
    ``shared`` by the runners of a shared eval (none may run beside a local eval's process)."""
    handle = path.open("a")
    try:
        fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise EvalError(f"another mesh eval is running in {path.parent}") from None
    return handle

