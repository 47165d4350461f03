"""Run the synthesizer's validation commands, but only those the project allows.

Validation commands come from model output, so they are untrusted. A command runs only if
its shlex-split argv matches an entry of the config's allowlist token by token; it runs
without a shell, in the task's worktree, in its own process group, with a timeout that
kills the whole group, with output capped to a tail, and with secrets removed from its
environment. A rejected command is recorded and never executed.

Allowlist entries are exact commands or templates: the token ``{path}`` stands for one
relative path argument that stays inside the worktree, and a final token ``{args...}`` for
any number of further plain arguments (no options, no shell syntax, nothing escaping the
worktree).
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
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Mapping, Sequence

from orchestrator.scrub import scrub
from roles.backends.command import split_command

__all__ = [
    "ARGS_PLACEHOLDER",
    "PATH_PLACEHOLDER",
    "ValidationResult",
    "is_allowed",
    "parse_allow_entry",
    "run_validation",
    "safe_env",
]

PATH_PLACEHOLDER = "{path}"
ARGS_PLACEHOLDER = "{args...}"

# Nothing is ever handed to a shell, but a command that is written as shell syntax was
# meant for one: refusing it outright keeps a "; rm -rf" from ever looking like arguments.
_SHELL_SYNTAX = re.compile(r"[;|&<>`$\n\r\x00]")
# A plain argument: no option dash up front (options like pytest's --basetemp or make's -C
# can delete or redirect), no '=' (VAR=value injection), no '@' (response files), no quotes,
# spaces, globs or escapes.
_PLAIN_ARG = re.compile(r"[A-Za-z0-9_.,/:+%\[\]][A-Za-z0-9_.,/:+%\[\]-]*")

_SECRET_ENV_EXACT = frozenset({"ANTHROPIC_API_KEY", "MESH_SIGNING_KEY"})
_SECRET_ENV_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "APIKEY", "PRIVATE_KEY",
                     "ACCESS_KEY", "CREDENTIAL")
# Variables that would point git (run by a test suite) at a repository other than the
# worktree the command runs in.
_GIT_LOCATION_ENV = frozenset({
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
})

_READER_JOIN_S = 5.0


@dataclass
class ValidationResult:
    """The outcome of one validation command.

    ``reason`` is None for a command that ran to completion, else one of ``not_allowed``,
    ``unparsable`` (both: ``rejected`` and never run), ``timeout`` or ``not_found``.
    """

    command: str
    exit_code: int | None
    passed: bool
    rejected: bool
    reason: str | None
    duration_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field."""
        return asdict(self)


def parse_allow_entry(entry: str) -> list[str]:
    """Split an allowlist entry into its template tokens; ValueError if it is unusable."""
    if _SHELL_SYNTAX.search(entry):
        raise ValueError("shell syntax (; | & < > ` $ or a newline) never matches a command")
    tokens = split_command(entry)
    if tokens[0] in (PATH_PLACEHOLDER, ARGS_PLACEHOLDER):
        raise ValueError("the program itself cannot be a placeholder")
    for index, token in enumerate(tokens):
        if token == ARGS_PLACEHOLDER and index != len(tokens) - 1:
            raise ValueError(f"{ARGS_PLACEHOLDER} must be the last token")
        if token not in (PATH_PLACEHOLDER, ARGS_PLACEHOLDER) and (
            PATH_PLACEHOLDER in token or "{args" in token
        ):
            raise ValueError("a placeholder must be a whole argument")
    return tokens


def _has_escape(arg: str) -> bool:
    parts = PurePosixPath(arg).parts
    return arg.startswith("/") or ".." in parts or "\\" in arg


def _plain_arg(arg: str) -> bool:
    return bool(_PLAIN_ARG.fullmatch(arg)) and not _has_escape(arg)


def _match(argv: Sequence[str], template: Sequence[str]) -> bool:
    for index, token in enumerate(template):
        if token == ARGS_PLACEHOLDER:
            return all(_plain_arg(arg) for arg in argv[index:])
        if index >= len(argv):
            return False
        if token == PATH_PLACEHOLDER:
            if not _plain_arg(argv[index]):
                return False
        elif token != argv[index]:
            return False
    return len(argv) == len(template)


def _split(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


def _matching_template(command: str, allow: Sequence[str]) -> list[str] | None:
    if _SHELL_SYNTAX.search(command):
        return None
    argv = _split(command)
    if not argv:
        return None
    for entry in allow:
        try:
            template = parse_allow_entry(entry)
        except ValueError:
            continue
        if _match(argv, template):
            return template
    return None


def is_allowed(command: str, allow: Sequence[str]) -> bool:
    """True when ``command`` matches an allowlist entry (exact or template), token by token."""
    return _matching_template(command, allow) is not None


def _placeholder_args(argv: Sequence[str], template: Sequence[str]) -> list[str]:
    args: list[str] = []
    for index, token in enumerate(template):
        if token == ARGS_PLACEHOLDER:
            args.extend(argv[index:])
        elif token == PATH_PLACEHOLDER:
            args.append(argv[index])
    return args


def _stays_inside(cwd: Path, arg: str) -> bool:
    # The lexical check already passed; this one follows symlinks already in the tree.
    # pytest-style node ids ("tests/x.py::test") name a file before the "::".
    path_part = arg.split("::", 1)[0]
    root = os.path.realpath(cwd)
    target = os.path.realpath(os.path.join(root, path_part))
    return target == root or target.startswith(root + os.sep)


def _secret_env_name(name: str) -> bool:
    upper = name.upper()
    return upper in _SECRET_ENV_EXACT or any(part in upper for part in _SECRET_ENV_PARTS)


def safe_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: os.environ) without secrets or git location overrides.

    Dropped: ANTHROPIC_API_KEY, MESH_SIGNING_KEY, every name containing TOKEN, SECRET,
    PASSWORD, PASSWD, API_KEY, APIKEY, PRIVATE_KEY, ACCESS_KEY or CREDENTIAL, and GIT_DIR
    and its kin (they would send a test suite's git calls to another repository).
    """
    source = os.environ if env is None else env
    return {
        name: value
        for name, value in source.items()
        if not _secret_env_name(name) and name.upper() not in _GIT_LOCATION_ENV
    }


def _resolve_program(program: str, cwd: Path, env: Mapping[str, str]) -> str | None:
    if "/" in program:
        candidate = program if os.path.isabs(program) else os.path.join(cwd, program)
        return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    # An empty or relative PATH entry means "the current directory": here the worktree,
    # whose files the patch controls. Only absolute entries are searched.
    search = os.pathsep.join(
        entry for entry in env.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(entry)
    )
    return shutil.which(program, path=search) if search else None


class _Tail:
    """Keeps the last ``limit`` bytes of a stream and counts what it dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0
        self.lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        with self.lock:
            self.data += chunk
            excess = len(self.data) - self.limit
            if excess > 0:
                del self.data[:excess]
                self.dropped += excess

    def text(self) -> str:
        with self.lock:
            body = bytes(self.data).decode("utf-8", errors="replace")
            dropped = self.dropped
        return f"[... {dropped} bytes truncated ...]\n{body}" if dropped else body


def _drain(stream: IO[bytes], tail: _Tail) -> None:
    fd = stream.fileno()
    try:
        while chunk := os.read(fd, 65536):
            tail.feed(chunk)
    except OSError:
        # The pipe went away (the group was killed); what was read so far is the tail.
        pass
    finally:
        stream.close()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _rejected(command: str, reason: str, started: float, detail: str = "") -> ValidationResult:
    return ValidationResult(
        command=scrub(command), exit_code=None, passed=False, rejected=True, reason=reason,
        duration_s=time.monotonic() - started, stdout_tail="", stderr_tail=detail,
    )


def _run_one(
    command: str,
    argv: list[str],
    program: str,
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    max_output_bytes: int,
    started: float,
) -> ValidationResult:
    out_tail, err_tail = _Tail(max_output_bytes), _Tail(max_output_bytes)
    try:
        proc = subprocess.Popen(
            argv, executable=program, cwd=cwd, env=env, shell=False,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        return ValidationResult(
            command=scrub(command), exit_code=None, passed=False, rejected=False,
            reason="not_found", duration_s=time.monotonic() - started,
            stderr_tail=scrub(f"cannot run {argv[0]!r}: {exc.strerror or exc}"),
        )
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, out_tail), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err_tail), daemon=True),
    ]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    # Kill the whole group either way: on timeout to stop the run, and after a normal exit
    # to reap anything it left running in the background (which would also hold our pipes).
    _kill_group(proc.pid)
    proc.wait()
    for reader in readers:
        reader.join(_READER_JOIN_S)
    exit_code = None if timed_out else proc.returncode
    return ValidationResult(
        command=scrub(command),
        exit_code=exit_code,
        passed=exit_code == 0,
        rejected=False,
        reason="timeout" if timed_out else None,
        duration_s=time.monotonic() - started,
        stdout_tail=scrub(out_tail.text()),
        stderr_tail=scrub(err_tail.text()),
    )


def run_validation(
    commands: Sequence[str],
    *,
    cwd: Path,
    allow: Sequence[str],
    timeout_s: float,
    max_output_bytes: int = 65536,
    env: Mapping[str, str] | None = None,
) -> list[ValidationResult]:
    """Run each allowed command in ``cwd`` and return one result per command, in order.

    Commands that do not parse or do not match ``allow`` are rejected and never run.
    Every command is attempted, whatever the outcome of the ones before it.
    """
    cwd = Path(cwd)
    if not cwd.is_dir():
        raise ValueError(f"validation directory {cwd} does not exist")
    run_env = safe_env(env)
    results: list[ValidationResult] = []
    for command in commands:
        started = time.monotonic()
        argv = _split(command)
        if not argv:
            results.append(_rejected(command, "unparsable", started, "cannot split the command"))
            continue
        template = _matching_template(command, allow)
        if template is None:
            results.append(_rejected(command, "not_allowed", started, "no allowlist entry matches"))
            continue
        if not all(_stays_inside(cwd, arg) for arg in _placeholder_args(argv, template)):
            results.append(_rejected(command, "not_allowed", started, "a path leaves the worktree"))
            continue
        program = _resolve_program(argv[0], cwd, run_env)
        if program is None:
            results.append(ValidationResult(
                command=scrub(command), exit_code=None, passed=False, rejected=False,
                reason="not_found", duration_s=time.monotonic() - started,
                stderr_tail=scrub(f"program not found: {argv[0]}"),
            ))
            continue
        results.append(_run_one(
            command, argv, program, cwd=cwd, env=run_env, timeout_s=timeout_s,
            max_output_bytes=max_output_bytes, started=started,
        ))
    return results
