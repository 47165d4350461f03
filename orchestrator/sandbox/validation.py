"""Run the synthesizer's validation commands, but only those the project allows.

Validation commands come from model output, so they are untrusted. A command runs only if
its shlex-split argv matches an entry of the config's allowlist token by token; it runs
without a shell, in its own process group, with a timeout that kills the whole group, with
output capped to a tail, with CPU, memory and file-size limits, and with a minimal
environment (PATH, LANG, a temporary HOME, the names the user lists; never a secret). A
rejected command is recorded and never executed.

With ``sandbox="bwrap"`` (the default) the commands run inside bubblewrap
(``orchestrator.sandbox.bwrap``) in a writable copy of exactly the committed tree under test,
materialised from git objects: files a worker left in the worktree without committing
them are not there, nor is the repository's ``.git``, the tracker or any home directory,
and there is no network. Each command starts from a fresh copy of that tree on a tmpfs
sized to the tree plus ``Limits.tree_growth_mb``, runs as an unprivileged user when mesh is
root, and its whole process tree is held to one memory and process cap
(``orchestrator.sandbox.cgroups``) where the machine allows it. With ``sandbox="none"`` they run in
the worktree itself.

The output is untrusted text too: it is stripped of terminal control sequences, scrubbed of
secrets (known ones and the values of the variables passed in), and capped, before anyone
stores, prints or prompts with it. A result names the limit that ended the command
(``limit``) when the kernel's counters or the exit status say one did.

A command that runs a test runner mesh knows (pytest, unittest) also writes the runner's
report into a folder of its own outside the tree, and passes only when that report shows
tests that ran and none that failed (``orchestrator.sandbox.testcounts``).

Allowlist entries are exact commands or templates: the token ``{path}`` stands for one
relative path argument that stays inside the worktree, and a final token ``{args...}`` for
any number of further plain arguments (no options, no shell syntax, nothing escaping the
worktree).
"""

from __future__ import annotations

import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path, PurePosixPath
from typing import IO, Mapping, Sequence

from orchestrator.sandbox import cgroups
from orchestrator.sandbox import bwrap as _sandbox
from orchestrator.sandbox import testcounts
from orchestrator.sandbox.project_env import ProjectEnv
from orchestrator.sandbox.bwrap import Limits
from orchestrator.sandbox.worker_sandbox import program_binds
from redact import scrub
from redact.controls import strip_terminal
from roles.backends.command import split_command

__all__ = [
    "ARGS_PLACEHOLDER",
    "PATH_PLACEHOLDER",
    "ValidationResult",
    "is_allowed",
    "parse_allow_entry",
    "materialize_tree",
    "run_configured",
    "run_validation",
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

_READER_JOIN_S = 5.0


@dataclass
class ValidationResult:
    """The outcome of one validation command.

    ``reason`` is None for a command that ran to completion, else one of ``not_allowed``,
    ``unparsable`` (both: ``rejected`` and never run), ``timeout`` or ``not_found``.
    ``limit`` names the resource limit that ended the command, if one did: ``memory``,
    ``processes`` (the tree's caps), ``cpu``, ``file_size`` (per process) or ``disk`` (the
    tree copy or ``/tmp`` is full). For a test runner that exited 0, ``reason`` may also be one
    of ``testcounts.REPORT_REASONS`` (the engine adds ``fewer_tests_than_base``), and ``tests``
    holds the runner's counts: None when the command runs no runner mesh knows, or its
    runner wrote no readable report.
    """

    command: str
    exit_code: int | None
    passed: bool
    rejected: bool
    reason: str | None
    duration_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    limit: str | None = None
    tests: testcounts.TestCounts | None = None

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


def _resolve_program(program: str, root: Path, search_path: str) -> str | None:
    if "/" in program:
        candidate = program if os.path.isabs(program) else os.path.join(root, program)
        return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    # An empty or relative PATH entry means "the current directory": here the tree under
    # test, whose files the patch controls. Only absolute entries are searched.
    search = os.pathsep.join(entry for entry in search_path.split(os.pathsep) if os.path.isabs(entry))
    return shutil.which(program, path=search) if search else None


def _absolute_path_entries(path: str | None) -> str:
    return os.pathsep.join(entry for entry in (path or os.defpath).split(os.pathsep) if os.path.isabs(entry))


def _git(repo: Path, *args: str) -> bytes:
    # git's location overrides in mesh's own environment must not redirect these reads.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ValueError(f"git {args[0]} in {repo}: {detail[-1] if detail else 'failed'}")
    return done.stdout


def _safe_tree_path(path: bytes) -> bool:
    parts = path.split(b"/")
    return not path.startswith(b"/") and all(part not in (b"", b".", b"..", b".git") for part in parts)


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise ValueError("git cat-file ended early")
        data += chunk
    return bytes(data)


def _blobs(repo: Path, object_ids: Sequence[bytes]):
    """Yield the contents of ``object_ids`` in order, read through one ``git cat-file --batch``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.Popen(["git", "-C", str(repo), "cat-file", "--batch"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None and proc.stdout is not None

    def feed() -> None:
        try:
            for object_id in object_ids:
                proc.stdin.write(object_id + b"\n")
        except BrokenPipeError:
            pass
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        for object_id in object_ids:
            header = proc.stdout.readline().split()
            if len(header) != 3 or header[0] != object_id or header[1] != b"blob":
                raise ValueError(f"git cat-file: object {object_id.decode()} is not a readable blob")
            yield _read_exact(proc.stdout, int(header[2]))
            _read_exact(proc.stdout, 1)
    finally:
        proc.kill()
        proc.wait()
        writer.join()


def materialize_tree(repo: Path, commit: str, dest: Path) -> str:
    """Write exactly the committed tree of ``commit`` (in checkout ``repo``) into new directory ``dest``.

    Read from git's objects (``ls-tree`` and ``cat-file``), not with ``git archive``, whose
    ``export-ignore`` attribute would let a committed ``.gitattributes`` hide files from the
    copy. Executable bits and symlinks are kept; submodule entries (gitlinks) are skipped.
    Returns the full commit id; ValueError when ``repo`` is no git checkout, ``commit`` no
    commit, or the tree holds a path that could leave ``dest``.
    """
    full = _git(repo, "rev-parse", "--verify", "--end-of-options", f"{commit}^{{commit}}").decode().strip()
    files: list[tuple[bytes, bytes, bytes]] = []
    for record in _git(repo, "ls-tree", "-r", "-z", "--full-tree", full).split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, kind, object_id = meta.split(b" ")
        if kind == b"commit":
            continue
        if not _safe_tree_path(path):
            raise ValueError(f"commit {full[:12]} holds an unsafe path {path.decode('utf-8', 'replace')!r}")
        files.append((mode, object_id, path))
    root = os.fsencode(dest)
    os.mkdir(root, 0o755)
    links: list[tuple[bytes, bytes]] = []
    for (mode, _object_id, path), content in zip(files, _blobs(repo, [f[1] for f in files])):
        target = os.path.join(root, path)
        if mode == b"120000":
            links.append((content, target))
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # O_NOFOLLOW|O_EXCL: no link exists yet (they are made last), and none is written through.
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o755 if mode == b"100755" else 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
    for link_target, path in links:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(link_target, path)
    return full


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


def clean_output(text: str, hidden_values: Sequence[str] = ()) -> str:
    """Validation output made safe to keep: no terminal controls, no secret, no passed value."""
    text = scrub(strip_terminal(text))
    for value in hidden_values:
        if len(value) >= 6 and value in text:
            text = text.replace(value, "[REDACTED]")
    return text


# Exit statuses of a process killed by a signal, as bwrap and shells report them (128 + n)
# and as Popen does (-n).
_SIGNAL_LIMITS = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file_size"}
_DISK_FULL = ("No space left on device", "Disk quota exceeded")


def _limit_hit(exit_code: int | None, usage: cgroups.TreeUsage | None, output: str) -> str | None:
    if usage is not None and usage.memory:
        return "memory"
    if usage is not None and usage.processes:
        return "processes"
    if exit_code is not None:
        for sig, name in _SIGNAL_LIMITS.items():
            if exit_code in (-sig, 128 + sig):
                return name
    if exit_code not in (None, 0) and any(marker in output for marker in _DISK_FULL):
        return "disk"
    return None


def _run_one(
    command: str,
    argv: list[str],
    program: str | None,
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    max_output_bytes: int,
    started: float,
    limits: Limits,
    confine: bool = False,
    hidden_values: Sequence[str] = (),
) -> ValidationResult:
    out_tail, err_tail = _Tail(max_output_bytes), _Tail(max_output_bytes)
    group = _tree_group(limits) if confine else None
    nproc = limits.max_processes if confine and group is None and _sandbox.sandbox_user() is not None else None

    def prepare() -> None:
        if group is not None:
            group.join()
        limits.apply()
        if nproc:
            # The sandbox's user has no other process on the host: RLIMIT_NPROC counts its tree.
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    try:
        try:
            proc = subprocess.Popen(
                argv, executable=program, cwd=cwd, env=env, shell=False,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True, preexec_fn=prepare,
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
        # Under bwrap the group is bwrap itself; --die-with-parent then ends the sandbox's pid 1,
        # and the kernel every process left in its pid namespace.
        _kill_group(proc.pid)
        proc.wait()
        usage = group.usage() if group is not None else None
    finally:
        if group is not None:
            group.kill_and_remove()
    for reader in readers:
        reader.join(_READER_JOIN_S)
    exit_code = None if timed_out else proc.returncode
    stdout, stderr = clean_output(out_tail.text(), hidden_values), clean_output(err_tail.text(), hidden_values)
    limit = _limit_hit(exit_code, usage, stdout + stderr)
    return ValidationResult(
        command=scrub(command),
        exit_code=exit_code,
        # A tree that hit a cap did not run as written (a fork that failed, a child killed by
        # the OOM killer), whatever its exit status claims.
        passed=exit_code == 0 and limit is None,
        rejected=False,
        reason="timeout" if timed_out else None,
        duration_s=time.monotonic() - started,
        stdout_tail=stdout,
        stderr_tail=stderr,
        limit=limit,
    )


def _tree_group(limits: Limits) -> cgroups.TreeGroup | None:
    """A control group capping the command's whole tree, or None where none can be made."""
    if cgroups.probe() is not None:
        return None
    memory = (int(limits.memory_mb) << 20) if limits.memory_mb else 1 << 62
    try:
        return cgroups.make_group(memory, int(limits.max_processes or 0) or 1 << 22)
    except OSError:
        return None


def tree_limits_note(limits: Limits) -> str:
    """One line for preflight: which of ``limits`` hold for a whole validation tree here."""
    problem = cgroups.probe()
    if problem is None:
        return (f"validation limits: memory {limits.memory_mb} MB and {limits.max_processes} processes for the "
                f"whole tree (control group), tree copy +{limits.tree_growth_mb} MB, /tmp {limits.memory_mb} MB")
    processes = (f"{limits.max_processes} processes (RLIMIT_NPROC of the sandbox user)"
                 if _sandbox.sandbox_user() is not None else "no process-count limit")
    return (f"validation limits: memory {limits.memory_mb} MB per process only, {processes}, tree copy "
            f"+{limits.tree_growth_mb} MB, /tmp {limits.memory_mb} MB; no control group ({problem})")


# The sandbox's first step copies the tree under test onto its tmpfs, then becomes the command:
# a script of mesh's, whose only interpolation is the quoted target path; the command and its
# arguments are passed as "$@", never interpolated.
_SANDBOX_SOURCE = "/mesh/source"


def _tree_bytes(root: Path) -> int:
    """What the tree takes on a tmpfs: its files rounded up to pages, plus a page per entry."""
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in files + dirs:
            try:
                size = os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
            total += (size + 4095) // 4096 * 4096 + 4096
    return total


@dataclass
class _Place:
    """Where commands run: the tree they see, and how a resolved program is launched there."""

    root: Path
    env: dict[str, str]
    bwrap: str | None = None
    # Folders a program's own folder must not contain when bound in: HOME, the checkout.
    shielded: tuple[str, ...] = ()
    limits: Limits = Limits()
    etc_dir: str | None = None
    hidden: tuple[str, ...] = ()
    tree_bytes: int = 0
    # Where the tree shows inside: the repository's own path when a project environment is
    # used (its editable install then imports the tree under test), else SANDBOX_TREE.
    tree_target: str = _sandbox.SANDBOX_TREE
    extra_ro: tuple[str, ...] = ()
    # Where each command's test report folder is made (never inside the tree).
    scratch: Path | None = None

    def report_folder(self) -> tuple[Path, str]:
        """A new empty folder for one command's test report, and its path as the command sees it."""
        folder = Path(tempfile.mkdtemp(prefix="report-", dir=self.scratch))
        return folder, (testcounts.SANDBOX_REPORT if self.bwrap else str(folder))

    def launch(self, argv: list[str], program: str,
               report: Path | None = None) -> tuple[list[str], str | None, Path]:
        """(argv to start, executable, host cwd) for ``program`` run with ``argv``; ``report``
        is a folder shown at ``testcounts.SANDBOX_REPORT``."""
        if self.bwrap is None:
            return argv, program, self.root
        ro_binds: list[tuple[str, str]] = []
        inside = program
        root = os.path.realpath(self.root)
        real = os.path.realpath(program)
        if program.startswith(str(self.root) + os.sep):
            inside = self.tree_target + program[len(str(self.root)):]
        elif real.startswith(root + os.sep):
            inside = self.tree_target + real[len(root):]
        else:
            shown = [*_sandbox.visible_roots(), *self.extra_ro]
            for path in (os.path.dirname(os.path.abspath(program)), os.path.dirname(real)):
                # A program in HOME itself (or in /) would bring all of HOME along: not bound,
                # it is simply not found inside.
                exposes = any(s == path or s.startswith(path.rstrip("/") + "/") for s in self.shielded)
                if not _sandbox.covered(path, shown) and not exposes:
                    ro_binds.append((path, path))
        growth = (int(self.limits.tree_growth_mb) << 20) if self.limits.tree_growth_mb else None
        memory = (int(self.limits.memory_mb) << 20) if self.limits.memory_mb else None
        shell = shutil.which("sh", path="/usr/bin:/bin") or "/bin/sh"
        copy_in = f"cp -RP {_SANDBOX_SOURCE}/. {shlex.quote(self.tree_target)}/ || exit 125; exec \"$@\""
        full = _sandbox.bwrap_argv(
            self.bwrap, [shell, "-c", copy_in, "mesh-validate", inside, *argv[1:]], network=False,
            binds=[(str(report), testcounts.SANDBOX_REPORT)] if report else [],
            ro_binds=[(str(self.root), _SANDBOX_SOURCE), *((path, path) for path in self.extra_ro),
                      *dict.fromkeys(ro_binds)],
            tmpfs=[(self.tree_target, self.tree_bytes + growth if growth else None)],
            tmp_bytes=memory, etc_dir=self.etc_dir, user=_sandbox.sandbox_user(), hidden=self.hidden,
            chdir=self.tree_target)
        return full, None, self.root


def run_validation(
    commands: Sequence[str],
    *,
    cwd: Path,
    allow: Sequence[str],
    timeout_s: float,
    max_output_bytes: int = 65536,
    env: Mapping[str, str] | None = None,
    commit: str | None = None,
    sandbox: str = "bwrap",
    env_names: Sequence[str] = (),
    limits: Limits | None = None,
    hidden: Sequence[str | Path] = (),
    environment: ProjectEnv | None = None,
) -> list[ValidationResult]:
    """Run each allowed command and return one result per command, in order.

    ``cwd`` is a git checkout. With ``sandbox="bwrap"`` the commands run under bubblewrap
    in a writable copy of the committed tree of ``commit`` (default: the checkout's HEAD),
    deleted afterwards; with ``sandbox="none"`` in ``cwd`` itself. Either way the
    environment is PATH, LANG, a temporary HOME, ``PYTHONSAFEPATH=1``,
    ``PYTHONDONTWRITEBYTECODE=1`` and the variables of ``env`` (default: os.environ)
    named in ``env_names``, and every process is held to ``limits``. ``hidden`` paths (the
    tracker's files) are covered wherever a bind would show them. With an ``environment``
    (the project's, ``orchestrator.sandbox.project_env``) its ``bin`` is first on PATH, it is shown
    read-only, ``VIRTUAL_ENV`` names it, the tree shows at the repository's own path and
    ``PYTHONSAFEPATH`` is not set (``python -m pkg`` works as in the developer's shell; a
    committed package shadowing the standard library is refused by the patch policy). Commands that do not
    parse or do not match ``allow`` are rejected and never run. Every command is
    attempted, whatever the outcome of the ones before it.

    Raises ValueError when ``cwd`` is missing, or (bwrap) is no git checkout or lacks
    ``commit``, and ``SandboxUnavailable`` when bwrap cannot be used.
    """
    cwd = Path(cwd)
    if not cwd.is_dir():
        raise ValueError(f"validation directory {cwd} does not exist")
    if sandbox not in ("bwrap", "none"):
        raise ValueError(f"unknown sandbox {sandbox!r}; choose 'bwrap' or 'none'")
    if not commands:
        return []
    source = os.environ if env is None else env
    limits = limits or Limits()
    passed_values = [source[name] for name in env_names if name in source]
    with tempfile.TemporaryDirectory(prefix="mesh-validate-", ignore_cleanup_errors=True) as scratch:
        if sandbox == "bwrap":
            bwrap = _sandbox.require_bwrap()
            # The sandbox's user (not root) must reach the tree copy and the identity files.
            os.chmod(scratch, 0o755)
            tree = Path(scratch) / "tree"
            materialize_tree(cwd, commit or "HEAD", tree)
            run_env = _with_environment(_sandbox.minimal_env(
                source, env_names, home=_sandbox.SANDBOX_HOME, path=_sandbox.sandbox_path(source.get("PATH"))),
                environment)
            etc_dir = _sandbox.write_identity(Path(scratch) / "etc", _sandbox.SANDBOX_HOME)
            place = _Place(tree, run_env, bwrap,
                           shielded=(os.path.realpath(Path.home()), os.path.realpath(cwd)),
                           limits=limits, etc_dir=etc_dir, hidden=tuple(str(path) for path in hidden),
                           tree_bytes=_tree_bytes(tree), scratch=Path(scratch),
                           tree_target=environment.project_root if environment else _sandbox.SANDBOX_TREE,
                           extra_ro=tuple(program_binds(environment.python)) if environment else ())
        else:
            home = Path(scratch) / "home"
            home.mkdir()
            run_env = _with_environment(_sandbox.minimal_env(
                source, env_names, home=str(home), path=_absolute_path_entries(source.get("PATH"))), environment)
            place = _Place(cwd, run_env, limits=limits, scratch=Path(scratch))
        return [_check_and_run(command, allow, place, timeout_s=timeout_s, max_output_bytes=max_output_bytes,
                               hidden_values=passed_values) for command in commands]


def _with_environment(env: dict[str, str], environment: ProjectEnv | None) -> dict[str, str]:
    if environment is None:
        return env
    env = dict(env)
    env["PATH"] = os.pathsep.join([environment.bin_dir, *(p for p in env["PATH"].split(os.pathsep) if p)])
    env.pop("PYTHONSAFEPATH", None)
    if os.path.isfile(os.path.join(environment.prefix, "pyvenv.cfg")):
        env["VIRTUAL_ENV"] = environment.prefix
    return env


def run_configured(commands: Sequence[str], cfg, *, cwd: Path, commit: str | None,
                   environment: ProjectEnv | None = None, hidden: Sequence[str | Path] = ()) -> list[ValidationResult]:
    """``run_validation`` with the settings of a ``[validation]`` table (``cfg``)."""
    return run_validation(commands, cwd=cwd, allow=cfg.allow, timeout_s=cfg.timeout_s,
                          max_output_bytes=cfg.max_output_bytes, commit=commit, sandbox=cfg.sandbox,
                          env_names=cfg.env, limits=cfg.limits, hidden=hidden, environment=environment)


def _check_and_run(command: str, allow: Sequence[str], place: _Place, *, timeout_s: float,
                   max_output_bytes: int, hidden_values: Sequence[str]) -> ValidationResult:
    started = time.monotonic()
    argv = _split(command)
    if not argv:
        return _rejected(command, "unparsable", started, "cannot split the command")
    template = _matching_template(command, allow)
    if template is None:
        return _rejected(command, "not_allowed", started, "no allowlist entry matches")
    if not all(_stays_inside(place.root, arg) for arg in _placeholder_args(argv, template)):
        return _rejected(command, "not_allowed", started, "a path leaves the worktree")
    program = _resolve_program(argv[0], place.root, place.env["PATH"])
    if program is None:
        return ValidationResult(
            command=scrub(command), exit_code=None, passed=False, rejected=False,
            reason="not_found", duration_s=time.monotonic() - started,
            stderr_tail=scrub(f"program not found: {argv[0]}"),
        )
    # The report argument is mesh's own, added after the allowlist admitted the command.
    probe = testcounts.instrument(argv, *place.report_folder())
    testcounts.prepare(probe, owner=_sandbox.sandbox_user() if place.bwrap else None)
    launch_argv, executable, host_cwd = place.launch(probe.argv, program, report=probe.folder)
    result = _run_one(command, launch_argv, executable, cwd=host_cwd, env=place.env, timeout_s=timeout_s,
                      max_output_bytes=max_output_bytes, started=started, limits=place.limits,
                      confine=place.bwrap is not None, hidden_values=hidden_values)
    counts, reason, note = testcounts.verdict(probe, result.passed)
    if reason is None:
        return replace(result, tests=counts)
    return replace(result, tests=counts, passed=False, reason=reason,
                   stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip())
