"""The library entry point of ``mesh run`` / ``mesh resume``: options in, a report out.

Resolves config, tracker, scope, backend and task, finds an unfinished run of
the task to resume, and hands over to ``Engine``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from roles.backends.base import Backend, BackendError, get_backend
from roles.backends.command import WORKER_MARKER, Launcher
from roles.backends.presets import command_workers
from tracker.errors import NotFoundError, TrackerError, WorkspaceError
from tracker.dialect import is_url
from tracker.store import Tracker

from orchestrator.protocol.checkpoint import Checkpoint, checkpoint_problem, signing_key
from orchestrator.config import ConfigError, MeshConfig, load_config
from orchestrator.protocol.engine import Engine
from orchestrator.protocol.outcomes import RunReport, TaskTaken, new_run_id
from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.protocol.lease import DEFAULT_TTL_S, Lease, LeaseHeld, held_by_person, holder_is_dead
from orchestrator.worktree.gitops import cache_dir
from orchestrator.protocol.idle import UnknownScope, explain_idle
from orchestrator.sandbox.project_view import ProjectView
from orchestrator.sandbox.bwrap import SandboxUnavailable, require_bwrap, tracker_paths
from orchestrator.sandbox.worker_sandbox import announce_real_home, egress_note, network_problem, worker_launcher
from orchestrator.protocol.scope import Scope, ScopeError, resolve_scope, scope_tasks, select_candidates
from orchestrator.landing.catch_up import (catch_up, close_landed_epics, closed_unlanded, scope_branch,
                                           waiting_on_landing)
from orchestrator.workspace import TrackerUnavailable, open_found_tracker

__all__ = ["BASE_FAILING_EXIT", "RunOptions", "RunError", "base_check", "follow_base", "NestedRunRefused",
           "refuse_nested_run", "run", "run_task", "make_lander",
           "unfinished_run", "interrupted_runs",
           "open_tracker", "make_backend", "require_sandbox"]

if TYPE_CHECKING:
    from orchestrator.landing.follow import FollowResult
    from orchestrator.landing.lander import Lander
    from orchestrator.toolchains.base_check import BaseCheck

# A run that stops because the tree its task starts from fails the project's own check.
BASE_FAILING_EXIT = 5


class RunError(Exception):
    """A run that cannot start: usage (exit 2) or tracker unavailable (exit 4)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class NestedRunRefused(RunError):
    """A run or drain asked for from inside a worker mesh started (exit 2)."""

    def __init__(self, run_id: str):
        super().__init__(
            f"refused: this process runs inside a mesh worker ({WORKER_MARKER}={run_id}), and a worker may not"
            " start a mesh run or drain (it would recurse into mesh). To allow it knowingly, set"
            " allow_nested_runs = true in mesh.toml", 2)


def refuse_nested_run(config: MeshConfig, environ: Mapping[str, str] | None = None) -> None:
    """Raise ``NestedRunRefused`` inside a worker (``MESH_WORKER`` set) unless the config allows it.

    A guard against an agent recursing into mesh by accident, not a boundary: the worker's
    sandbox already hides the tracker, and a worker could unset the variable."""
    run_id = (os.environ if environ is None else environ).get(WORKER_MARKER)
    if run_id and not config.allow_nested_runs:
        raise NestedRunRefused(run_id)


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
    worker: str | None = None  # an agent CLI preset for every role (--worker), on the command backend
    repo: Path | None = None
    config_file: Path | None = None
    db: Path | str | None = None  # a SQLite file or a PostgreSQL URL
    actor: str | None = None
    task: str | None = None
    force: bool = False
    onto: str | None = None
    land: bool = True  # land approved work on the scope's integration branch (--no-land: its branch only)
    take_over: bool = False
    remote: str | None = None  # a shared git remote (else config drain.remote): push and land there
    reviewer: str | None = None  # "worker" or "human" (--reviewer; else config reviewer)
    allow_failing_base: bool | None = None  # --allow-failing-base (else config validation.allow_failing_base)
    profile: str | None = None  # --profile (else config profile): full, lite, single or candidates
    batch: bool = False  # --batch: the anthropic backend's calls as Message Batches (config anthropic.batch)
    models: Sequence[str] = ()  # --model [ROLE=]MODEL: every role's model, or one role's, over config [models]
    checked_base: object | None = None  # set by run and drain: the base check's outcome (BaseCheck)


def open_tracker(db: Path | str | None, actor: str | None, config: MeshConfig | None = None, *,
                 repo: Path | str | None = None) -> Tracker:
    """Open the tracker (``db``, else ``MESH_DB``, else the config's ``tracker.url``, else the
    workspace's file found from ``repo``, then from the current folder) and run the prechecks
    (``where``, ``status``); exit 4 when unusable or not found."""
    try:
        return open_found_tracker(db, actor, config.tracker.url if config is not None else None, repo=repo)
    except TrackerUnavailable as exc:
        raise RunError(str(exc), 4) from None


def make_backend(config: MeshConfig, options: RunOptions, tracker: Tracker | None = None) -> Backend:
    """The worker backend named by the options or the config (``tracker``: the open tracker,
    whose files command workers must never see)."""
    name = config.backend
    try:
        if name == "replay":
            if not options.script:
                raise RunError("the replay backend needs --script FILE", 2)
            return get_backend("replay", script=Path(options.script))
        if name == "command":
            return _command_backend(config, options, tracker)
        if name == "anthropic" and config.anthropic.batch:
            # Which batch holds which request: a run killed while its batch ran takes its answers later.
            return get_backend(name, config=config, batch_journal=cache_dir() / "mesh-batches" / "journal.jsonl")
        return get_backend(name, config=config)
    except BackendError as exc:
        raise RunError(str(exc), 2) from None


def _command_backend(config: MeshConfig, options: RunOptions, tracker: Tracker | None) -> Backend:
    """The command backend's workers. A flag picks one worker for every role for this run
    (``--worker NAME`` or ``--worker-cmd CMD``); else the config's ``workers``, ``worker``
    and ``worker_cmd`` do, role by role."""
    if options.worker or options.worker_cmd:
        worker, workers = options.worker, {}
        cmd = options.worker_cmd or (None if options.worker else config.worker_cmd)
    else:
        worker, workers, cmd = config.worker, config.workers, config.worker_cmd
    return command_workers(roles=config.roles, worker_cmd=cmd, worker=worker, workers=workers,
                           models=config.models, timeout_s=config.worker_timeout_s, env_names=config.worker_env,
                           launcher=_worker_launcher(config, options, tracker),
                           max_output_bytes=config.worker_limits.max_output_mb << 20)


def _worker_launcher(config: MeshConfig, options: RunOptions, tracker: Tracker | None) -> Launcher | None:
    """The bwrap launcher of command workers (None when the user opted out of the sandbox)."""
    if config.validation.sandbox != "bwrap":
        return None
    try:
        bwrap = require_bwrap()
    except SandboxUnavailable as exc:
        raise RunError(str(exc), 2) from None
    if config.worker_network == "isolated" and (problem := network_problem(bwrap)):
        raise RunError(f'worker_network = "isolated", but {problem}; install passt (apt-get install passt)'
                       ' or set worker_network = "auto"', 2)
    repo = Path(options.repo) if options.repo else Path.cwd()
    # Every task's worktree lives under the cache folder: under a real HOME it stays read-only
    # (other tasks' worktrees included, under a drain), and so does the repository.
    worktrees = cache_dir() / "mesh"
    worktrees.mkdir(parents=True, exist_ok=True, mode=0o700)
    hidden = tracker_paths(tracker) if tracker is not None else []
    if options.db and not is_url(options.db):
        hidden.append(str(options.db))
    try:
        return worker_launcher(bwrap, home=config.worker_home, private_root=cache_dir() / "mesh-worker-homes",
                               repo=repo, hidden=hidden, shielded=[repo, worktrees], network=config.worker_network,
                               extra_ports=config.worker_loopback_ports, limits=config.worker_limits.limits,
                               egress_hosts=config.worker_egress,
                               read_only=[str(repo / path) if not os.path.isabs(path) else path
                                          for path in config.worker_read_only])
    except ValueError as exc:
        raise RunError(str(exc), 2) from None


def project_environment(config: MeshConfig, repo: Path) -> ProjectView | None:
    """What validation shows of the project beyond its committed tree (its toolchains'
    dependencies, caches and generated files: ``orchestrator.toolchains``); None without
    validation. RunError (exit 2, before any worker call) when the project needs dependencies or
    a toolchain that are not there, naming the command that installs them."""
    from orchestrator.toolchains.base import DependenciesMissing, ToolchainMissing
    from orchestrator.toolchains.view import inspect

    if not config.integrate:
        return None
    try:
        return inspect(repo, config.validation).view
    except (DependenciesMissing, ToolchainMissing) as exc:
        raise RunError(str(exc), 2) from None


def base_check(config: MeshConfig, repo: Path, environment: ProjectView | None, commit: str,
               tracker: Tracker | None = None) -> "BaseCheck | None":
    """Run the project's check command on ``commit`` (the tree the next task starts from) before
    any worker call (``orchestrator.toolchains.base_check``); None when there is nothing to check.
    Raises RunError (exit 5, the task left open) when the base fails and failures are not allowed."""
    from orchestrator.toolchains.base_check import check_commands, run_base_check

    cfg = config.validation
    if not (config.integrate and cfg.base_check):
        return None
    commands = check_commands(cfg, list(environment.checks) if environment else [])
    if not commands:
        return None
    try:
        check = run_base_check(repo, commit, commands, cfg, environment,
                               hidden=tracker_paths(tracker) if tracker is not None else ())
    except (SandboxUnavailable, ValueError) as exc:
        raise RunError(f"the base check could not run: {exc}", 2) from None
    unrunnable = [r for r in check.results if r.get("rejected") or r.get("reason") == "not_found"]
    if unrunnable:
        # A check that cannot start is the configuration's mistake (a toolchain missing), not the base's.
        raise RunError("the base check cannot run: " + "; ".join(
            f"`{r['command']}`: {' '.join((r.get('stderr_tail') or r.get('reason') or '').split())[:200]}"
            for r in unrunnable), 2)
    if not check.passed and not cfg.allow_failing_base:
        raise RunError(check.failure_text(repo=Path(environment.project_root) if environment else repo),
                       BASE_FAILING_EXIT)
    blind = [command for command, result in check.failures().items() if not result.get("tests")]
    if blind and not os.environ.get("MESH_EVAL_CASE"):  # an eval's runs are graded by hidden tests instead
        # allow_failing_base judges a failing command test by test: one whose tests mesh does not
        # read cannot be judged, so no worker is called for a verdict that could not be trusted.
        raise RunError(check.failure_text(), 2)
    return check


def follow_base(tracker: Tracker, lander: "Lander", tasks: Sequence[dict], config: MeshConfig) -> "FollowResult":
    """Bring the integration branch up to date with its base before a task is cut from it
    (``orchestrator.landing.follow``); RunError (exit 5, as a failing base) when it cannot."""
    from orchestrator.landing.follow import BaseProblem, follow_scope
    from orchestrator.worktree.gitops import GitError

    try:
        return follow_scope(tracker, lander, tasks, config.drain.base)
    except BaseProblem as exc:
        raise RunError(str(exc), BASE_FAILING_EXIT) from None
    except GitError as exc:
        raise RunError(f"{lander.branch} could not follow its base: {exc}", 2) from None


def sandbox_notes(config: MeshConfig, environment: ProjectView | None = None) -> list[str]:
    """What preflight prints of the configuration in use (the file, found from a subfolder too)
    and the sandboxes a run will use: the project's toolchains and what validation sees of them,
    the limits of validation, and for command workers their HOME and network (with the warning
    ``worker_home = "real"`` owes)."""
    from orchestrator.sandbox.validation import tree_limits_note
    from orchestrator.toolchains.python import no_environment_note

    notes = [f"configuration: {config.source}" if config.source != "defaults" else
             "configuration: defaults (no mesh.toml, nor [tool.mesh] in a pyproject.toml, from here up to the"
             " repository's root)"]
    if config.integrate:
        notes += list(environment.notes) if environment and environment.notes else [
            environment.describe() if environment else
            no_environment_note()]
    if config.validation.sandbox != "bwrap":
        return [*notes, 'warning: validation.sandbox = "none": validation and command workers run unconfined']
    if config.integrate:
        notes.append(tree_limits_note(config.validation.limits))
    if config.backend == "command":
        notes.append(config.worker_limits.limits.note())
        if config.worker_home == "real":
            notes.append(announce_real_home())
        problem = network_problem(require_bwrap()) if config.worker_network != "host" else None
        if config.worker_network == "host" or problem:
            notes.append("warning: command workers share this machine's network (they can reach its loopback "
                         f"services and every host; worker_egress is not enforced){f': {problem}' if problem else ''}")
        else:
            notes.append(egress_note(config.worker_egress))
    return notes


def require_sandbox(config: MeshConfig) -> None:
    """Refuse (RunError, exit 2, one line) a run whose sandbox is configured but cannot work here.

    Checked before any worker is called: a run that would validate (``integrate``) or
    start command workers needs bwrap unless ``validation.sandbox = "none"``.
    """
    if config.validation.sandbox == "bwrap" and (config.integrate or config.backend == "command"):
        try:
            require_bwrap()
        except SandboxUnavailable as exc:
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
    if options.reviewer:
        overrides["reviewer"] = options.reviewer
    if options.allow_failing_base:
        overrides["validation__allow_failing_base"] = True
    if options.profile:
        overrides["profile"] = options.profile
    if options.batch:
        overrides["anthropic__batch"] = True
    if options.models:
        overrides["models"] = models_over(config.models, options.models)
    if options.worker:
        if options.worker_cmd:
            raise RunError("give --worker NAME or --worker-cmd CMD, not both", 2)
        if options.backend not in (None, "command"):
            raise RunError(f"--worker {options.worker} is a command worker; it cannot run with --backend"
                           f" {options.backend}", 2)
        overrides["backend"] = "command"
    elif options.worker_cmd:
        # A worker command is only ever run by the command backend: naming one selects it.
        if options.backend not in (None, "command"):
            raise RunError(f"--worker-cmd runs a command worker; it cannot run with --backend {options.backend}", 2)
        overrides["backend"] = "command"
    try:
        return config.with_overrides(**overrides) if overrides else config
    except ConfigError as exc:  # --model naming a role mesh does not know
        raise RunError(str(exc), 2) from None


def models_over(models: dict[str, str], given: Sequence[str]) -> dict[str, str]:
    """``models`` (role -> model) with ``--model`` values laid over it: ``MODEL`` for every role,
    ``ROLE=MODEL`` for one (a later value wins)."""
    out = dict(models)
    for value in given:
        role, equals, model = value.partition("=")
        if not equals:
            out = {name: value.strip() for name in out}
        elif role.strip() and model.strip():
            out[role.strip()] = model.strip()
        else:
            raise RunError(f"--model {value!r}: give MODEL or ROLE=MODEL", 2)
    return out


def unfinished_run(checkpoints: Sequence[Checkpoint], key: bytes | None = None) -> str | None:
    """The run id of the latest run on a task that has checkpoints but no outcome.

    With a signing key, checkpoints that do not verify are ignored here: a forged comment
    neither starts nor finishes a run.
    """
    last_run = None
    finished: set[str] = set()
    for cp in checkpoints:
        if not cp.run_id or (key is not None and checkpoint_problem(cp, key) is not None):
            continue
        last_run = cp.run_id
        if cp.kind == "outcome":
            finished.add(cp.run_id)
    return last_run if last_run and last_run not in finished else None


def interrupted_runs(tracker: Tracker, scope: Scope, ids: Sequence[str] = ()) -> list[tuple[dict, str]]:
    """Scope tasks the selection rules no longer offer (closed, blocked, or in progress behind
    a gate) whose latest run was killed after it had decided (its run head, its outcome or a
    landing of its work is stored) but before it ended. Resuming such a run only writes what
    it had not written yet; a run that had not decided is never resumed on a task a person
    closed or blocked in the meantime."""
    key = signing_key()
    wanted = set(ids)
    runnable = {task["id"] for task, _ in select_candidates(tracker, scope, ids)}
    out = []
    for task in scope_tasks(tracker, scope):
        if task["status"] == "open" or task["id"] in runnable or (wanted and task["id"] not in wanted):
            continue
        checkpoints = load_checkpoints(tracker, task["id"])
        run_id = unfinished_run(checkpoints, key)
        if run_id and any(cp.run_id == run_id and (cp.kind in ("run-head", "outcome") or (
                cp.kind == "land" and (cp.payload.get("artifact") or {}).get("result") == "landed"))
                for cp in checkpoints):
            out.append((task, "finish_interrupted_run"))
    return out


def run(options: RunOptions, *, echo: Callable[[str], None] | None = None,
        engine_hook: Callable[[Engine], None] | None = None) -> RunReport:
    """Run (or resume) one task to its outcome. Raises ``RunError`` for usage/tracker problems."""
    config = load_run_config(options)
    refuse_nested_run(config)
    require_sandbox(config)
    repo = Path(options.repo).resolve() if options.repo else Path.cwd()
    scope: Scope | None = None
    try:
        scope = resolve_scope(options.label, options.parent, types=config.runnable_types)
    except ScopeError as exc:
        if not options.task:
            raise RunError(str(exc), 2) from None
    tracker = open_tracker(options.db, options.actor, config, repo=options.repo)
    try:
        if options.task:
            try:
                candidates = [(tracker.get(options.task), "resume_named_task")]
            except NotFoundError as exc:
                raise RunError(str(exc), 2) from None
            scope = scope or _scope_of(candidates[0][0], config.runnable_types)
        else:
            # Runs killed after deciding (landed, closed) are finished first, as mesh drain does.
            try:
                candidates = (interrupted_runs(tracker, scope, options.ids)
                              + select_candidates(tracker, scope, options.ids))
            except NotFoundError:
                candidates = []  # an epic that does not exist: _idle names the closest ones
        if not candidates and not _lands_closed_work(tracker, scope, config, options):
            return _idle(tracker, scope, options.ids)
        if config.integrate:
            from orchestrator.worktree.gitops import GitError, repo_root

            try:
                repo = repo_root(repo)
            except GitError as exc:
                raise RunError(f"--repo {repo}: {exc}", 2) from None
        lander = _scope_lander(tracker, scope, repo, config, options)
        if lander is None and config.integrate and not options.task:
            candidates, waiting = _not_waiting(tracker, scope, config, candidates)
            if not candidates:
                report = _idle(tracker, scope, options.ids)
                for entry in report.tasks:
                    if entry["id"] in waiting:
                        entry["reason"] = waiting[entry["id"]]
                return report
        environment = project_environment(config, repo)
        caught: list[str] = []  # what the catch-up landed (or could not): said and reported
        if lander is not None:
            lander.environment = environment
            # Work closed without landing here lands first: no dependent starts without it.
            if catch_up(tracker, lander, scope_tasks(tracker, scope),
                        emit=lambda event, fields: _caught(event, fields, lander.branch, caught)) \
                    and not options.task:
                candidates = interrupted_runs(tracker, scope, options.ids) + select_candidates(tracker, scope,
                                                                                               options.ids)
            if not candidates:
                idle = _idle(tracker, scope, options.ids)
                idle.mutations[:0] = caught
                return idle
        notes = sandbox_notes(config, environment)
        backend = make_backend(config, options, tracker)
        try:
            if lander is not None:
                # The integration branch follows its base before the base check checks it.
                notes.append(follow_base(tracker, lander, scope_tasks(tracker, scope), config).line())
            if config.integrate:
                start = lander.cut_base() if lander is not None else _head(repo)
                checked = base_check(config, repo, environment, start, tracker)
                if checked is not None:
                    notes.append(checked.line())
                    options.checked_base = checked
            report = _run_first_free(tracker, backend, config, scope, candidates, repo, options, echo, engine_hook,
                                     lander, notes=notes, environment=environment)
            report.mutations[:0] = caught
            if lander is not None:
                report.mutations += [f"{epic}: closed (every task landed on {lander.branch})"
                                     for epic in close_landed_epics(tracker, scope_tasks(tracker, scope), lander.branch)]
            return report
        except BackendError as exc:
            raise RunError(str(exc), 2) from None
        finally:
            backend.close()
    except TrackerError as exc:
        raise RunError(str(exc), 4 if isinstance(exc, WorkspaceError) else 2) from None
    finally:
        tracker.close()


def _lands_closed_work(tracker: Tracker, scope: Scope | None, config: MeshConfig, options: RunOptions) -> bool:
    """Whether a landing run with no task to run still has work to land: a task of the scope
    closed (by ``mesh run --no-land``) and not landed on the scope's branch."""
    if scope is None or options.task or not (config.integrate and options.land):
        return False
    try:
        tasks = scope_tasks(tracker, scope)
    except NotFoundError:
        return False  # an epic that does not exist: _idle names the closest ones
    return bool(closed_unlanded(tracker, tasks, scope_branch(tracker, scope, tasks, options.onto or config.drain.onto)))


def _caught(event: str, fields: dict, branch: str, lines: list[str]) -> None:
    """A catch-up landing's line (work closed earlier, landed by this run before any task), for
    the report's mutations (also an idle run's: its summary says them before why it is idle)."""
    if event != "land_done":
        return
    task, sha = fields.get("task"), str(fields.get("sha") or "")[:12]
    line = (f"{task}: closed earlier, landed now on {branch} ({fields.get('method') or 'landed'} {sha})"
            if fields.get("result") == "landed" else
            f"{task}: closed earlier, could not land on {branch} ({fields.get('result')}): status -> blocked")
    lines.append(line)


def _head(repo: Path) -> str:
    from orchestrator.worktree.gitops import GitError, head_commit

    try:
        return head_commit(repo)
    except GitError as exc:
        raise RunError(f"--repo {repo}: {exc}", 2) from None


def _scope_lander(tracker: Tracker, scope: Scope, repo: Path, config: MeshConfig,
                  options: RunOptions) -> "Lander | None":
    """The scope's integration branch (``catch_up.scope_branch``) a landing run cuts from and lands
    on; None for ``--no-land`` or ``--no-integrate``."""
    remote = options.remote or config.drain.remote
    if not config.integrate:
        return None
    if not options.land:
        if options.onto or remote:
            raise RunError("--no-land keeps work on its task branch: it takes no --onto or --remote", 2)
        return None
    onto = scope_branch(tracker, scope, scope_tasks(tracker, scope), options.onto or config.drain.onto)
    return make_lander(repo, onto, config, remote=remote)


def _not_waiting(tracker: Tracker, scope: Scope, config: MeshConfig,
                 candidates: list[tuple[dict, str]]) -> tuple[list[tuple[dict, str]], dict[str, str]]:
    """A ``--no-land`` run's candidates without the dependents of work closed but not landed
    (they wait: cut from HEAD they would lack it), and why each one left out waits."""
    tasks = scope_tasks(tracker, scope)
    waiting = waiting_on_landing(tracker, tasks, scope_branch(tracker, scope, tasks, config.drain.onto))
    kept = [(task, why) for task, why in candidates if task["id"] not in waiting]
    return kept, {task["id"]: f"waits for {', '.join(waiting[task['id']])} to land (mesh run or mesh drain"
                              " lands it first)" for task, _ in candidates if task["id"] in waiting}


def _run_first_free(tracker: Tracker, backend: Backend, config: MeshConfig, scope: Scope,
                    candidates: Sequence[tuple[dict, str]], repo: Path, options: RunOptions,
                    echo: Callable[[str], None] | None, engine_hook: Callable[[Engine], None] | None,
                    lander: "Lander | None" = None, *, notes: Sequence[str] = (),
                    environment: ProjectView | None = None) -> RunReport:
    """Run the first candidate whose lease (and, for open tasks, claim) this run can take.

    Two runs on one scope never take the same task: the loser of a lease or a claim
    moves on to the next candidate.
    """
    held: list[str] = []
    for task, reason in candidates:
        report = run_task(tracker, backend, config, scope, task, reason, repo, options, held, echo=echo,
                          engine_hook=engine_hook, lander=lander, notes=notes, environment=environment,
                          steal_dead=True)
        if report is not None:
            return report
    if options.task and any("held by run" in h for h in held):
        raise RunError("; ".join(held), 3)
    return _idle(tracker, scope, options.ids, held)


def _idle(tracker: Tracker, scope: Scope, ids: Sequence[str], held: Sequence[str] = ()) -> RunReport:
    """The report of a run with nothing to run, saying why; RunError (exit 2) for a scope
    that names no existing label or epic."""
    try:
        return explain_idle(tracker, scope, ids, held)
    except UnknownScope as exc:
        raise RunError(str(exc), 2) from None


def run_task(tracker: Tracker, backend: Backend, config: MeshConfig, scope: Scope, task: dict, reason: str,
             repo: Path, options: RunOptions, held: list[str], *, echo: Callable[[str], None] | None = None,
             engine_hook: Callable[[Engine], None] | None = None, lander: "Lander | None" = None,
             steal_dead: bool = False, notes: Sequence[str] = (),
             environment: ProjectView | None = None, lease: Lease | None = None) -> RunReport | None:
    """Run (or resume) one task to its outcome under its lease; None (and why, in ``held``)
    when this run may not take it. ``lease``: the task's, taken with its claim
    (``lease.claim_next_leased``: a drain), released at the end like one taken here.

    A task in progress by hand (``held_by_person``) is left alone without ``take_over``.
    With a ``lander`` approved work lands on its branch; work that did not land is sent back
    once and run again, as a new run, on the branch's current tip. ``steal_dead`` takes over a
    lease whose holder process on this host is gone (a killed drain or run) without waiting its TTL.
    """
    current = tracker.get(task["id"])
    if not options.take_over and held_by_person(tracker, current, tracker.actor):
        held.append(f"{task['id']} is in progress by {current['assignee']} (not a mesh run); use --take-over")
        return None
    checkpoints = load_checkpoints(tracker, task["id"])
    unfinished = unfinished_run(checkpoints, signing_key())
    if options.task and not unfinished and current["status"] != "in_progress":
        held.append(f"{task['id']} has no interrupted run to resume (status {current['status']})")
        return None
    run_id = unfinished or (lease.run_id if lease else new_run_id())
    if unfinished and not options.onto:
        # A run that was landing onto an integration branch (mesh drain, --onto) resumes landing there.
        # With a key, only a verified preflight names it: a forged one must not pick a branch.
        key = signing_key()
        onto = next((cp.payload.get("artifact", {}).get("onto") for cp in checkpoints
                     if cp.kind == "preflight" and cp.run_id == unfinished
                     and (key is None or checkpoint_problem(cp, key, task_id=task["id"]) is None)), None)
        if onto and onto != (lander.branch if lander is not None else None):
            lander = make_lander(repo, onto, config, remote=options.remote or config.drain.remote)
            lander.environment = environment
    if config.integrate and lease is None:
        try:
            lease = Lease.acquire(tracker, task["id"], run_id, holder=tracker.actor, ttl_s=lease_ttl(config),
                                  force=options.force or (steal_dead and holder_is_dead(tracker, task["id"])))
        except LeaseHeld as exc:
            held.append(str(exc))
            return None
    if lease is not None:
        lease.heartbeat()
    try:
        for _ in range(3):  # the first attempt, at most one send-back, and a resumed send-back
            engine = Engine(tracker, backend, config, scope=scope, task=tracker.get(task["id"]),
                            selection_reason=reason, repo=repo, run_id=run_id, ids=options.ids, echo=echo,
                            resume_from=checkpoints)
            engine.lease = lease
            engine.notes, engine.environment = list(notes), environment
            engine.base_check = options.checked_base
            if lander is not None:
                lander.attach(engine)
            if engine_hook:
                engine_hook(engine)
            report = engine.execute()
            if report.outcome != "sent_back":
                return report
            checkpoints, run_id, reason = load_checkpoints(tracker, task["id"]), new_run_id(), "sent_back"
        return report
    except TaskTaken as exc:
        held.append(str(exc))
        return None
    finally:
        if lease:
            lease.release(tracker)


def make_lander(repo: Path, onto: str, config: MeshConfig, emit=None, *, remote: str | None = None) -> "Lander":
    """The integration branch ``onto`` of ``repo`` (created from HEAD when missing; with a
    ``remote``, from the remote's branch, published when the remote has none); RunError
    (exit 2) for a protected or checked-out branch or an unusable remote."""
    from orchestrator.worktree.gitops import GitError
    from orchestrator.landing.lander import Lander

    try:
        return Lander(repo, onto, config, emit=emit, remote=remote)
    except GitError as exc:
        raise RunError(f"--onto {onto}: {exc}", 2) from None


def lease_ttl(config: MeshConfig | None = None) -> float:
    """Lease time-to-live in seconds: env ``MESH_LEASE_TTL_S``, else config ``lease_ttl_s`` (60)."""
    default = config.lease_ttl_s if config is not None else DEFAULT_TTL_S
    try:
        return float(os.environ.get("MESH_LEASE_TTL_S", default))
    except ValueError:
        return default


def _scope_of(task: dict, types: Sequence[str]) -> Scope:
    labels = task.get("labels") or []
    plan = next((label for label in labels if label.startswith("plan:")), labels[0] if labels else None)
    if plan:
        return Scope("label", plan_label=plan, types=tuple(types))
    return Scope("parent", parent_epic=task.get("parent"), types=tuple(types))
