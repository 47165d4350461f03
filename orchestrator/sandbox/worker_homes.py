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

**How a call sees it.** The worker never writes to that folder: the sandbox shows it
read-only. Its HOME is a tmpfs as large as the folder's content plus ``home_growth_mb``; a
small program of mesh's (``CARRY``, run inside the sandbox before the worker) copies the
folder in, runs the worker, then sends the HOME back as a tar through a FIFO (``Return``),
which mesh reads into a spool no larger than the tmpfs and unpacks into the folder with
tarfile's ``data`` filter (no absolute path, no ``..``, no link leaving the folder, no
device). When the worker filled the tmpfs it sends only that: the folder is emptied and the
call fails as ``home_limit``. A worker that writes into the FIFO itself can only spoil its
own HOME, within the same bound. So a call grows
the HOME by ``home_growth_mb`` at most, a folder larger than that at the start of a call
is emptied first (the bound in all), and nothing a worker writes reaches the host's disk
beyond it. Only regular files, folders and symlinks of the HOME's own file system are
carried (a FIFO would hang the copy; what the sandbox binds inside HOME, a program, the
worktree, a cache folder under ``~/.cache``, belongs to no HOME).

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
import shutil
import stat
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from roles.backends.command import LaunchRefused

__all__ = ["BACK_TARGET", "CARRY", "HomeItem", "KEEP_TARGET", "Return", "carried", "clean", "fit", "home_folder",
           "plan", "repair", "repository_key"]

# Where the sandbox shows the task's HOME folder, for CARRY to copy from and back to.
KEEP_TARGET = "/mesh/home-keep"
BACK_TARGET = "/mesh/home-back"
_counter = itertools.count()
_NAME = re.compile(r"[^A-Za-z0-9._-]")
_REPOSITORY_KEY = re.compile(r"^(.+-[0-9a-f]{12}|no-repository)$")

# Run by the sandbox's Python (``-I -S``) before the worker: argv is HOME, the folder's place
# (read-only), the channel back (a FIFO), the login files (JSON, relative to HOME), "--", the
# worker's argv. The worker inherits stdin, stdout and stderr; the exit status is the worker's.
# Back through the channel: "F" when the HOME filled its tmpfs, else "K" and the HOME as a tar.
CARRY = r'''
import fcntl, json, os, shutil, stat, subprocess, sys, tarfile, time
home, keep, back, skip = sys.argv[1], sys.argv[2], sys.argv[3], set(json.loads(sys.argv[4]))
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
def send(stream):
    device = os.stat(home).st_dev
    with tarfile.open(fileobj=stream, mode="w|") as tar:
        for base, dirs, files in os.walk(home):
            rel = os.path.relpath(base, home)
            for name in dirs + files:
                path, arc = os.path.join(base, name), os.path.normpath(os.path.join(rel, name))
                if arc not in skip and kept(path, device):
                    try:
                        tar.add(path, arcname=arc, recursive=False)
                    except OSError:
                        pass
            dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in skip
                       and kept(os.path.join(base, d), device) and not os.path.islink(os.path.join(base, d))]
copy_in()
try:
    code = subprocess.call(sys.argv[6:])
except OSError as exc:
    # The program cannot start here (its interpreter is nowhere the sandbox shows): say so in
    # words mesh recognises, so the run ends as a configuration mistake, not as a worker's failure.
    sys.stderr.write("mesh-carry: cannot execute %s: %s\n" % (sys.argv[6], exc.strerror or exc))
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
                stream.write(b"K")
                send(stream)
        except OSError:
            pass
sys.exit(code if code >= 0 else 128 - code)
'''


def repository_key(common: str | None) -> str:
    """The folder name of a repository's HOMEs: its name and 12 hex of its git directory's path."""
    if common is None:
        return "no-repository"
    path = Path(os.path.realpath(common))
    name = path.parent.name if path.name == ".git" else path.name.removesuffix(".git")
    name = _NAME.sub("_", name).lstrip(".")[:48] or "repo"
    return f"{name}-{hashlib.sha256(os.fsencode(path)).hexdigest()[:12]}"


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


def _bytes(folder: Path) -> int:
    total = 0
    for base, dirs, files in os.walk(folder):
        for name in files + dirs:
            try:
                total += os.lstat(os.path.join(base, name)).st_size + 4096
            except OSError:
                continue
    return total


def fit(folder: Path, growth_bytes: int) -> int:
    """The size the HOME's tmpfs needs for ``folder``'s content; a folder that grew past
    ``growth_bytes`` over earlier calls is emptied first (its caches are rebuilt)."""
    size = _bytes(folder)
    if size > growth_bytes:
        _empty(folder)
        size = 0
    return size


def carried(argv: Sequence[str], home: str, logins: Sequence[str]) -> list[str]:
    """``argv`` run by ``CARRY`` with the sandbox's Python (the running one, shown in every sandbox)."""
    return [sys.executable, "-I", "-S", "-c", CARRY, home, KEEP_TARGET, BACK_TARGET, json.dumps(list(logins)), "--",
            *argv]


def _empty(folder: Path) -> None:
    for entry in folder.iterdir():
        _remove(entry)


class Return:
    """The way a call's HOME comes back into its folder: a FIFO only the sandbox sees (at
    ``BACK_TARGET``), read by a thread of mesh's into a spool of at most ``limit`` bytes, then
    unpacked into the folder (``finish``) with tarfile's ``data`` filter, member by member."""

    def __init__(self, scratch: Path, folder: Path, limit: int) -> None:
        self.folder, self.limit = folder, limit
        self.fifo = scratch / f"home-back-{os.getpid()}-{next(_counter)}"
        os.mkfifo(self.fifo, 0o600)
        self.spool = tempfile.SpooledTemporaryFile(max_size=1 << 20, dir=scratch)
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

    def finish(self) -> bool:
        """Put what came back into the folder; True when the HOME filled its tmpfs (the folder
        is then emptied). A call killed before it ended leaves the folder as it was."""
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
            self.spool.seek(0)
            head = self.spool.read(1)
            if self.over or head == b"F":
                _empty(self.folder)
                return True
            if head == b"K":
                _empty(self.folder)
                self._unpack()
        return False

    def _unpack(self) -> None:
        if not hasattr(tarfile, "data_filter"):
            return  # Python before 3.11.4: no safe way to unpack it, so the HOME is not kept
        try:
            with tarfile.open(fileobj=self.spool, mode="r|") as tar:
                for member in tar:
                    try:
                        tar.extract(member, self.folder, filter="data")
                    except (tarfile.TarError, OSError):
                        continue
        except (tarfile.TarError, OSError):
            pass


@dataclass
class HomeItem:
    """One task's HOMEs of a repository (or an old shared one), and what ``mesh clean`` does with it."""

    path: str
    task: str | None
    action: str  # "remove" or "keep"
    why: str


def plan(root: Path, common: str | None, status_of: Callable[[str], str | None]) -> list[HomeItem]:
    """What ``mesh clean`` does with the worker HOMEs of the repository whose git directory is
    ``common``: a task's are removed unless it is in progress; the HOMEs mesh kept per program
    before (shared by every repository) are removed too."""
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
    return items


def clean(root: Path, common: str | None, status_of: Callable[[str], str | None], *, yes: bool) -> list[HomeItem]:
    """``plan``, carried out when ``yes``: each HOME to remove is ``removed``, or ``kept`` when
    its task was started meanwhile."""
    items = plan(root, common, status_of)
    for item in items if yes else []:
        if item.action != "remove":
            continue
        if item.task and status_of(item.task) == "in_progress":
            item.action, item.why = "kept", f"task {item.task} was started meanwhile"
            continue
        shutil.rmtree(item.path, ignore_errors=True)
        item.action = "removed"
    return items
