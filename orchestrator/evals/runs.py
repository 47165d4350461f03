"""``mesh eval run`` as a library: every (case, profile) of a suite as a real ``mesh run``, graded.

An eval lives in a folder of its own (by default ``<repo>/.mesh/evals/<suite name>/``):

- ``eval.json``: the suite (path and sha256), the source repository, the profiles in order;
- ``tracker.db``: the eval's tracker (or the one ``--db`` names, SQLite or PostgreSQL), where
  each (case, profile) is a task of its own, in a scope of its own (``plan:eval-<case>-<profile>``);
- ``repos/<case>/<profile>/``: the repository of that run, holding only the case's base history;
  its work goes on ``mesh/<task>`` there, never into the user's repository;
- ``results/<case>/<profile>.json``: the graded result, written at once when the run is graded;
- ``runs/<case>/<profile>.html``: the run's report page.

Each run is a ``mesh run`` process (``mesh resume --force`` for one a killed eval left in
progress: its checkpoints and calls log make it continue without paying a call twice). A result
file is the mark of a finished pair: a killed eval run again starts where it stopped. One eval
process at a time holds a folder (a lock file).
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from orchestrator.evals.cases import Grade, case_repo, grade_run, write_json, write_text
from orchestrator.evals.suite import Case, read_suite
from orchestrator.sandbox.lifetime import die_with_parent

__all__ = ["EvalError", "EvalOptions", "EvalRun", "eval_folder", "pair_label"]

PROFILES = ("full", "lite", "single", "candidates")
ACTOR = "mesh-eval"
# Calls a run of each profile makes when it goes straight through (one review cycle): what the
# first estimate multiplies before any run of the profile has finished.
TYPICAL_CALLS = {"full": 11, "lite": 4, "single": 2}
# Tokens of one call, when nothing was measured yet: a prompt with its repository context, an answer.
TYPICAL_TOKENS = (6000, 1500)


class EvalError(Exception):
    """The eval cannot run (a bad suite, a folder another eval holds, a changed suite): exit 2."""


@dataclass
class EvalOptions:
    """What ``mesh eval run`` was asked."""

    suite: Path
    profiles: list[str]
    repo: Path | None = None
    config_file: Path | None = None
    out: Path | None = None
    db: str | None = None
    jobs: int = 1
    max_usd: float | None = None
    batch: bool = False
    retry_errors: bool = False
    run_args: list[str] = field(default_factory=list)  # --backend/--worker/--worker-cmd, passed to each run


def eval_folder(repo: Path, suite: Path) -> Path:
    """The default folder of an eval of ``suite`` in ``repo``."""
    name = suite.name.removesuffix(".jsonl").removesuffix(".json")
    return repo / ".mesh" / "evals" / name


def pair_label(case_id: str, profile: str) -> str:
    """The plan label of a (case, profile) run: its scope."""
    return f"plan:eval-{case_id}-{profile}"


class EvalRun:
    """One eval folder: its plan, its pairs, and the runs that grade them."""

    def __init__(self, options: EvalOptions, echo: Callable[[str], None]):
        from orchestrator.config import ConfigError, load_config
        from orchestrator.worktree.gitops import GitError, repo_root

        self.options, self.echo = options, echo
        unknown = [p for p in options.profiles if p not in PROFILES]
        if unknown or not options.profiles:
            raise EvalError(f"--profile takes {', '.join(PROFILES)}" + (f"; not {', '.join(unknown)}" if unknown
                                                                          else ""))
        try:
            self.source = repo_root(Path(options.repo or Path.cwd()).resolve())
            self.config = load_config(self.source, options.config_file)
        except (GitError, ConfigError) as exc:
            raise EvalError(str(exc)) from None
        self.config_file = _config_path(self.source, options.config_file)
        suite = Path(options.suite).resolve()
        try:
            self.cases: list[Case] = read_suite(suite)
        except (OSError, ValueError) as exc:
            raise EvalError(f"the suite: {exc}") from None
        if not self.cases:
            raise EvalError(f"{suite} holds no case")
        self.folder = Path(options.out).resolve() if options.out else eval_folder(self.source, suite)
        self.folder.mkdir(parents=True, exist_ok=True)
        private = self.source / ".mesh"
        if self.folder.is_relative_to(private) and not (private / ".gitignore").exists():
            # mesh's own folder in the repository stays out of git (its evals hold repositories).
            (private / ".gitignore").write_text("# mesh's own files (evals, jobs): never committed\n*\n")
        self._lock = _hold(self.folder / ".lock")
        self.meta = self._meta(suite)
        self.profiles: list[str] = self.meta["profiles"]
        self.db = options.db or str(self.folder / "tracker.db")
        self._spent_lock = threading.Lock()
        self._stopped_for_budget = False
        self._stopping = threading.Event()
        self._children: set[subprocess.Popen] = set()
        self._children_lock = threading.Lock()
        self._checks: dict[str, tuple[list[str], bool]] = {}  # case -> (check commands, base passes them)
        self.view = None

    # ------------------------------------------------------------------ the plan

    def _meta(self, suite: Path) -> dict[str, Any]:
        digest = hashlib.sha256(suite.read_bytes()).hexdigest()
        path = self.folder / "eval.json"
        meta = json.loads(path.read_text()) if path.exists() else {
            "eval": f"ev-{self.folder.name}", "suite": str(suite), "suite_sha256": digest, "source": str(self.source),
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "profiles": []}
        if meta["suite_sha256"] != digest:
            raise EvalError(f"{suite} changed since this eval began ({path}); give another --out for the new suite")
        meta["profiles"] = list(dict.fromkeys([*meta["profiles"], *self.options.profiles]))
        write_json(path, meta)
        return meta

    def pairs(self) -> list[tuple[Case, str]]:
        """Every (case, profile) of the eval, case by case (the first profile first)."""
        return [(case, profile) for case in self.cases for profile in self.options.profiles]

    def result_path(self, case_id: str, profile: str) -> Path:
        return self.folder / "results" / case_id / f"{profile}.json"

    def result(self, case_id: str, profile: str) -> dict | None:
        path = self.result_path(case_id, profile)
        return json.loads(path.read_text()) if path.exists() else None

    def pending(self) -> list[tuple[Case, str]]:
        out = []
        for case, profile in self.pairs():
            done = self.result(case.id, profile)
            if done is None or (self.options.retry_errors and done.get("state") == "error"):
                out.append((case, profile))
        return out

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
        with self.tracker() as tracker:
            return self.usage_of(tracker)["cost_usd"]

    def estimate(self) -> dict[str, Any]:
        """How many runs are left, and what they may cost: per profile, the mean cost of its
        finished runs in this eval; for a profile with none yet, its typical calls at the mean
        cost of a call measured here, else at the price table's price of typical tokens."""
        pending = self.pending()
        done = [r for case in self.cases for p in self.profiles if (r := self.result(case.id, p))]
        by_profile: dict[str, list[float]] = {}
        calls = sum(r.get("calls", 0) for r in done)
        cost = sum(r.get("cost_usd", 0.0) for r in done)
        for r in done:
            by_profile.setdefault(r["profile"], []).append(r.get("cost_usd", 0.0))
        per_call = cost / calls if calls else self._priced_call()
        per_run = {p: sum(v) / len(v) if (v := by_profile.get(p)) else per_call * self._typical_calls(p)
                   for p in self.options.profiles}
        basis = {p: "measured" if by_profile.get(p) else ("measured per call" if calls else "price table")
                 for p in self.options.profiles}
        total = sum(per_run[p] for _, p in pending)
        return {"runs": len(pending), "done": len(self.pairs()) - len(pending), "estimated_usd": round(total, 4),
                "per_run_usd": {p: round(v, 4) for p, v in per_run.items()}, "basis": basis}

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
        pending = self.pending()
        results: list[dict] = []
        skipped = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.options.jobs)) as pool:
            futures = {pool.submit(self.pair, case, profile): (case, profile) for case, profile in pending}
            try:
                for future in concurrent.futures.as_completed(futures):
                    outcome = future.result()
                    if outcome is None:
                        skipped += 1
                    else:
                        results.append(outcome)
            except KeyboardInterrupt:
                self.stop()
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        return {"eval": self.meta["eval"], "folder": str(self.folder), "ran": len(results), "skipped": skipped,
                "resolved": sum(r["state"] == "resolved" for r in results)}

    def _prepare_environment(self) -> None:
        """The project's installed environment, found in the user's repository, is the one every
        case's validation uses (a case's repository has no virtualenv of its own, and gets the
        checkout's installed dependency folders)."""
        from orchestrator.sandbox.project_env import EnvironmentMissing, find_environment
        from orchestrator.toolchains.base import DependenciesMissing, ToolchainMissing
        from orchestrator.toolchains.view import inspect

        cfg = self.config.validation
        try:
            self.view = inspect(self.source, cfg).view
        except (DependenciesMissing, ToolchainMissing) as exc:
            raise EvalError(str(exc)) from None
        if os.environ.get("VIRTUAL_ENV") or cfg.python:
            return
        try:
            found = find_environment(self.source, None, cfg.env_dir)
        except EnvironmentMissing as exc:
            raise EvalError(str(exc)) from None
        if found is not None:
            os.environ["VIRTUAL_ENV"] = found.prefix

    def stop(self) -> None:
        """Ctrl-C: no pair starts any more, and the runs under way are asked to stop after their
        next checkpoint (SIGINT, as a terminal's Ctrl-C would; ``mesh eval run`` again continues them)."""
        self._stopping.set()
        with self._children_lock:
            children = list(self._children)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGINT)

    def pair(self, case: Case, profile: str) -> dict | None:
        """Run (or resume) and grade one (case, profile); None when the budget kept it from
        starting, or the eval is stopping."""
        if self._stopping.is_set():
            raise KeyboardInterrupt
        if self.over_budget():
            return None
        try:
            return self._pair(case, profile)
        except (ValueError, OSError) as exc:  # git or the file system failed this pair: said, and the eval goes on
            from redact import scrub

            result = {"case": case.id, "profile": profile, "task": None, "state": "error", "outcome": None,
                      "detail": scrub(f"{type(exc).__name__}: {exc}")[:400], "report": None, "run_id": None}
            write_json(self.result_path(case.id, profile), result)
            self.echo(f"{case.id} {profile}: error ({result['detail']})")
            return result

    def _pair(self, case: Case, profile: str) -> dict:
        repo = case_repo(self.folder, self.source, case, profile, self.view)
        task_id = self._task(case, profile)
        with self.tracker() as tracker:
            status = tracker.get(task_id)["status"]
        wall = self.folder / "results" / case.id / f"{profile}.wall"
        error = None
        if status not in ("closed", "blocked"):
            error = self._mesh_run(case, profile, repo, task_id, resume=status == "in_progress", wall=wall)
        return self._grade(case, profile, repo, task_id, error, wall)

    def _task(self, case: Case, profile: str) -> str:
        with self.tracker() as tracker:
            issue = tracker.create((case.title or case.task.splitlines()[0])[:200], description=case.task,
                                   labels=[pair_label(case.id, profile)], issue_type="task",
                                   idempotency_key=f"{self.meta['eval']}:{case.id}:{profile}")
            return issue["id"]

    def _mesh_run(self, case: Case, profile: str, repo: Path, task_id: str, *, resume: bool,
                  wall: Path) -> str | None:
        """One ``mesh run`` (``resume --force`` after a kill) of the pair; an error's text, else None.
        Its wall time so far is written to ``wall`` every few seconds, a line per attempt, so an
        eval killed during the run still counts the time the run had taken."""
        command = [sys.executable, "-c", "from orchestrator.cli.main import main; main()", "--db", self.db,
                   "--actor", ACTOR, *(["resume", task_id, "--force"] if resume else ["run"]),
                   "--label", pair_label(case.id, profile), "--repo", str(repo), "--json", "--no-land",
                   "--profile", profile, "--allow-failing-base", *self.options.run_args]
        if self.config_file is not None:
            command += ["--config", str(self.config_file)]
        if self.options.batch:
            command.append("--batch")
        env = {**os.environ, "MESH_EVAL_CASE": case.id, "MESH_EVAL_PROFILE": profile}
        done = _timed_run(command, cwd=repo, env=env, wall=wall, children=(self._children, self._children_lock))
        if done.returncode in (0, 3):  # closed (or nothing to run: finished before), blocked
            return None
        if done.returncode == 130:
            raise KeyboardInterrupt
        from redact import scrub

        tail = scrub(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
        return f"mesh run exited {done.returncode}: {tail[:300]}"

    def _grade(self, case: Case, profile: str, repo: Path, task_id: str, error: str | None, wall: Path) -> dict:
        from orchestrator.evals.cases import _git  # one git runner for the case repositories
        from orchestrator.protocol.checkpoint import load_checkpoints
        from orchestrator.views.report_html import write_report

        with self.tracker() as tracker:
            issue = tracker.get(task_id)
            checkpoints = load_checkpoints(tracker, task_id)
            outcomes = [cp for cp in checkpoints if cp.kind == "outcome"]
            cycles = sum(1 for cp in checkpoints if cp.kind == "review-cycle")
            usage = self.usage_of(tracker, task_id)
            last = (outcomes[-1].payload.get("artifact") or {}) if outcomes else {}
            report = self.folder / "runs" / case.id / f"{profile}.html"
            report.parent.mkdir(parents=True, exist_ok=True)
            try:
                write_report(tracker, task_id, report, prices=self.config.prices)
            except OSError:
                report = None
        branch = f"refs/heads/mesh/{task_id}"
        try:
            head = _git(repo, "rev-parse", "--verify", "-q", branch).strip()
            head = head if head != _git(repo, "rev-parse", "main").strip() else None
        except ValueError:
            head = None
        if error and issue["status"] not in ("closed", "blocked"):
            grade, state = Grade(False, error), "error"
        else:
            view = self._view(repo)
            checks, base_passes = self._base_checks(case, repo, view)
            grade = grade_run(repo, self.source, case, head, settings=self.config.validation, view=view,
                              checks=checks, base_passes=base_passes)
            state = "resolved" if grade.resolved else "unresolved"
            if issue["status"] == "blocked" and last.get("block_reason"):
                # Why the run stopped is part of the grade's story (a refused patch is no change).
                grade.detail = f"{grade.detail}; the run ended blocked: {last['block_reason']}"
        walls = _walls(wall)
        result = {"case": case.id, "profile": profile, "task": task_id, "state": state, "detail": grade.detail,
                  "outcome": last.get("outcome") or issue["status"], "block_reason": last.get("block_reason"),
                  "run_id": outcomes[-1].payload.get("run_id") if outcomes else None,
                  "review_cycles": cycles,
                  "wall_s": round(sum(walls), 3), "head": head, "graded_commit": grade.commit,
                  "hidden": grade.hidden, "existing": grade.existing,
                  "report": str(report.relative_to(self.folder)) if report else None, **usage}
        write_json(self.result_path(case.id, profile), result)
        self.echo(f"{case.id} {profile}: {state} ({result['outcome']}, {usage['calls']} call(s),"
                  f" ${usage['cost_usd']:.4f}, {result['wall_s']:.1f}s)")
        return result

    def _view(self, repo: Path):
        from orchestrator.toolchains.view import inspect

        return inspect(repo, self.config.validation).view

    def _base_checks(self, case: Case, repo: Path, view: Any) -> tuple[list[str], bool]:
        """The project's check commands (``view``'s, as the base check's), and whether the case's
        base passes them (once per case)."""
        if case.id in self._checks:
            return self._checks[case.id]
        from orchestrator.evals.cases import _git
        from orchestrator.evals.suite import sandbox_run
        from orchestrator.toolchains.base_check import check_commands

        cfg = self.config.validation
        checks = check_commands(cfg, list(view.checks) if view else [])
        run = sandbox_run(repo, cfg, view)
        base = _git(repo, "rev-parse", "main").strip()
        passes = all(run(base, command)[0] for command in checks)
        self._checks[case.id] = (checks, passes)
        return checks, passes


_WALL_EVERY_S = 2.0


def _walls(path: Path) -> list[float]:
    """The wall times of a pair's attempts (a line each; a killed eval's last line is its last note)."""
    try:
        return [float(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def _timed_run(command: list[str], *, cwd: Path, env: dict[str, str], wall: Path,
               children: tuple[set, threading.Lock]) -> subprocess.CompletedProcess:
    """Run ``command`` to its end (its output kept), noting its wall time so far as the last line of
    ``wall`` every ``_WALL_EVERY_S`` seconds and when it ends; the process is in ``children``
    (a set and its lock) while it runs."""
    import tempfile

    before = _walls(wall)
    started = time.monotonic()

    def note() -> None:
        write_text(wall, "".join(f"{x:.3f}\n" for x in [*before, time.monotonic() - started]))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # A session of its own: a terminal's Ctrl-C reaches the eval alone, which asks each run to
        # stop once (EvalRun.stop); a second signal to a run would end it at once.
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err, preexec_fn=die_with_parent,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        running, lock = children
        with lock:
            running.add(proc)
        try:
            while True:
                note()
                try:
                    proc.wait(timeout=_WALL_EVERY_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            with lock:
                running.discard(proc)
        note()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, proc.returncode, out.read().decode("utf-8", "replace"),
                                           err.read().decode("utf-8", "replace"))


def _config_path(repo: Path, given: Path | None) -> Path | None:
    if given is not None:
        return Path(given).resolve()
    if (repo / "mesh.toml").is_file():
        return repo / "mesh.toml"
    pyproject = repo / "pyproject.toml"
    if pyproject.is_file() and "[tool.mesh" in pyproject.read_text(encoding="utf-8", errors="replace"):
        return pyproject
    return None


def _hold(path: Path):
    """An exclusive lock on ``path`` for this process's life: one eval process per folder."""
    handle = path.open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise EvalError(f"another mesh eval is running in {path.parent}") from None
    return handle

