"""The private HOMEs of command workers: one per repository, task, role and program, on a
size-bound tmpfs for each call.

**Where they live.** ``<cache>/mesh-worker-homes/<repository>/<task>/<role>/<program>``: the
repository is named by its folder and 12 hex digits of its git directory's path (as its
worktrees are), so two repositories never share a HOME, whatever their programs are called;
the task by its id. The role is there because a round asks several roles at once (the
critiques, the votes): each call carries its HOME back when it ends, so two calls at once
must not share one. A HOME is kept for the task's later calls (its retries, review cycles,
resumes: an agent CLI's caches and first-run state stay warm) and never shown to another
task, another repository or another program. Per task rather than per repository because
tasks of one repository are written by different people (issue text is untrusted too): a
memory file or hook that one task's worker plants in its HOME must not steer the next task.
The presets run without session persistence, so nothing a task needs is lost with it.
``mesh clean`` removes the HOMEs of every task not in progress (``plan``), and the single
HOME per program that mesh kept before (``<cache>/mesh-worker-homes/<program>``, shared by
every repository).

**A call's own files** lie in the views folder beside the HOMEs (``<cache>/mesh-worker-homes-views``):
the ``passwd`` and ``group`` its sandbox shows (``etc-<pid>-<n>``, and ``etc-unpack-<pid>-<n>``
for the unpacking's), unique to the call (``call_folder``) and removed when it ends, however it
ends; those of a process killed outright stay behind, and ``mesh clean`` removes them once that
process is gone (``plan``).

**How a call sees it.** The worker never writes to that folder: the sandbox shows it
read-only. Its HOME is a tmpfs as large as the folder's content plus ``home_growth_mb``; a
small program of mesh's (``CARRY``, run inside the sandbox before the worker) copies the
folder in, runs the worker, then sends the HOME back as a tar through a FIFO (``Return``),
which a thread of mesh's reads into a spool no larger than the tmpfs. **Mesh's own process
never interprets those bytes**: a worker can write its own tar into the FIFO, and tarfile's
``data`` filter has had holes (on Python before 3.11.13, 3.12.11 and 3.13.4 ``os.path.realpath``
gives up past PATH_MAX while the kernel does not: CVE-2025-4517), so the spool is unpacked by
``UNPACK`` in a bwrap sandbox of its own (``Return._unpack``) whose only writable place is the
folder: no HOME, no repository, no virtualenv, no network, every capability dropped, its
memory and file size capped. There it keeps regular files, folders and relative symlinks whose
paths are plain (no ``..``, at most ``MAX_PATH`` characters and ``MAX_DEPTH`` deep) and that the
``data`` filter admits; a link out is refused, and a hole in the filter reaches no further than
the sandbox's own throwaway root.

**The bound, in every unit.** The folder holds at most ``home_growth_mb`` in 4 KiB disk blocks
(an empty file or folder counts one) and ``home_files`` entries: ``CARRY`` sends only "filled"
(``F``) or "too many entries" (``N``) when the HOME is past either, and ``UNPACK`` counts
again as it goes (the worker may have written the FIFO itself) and empties the folder at the
first entry past a bound; the call then fails as ``home_limit`` naming the bound. A folder
past a bound at the start of a call (an older mesh's) is emptied first (``fit``). Carrying the
HOME in (inside the sandbox) and back (the unpacking is given what is left of the call's
timeout, at least 5 seconds, and killed past it) counts against the call's timeout. So a call grows the HOME by
``home_growth_mb`` and ``home_files`` at most, and the next call's copy costs no more than
that. Only regular files, folders and symlinks of the HOME's own file system are carried (a
FIFO would hang the copy; what the sandbox binds inside HOME, a program, the worktree, a cache
folder under ``~/.cache``, belongs to no HOME).

**The login file** (``AGENT_LOGIN_FILES``) is bound read-only over the tmpfs afresh on each
call, and never carried into the folder. What a worker left where it is bound (a symlink,
a file or folder swapped in) is removed from the folder before the next call (``repair``),
so one call cannot break its program's later ones; if it cannot be removed the call is
refused as ``login_file``, naming the path.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.sandbox.bwrap import bwrap_argv, write_identity
from roles.backends.command import LaunchRefused

__all__ = ["BACK_TARGET", "CARRY", "HomeItem", "KEEP_TARGET", "MAX_PATH", "Return", "UNPACK", "call_folder", "carried",
           "clean", "fit", "home_folder", "plan", "repair", "repository_key"]

# Where the sandbox shows the task's HOME folder, for CARRY to copy from and back to.
KEEP_TARGET = "/mesh/home-keep"
BACK_TARGET = "/mesh/home-back"
# Where the unpacking sandbox shows the folder (the only writable place it has).
UNPACK_TARGET = "/mesh/home"
# The longest path (relative to HOME, and a symlink's target) and the deepest one a HOME keeps.
MAX_PATH = 1024
MAX_DEPTH = 64
_BLOCK = 4096
# When the caller gives no time left: how long an unpacking may take; and the least it is given
# (starting a sandbox on a loaded machine takes a moment; the HOME's bounds keep the work small).
_UNPACK_TIMEOUT_S = 120.0
_UNPACK_FLOOR_S = 5.0
_counter = itertools.count()
_NAME = re.compile(r"[^A-Za-z0-9._-]")
_REPOSITORY_KEY = re.compile(r"^(.+-[0-9a-f]{12}|no-repository)$")
# A call's sandbox files in the views folder (``call_folder``; an older mesh's had no ``-<n>``).
_CALL_FOLDER = re.compile(r"^etc-(?:unpack-)?(?P<pid>[0-9]+)(?:-[0-9]+)?$")

# Run by the sandbox's Python (``-I -S``) before the worker: argv is HOME, the folder's place
# (read-only), the channel back (a FIFO), the login files (JSON, relative to HOME), "--", the
# worker's argv. The worker inherits stdin, stdout and stderr; the exit status is the worker's.
# Back through the channel: "F" when the HOME filled its tmpfs, "N" when it holds more entries
# than the bound, else "K" and the HOME as a tar (paths longer than MAX_PATH left out).
CARRY = r'''
import fcntl, json, os, shutil, stat, subprocess, sys, tarfile, time
home, keep, back, skip = sys.argv[1], sys.argv[2], sys.argv[3], set(json.loads(sys.argv[4]))
max_files, max_path = int(sys.argv[5]), int(sys.argv[6])
class Over(Exception):
    pass
def kept(path, device):
    try:
        info = os.lstat(path)
    except OSError:
        return False
    mode = info.st_mode
    return info.st_dev == device and (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))
def copy_in():
    device = os.stat(keep).st_dev
    def ignore(folder, names):
        rel = os.path.relpath(folder, keep)
        return [n for n in names if not kept(os.path.join(folder, n), device)
                or os.path.normpath(os.path.join(rel, n)) in skip]
    try:
        shutil.copytree(keep, home, symlinks=True, ignore=ignore, dirs_exist_ok=True)
    except (shutil.Error, OSError):
        pass
def carried_paths():
    """(path, name in the archive) of what comes back: the HOME's own entries, not what is bound in it."""
    device = os.stat(home).st_dev
    for base, dirs, files in os.walk(home):
        rel = os.path.relpath(base, home)
        for name in dirs + files:
            path, arc = os.path.join(base, name), os.path.normpath(os.path.join(rel, name))
            if arc not in skip and len(arc) <= max_path and kept(path, device):
                yield path, arc
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in skip
                   and kept(os.path.join(base, d), device) and not os.path.islink(os.path.join(base, d))]
def count():
    for found, _ in enumerate(carried_paths(), 1):
        if found > max_files:
            raise Over
def send(stream):
    with tarfile.open(fileobj=stream, mode="w|") as tar:
        for path, arc in carried_paths():
            try:
                tar.add(path, arcname=arc, recursive=False)
            except OSError:
                pass
copy_in()
try:
    code = subprocess.call(sys.argv[8:])
except OSError as exc:
    # The program cannot start here (its interpreter is nowhere the sandbox shows): say so in
    # words mesh recognises, so the run ends as a configuration mistake, not as a worker's failure.
    sys.stderr.write("mesh-carry: cannot execute %s: %s\n" % (sys.argv[8], exc.strerror or exc))
    code = 127
info = os.statvfs(home)
for _ in range(20):
    try:
        fd = os.open(back, os.O_WRONLY | os.O_NONBLOCK)
        break
    except OSError:
        time.sleep(0.1)
else:
    fd = None
if fd is not None:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    with os.fdopen(fd, "wb") as stream:
        try:
            if info.f_bavail * info.f_frsize < 262144:
                stream.write(b"F")
            else:
                try:
                    count()
                    stream.write(b"K")
                    send(stream)
                except Over:
                    stream.write(b"N")
        except OSError:
            pass
sys.exit(code if code >= 0 else 128 - code)
'''


# Run by the unpacking sandbox's Python (``-I -S``): argv is the folder's place (the sandbox's only
# writable place), the most entries and the most bytes (in 4 KiB blocks) it may hold; stdin is what
# came back. It empties the folder, then extracts member by member what passes tarfile's ``data``
# filter and its own checks (regular files, folders and relative symlinks whose paths are plain,
# at most MAX_PATH long and MAX_DEPTH deep); past a bound it empties the folder again. It prints
# one JSON line: ``{"state": "kept" | "filled" | "files"}``.
UNPACK = r'''
import json, os, shutil, sys, tarfile
dest, max_files, max_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
MAX_PATH, MAX_DEPTH, BLOCK = %d, %d, %d
def empty():
    for name in os.listdir(dest):
        path = os.path.join(dest, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
def plain(name):
    parts = name.split("/")
    return (0 < len(name) <= MAX_PATH and len(parts) <= MAX_DEPTH and "\0" not in name
            and all(part not in ("", ".", "..") for part in parts))
def done(state):
    if state != "kept":
        empty()
    sys.stdout.write(json.dumps({"state": state}) + "\n")
    sys.exit(0)
stream = sys.stdin.buffer
head = stream.read(1)
empty()
if head != b"K":
    done("files" if head == b"N" else "filled")
if not hasattr(tarfile, "data_filter"):
    done("kept")  # a Python before 3.11.4: nothing is unpacked, the HOME is not kept
files = used = 0
try:
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            files += 1
            used += BLOCK * max(1, -(-member.size // BLOCK)) if member.isreg() else BLOCK
            if files > max_files:
                done("files")
            if used > max_bytes:
                done("filled")
            name = member.name.rstrip("/")
            if not (member.isreg() or member.isdir() or member.issym()) or not plain(name):
                continue
            if member.issym() and (os.path.isabs(member.linkname) or len(member.linkname) > MAX_PATH):
                continue
            try:
                tar.extract(member, dest, set_attrs=not member.issym(), filter="data")
            except (tarfile.TarError, OSError, RecursionError):
                continue
except (tarfile.TarError, OSError, EOFError):
    pass
done("kept")
''' % (MAX_PATH, MAX_DEPTH, _BLOCK)


def _unpack_limits(size: int) -> Callable[[], None]:
    """What the unpacking's process may take: memory, and no file larger than the bound."""
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (512 << 20, 512 << 20))
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return apply


def repository_key(common: str | None) -> str:
    """The folder name of a repository's HOMEs: its name and 12 hex of its git directory's path."""
    if common is None:
        return "no-repository"
    path = Path(os.path.realpath(common))
    name = path.parent.name if path.name == ".git" else path.name.removesuffix(".git")
    name = _NAME.sub("_", name).lstrip(".")[:48] or "repo"
    return f"{name}-{hashlib.sha256(os.fsencode(path)).hexdigest()[:12]}"


def call_folder(scratch: Path, kind: str) -> Path:
    """Where one call puts its sandbox's ``/etc`` files in the views folder ``scratch``:
    ``<kind>-<pid>-<n>``, no other call's (of this process or another), for the call to remove
    when it ends; ``mesh clean`` removes one whose process is gone."""
    return scratch / f"{kind}-{os.getpid()}-{next(_counter)}"


def _safe_name(text: str, fallback: str) -> str:
    """``text`` as one folder name: as it is when it is plain, else its plain part and a digest."""
    if not text:
        return fallback
    clean = _NAME.sub("_", text).lstrip(".")[:64]
    if clean == text:
        return clean
    return f"{clean or fallback}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def home_folder(root: Path, common: str | None, task: str | None, role: str | None, program: str) -> Path:
    """The HOME folder of ``program`` answering as ``role`` for ``task`` of the repository whose
    git directory is ``common`` (made, private to the user)."""
    folder = (root / repository_key(common) / _safe_name(task or "", "no-task") / _safe_name(role or "", "no-role")
              / _safe_name(program, "worker"))
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def repair(folder: Path, logins: Sequence[str]) -> None:
    """Remove from ``folder`` whatever stands where a login file is bound or on the way to it
    (a symlink, a file where a folder must be, anything at the file's own place).

    Raises LaunchRefused (``login_file``) naming the path when it cannot be removed."""
    for login in logins:
        path = folder
        parts = Path(login).parts
        for index, part in enumerate(parts):
            path = path / part
            last = index == len(parts) - 1
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                break
            except OSError as exc:
                raise LaunchRefused("login_file", f"cannot check {path}: {exc.strerror or exc}") from None
            if last or not stat.S_ISDIR(mode):
                try:
                    _remove(path)
                except OSError as exc:
                    raise LaunchRefused("login_file", f"{path} stands where the login file ~/{login} is bound and "
                                                      f"cannot be removed ({exc.strerror or exc}): remove it") from None
                break


def _usage(folder: Path, max_files: int) -> tuple[int, int]:
    """(disk bytes in 4 KiB blocks, entries) of ``folder``, counted up to just past ``max_files``
    entries (so a flood costs no more to count than the bound). Symlinks are not followed."""
    total = files = 0
    for base, dirs, names in os.walk(folder):
        for name in names + dirs:
            files += 1
            try:
                total += _blocks(os.lstat(os.path.join(base, name)).st_size)
            except OSError:
                total += _BLOCK
        if files > max_files:
            break
    return total, files


def _blocks(size: int) -> int:
    """What ``size`` bytes take on disk, counted in whole 4 KiB blocks (an empty file or folder: one)."""
    return _BLOCK * max(1, -(-size // _BLOCK))


def fit(folder: Path, growth_bytes: int, max_files: int = 20000) -> int:
    """The size the HOME's tmpfs needs for ``folder``'s content; a folder that grew past
    ``growth_bytes`` or ``max_files`` entries over earlier calls is emptied first (its caches are
    rebuilt)."""
    size, files = _usage(folder, max_files)
    if size > growth_bytes or files > max_files:
        _empty(folder)
        size = 0
    return size


def carried(argv: Sequence[str], home: str, logins: Sequence[str], max_files: int = 20000) -> list[str]:
    """``argv`` run by ``CARRY`` with the sandbox's Python (the running one, shown in every sandbox)."""
    return [sys.executable, "-I", "-S", "-c", CARRY, home, KEEP_TARGET, BACK_TARGET, json.dumps(list(logins)),
            str(max_files), str(MAX_PATH), "--", *argv]


def _empty(folder: Path) -> None:
    """Remove everything in ``folder`` without following a link (``rm`` for what Python's
    recursive removal cannot reach: a chain deeper than its recursion limit)."""
    for entry in list(folder.iterdir()):
        try:
            _remove(entry)
        except (OSError, RecursionError):
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(entry)], stdin=subprocess.DEVNULL,
                           capture_output=True, env={"PATH": "/usr/bin:/bin"})


class Return:
    """The way a call's HOME comes back into its folder: a FIFO only the sandbox sees (at
    ``BACK_TARGET``), read by a thread of mesh's into a spool of at most ``limit`` bytes, then
    unpacked into the folder (``finish``) by ``UNPACK`` in a sandbox of its own that sees
    nothing writable but the folder: mesh's own process never interprets what came back."""

    def __init__(self, scratch: Path, folder: Path, limit: int, *, bwrap: str, max_files: int = 20000) -> None:
        self.folder, self.limit, self.bwrap, self.max_files = folder, limit, bwrap, max_files
        self.scratch = scratch
        self.fifo = scratch / f"home-back-{os.getpid()}-{next(_counter)}"
        os.mkfifo(self.fifo, 0o600)
        self.spool = tempfile.TemporaryFile(dir=scratch)
        self.size, self.over = 0, False
        self.thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> None:
        """Wait for the HOME to come back (just before the call starts)."""
        self.thread.start()

    def _read(self) -> None:
        try:
            with open(self.fifo, "rb") as stream:
                while chunk := stream.read(65536):
                    if self.size + len(chunk) > self.limit:
                        self.over = True
                        return
                    self.spool.write(chunk)
                    self.size += len(chunk)
        except OSError:
            pass

    def finish(self, seconds_left: float | None = None) -> str | None:
        """Put what came back into the folder, within ``seconds_left`` (what is left of the
        call's timeout). None when it was kept (or nothing came: a call killed before it ended
        leaves the folder as it was), else why the folder was emptied: ``"filled"`` (the HOME
        filled its tmpfs, or more came back than the bound), ``"files"`` (more entries than
        ``max_files``), ``"time"`` (the unpacking ran past the time left)."""
        if self.thread.is_alive():
            try:  # nothing came: let the reader's open return
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        if self.thread.ident is not None:
            self.thread.join(5)
        try:
            self.fifo.unlink()
        except OSError:
            pass
        with self.spool:
            if self.over:
                _empty(self.folder)
                return "filled"
            self.spool.flush()
            fd = self.spool.fileno()
            if os.pread(fd, 1, 0) not in (b"F", b"K", b"N"):
                return None
            os.lseek(fd, 0, os.SEEK_SET)  # the unpacking reads the file itself, from its start
            why = self._unpack(seconds_left)
        if why is not None:
            _empty(self.folder)
        return why

    def _unpack(self, seconds_left: float | None) -> str | None:
        """Run ``UNPACK`` on the spool in a sandbox whose only writable place is the folder."""
        etc = write_identity(call_folder(self.scratch, "etc-unpack"), "/")
        code = [sys.executable, "-I", "-S", "-c", UNPACK, UNPACK_TARGET, str(self.max_files), str(self.limit)]
        argv = bwrap_argv(self.bwrap, code, network=False, chdir="/", binds=[(str(self.folder), UNPACK_TARGET)],
                          etc_dir=etc, tmp_bytes=1 << 20)
        limit = max(_UNPACK_FLOOR_S, seconds_left if seconds_left is not None else _UNPACK_TIMEOUT_S)
        try:
            done = subprocess.run(argv, stdin=self.spool, capture_output=True, timeout=limit,
                                  env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True,
                                  preexec_fn=_unpack_limits(self.limit))
        except subprocess.TimeoutExpired:
            return "time"
        except OSError:
            return "filled"
        finally:
            shutil.rmtree(etc, ignore_errors=True)
        try:
            said = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            return "filled"
        state = said.get("state") if isinstance(said, dict) else None
        return None if state == "kept" else "files" if state == "files" else "filled"


@dataclass
class HomeItem:
    """One task's HOMEs of a repository (or an old shared one, or a call's files left in the views
    folder), and what ``mesh clean`` does with it."""

    path: str
    task: str | None
    action: str  # "remove" or "keep"
    why: str


def plan(root: Path, common: str | None, status_of: Callable[[str], str | None],
         gone: Callable[[int], bool]) -> list[HomeItem]:
    """What ``mesh clean`` does with the worker HOMEs of the repository whose git directory is
    ``common``: a task's are removed unless it is in progress; the HOMEs mesh kept per program
    before (shared by every repository) are removed too, and so are the files of calls (in the
    views folder beside ``root``) whose process is ``gone``."""
    items: list[HomeItem] = []
    ours = root / repository_key(common)
    for folder in sorted(ours.iterdir()) if ours.is_dir() and not ours.is_symlink() else []:
        task = folder.name
        if status_of(task) == "in_progress":
            items.append(HomeItem(str(folder), task, "keep", f"task {task} is in progress"))
        else:
            items.append(HomeItem(str(folder), task, "remove", "its workers' HOMEs; the task is not in progress"))
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if not _REPOSITORY_KEY.match(folder.name) and folder.is_dir() and not folder.is_symlink():
            items.append(HomeItem(str(folder), None, "remove",
                                  f"the HOME of {folder.name} that every repository shared (an older mesh's layout)"))
    views = root.parent / (root.name + "-views")
    for folder in sorted(views.iterdir()) if views.is_dir() and not views.is_symlink() else []:
        match = _CALL_FOLDER.match(folder.name)
        if not match or folder.is_symlink() or not folder.is_dir():
            continue
        pid = int(match.group("pid"))
        action, state = ("remove", "is gone") if gone(pid) else ("keep", "still runs")
        items.append(HomeItem(str(folder), None, action, f"a worker call's sandbox files; its process {pid} {state}"))
    return items


def clean(root: Path, common: str | None, status_of: Callable[[str], str | None], gone: Callable[[int], bool], *,
          yes: bool) -> list[HomeItem]:
    """``plan``, carried out when ``yes``: each HOME or call's files to remove is ``removed``, or
    ``kept`` when its task was started meanwhile."""
    items = plan(root, common, status_of, gone)
    for item in items if yes else []:
        if item.action != "remove":
            continue
        if item.task and status_of(item.task) == "in_progress":
            item.action, item.why = "kept", f"task {item.task} was started meanwhile"
            continue
        shutil.rmtree(item.path, ignore_errors=True)
        item.action = "removed"
    return items
