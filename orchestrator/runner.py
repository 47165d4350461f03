"""The library entry point of ``mesh run`` / ``mesh resume``: options in, a report out.

Resolves config, tracker, scope, backend and task, finds an unfinished run of
the task to resume, and hands over to ``Engine``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from roles.backends.base import Backend, BackendError, get_backend
from tracker.errors import NotFoundError, TrackerError, WorkspaceError
from tracker.store import Tracker

from .checkpoint import Checkpoint
from .config import ConfigError, MeshConfig, load_config
from .engine import Engine, RunReport, TaskTaken, load_checkpoints, new_run_id
from .lease import DEFAULT_TTL_S, Lease, LeaseHeld
from .scope import Scope, ScopeError, resolve_scope, select_candidates

__all__ = ["RunOptions", "RunError", "run", "unfinished_run", "open_tracker", "make_backend"]

DOCTOR_HINT = "run 'mesh tracker doctor --fix'"


class RunError(Exception):
    """A run that cannot start: usage (exit 2) or tracker unavailable (exit 4)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class RunOptions:
    """Everything ``mesh run`` accepts; None means "from config"."""

    label: str | None = None
    parent: str | None = None
    ids: Sequence[str] = field(default_factory=list)
    integrate: bool | None = None
    strict_output: bool | None = None
    backend: str | None = None
    script: Path | None = None
    worker_cmd: str | None = None
    repo: Path | None = None
    config_file: Path | None = None
    db: Path | None = None
    actor: str | None = None
    task: str | None = None
    force: bool = False


def open_tracker(db: Path | None, actor: str | None) -> Tracker:
    """Open the tracker and run the prechecks (``where``, ``status``); exit 4 when unusable."""
    try:
        tracker = Tracker.open(db, actor=actor or os.environ.get("MESH_ACTOR") or "mesh")
        tracker.where()
        tracker.status()
    except WorkspaceError as exc:
        raise RunError(f"tracker unavailable: {exc}; {DOCTOR_HINT}", 4) from None
    except Exception as exc:  # a damaged file surfaces as sqlite errors from the first query
        raise RunError(f"tracker unavailable: {exc}; {DOCTOR_HINT}", 4) from None
    return tracker


def make_backend(config: MeshConfig, options: RunOptions) -> Backend:
    """The worker backend named by the options or the config."""
    name = config.backend
    try:
        if name == "replay":
            if not options.script:
                raise RunError("the replay backend needs --script FILE", 2)
            return get_backend("replay", script=Path(options.script))
        if name == "command":
            cmd = options.worker_cmd or config.worker_cmd
            if not cmd:
                raise RunError("the command backend needs --worker-cmd CMD (or worker_cmd in config)", 2)
            return get_backend("command", worker_cmd=cmd, timeout_s=config.worker_timeout_s)
        return get_backend(name, config=config)
    except BackendError as exc:
        raise RunError(str(exc), 2) from None


def load_run_config(options: RunOptions) -> MeshConfig:
    repo = Path(options.repo) if options.repo else Path.cwd()
    try:
        config = load_config(repo, Path(options.config_file) if options.config_file else None)
    except ConfigError as exc:
        raise RunError(str(exc), 2) from None
    overrides = {}
    if options.integrate is not None:
        overrides["integrate"] = options.integrate
    if options.strict_output is not None:
        overrides["strict_output"] = options.strict_output
    if options.backend:
        overrides["backend"] = options.backend
    return config.with_overrides(**overrides) if overrides else config


def unfinished_run(checkpoints: Sequence[Checkpoint]) -> str | None:
    """The run id of the latest run on a task that has checkpoints but no outcome."""
    last_run = None
    finished: set[str] = set()
    for cp in checkpoints:
        if not cp.run_id:
            continue
        last_run = cp.run_id
        if cp.kind == "outcome":
            finished.add(cp.run_id)
    return last_run if last_run and last_run not in finished else None


def run(options: RunOptions, *, echo: Callable[[str], None] | None = None,
        engine_hook: Callable[[Engine], None] | None = None) -> RunReport:
    """Run (or resume) one task to its outcome. Raises ``RunError`` for usage/tracker problems."""
    config = load_run_config(options)
    repo = Path(options.repo).resolve() if options.repo else Path.cwd()
    scope: Scope | None = None
    try:
        scope = resolve_scope(options.label, options.parent)
    except ScopeError as exc:
        if not options.task:
            raise RunError(str(exc), 2) from None
    tracker = open_tracker(Path(options.db) if options.db else None, options.actor)
    try:
        if options.task:
            try:
                candidates = [(tracker.get(options.task), "resume_named_task")]
            except NotFoundError as exc:
                raise RunError(str(exc), 2) from None
            scope = scope or _scope_of(candidates[0][0])
        else:
            candidates = select_candidates(tracker, scope, options.ids)
        if not candidates:
            return RunReport(orch_run_id="", preflight="", scope=scope.to_dict(), task=None,
                             outcome="no_runnable_task")
        if config.integrate:
            from .gitops import GitError, repo_root

            try:
                repo = repo_root(repo)
            except GitError as exc:
                raise RunError(f"--repo {repo}: {exc}", 2) from None
        backend = make_backend(config, options)
        try:
            return _run_first_free(tracker, backend, config, scope, candidates, repo, options, echo, engine_hook)
        except BackendError as exc:
            raise RunError(str(exc), 2) from None
        finally:
            backend.close()
    except TrackerError as exc:
        raise RunError(str(exc), 4 if isinstance(exc, WorkspaceError) else 2) from None
    finally:
        tracker.close()


def _run_first_free(tracker: Tracker, backend: Backend, config: MeshConfig, scope: Scope,
                    candidates: Sequence[tuple[dict, str]], repo: Path, options: RunOptions,
                    echo: Callable[[str], None] | None, engine_hook: Callable[[Engine], None] | None) -> RunReport:
    """Run the first candidate whose lease (and, for open tasks, claim) this run can take.

    Two runs on one scope never take the same task: the loser of a lease or a claim
    moves on to the next candidate.
    """
    held: list[str] = []
    for task, reason in candidates:
        checkpoints = load_checkpoints(tracker, task["id"])
        unfinished = unfinished_run(checkpoints)
        if options.task and not unfinished and tracker.get(task["id"])["status"] != "in_progress":
            held.append(f"{task['id']} has no interrupted run to resume (status {tracker.get(task['id'])['status']})")
            continue
        run_id = unfinished or new_run_id()
        lease = None
        if config.integrate:
            try:
                lease = Lease.acquire(tracker, task["id"], run_id, holder=tracker.actor, ttl_s=lease_ttl(),
                                      force=options.force)
            except LeaseHeld as exc:
                held.append(str(exc))
                continue
            lease.heartbeat()
        try:
            engine = Engine(tracker, backend, config, scope=scope, task=tracker.get(task["id"]),
                            selection_reason=reason, repo=repo, run_id=run_id, ids=options.ids, echo=echo,
                            resume_from=checkpoints)
            if engine_hook:
                engine_hook(engine)
            return engine.execute()
        except TaskTaken as exc:
            held.append(str(exc))
            continue
        finally:
            if lease:
                lease.release(tracker)
    if options.task and any("held by run" in h for h in held):
        raise RunError("; ".join(held), 3)
    return RunReport(orch_run_id="", preflight="", scope=scope.to_dict(), task=None, outcome="no_runnable_task",
                     mutations=[f"skipped: {h}" for h in held])


def lease_ttl() -> float:
    """Lease time-to-live in seconds (env ``MESH_LEASE_TTL_S``, default 60)."""
    try:
        return float(os.environ.get("MESH_LEASE_TTL_S", DEFAULT_TTL_S))
    except ValueError:
        return DEFAULT_TTL_S


def _scope_of(task: dict) -> Scope:
    labels = task.get("labels") or []
    plan = next((label for label in labels if label.startswith("plan:")), labels[0] if labels else None)
    if plan:
        return Scope("label", plan_label=plan)
    return Scope("parent", parent_epic=task.get("parent"))
