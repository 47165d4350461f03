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

**How a call sees it.** The worker never writes to that folder. Its HOME is a tmpfs as
large as the folder's content plus ``home_growth_mb``; a small program of mesh's
(``CARRY``, run inside the sandbox before the worker) copies the folder in, runs the worker,
then copies the HOME back when the worker is done, or, when the worker filled the tmpfs,
empties the folder and leaves a mark that fails the call as ``home_limit``. So a call grows
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
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from roles.backends.command import LaunchRefused

__all__ = ["CARRY", "FULL_MARK", "HomeItem", "KEEP_TARGET", "carried", "clean", "fit", "home_folder", "plan",
           "repair", "repository_key", "took_all"]

# Where the sandbox shows the task's HOME folder, for CARRY to copy from and back to.
KEEP_TARGET = "/mesh/home-keep"
FULL_MARK = ".mesh-home-full"
_NAME = re.compile(r"[^A-Za-z0-9._-]")
_REPOSITORY_KEY = re.compile(r"^(.+-[0-9a-f]{12}|no-repository)$")

# Run by the sandbox's Python (``-I -S``) before the worker: argv is HOME, the folder's place,
# the login files (JSON, relative to HOME), "--", the worker's argv. The worker inherits stdin,
# stdout and stderr; the exit status is the worker's.
CARRY = r'''
import json, os, shutil, stat, subprocess, sys
home, keep, skip = sys.argv[1], sys.argv[2], set(json.loads(sys.argv[3])) | {".mesh-home-full"}
def copy(src, dst):
    device = os.stat(src).st_dev
    def ignore(folder, names):
        rel = os.path.relpath(folder, src)
        out = []
        for name in names:
            try:
                info = os.lstat(os.path.join(folder, name))
                mode = info.st_mode if info.st_dev == device else 0
            except OSError:
                mode = 0
            kept = stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)
            if not kept or os.path.normpath(os.path.join(rel, name)) in skip:
                out.append(name)
        return out
    try:
        shutil.copytree(src, dst, symlinks=True, ignore=ignore, dirs_exist_ok=True)
    except (shutil.Error, OSError):
        pass
def empty(folder):
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
copy(keep, home)
try:
    code = subprocess.call(sys.argv[5:])
except OSError as exc:
    # The program cannot start here (its interpreter is nowhere the sandbox shows): say so in
    # words mesh recognises, so the run ends as a configuration mistake, not as a worker's failure.
    sys.stderr.write("mesh-carry: cannot execute %s: %s\n" % (sys.argv[5], exc.strerror or exc))
    code = 127
info = os.statvfs(home)
empty(keep)
if info.f_bavail * info.f_frsize < 262144:
    open(os.path.join(keep, ".mesh-home-full"), "w").close()
else:
    copy(home, keep)
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
        for entry in folder.iterdir():
            _remove(entry)
        size = 0
    return size


def carried(argv: Sequence[str], home: str, logins: Sequence[str]) -> list[str]:
    """``argv`` run by ``CARRY`` with the sandbox's Python (the running one, shown in every sandbox)."""
    return [sys.executable, "-I", "-S", "-c", CARRY, home, KEEP_TARGET, json.dumps(list(logins)), "--", *argv]


def took_all(folder: Path) -> bool:
    """True when the last call filled its HOME (``CARRY`` left its mark); the mark is removed."""
    mark = folder / FULL_MARK
    if not os.path.lexists(mark):
        return False
    _remove(mark)
    return True


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
