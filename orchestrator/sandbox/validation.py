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

What the project adds to its committed tree (installed dependencies, toolchains, build caches,
generated files, setup commands) comes as a ``ProjectView`` (``orchestrator.sandbox.project_view``)
found by the project's toolchains. The allowlist itself is ``orchestrator.sandbox.allowlist``.
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

from orchestrator.sandbox import cgroups
from orchestrator.sandbox import bwrap as _sandbox
from orchestrator.mutants import planting
from orchestrator.mutants.table import MUTATORS
from orchestrator.sandbox import canaries, chain_runs, subset_runs, testcounts, workspace_runs
from orchestrator.sandbox.allowlist import (ARGS_PLACEHOLDER, PATH_PLACEHOLDER, explain, is_allowed, matching_template,
                                             parse_allow_entry, placeholder_args, split, stays_inside)
from orchestrator.sandbox.bwrap import Limits
from orchestrator.sandbox.cache_layers import shown as caches_shown
from orchestrator.sandbox.project_env import ProjectEnv
from orchestrator.sandbox.project_view import ProjectView, carry_into
from orchestrator.sandbox.tree_copy import changed_lines, changed_paths, materialize_tree
from orchestrator.testruns.model import MAX_FAILURES_KEPT, Run, failures_kept
from orchestrator.testruns.table import read_chain
from orchestrator.testruns.workspaces import workspace_run
from orchestrator.sandbox.worker_sandbox import program_binds
from redact import scrub
from redact.controls import strip_terminal
from roles.backends.streams import Tail, drain, run_with

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
    # Every test the runner reported (kept in memory: the base comparison reads it by test).
    run: Run | None = field(default=None, compare=False, repr=False)
    # The tests the candidate lost against its base, by kind (``broken``, ``gone``, ``new_failures``).
    lost: dict[str, list[str]] | None = None
    # The command whose run this one was judged from, not run itself (``subset_runs``).
    judged_from: str | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field (the test counts as ``TestCounts.to_dict`` has them,
        and the first ``MAX_FAILURES_KEPT`` failing tests with their messages as ``failures``)."""
        out = {**asdict(self), "tests": self.tests.to_dict() if self.tests else None}
        del out["run"]
        if not self.lost:
            del out["lost"]
        if self.judged_from is None:
            del out["judged_from"]
        if self.run is not None and (self.run.failures() or self.run.collection_errors):
            out["failures"] = failures_kept(self.run)
        if self.run is not None and self.run.flaky:
            out["flaky"] = self.run.flaky[:MAX_FAILURES_KEPT]
        return out


def _resolve_program(program: str, root: Path, search_path: str, view: ProjectView | None = None) -> str | None:
    if "/" in program:
        candidate = program if os.path.isabs(program) else os.path.join(root, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
        if not os.path.isabs(program) and _in_tree_mount(program, view):
            # ``node_modules/.bin/tape``: the tree copy holds no node_modules, the sandbox shows it
            # there (the view's read-only mount); the path inside the tree is what runs.
            return candidate
        return None
    # An empty or relative PATH entry means "the current directory": here the tree under
    # test, whose files the patch controls. Only absolute entries are searched.
    search = os.pathsep.join(entry for entry in search_path.split(os.pathsep) if os.path.isabs(entry))
    return shutil.which(program, path=search) if search else None


def _in_tree_mount(program: str, view: ProjectView | None) -> bool:
    """True when ``program`` (relative to the tree) is an executable file of one of ``view``'s
    read-only mounts into the tree, as the sandbox shows it."""
    parts = Path(program).parts
    if ".." in parts or not parts:
        return False
    for mount in view.mounts if view else ():
        if not mount.in_tree or mount.writable:
            continue
        prefix = Path(mount.target).parts
        if tuple(parts[:len(prefix)]) == prefix and len(parts) > len(prefix):
            source = os.path.join(mount.source, *parts[len(prefix):])
            real, base = os.path.realpath(source), os.path.realpath(mount.source)
            # Followed links must stay in the mount: what runs inside is what was checked here.
            return real.startswith(base + os.sep) and os.path.isfile(real) and os.access(real, os.X_OK)
    return False


def _absolute_path_entries(path: str | None) -> str:
    return os.pathsep.join(entry for entry in (path or os.defpath).split(os.pathsep) if os.path.isabs(entry))


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


def _not_found(command: str, started: float, detail: str) -> ValidationResult:
    return ValidationResult(command=scrub(command), exit_code=None, passed=False, rejected=False, reason="not_found",
                            duration_s=time.monotonic() - started, stderr_tail=scrub(detail))


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
    capture: testcounts.Capture | None = None,
) -> ValidationResult:
    out_tail, err_tail = Tail(max_output_bytes), Tail(max_output_bytes)
    out_sink = out_tail if capture is None else _Both(out_tail, capture)
    group = _tree_group(limits) if confine else None
    nproc = limits.max_processes if confine and group is None and _sandbox.sandbox_user() is not None else None

    def prepare() -> None:
        if group is not None:
            group.join()
        limits.apply(per_process_memory=group is None)
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
            return _not_found(command, started, f"cannot run {argv[0]!r}: {exc.strerror or exc}")
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            threading.Thread(target=drain, args=(proc.stdout, out_sink), daemon=True),
            threading.Thread(target=drain, args=(proc.stderr, err_tail), daemon=True),
        ]
        timed_out = run_with(proc, readers, timeout_s, lambda: _kill_group(proc.pid))
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


class _Both:
    """Feeds a stream to its tail and to the capture a test-result reader reads."""

    def __init__(self, tail: Tail, capture: testcounts.Capture) -> None:
        self.tail, self.capture = tail, capture

    def feed(self, chunk: bytes) -> bool:
        self.capture.feed(chunk)
        return self.tail.feed(chunk)


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
    view: ProjectView | None = None
    # The view's setup commands, resolved: (argv with the program as the sandbox sees it).
    setup: tuple[tuple[str, ...], ...] = ()
    # What the commit under validation changed (path: its hunks' line ranges): their tests get
    # mesh's twins first.
    changed: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # The paths changed since the base of the change under validation (``since``); None: unknown.
    since_paths: tuple[str, ...] | None = None

    def report_folder(self) -> tuple[Path, str]:
        """A new empty folder for one command's test report, and its path as the command sees it."""
        folder = Path(tempfile.mkdtemp(prefix="report-", dir=self.scratch))
        return folder, (testcounts.SANDBOX_REPORT if self.bwrap else str(folder))

    def launch(self, argv: list[str], program: str, report: Path | None = None,
               subdir: str = "", before: Sequence[str] = ()) -> tuple[list[str], str | None, Path]:
        """(argv to start, executable, host cwd) for ``program`` run with ``argv`` in the tree's
        folder ``subdir``; ``report`` is a folder shown at ``testcounts.SANDBOX_REPORT``."""
        if self.bwrap is None:
            return argv, program, self.root / subdir if subdir else self.root
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
        view_ro, view_rw = self.view_mounts()
        full = _sandbox.bwrap_argv(
            self.bwrap, [shell, "-c", self.copy_in_script(subdir, before), "mesh-validate", inside, *argv[1:]],
            network=False,
            binds=[*([(str(report), testcounts.SANDBOX_REPORT)] if report else []), *view_rw],
            ro_binds=[(str(self.root), _SANDBOX_SOURCE), *((path, path) for path in self.extra_ro),
                      *dict.fromkeys(ro_binds), *view_ro],
            tmpfs=[(self.tree_target, self.tree_bytes + growth if growth else None)],
            tmp_bytes=memory, etc_dir=self.etc_dir, user=_sandbox.sandbox_user(), hidden=self.hidden,
            chdir=self.tree_target)
        return full, None, self.root

    def view_mounts(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The project view's mounts as (read-only, writable) (source, target) pairs."""
        ro: list[tuple[str, str]] = []
        rw: list[tuple[str, str]] = []
        for mount in self.view.mounts if self.view else ():
            target = f"{self.tree_target}/{mount.target}" if mount.in_tree else mount.target
            (rw if mount.writable else ro).append((mount.source, target))
        return ro, rw

    def copy_in_script(self, subdir: str = "", before: Sequence[str] = ()) -> str:
        """The sandbox's first step: copy the tree in, run the setup commands (the user's, each
        already resolved and quoted word by word) and ``before`` (a workspace's ``pretest``), then
        become the command (``"$@"``), in the tree's folder ``subdir``."""
        steps = [f"cp -RP {_SANDBOX_SOURCE}/. {shlex.quote(self.tree_target)}/ || exit 125"]
        for setup in [*self.setup, *([tuple(before)] if before else [])]:
            words = " ".join(shlex.quote(word) for word in setup)
            note = shlex.quote(f"mesh: the setup command {shlex.join(setup[1:]) or setup[0]} failed")
            steps.append(f"{words} >&2 || {{ echo {note} >&2; exit 124; }}")
        if subdir:
            steps.append(f"cd {shlex.quote(subdir)} || exit 125")
        return "; ".join([*steps, 'exec "$@"'])


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
    environment: ProjectView | ProjectEnv | None = None,
    select: Mapping[str, str] | None = None,
    since: str | None = None,
    judge_subsets: bool = True,
) -> list[ValidationResult]:
    """Run each allowed command and return one result per command, in order.

    ``cwd`` is a git checkout. With ``sandbox="bwrap"`` the commands run under bubblewrap
    in a writable copy of the committed tree of ``commit`` (default: the checkout's HEAD),
    deleted afterwards; with ``sandbox="none"`` in ``cwd`` itself when it is that commit with
    nothing changed, else in such a copy too (unsandboxed). Either way the
    environment is PATH, LANG, a temporary HOME, ``PYTHONDONTWRITEBYTECODE=1`` and the
    variables of ``env`` (default: os.environ) named in ``env_names``, and every process is
    held to ``limits``. ``hidden`` paths (the tracker's files) are covered wherever a bind
    would show them. With an ``environment``
    (a ``ProjectView``, or just the project's Python environment) its Python ``bin`` is first on
    PATH, then the view's program folders; the Python environment is shown read-only,
    ``VIRTUAL_ENV`` names it; the view's mounts,
    variables, carried files and setup commands apply, and the tree shows at the repository's
    own path. Commands that do not
    parse or do not match ``allow`` are rejected and never run. Every command is
    attempted, whatever the outcome of the ones before it. ``select`` names, by command, the one
    test a command is to run (its runner's selection added by mesh after the allowlist admitted
    the command: a flaky test run again alone); a runner that cannot select it gives a result
    rejected as ``unselectable``. ``since`` is the commit the change under validation starts from
    (its base): with it a workspace command runs only the packages the change reaches
    (``workspace_runs``); without it, all of them. With ``judge_subsets`` a command whose tests
    another command runs too is judged from that one's run (``subset_runs``); an eval's grading
    runs each of its commands (a hidden command's tests all get their twins).

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
    view = ProjectView(project_root=environment.project_root, python=environment) \
        if isinstance(environment, ProjectEnv) else environment
    passed_values = [source[name] for name in env_names if name in source]
    # Build caches: the base check's, copied for this tree alone (``cache_layers``).
    with tempfile.TemporaryDirectory(prefix="mesh-validate-", ignore_cleanup_errors=True) as scratch, \
            caches_shown(view, cwd, commit, sandbox) as view:
        if sandbox == "bwrap":
            bwrap = _sandbox.require_bwrap()
            # The sandbox's user (not root) must reach the tree copy and the identity files.
            os.chmod(scratch, 0o755)
            tree = Path(scratch) / "tree"
            full = materialize_tree(cwd, commit or "HEAD", tree)
            if view is not None:
                carry_into(view, tree)
            run_env = _with_environment(_sandbox.minimal_env(
                source, env_names, home=_sandbox.SANDBOX_HOME, path=_sandbox.sandbox_path(source.get("PATH"))),
                view)
            etc_dir = _sandbox.write_identity(Path(scratch) / "etc", _sandbox.SANDBOX_HOME)
            target = view.tree_path if view and view.at_repo_path else _sandbox.SANDBOX_TREE
            _drop_hidden(tree, target, hidden)
            place = _Place(tree, run_env, bwrap,
                           shielded=(os.path.realpath(Path.home()), os.path.realpath(cwd)),
                           limits=limits, etc_dir=etc_dir, hidden=tuple(str(path) for path in hidden),
                           tree_bytes=_tree_bytes(tree), scratch=Path(scratch),
                           tree_target=target,
                           extra_ro=tuple(program_binds(view.python.python)) if view and view.python else (),
                           view=view, changed=changed_lines(cwd, full),
                           since_paths=changed_paths(cwd, since, full) if since else None)
            problem = _resolve_setup(place, allow)
            if problem is not None:
                started = time.monotonic()
                return [_rejected(command, "not_allowed", started, problem) for command in commands]
        else:
            home = Path(scratch) / "home"
            home.mkdir()
            run_env = _with_environment(_sandbox.minimal_env(
                source, env_names, home=str(home), path=_absolute_path_entries(source.get("PATH"))), view)
            where = _unsandboxed_tree(cwd, commit, Path(scratch), view)
            if where != cwd:
                # The copy's modules before an editable install's (which points at the checkout).
                run_env["PYTHONPATH"] = os.pathsep.join(
                    [str(where), str(where / "src"), *([run_env["PYTHONPATH"]] if run_env.get("PYTHONPATH") else [])])
            place = _Place(where, run_env, limits=limits, scratch=Path(scratch),
                           since_paths=changed_paths(cwd, since, commit or "HEAD") if since else None)
        def run(command: str) -> ValidationResult:
            return _check_and_run(command, allow, place, timeout_s=timeout_s, max_output_bytes=max_output_bytes,
                                  hidden_values=passed_values, test_id=(select or {}).get(command))

        # A command whose tests another command here runs too is judged from that one's run.
        def admitted(command: str) -> bool:  # a subset is judged only when it would have run
            argv, template = split(command), matching_template(command, allow)
            return bool(argv) and template is not None and all(
                stays_inside(place.root, arg) for arg in placeholder_args(argv, template))

        subsets = subset_runs.plan([c if admitted(c) else "" for c in commands], place.root, select or {},
                                   split) if judge_subsets else {}
        results: dict[int, ValidationResult] = {index: run(command) for index, command in enumerate(commands)
                                                if index not in subsets}
        for index, (big, pick) in subsets.items():
            results[index] = subset_runs.derived(commands[index], commands[big], results[big], pick,
                                                 ValidationResult) or run(commands[index])
        return [results[index] for index in range(len(commands))]


def _unsandboxed_tree(cwd: Path, commit: str | None, scratch: Path, view: ProjectView | None) -> Path:
    """Where a command runs without the sandbox: the checkout itself when it is exactly
    ``commit`` (HEAD, nothing changed), else a copy of ``commit``'s tree in ``scratch``: the
    results said to be a commit's (the base's, kept by its tree) are that commit's, never the
    checkout's as it happens to be."""
    if commit is None:
        return cwd
    from orchestrator.sandbox.tree_copy import _git as tree_git

    try:
        head = tree_git(cwd, "rev-parse", "--verify", "HEAD^{commit}").decode().strip()
        wanted = tree_git(cwd, "rev-parse", "--verify", "--end-of-options", f"{commit}^{{commit}}").decode().strip()
        changed = tree_git(cwd, "status", "--porcelain", "--untracked-files=no").strip()
    except ValueError:
        return cwd
    if head == wanted and not changed:
        return cwd
    tree = scratch / "tree"
    materialize_tree(cwd, wanted, tree)
    if view is not None:
        carry_into(view, tree)
    return tree


def _with_environment(env: dict[str, str], view: ProjectView | None) -> dict[str, str]:
    if view is None:
        return env
    env = dict(env)
    first = [*([view.python.bin_dir] if view.python else []), *view.path]
    env["PATH"] = os.pathsep.join(dict.fromkeys([*first, *(p for p in env["PATH"].split(os.pathsep) if p)]))
    if view.python is not None:
        if os.path.isfile(os.path.join(view.python.prefix, "pyvenv.cfg")):
            env["VIRTUAL_ENV"] = view.python.prefix
    env.update(dict(view.env))
    return env


def _drop_hidden(tree: Path, target: str, hidden: Sequence[str | Path]) -> None:
    """Take out of the tree copy what a hidden path covers where the tree shows (the tracker's
    files of a tree shown at the repository's own path: a tracked ``.beads/config.yaml`` could not
    be copied under the cover, and the commands have no business reading the tracker)."""
    for path in hidden:
        path = str(path)
        if not path.startswith(target.rstrip("/") + "/"):
            continue
        inside = tree / os.path.relpath(path, target)
        if inside.is_dir() and not inside.is_symlink():
            shutil.rmtree(inside, ignore_errors=True)
        elif inside.exists() or inside.is_symlink():
            inside.unlink()


def _resolve_setup(place: _Place, allow: Sequence[str]) -> str | None:
    """Resolve the view's setup commands into ``place.setup``; why not, when one of them is not
    admitted by ``allow`` or its program is not found."""
    resolved = []
    for command in place.view.setup if place.view else ():
        argv = split(command)
        if not argv or matching_template(command, allow) is None:
            return f"the setup command {command!r} is not admitted by validation.allow: {explain(command, allow)}"
        program = _resolve_program(argv[0], place.root, place.env["PATH"], place.view)
        if program is None:
            return f"the setup command {command!r}: program not found: {argv[0]}"
        if program.startswith(str(place.root) + os.sep):
            program = place.tree_target + program[len(str(place.root)):]
        resolved.append((program, *argv[1:]))
    place.setup = tuple(resolved)
    return None


def run_configured(commands: Sequence[str], cfg, *, cwd: Path, commit: str | None,
                   environment: ProjectEnv | None = None, hidden: Sequence[str | Path] = (),
                   select: Mapping[str, str] | None = None, since: str | None = None) -> list[ValidationResult]:
    """``run_validation`` with the settings of a ``[validation]`` table (``cfg``)."""
    return run_validation(commands, cwd=cwd, allow=cfg.allow, timeout_s=cfg.timeout_s,
                          max_output_bytes=cfg.max_output_bytes, commit=commit, sandbox=cfg.sandbox,
                          env_names=cfg.env, limits=cfg.limits, hidden=hidden, environment=environment,
                          select=select, since=since)


# How much more of a command's output is kept while mesh's own tests' failures are in it.
_CONTROLS_OUTPUT = 2 << 20
_TRUNCATED = re.compile(r"^\[\.\.\. (\d+) bytes truncated \.\.\.\]\n")


def _recut(text: str, limit: int) -> str:
    """``text`` (an output tail, perhaps headed by what was dropped) cut to its last ``limit``
    bytes, headed by all that was dropped."""
    found = _TRUNCATED.match(text)
    dropped = int(found.group(1)) if found else 0
    body = text[found.end():] if found else text
    data = body.encode("utf-8")
    if len(data) <= limit:
        return text
    dropped += len(data) - limit
    return f"[... {dropped} bytes truncated ...]\n{data[-limit:].decode('utf-8', errors='replace')}"


def _where_searched(name: str, place: _Place) -> str:
    """Where a bare program name was looked for, and the name that is there when ``python`` is
    not: a shell finds programs the sandbox does not show (a pyenv shim, a user's own bin)."""
    if "/" in name:
        return ""
    said = f" (looked for on the sandbox's PATH {place.env['PATH']})"
    view = place.view if place.bwrap else None
    if name == "python" and _resolve_program("python3", place.root, place.env["PATH"], view) is not None:
        said += "; python3 is there: name it in the command and in validation.allow, or set validation.python"
    return said


def _check_and_run(command: str, allow: Sequence[str], place: _Place, *, timeout_s: float,
                   max_output_bytes: int, hidden_values: Sequence[str], test_id: str | None = None) -> ValidationResult:
    started = time.monotonic()
    argv = split(command)
    if not argv:
        return _rejected(command, "unparsable", started, "cannot split the command")
    template = matching_template(command, allow)
    if template is None:
        return _rejected(command, "not_allowed", started, f"no allowlist entry matches: {explain(command, allow)}")
    if not all(stays_inside(place.root, arg) for arg in placeholder_args(argv, template)):
        return _rejected(command, "not_allowed", started, "a path leaves the worktree")
    program = _resolve_program(argv[0], place.root, place.env["PATH"], place.view if place.bwrap else None)
    if program is None:
        return _not_found(command, started, f"program not found: {argv[0]}{_where_searched(argv[0], place)}")
    workspace = workspace_run(argv, place.root)
    if workspace is not None:
        view = place.view if place.bwrap else None

        def one(sub_argv: list[str], folder: str, sub_id: str | None, before: Sequence[str] = ()) -> ValidationResult:
            found = _resolve_program(sub_argv[0], place.root, place.env["PATH"], view)
            first = _resolve_program(before[0], place.root, place.env["PATH"], view) if before else None
            if found is None or (before and first is None):
                missing = sub_argv[0] if found is None else before[0]
                return _not_found(shlex.join(sub_argv), started, f"program not found: {missing}")
            return _run_probe(command, sub_argv, found, place, started, timeout_s=timeout_s,
                              max_output_bytes=max_output_bytes, hidden_values=hidden_values, test_id=sub_id,
                              subdir=folder, unset=workspace_runs.NOT_FOR_NPM,
                              before=(first, *before[1:]) if before else ())
        return workspace_runs.run(command, workspace, place.since_paths, one, started, test_id=test_id,
                                  max_output_bytes=max_output_bytes, make=ValidationResult, root=place.root,
                                  before_each=place.bwrap is not None)
    chain = read_chain(argv, place.root)
    if chain is not None:  # ``node --test && tsc``: the runner's part read, the others by their status
        view = place.view if place.bwrap else None

        def part(words: list[str], sub_id: str | None, left: float) -> ValidationResult:
            found = _resolve_program(words[0], place.root, place.env["PATH"], view)
            if found is None and "/" not in words[0]:  # npm puts the project's tools on a script's PATH
                local = f"node_modules/.bin/{words[0]}"
                found = _resolve_program(local, place.root, place.env["PATH"], view)
                words = [local, *words[1:]] if found else words
            if found is None:
                return _not_found(command, started, f"program not found: {words[0]} (in {argv[-1]}'s script)")
            return _run_probe(command, words, found, place, started, timeout_s=left,
                              max_output_bytes=max_output_bytes, hidden_values=hidden_values, test_id=sub_id)
        return chain_runs.run(command, chain[0], chain[1], part, started, test_id=test_id, timeout_s=timeout_s,
                              make=ValidationResult)
    return _run_probe(command, argv, program, place, started, timeout_s=timeout_s, max_output_bytes=max_output_bytes,
                      hidden_values=hidden_values, test_id=test_id)


def _run_probe(command: str, argv: list[str], program: str, place: _Place, started: float, *, timeout_s: float,
               max_output_bytes: int, hidden_values: Sequence[str], test_id: str | None = None,
               subdir: str = "", unset: Sequence[str] = (), before: Sequence[str] = ()) -> ValidationResult:
    """Run the admitted ``command`` as ``argv`` (``program`` resolved) in the tree's folder
    ``subdir`` without the variables ``unset`` (``before``: a command run first at the tree's
    root, in the sandbox): its runner's report read, mesh's twins and control tests planted and
    judged."""
    tree = place.root / subdir if subdir else place.root
    if test_id is not None:
        # The one test to run again, selected by mesh after the allowlist admitted the command.
        narrowed = testcounts.select(argv, test_id, tree)
        if narrowed is None:
            return _rejected(command, "unselectable", started, f"its runner cannot run {test_id!r} alone")
        argv = narrowed
    changed = place.changed if not subdir else {
        path[len(subdir) + 1:]: lines for path, lines in place.changed.items() if path.startswith(subdir + "/")}
    # Twins of the project's own tests (``orchestrator.mutants``) and control tests whose
    # outcome mesh knows, in the tree copy only (never the user's checkout).
    twins = planting.plant(argv, testcounts.runner_of(argv, tree), tree, changed) if place.bwrap else None
    if twins is not None and twins.args:
        argv = [*argv, *twins.args]  # a command that names its tests runs their twins too
    # The report argument is mesh's own, added after the allowlist admitted the command.
    probe = testcounts.instrument(argv, *place.report_folder(), tree=tree,
                                  root=(f"{place.tree_target}/{subdir}" if subdir else place.tree_target)
                                  if place.bwrap else str(tree))
    if probe.argv[0] != argv[0]:
        # The runner is started through another program (``django-admin test``, ``./manage.py
        # test``: through Python, with mesh's shim).
        program = _resolve_program(probe.argv[0], tree, place.env["PATH"], place.view if place.bwrap else None)
        if program is None:
            if twins is not None:
                twins.remove()
            return _not_found(command, started, f"program not found: {probe.argv[0]} (to run {argv[0]}'s tests)"
                                                f"{_where_searched(probe.argv[0], place)}")
    testcounts.prepare(probe, owner=_sandbox.sandbox_user() if place.bwrap else None)
    planted = canaries.plant(testcounts.runner_args(argv, tree), probe.runner, tree) if place.bwrap else None
    launch_argv, executable, host_cwd = place.launch(probe.argv, program, report=probe.folder, subdir=subdir,
                                                     before=before)
    # mesh's own tests' failures are taken out of the output: keep more of it, cut it after.
    kept_bytes = max_output_bytes + (_CONTROLS_OUTPUT if twins is not None or planted is not None else 0)
    try:
        env = {name: value for name, value in probe.environment(place.env).items() if name not in unset}
        result = _run_one(command, launch_argv, executable, cwd=host_cwd, env=env,
                          timeout_s=timeout_s,
                          max_output_bytes=kept_bytes, started=started, limits=place.limits,
                          confine=place.bwrap is not None, hidden_values=hidden_values, capture=probe.capture)
    finally:
        if planted is not None:
            planted.remove()
        if twins is not None:
            twins.remove()
    shown = testcounts.shown_output(probe, frozenset(twins.names()) if twins is not None else frozenset())
    if shown is not None:  # go test -json: its events' text, as go test -v prints it
        result = replace(result, stdout_tail=clean_output(shown[-max_output_bytes:], hidden_values))
    run, reason, note, passed, controls = testcounts.verdict(
        probe, result.passed, planted, twins=twins, exit_code=result.exit_code if result.limit is None else None,
        output=f"{result.stdout_tail}\n{result.stderr_tail}")
    if controls.names:
        # What a person and the workers read is the project's run, not mesh's control tests.
        result = replace(result, stdout_tail=canaries.clean_output(controls, result.stdout_tail),
                         stderr_tail=canaries.clean_output(controls, result.stderr_tail))
    if twins is not None:
        # Line numbers as the user's files have them, not as the twins moved them.
        result = replace(result, stdout_tail=twins.unshift(result.stdout_tail),
                         stderr_tail=twins.unshift(result.stderr_tail))
        run = run.with_messages(twins.unshift) if run is not None else None
    if kept_bytes != max_output_bytes:
        result = replace(result, stdout_tail=_recut(result.stdout_tail, max_output_bytes),
                         stderr_tail=_recut(result.stderr_tail, max_output_bytes))
    counts = run.counts() if run is not None else None
    if reason is None and not note and not controls.checked and place.bwrap and (
            probe.runner in canaries.RUNNERS or probe.runner in MUTATORS):
        note = canaries.UNCHECKED
    if reason is None:
        if note:
            result = replace(result, stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip())
        # An honest run with control tests exits 1 (they must fail): it counts as the exit 0 it is.
        return replace(result, tests=counts, run=run, passed=passed,
                       exit_code=0 if passed else result.exit_code)
    return replace(result, tests=counts, run=run, passed=False, reason=reason,
                   stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip())
