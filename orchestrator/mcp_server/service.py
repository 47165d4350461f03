"""What ``mesh mcp``'s tools do, as a library: one ``MeshService`` per repository and tracker.

Every view reuses the command line's own functions (``mesh status``'s ``scope_status``,
``mesh show``'s ``task_history``, ``mesh usage``'s ``usage_summary``, ``mesh report``'s
``write_report``), so a session sees what a person at the terminal sees. Input is checked
before anything is started or written: a problem is an ``InputProblem`` naming the field and
the fix, and an unknown task, label or epic names the closest existing ones.
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracker.errors import NotFoundError, TrackerError
from tracker.model import parse_ts
from tracker.store import Tracker

from orchestrator.config import MeshConfig
from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.worktree.gitops import GitError, _git, repo_root
from orchestrator.protocol.idle import UnknownScope, check_scope, last_block
from orchestrator.runner import RunError, RunOptions, load_run_config, open_tracker, refuse_nested_run
from orchestrator.protocol.scope import Scope, scope_tasks
from orchestrator.views.live import current_step
from orchestrator.views.preflight import readable_summary
from orchestrator.views.status import scope_status
from orchestrator.ledger.usage import UsageError, parse_since, usage_summary
from orchestrator.mcp_server.jobs import Job, JobStore

__all__ = ["InputProblem", "MeshService", "ServiceError"]


class InputProblem(Exception):
    """Bad input: ``field`` names the argument, the message says what is wrong and the fix."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class ServiceError(Exception):
    """The server cannot do it (no tracker, a broken config, a nested run): one line saying why."""


def _closest(wanted: str, known: list[str], what: str) -> str:
    close = difflib.get_close_matches(wanted, known, n=3, cutoff=0.5)
    if close:
        return f"no {what} {wanted!r}; did you mean {' or '.join(close)}?"
    return f"no {what} {wanted!r}" + (f"; the tracker's {what}s include {', '.join(known[:10])}" if known else "")


def _task_scope(task: dict) -> Scope | None:
    """The scope ``mesh run`` runs a task in: its plan label (else its first label), else its epic."""
    labels = task.get("labels") or []
    plan = next((label for label in labels if label.startswith("plan:")), labels[0] if labels else None)
    if plan:
        return Scope("label", plan_label=plan)
    return Scope("parent", parent_epic=task["parent"]) if task.get("parent") else None


class MeshService:
    """The tracker mesh is pointed at (``db``: ``mesh --db``, else MESH_DB, the config's
    ``tracker.url`` or the workspace found from ``repo``) and the repository runs land in."""

    def __init__(self, repo: Path, *, db: str | None = None, actor: str | None = None,
                 config_file: Path | None = None):
        repo = repo.resolve()
        try:
            repo = repo_root(repo)
        except GitError:
            pass  # not a git repository: runs say so when started; the views still work
        self.repo, self.db, self.actor, self.config_file = repo, db, actor, config_file
        self.jobs = JobStore(self.repo)

    # ------------------------------------------------------------------ plumbing

    def config(self) -> MeshConfig:
        """The configuration runs started here use."""
        try:
            return load_run_config(RunOptions(repo=self.repo, config_file=self.config_file))
        except RunError as exc:
            raise ServiceError(str(exc)) from None

    @contextmanager
    def tracker(self, config: MeshConfig | None = None) -> Iterator[Tracker]:
        """An open tracker for one call (each call its own connection: tools run in threads)."""
        try:
            tracker = open_tracker(self.db, self.actor, config or self.config(), repo=self.repo)
        except RunError as exc:
            raise ServiceError(str(exc)) from None
        try:
            yield tracker
        except NotFoundError as exc:
            raise ServiceError(str(exc)) from None
        except TrackerError as exc:
            raise ServiceError(f"tracker: {exc}") from None
        finally:
            tracker.close()

    def _task(self, tracker: Tracker, task_id: str, field: str = "task") -> dict:
        try:
            return tracker.get(task_id)
        except NotFoundError:
            known = [i["id"] for i in tracker.list(include_closed=True) if i["status"] != "tombstone"]
            raise InputProblem(field, _closest(task_id, known, "issue") + "; the scope tool lists a scope's tasks") \
                from None

    def _scope(self, tracker: Tracker, label: str | None, parent: str | None) -> Scope:
        if label and parent:
            raise InputProblem("label", "give label or parent, not both")
        if not label and not parent:
            raise InputProblem("label", "give a scope: label (a plan label such as plan:q3) or parent (an epic id)")
        scope = Scope("label", plan_label=label) if label else Scope("parent", parent_epic=parent)
        try:
            check_scope(tracker, scope)
        except UnknownScope as exc:
            raise InputProblem("label" if label else "parent", str(exc).replace("--label ", "")
                               .replace("--parent ", "")) from None
        return scope

    def _mesh_args(self) -> list[str]:
        """The global options every job's command line starts with."""
        out = []
        if self.db:
            out += ["--db", str(self.db)]
        if self.actor:
            out += ["--actor", self.actor]
        return out

    def _run_args(self, scope: Scope, worker: str | None, reviewer: str | None = None) -> list[str]:
        args = ["--label", scope.plan_label] if scope.plan_label else ["--parent", scope.parent_epic or ""]
        args += ["--repo", str(self.repo), "--json"]
        if self.config_file:
            args += ["--config", str(self.config_file)]
        if worker:
            args += ["--worker", worker]
        if reviewer:
            args += ["--reviewer", reviewer]
        return args

    # ------------------------------------------------------------------ views

    def scope(self, label: str | None, parent: str | None) -> dict[str, Any]:
        """The scope's tasks by state (ready, running, waiting, blocked, closed) and its tree."""
        config = self.config()
        with self.tracker(config) as tracker:
            scope = self._scope(tracker, label, parent)
            tree = scope_status(tracker, scope, repo=self.repo, onto=config.drain.onto)
            ready = {t["id"] for t in tracker.ready(labels=[label] if label else [], issue_type="task",
                                                     parent=parent)}
            buckets: dict[str, list[dict[str, Any]]] = {k: [] for k in ("ready", "running", "waiting", "blocked",
                                                                          "closed")}
            for task in scope_tasks(tracker, scope):
                if task["status"] == "tombstone":
                    continue  # deleted: neither waiting nor anything else
                entry = {"id": task["id"], "title": task["title"], "priority": task.get("priority")}
                if task["status"] == "closed":
                    buckets["closed"].append(entry)
                elif task["status"] == "in_progress":
                    buckets["running"].append({**entry, "assignee": task.get("assignee")})
                elif task["status"] == "blocked":
                    reason, detail = last_block(tracker, task["id"])
                    buckets["blocked"].append({**entry, "reason": reason, "detail": detail[:300]})
                elif task["id"] in ready:
                    buckets["ready"].append(entry)
                else:
                    buckets["waiting"].append({**entry, "blockers": [b["id"] for b in tracker.blockers(task["id"])]})
        return {"scope": scope.to_dict(), "branch": tree["branch"], "branch_tip": tree["branch_tip"], **buckets,
                "epics": tree["epics"]}

    def create_task(self, *, title: str, description: str, acceptance: str, labels: list[str],
                    parent: str | None, dependencies: list[str], priority: int) -> dict[str, Any]:
        """Create one task (checked whole first: nothing is created when a field is wrong)."""
        if not title.strip():
            raise InputProblem("title", "empty: give the task a one-line title")
        with self.tracker() as tracker:
            if parent:
                epic = self._task(tracker, parent, "parent")
                if epic["status"] == "closed":
                    raise InputProblem("parent", f"{parent} is closed: give an open epic")
            for index, dep in enumerate(dependencies):
                self._task(tracker, dep, f"dependencies[{index}]")
            issue = tracker.create(title, issue_type="task", priority=priority, labels=labels, parent=parent,
                                   description=description, acceptance_criteria=acceptance)
            for dep in dependencies:
                tracker.add_dependency(issue["id"], dep)
            issue = tracker.get(issue["id"])
        return {"id": issue["id"], "title": issue["title"], "status": issue["status"], "labels": issue["labels"],
                "parent": issue.get("parent"), "dependencies": dependencies}

    # ------------------------------------------------------------------ jobs

    def start_run(self, task_id: str, worker: str | None = None, reviewer: str | None = None) -> Job:
        """Start ``mesh run`` on one task, detached; returns its job at once."""
        config = self.config()
        self._refuse_nested(config)
        with self.tracker(config) as tracker:
            task = self._task(tracker, task_id)
            if task.get("issue_type") not in (None, "task"):
                raise InputProblem("task", f"{task_id} is a {task['issue_type']}, not a task: start_drain runs an"
                                           " epic's tasks (parent)")
            if task["status"] == "closed":
                raise InputProblem("task", f"{task_id} is closed already")
            if task["status"] == "blocked":
                reason, _ = last_block(tracker, task_id)
                raise InputProblem("task", f"{task_id} is blocked ({reason}): re-open it with `mesh retry {task_id}`")
            blockers = [b["id"] for b in tracker.blockers(task_id)]
            if task["status"] == "open" and blockers:
                raise InputProblem("task", f"{task_id} waits on {', '.join(blockers)}: run those first, or"
                                           " start_drain its scope")
            scope = _task_scope(task)
            if scope is None:
                raise InputProblem("task", f"{task_id} has no label and no parent epic, so no scope to land in:"
                                           " give it a plan label (labels: [\"plan:NAME\"]) or a parent epic")
        argv = [*self._mesh_args(), "run", *self._run_args(scope, worker, reviewer), "--ids", task_id]
        return self.jobs.start("run", argv, scope=scope.to_dict(), task=task_id, cwd=self.repo)

    def start_drain(self, *, label: str | None, parent: str | None, jobs: int | None, max_tasks: int | None,
                    budget_usd: float | None, worker: str | None = None, reviewer: str | None = None) -> Job:
        """Start ``mesh drain`` on a scope, detached; returns its job at once."""
        config = self.config()
        self._refuse_nested(config)
        with self.tracker(config) as tracker:
            scope = self._scope(tracker, label, parent)
        argv = [*self._mesh_args(), "drain", *self._run_args(scope, worker, reviewer)]
        for flag, value in (("--jobs", jobs), ("--max-tasks", max_tasks), ("--max-usd", budget_usd)):
            if value is not None:
                argv += [flag, str(value)]
        return self.jobs.start("drain", argv, scope=scope.to_dict(), cwd=self.repo)

    def _refuse_nested(self, config: MeshConfig) -> None:
        try:
            refuse_nested_run(config)
        except RunError as exc:
            raise ServiceError(str(exc)) from None

    def status(self, job_id: str) -> dict[str, Any]:
        """Where a job is: state, round (its latest checkpoint), step (what it does now: validation,
        landing, waiting for a person), cycle, elapsed, tokens, cost, outcome and its reason code."""
        job = self.jobs.get(job_id)
        alive = self.jobs.alive(job)
        objects = self.jobs.output(job)
        started = parse_ts(job.started).timestamp()
        end = time.time() if alive else _mtime(job.stdout, job.log) or started
        out: dict[str, Any] = {"job": job.id, "kind": job.kind, "scope": job.scope, "task": job.task,
                               "command": job.command, "started": job.started, "elapsed_s": round(end - started, 3),
                               "pid": job.pid, "alive": alive, "stop_requested": job.stop_requested,
                               "log_tail": self.jobs.log_tail(job, 8)}
        config = self.config()
        with self.tracker(config) as tracker:
            if job.kind == "run":
                out.update(self._run_progress(tracker, job))
            else:
                out.update(_drain_progress(objects))
            tasks = [job.task] if job.kind == "run" else [t["id"] for t in out["tasks"]]
            out.update(self._spent(tracker, config, job, tasks))
        out.update(_ending(job, alive, objects, self.jobs.log_tail(job, 40)))
        return out

    def _run_progress(self, tracker: Tracker, job: Job) -> dict[str, Any]:
        """The run's latest round and cycle, from the task's checkpoints written since it started."""
        since = parse_ts(job.started)
        mine = [cp for cp in load_checkpoints(tracker, job.task or "")
                if cp.created_at and parse_ts(cp.created_at) >= since]
        last = mine[-1] if mine else None
        return {"run_id": last.run_id if last else None, "checkpoints": len(mine),
                "round": last.kind if last else None,
                "step": current_step(last.kind if last else None, last.summary if last else ""),
                "cycle": (f"c{last.payload.get('consensus_cycle')}/r{last.payload.get('review_cycle')}"
                          if last else None),
                "last_line": f"[orch:{last.kind}] {readable_summary(last.kind, last.summary)}" if last else None}

    def _spent(self, tracker: Tracker, config: MeshConfig, job: Job, tasks: list[str]) -> dict[str, Any]:
        """Tokens and dollars of the job's tasks' calls since it started (``mesh usage``'s sums)."""
        try:
            summary = usage_summary(tracker, prices=config.prices, since=parse_since(job.started))
        except UsageError:
            return {"tokens": None, "cost_usd": None}
        rows = [row for row in summary["by_task"] if row["task"] in set(tasks)]
        return {"calls": sum(r["calls"] for r in rows),
                "tokens": sum(r["input_tokens"] + r["output_tokens"] + r["cache_read_tokens"] + r["cache_write_tokens"]
                              for r in rows),
                "cost_usd": round(sum(r["cost_usd"] for r in rows), 6)}

    def stop(self, job_id: str) -> dict[str, Any]:
        """Ask a job to stop as the first Ctrl-C does; says what that means for its kind."""
        job = self.jobs.get(job_id)
        if not self.jobs.alive(job):
            return {"job": job.id, "stopping": False, "note": "the job is not running any more"}
        job = self.jobs.stop(job)
        note = ("the drain starts no new task; the running ones finish and approved work lands"
                if job.kind == "drain" else
                f"the run stops after its next checkpoint; continue it later with start_run {job.task}"
                f" (or mesh resume {job.task})")
        return {"job": job.id, "stopping": True, "note": note}

    # ------------------------------------------------------------------ a person's review

    def waiting_reviews(self, task_id: str | None) -> list[dict[str, Any]]:
        """The runs waiting for a person's review (of ``task_id``, or of every task in progress)."""
        from orchestrator.protocol.checkpoint import signing_key
        from orchestrator.protocol.human_review import waiting_reviews

        with self.tracker() as tracker:
            if task_id:
                self._task(tracker, task_id)
            ids = [task_id] if task_id else [t["id"] for t in tracker.list(status="in_progress")]
            return [w.to_dict() for w in waiting_reviews(tracker, ids, signing_key())]

    def submit_review(self, task_id: str, *, decision: str, summary: str, comments: list[dict[str, Any]],
                      reviewer: str) -> dict[str, Any]:
        """A person's review of the run waiting on ``task_id``, recorded as ``mesh review`` records it
        (the same artifact, findings and revision cycle as a reviewer worker's answer)."""
        from orchestrator.protocol.checkpoint import signing_key
        from orchestrator.protocol.human_review import LineComment, ReviewRefused, submit_review

        parsed = [LineComment(path=c["path"], line=c["line"], text=c["text"], severity=c.get("severity") or "Medium",
                              label=c.get("label"), end=c.get("end"), fix=c.get("fix")) for c in comments]
        with self.tracker() as tracker:
            self._task(tracker, task_id)
            try:
                review = submit_review(tracker, task_id, decision=decision, summary=summary, comments=parsed,
                                       author=reviewer or tracker.actor, key=signing_key())
            except ReviewRefused as exc:
                raise InputProblem(exc.field, str(exc)) from None
        return {"task": task_id, "decision": review["decision"], "findings": review["findings"],
                "summary": review["summary"]}

    # ------------------------------------------------------------------ history

    def transcript(self, task_id: str) -> dict[str, Any]:
        """A task's runs, round by round, as ``mesh show`` gives them (JSON and text)."""
        from orchestrator.views.show import render_history, task_history

        with self.tracker() as tracker:
            self._task(tracker, task_id)
            history = task_history(tracker, task_id)
        return {"history": history, "text": render_history(history)}

    def report(self, task_id: str) -> Path:
        """Write the task's HTML report under ``<repo>/.mesh/reports/``; returns its path."""
        from orchestrator.views.report_html import write_report

        config = self.config()
        folder = self.jobs.folder.parent / "reports"
        folder.mkdir(parents=True, exist_ok=True)
        with self.tracker(config) as tracker:
            self._task(tracker, task_id)
            return write_report(tracker, task_id, folder / f"mesh-report-{task_id}.html", prices=config.prices)

    def report_html(self, task_id: str) -> str:
        """The task's HTML report as text (the resource)."""
        from orchestrator.views.report_html import render_report_html, report_data

        config = self.config()
        with self.tracker(config) as tracker:
            self._task(tracker, task_id)
            return render_report_html(report_data(tracker, task_id, prices=config.prices))

    def usage(self, task_id: str | None, since: str | None) -> dict[str, Any]:
        """``mesh usage``'s summary: tokens, cache use and dollars by task, role, model and day."""
        config = self.config()
        with self.tracker(config) as tracker:
            if task_id:
                self._task(tracker, task_id)
            try:
                start = parse_since(since) if since else None
            except UsageError:
                raise InputProblem("since", f"{since!r} is not a time: give YYYY-MM-DD, an ISO date-time,"
                                            " or a span back from now (12h, 7d, 2w)") from None
            try:
                return usage_summary(tracker, prices=config.prices, task_id=task_id, since=start)
            except UsageError as exc:
                raise ServiceError(str(exc)) from None

    def branch_log(self, label: str | None, parent: str | None, limit: int = 50) -> str:
        """``git log --oneline`` of the scope's integration branch (what landed, newest first)."""
        config = self.config()
        with self.tracker(config) as tracker:
            scope = self._scope(tracker, label, parent)
            tree = scope_status(tracker, scope, repo=self.repo, onto=config.drain.onto)
        if not tree["branch_tip"]:
            return f"{tree['branch']}: not created yet (nothing of this scope has landed)"
        log = _git(self.repo, "log", "--oneline", f"-{limit}", f"refs/heads/{tree['branch']}").stdout
        return f"{tree['branch']} at {tree['branch_tip'][:12]}\n{log}"


def _mtime(*paths: str) -> float | None:
    times = []
    for path in paths:
        try:
            times.append(Path(path).stat().st_mtime)
        except OSError:
            pass
    return max(times) if times else None


def _drain_progress(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The drain's tasks from its own events (``mesh drain --json``): each one's state, round,
    cycle and outcome."""
    rows: dict[str, dict[str, Any]] = {}
    last_line = None
    for event in events:
        kind, task = event.get("event"), event.get("task")
        if kind == "task_started":
            rows[task] = {"id": task, "title": event.get("title"), "state": "running", "round": None, "cycle": None,
                          "step": current_step(None)}
        elif kind == "checkpoint" and task in rows:
            rows[task].update(round=event.get("kind"), cycle=event.get("cycle"),
                              step=current_step(event.get("kind"), event.get("line") or ""))
            last_line = f"{task}: {event.get('line')}"
        elif kind == "task_finished" and task in rows:
            rows[task].update({k: event.get(k) for k in ("state", "round", "cycle", "elapsed_s", "cost_usd", "tokens",
                                                          "block_reason", "landed")}, step="done")
    finished = [r for r in rows.values() if r["state"] != "running"]
    return {"tasks": list(rows.values()), "checkpoints": sum(e.get("event") == "checkpoint" for e in events),
            "round": None, "cycle": None,
            "last_line": last_line or (f"{len(finished)}/{len(rows)} task(s) finished" if rows else None)}


def _ending(job: Job, alive: bool, objects: list[dict[str, Any]], log: list[str]) -> dict[str, Any]:
    """The job's state and outcome with its reason code, from what its process printed."""
    errors = [obj for obj in objects if obj.get("event") == "error"]
    for line in log:
        if line.startswith('{"error"'):
            try:
                errors.append(json.loads(line))
            except ValueError:
                pass
    if job.kind == "run":
        report = next((obj for obj in reversed(objects) if "outcome" in obj), None)
        outcome = report and {"outcome": report["outcome"], "reason": report.get("block_reason"),
                              "detail": (report.get("block_detail") or "")[:500] or None}
    else:
        summary = next((obj for obj in reversed(objects) if obj.get("event") == "summary"), None)
        outcome = summary and {"outcome": "blocked" if summary.get("blocked") else "done",
                               "reason": summary.get("stop_reason"), "closed": summary.get("closed"),
                               "blocked": summary.get("blocked"), "branch": summary.get("branch")}
    if alive:
        state = "stopping" if job.stop_requested else "running"
    elif outcome:
        state = "finished"
    elif errors:
        code = errors[-1].get("code")
        state = "stopped" if code == 130 else "failed"
        outcome = {"outcome": state, "reason": "stopped" if code == 130 else "error",
                   "detail": str(errors[-1].get("error"))[:500]}
    else:
        state = "died"
        outcome = {"outcome": "died", "reason": "killed",
                   "detail": "the process ended without a report (killed?); its checkpoints make it resumable:"
                             " start it again"}
    return {"state": state, "outcome": outcome, "exit_code": job.exit_code}
