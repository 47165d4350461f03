"""The ``command`` backend: any program that reads a prompt on stdin and answers on stdout.

Each call spawns the worker command (split like a shell would, run without one) with the
prompt on stdin and a minimal environment: PATH, HOME, LANG, the call variables
``MESH_ROLE``, ``MESH_ROUND``, ``MESH_TASK_ID``, ``MESH_RUN_ID`` and ``MESH_ATTEMPT``, and
the variables named in ``env_names`` (an agent CLI's own API key, say); never
``MESH_SIGNING_KEY``. Its stdout is the answer. It runs in the request's worktree when one
is given, so an agent CLI can read the code it works on. An injected ``launcher`` wraps the
argv and environment of every call (mesh's runner supplies one that runs the worker
inside bubblewrap, out of sight of mesh's own process). A non-zero exit or an empty answer
is ``no_response``; running past the timeout is ``timeout``, and the worker's whole
process group is killed so no helper it started outlives the call.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from .base import Backend, BackendError, WorkerRequest, WorkerResponse

__all__ = ["CommandBackend", "Launcher"]

Launcher = Callable[[Sequence[str], Mapping[str, str], "str | None"], tuple[list[str], dict[str, str]]]
"""(argv, env, cwd) -> (argv, env): how a worker process is actually started."""

_BASE_ENV = ("PATH", "HOME", "LANG")
# The key that signs mesh's checkpoints; a worker holding it could forge an approval.
_NEVER_PASSED = "MESH_SIGNING_KEY"

_STDERR_TAIL_CHARS = 2000
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


class CommandBackend(Backend):
    """Run ``worker_cmd`` once per call; calls are independent processes, so thread-safe."""

    name = "command"

    def __init__(self, worker_cmd: str, timeout_s: float = 600, *, env_names: Sequence[str] = (),
                 launcher: Launcher | None = None):
        try:
            argv = split_command(worker_cmd)
        except ValueError as exc:
            raise BackendError(f"worker command: {exc}") from None
        if timeout_s <= 0:
            raise BackendError(f"the worker timeout must be positive, got {timeout_s}")
        executable = shutil.which(argv[0])
        if executable is None:
            raise BackendError(f"worker command not found or not executable: {argv[0]}")
        # Resolved once, so a worktree cwd cannot change which program a relative path names.
        self._argv = [os.path.abspath(executable), *argv[1:]]
        self._timeout_s = float(timeout_s)
        self._env_names = tuple(name for name in env_names if name != _NEVER_PASSED)
        self._launcher = launcher

    def call(self, request: WorkerRequest) -> WorkerResponse:
        """Run the worker on the request's prompt and return its stdout."""
        env = {name: os.environ[name] for name in (*_BASE_ENV, *self._env_names) if name in os.environ}
        env.update(
            MESH_ROLE=request.role,
            MESH_ROUND=request.round,
            MESH_TASK_ID=request.task_id,
            MESH_RUN_ID=request.run_id,
            MESH_ATTEMPT=str(request.attempt),
        )
        argv = list(self._argv)
        if self._launcher is not None:
            argv, env = self._launcher(argv, env, str(request.worktree) if request.worktree else None)
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=request.worktree,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"cannot start worker command {self._argv[0]}: {exc.strerror or exc}") from None
        try:
            stdout, stderr = process.communicate(
                request.prompt.text.encode("utf-8"), timeout=self._timeout_s
            )
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return WorkerResponse(
                text=None,
                error="timeout",
                duration_s=time.monotonic() - started,
                detail=f"worker ran past {self._timeout_s:g}s and was killed",
            )
        except BaseException:
            # An interrupt (Ctrl-C) must not leave the worker running behind us.
            _kill_group(process)
            raise
        duration = time.monotonic() - started
        text = stdout.decode("utf-8", errors="replace")
        stderr_tail = stderr.decode("utf-8", errors="replace")[-_STDERR_TAIL_CHARS:].strip()
        if process.returncode != 0:
            detail = f"worker exited with status {process.returncode}"
            return WorkerResponse(
                text=None,
                error="no_response",
                duration_s=duration,
                detail=f"{detail}: {stderr_tail}" if stderr_tail else detail,
            )
        if not text.strip():
            return WorkerResponse(
                text=None,
                error="no_response",
                duration_s=duration,
                detail="worker wrote nothing to stdout",
            )
        return WorkerResponse(text=text, duration_s=duration, detail=stderr_tail or None)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's process group, then reap the worker."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.communicate(timeout=_REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        process.wait()
