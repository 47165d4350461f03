"""The ``command`` backend: any program that reads a prompt on stdin and answers on stdout.

Each call spawns the worker command (split like a shell would, run without one) with the
prompt on stdin and a minimal environment: PATH, HOME, LANG, the call variables
``MESH_ROLE``, ``MESH_ROUND``, ``MESH_TASK_ID``, ``MESH_RUN_ID`` and ``MESH_ATTEMPT``, the
marker ``MESH_WORKER`` (the run id: a mesh started inside refuses to run, unless configured), and
the variables named in ``env_names`` (an agent CLI's own API key, say); never
``MESH_SIGNING_KEY``. Its stdout is the answer. It runs in the request's worktree when one
is given, so an agent CLI can read the code it works on. An injected ``launcher`` wraps the
argv and environment of every call (mesh's runner supplies one that runs the worker
inside bubblewrap, out of sight of mesh's own process). A non-zero exit or an empty answer
is ``no_response``, and so is running past the timeout (the profile's name for a worker
that did not answer; the detail says ``timeout: ...``): the worker's whole process group
is killed so no helper it started outlives the call.

What a worker writes is read in bounded memory (``roles.backends.streams``): stdout, the
answer, up to ``max_output_bytes`` (beyond it the worker is killed and the call is
``no_response`` with the detail ``output_limit: ...``), stderr as its last 2,000 characters.
A launcher may also cap the call (a control group, a size-bound HOME): a cap it reports hit
fails the call the same way, its detail headed by the limit's name (``LIMIT_KINDS``), and a
launcher that refuses a call (``LaunchRefused``) fails it with its reason.

The agent CLI presets (``roles.backends.presets``) are command workers too: they reuse
``run_process`` with their own command line and read the CLI's JSON output.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .base import Backend, BackendError, WorkerRequest, WorkerResponse
from .streams import Capped, Tail, drain, run_with

__all__ = ["CommandBackend", "DEFAULT_MAX_OUTPUT_BYTES", "Finished", "LIMIT_KINDS", "Launch", "LaunchRefused",
           "Launcher", "WORKER_MARKER", "call_env", "resolve_program", "run_process", "split_command"]


@dataclass
class Launch:
    """One worker call as a launcher starts it: the argv and environment, what to set up just
    before the process starts (``begin``: make a control group), what the child runs before
    it executes the argv (``prepare``: join that group, set limits; no allocation-heavy code)
    and what to ask once the call ended (``finish``, given the seconds left of the call's
    timeout: releases what ``begin`` made and returns the detail of a limit the call hit,
    ``"memory: ..."``, or None). Unpacks as
    ``(argv, env)`` for a caller that runs the argv itself, uncapped."""

    argv: list[str]
    env: dict[str, str]
    begin: Callable[[], None] | None = None
    prepare: Callable[[], None] | None = None
    finish: Callable[..., str | None] | None = None
    # A line about the call for whoever reads its detail (hosts its egress proxy refused), asked
    # after ``finish``; None when there is nothing to say.
    notes: Callable[[], str | None] | None = None

    def __iter__(self):
        return iter((self.argv, self.env))


class LaunchRefused(Exception):
    """A launcher will not start this call; ``kind`` (one of ``LIMIT_KINDS``) and the reason."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind, self.reason = kind, reason


Launcher = Callable[[Sequence[str], Mapping[str, str], "str | None"], "Launch | tuple[list[str], dict[str, str]]"]
"""(argv, env, cwd) -> Launch (or (argv, env)): how a worker process is actually started."""

# How a bounded worker call failed, as the first word of its ``no_response`` detail: past its
# timeout, an answer larger than ``max_output_bytes``, its tree's memory or process cap, its
# HOME's size bound, its login file (which could not be bound as it must).
LIMIT_KINDS = ("timeout", "output_limit", "memory", "processes", "home_limit", "login_file")
DEFAULT_MAX_OUTPUT_BYTES = 4 << 20

_BASE_ENV = ("PATH", "HOME", "LANG")
# Set in every worker's environment: ``mesh run``/``drain``/``resume`` and ``mesh mcp``'s start
# tools refuse to start inside a worker (orchestrator.runner.refuse_nested_run).
WORKER_MARKER = "MESH_WORKER"
# The key that signs mesh's checkpoints; a worker holding it could forge an approval.
_NEVER_PASSED = "MESH_SIGNING_KEY"

_STDERR_TAIL_CHARS = 2000
# What bwrap, setpriv (dropping root) or mesh's HOME carrier say when the program itself cannot be executed.
_CANNOT_START = re.compile(r"^(bwrap: execvp |setpriv: failed to execute |bwrap: Can't find source path"
                           r" |mesh-carry: cannot execute )", re.M)
# After a kill, how long to wait for the pipes to close; a grandchild that left the
# process group could otherwise hold them open forever.
_REAP_TIMEOUT_S = 5.0


def split_command(text: str) -> list[str]:
    """``text`` split into argv the way a shell would (without running one).

    Raises ValueError when it cannot be split or is empty.
    """
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot split {text!r}: {exc}") from None
    if not argv:
        raise ValueError("empty command")
    return argv


def resolve_program(name: str) -> str | None:
    """The absolute path of ``name`` (looked up on PATH unless it holds a slash), or None.

    Resolved once, so a worktree cwd cannot change which program a relative path names.
    """
    found = shutil.which(name)
    return os.path.abspath(found) if found else None


def call_env(request: WorkerRequest, env_names: Sequence[str], extra: Mapping[str, str] | None = None,
               forced: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of one worker call.

    PATH, HOME, LANG, ``extra`` (defaults a variable named in ``env_names`` overrides), the
    variables named in ``env_names``, ``forced`` (settings no passed variable may change),
    the ``MESH_*`` call variables and the ``MESH_WORKER`` marker; never the signing key.
    """
    env = {name: os.environ[name] for name in _BASE_ENV if name in os.environ}
    env.update(extra or {})
    env.update({name: os.environ[name] for name in env_names if name != _NEVER_PASSED and name in os.environ})
    env.update(forced or {})
    env.update(
        MESH_ROLE=request.role,
        MESH_ROUND=request.round,
        MESH_TASK_ID=request.task_id,
        MESH_RUN_ID=request.run_id,
        MESH_ATTEMPT=str(request.attempt),
    )
    env[WORKER_MARKER] = request.run_id
    env.pop(_NEVER_PASSED, None)
    return env


@dataclass
class Finished:
    """A worker process that exited by itself: its output, exit status and run time."""

    stdout: str
    stderr_tail: str
    returncode: int
    duration_s: float


def run_process(argv: Sequence[str], env: Mapping[str, str], request: WorkerRequest, *, timeout_s: float,
                launcher: Launcher | None = None,
                max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> Finished | WorkerResponse:
    """Run one worker call: the prompt on stdin, in the request's worktree, in its own process group.

    Returns what the process left behind, or the ``no_response`` answer of a call that ran
    past ``timeout_s``, wrote more than ``max_output_bytes`` to stdout, hit a cap of its
    launcher or was refused by it (the detail headed by the limit: ``LIMIT_KINDS``); the
    whole process group is killed in each case. Raises BackendError when the program cannot
    be started.
    """
    program = argv[0]
    started = time.monotonic()
    try:
        launch = _launch(launcher, list(argv), dict(env), str(request.worktree) if request.worktree else None)
    except LaunchRefused as exc:
        return _failed(started, str(exc))
    try:
        if launch.begin is not None:
            launch.begin()
        try:
            process = subprocess.Popen(launch.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, env=launch.env, cwd=request.worktree,
                                       start_new_session=True, preexec_fn=launch.prepare)
        except OSError as exc:
            raise BackendError(f"cannot start worker command {program}: {exc.strerror or exc}") from None
        answer = Capped(max_output_bytes, lambda: _signal_group(process.pid))
        errors = Tail(_STDERR_TAIL_CHARS * 4)
        threads = [threading.Thread(target=_feed, args=(process.stdin, request.prompt.text.encode("utf-8")),
                                    daemon=True),
                   threading.Thread(target=drain, args=(process.stdout, answer), daemon=True),
                   threading.Thread(target=drain, args=(process.stderr, errors), daemon=True)]
        # An interrupt (Ctrl-C) must not leave the worker running behind us.
        timed_out = run_with(process, threads, timeout_s, lambda: _kill_group(process))
        _kill_group(process)
        for thread in threads:
            thread.join(_REAP_TIMEOUT_S)
    finally:
        # What the launcher does after the call (carrying a HOME back) counts against its timeout.
        hit = launch.finish(max(0.0, timeout_s - (time.monotonic() - started))) if launch.finish is not None else None
    note = launch.notes() if launch.notes is not None else None
    if timed_out:
        return _failed(started, f"timeout: the worker ran past {timeout_s:g}s (worker_timeout_s) and was killed", note)
    if answer.overflowed:
        return _failed(started, f"output_limit: the worker wrote more than {max_output_bytes} bytes to stdout"
                                f" (worker_limits.max_output_mb) and was killed; nothing of it was kept", note)
    if hit is not None:
        return _failed(started, hit, note)
    stderr_tail = errors.text()[-_STDERR_TAIL_CHARS:].strip()
    if note:
        stderr_tail = f"{stderr_tail}\n{note}".strip()
    cannot_start = _CANNOT_START.search(stderr_tail) if process.returncode != 0 else None
    if cannot_start:
        # Not the model's answer failing: the program never started (it, or its interpreter, is
        # not where the sandbox shows files). Every later call would fail the same way.
        line = stderr_tail[cannot_start.start():].splitlines()[0]
        raise BackendError(f"the worker command {program} cannot start in its sandbox: {line}"
                           "; a file it needs may lie where the worker sandbox shows nothing (name the folder in"
                           " worker_read_only in mesh.toml; docs/workers.md says what a worker sees)")
    return Finished(
        stdout=bytes(answer.data).decode("utf-8", errors="replace"),
        stderr_tail=stderr_tail,
        returncode=process.returncode,
        duration_s=time.monotonic() - started,
    )


def _launch(launcher: Launcher | None, argv: list[str], env: dict[str, str], cwd: str | None) -> Launch:
    if launcher is None:
        return Launch(argv, env)
    made = launcher(argv, env, cwd)
    return made if isinstance(made, Launch) else Launch(*made)


def _failed(started: float, detail: str, note: str | None = None) -> WorkerResponse:
    return WorkerResponse(text=None, error="no_response", duration_s=time.monotonic() - started,
                          detail=f"{detail}; {note}" if note else detail)


def _feed(stream, data: bytes) -> None:
    """Write the prompt to the worker's stdin and close it; a worker that stops reading is its business."""
    try:
        stream.write(data)
    except OSError:
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


class CommandBackend(Backend):
    """Run ``worker_cmd`` once per call; calls are independent processes, so thread-safe."""

    name = "command"

    def __init__(self, worker_cmd: str, timeout_s: float = 600, *, env_names: Sequence[str] = (),
                 launcher: Launcher | None = None, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES):
        try:
            argv = split_command(worker_cmd)
        except ValueError as exc:
            raise BackendError(f"worker command: {exc}") from None
        if timeout_s <= 0:
            raise BackendError(f"the worker timeout must be positive, got {timeout_s}")
        executable = resolve_program(argv[0])
        if executable is None:
            raise BackendError(f"worker command not found or not executable: {argv[0]}")
        self._argv = [executable, *argv[1:]]
        self._timeout_s = float(timeout_s)
        self._env_names = tuple(env_names)
        self._launcher = launcher
        self._max_output_bytes = int(max_output_bytes)

    def call(self, request: WorkerRequest) -> WorkerResponse:
        """Run the worker on the request's prompt and return its stdout."""
        finished = run_process(self._argv, call_env(request, self._env_names), request,
                               timeout_s=self._timeout_s, launcher=self._launcher,
                               max_output_bytes=self._max_output_bytes)
        if isinstance(finished, WorkerResponse):
            return finished
        if finished.returncode != 0:
            detail = f"worker exited with status {finished.returncode}"
            return WorkerResponse(
                text=None,
                error="no_response",
                duration_s=finished.duration_s,
                detail=f"{detail}: {finished.stderr_tail}" if finished.stderr_tail else detail,
            )
        if not finished.stdout.strip():
            return WorkerResponse(
                text=None,
                error="no_response",
                duration_s=finished.duration_s,
                detail="worker wrote nothing to stdout",
            )
        return WorkerResponse(text=finished.stdout, duration_s=finished.duration_s,
                              detail=finished.stderr_tail or None)


def _signal_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's process group (anything it left behind too), then reap the worker.

    Under bwrap the group is bwrap itself; ``--die-with-parent`` then ends the sandbox's pid
    1 and the kernel every process left in its pid namespace."""
    _signal_group(process.pid)
    process.wait()
