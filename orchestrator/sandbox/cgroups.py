"""Resource caps for a whole sandboxed process tree, with Linux control groups.

``setrlimit`` limits hold per process: six children of a test suite can each take the
address-space limit, and a fork bomb is not bounded at all. A control group caps the tree:
its memory (tmpfs pages the tree writes into its ``/tmp`` included, since tmpfs pages are
charged to the group that wrote them) and its number of processes. One group is made per
sandboxed command, the command's first process joins it before it executes bwrap (so
everything the sandbox starts is inside), and the group is emptied and removed afterwards.

Two layouts are supported:

- cgroup v2 (the unified hierarchy at ``/sys/fs/cgroup``): groups are made under the
  group mesh runs in, when that group is writable (root, or a systemd-delegated user
  slice) and its ``memory`` and ``pids`` controllers can be enabled for children;
- cgroup v1 (separate ``memory`` and ``pids`` hierarchies): groups are made at the top of
  each hierarchy when it is writable (in practice: root).

Where neither holds, ``probe()`` says why; the caller falls back to per-process limits and
preflight reports which limits hold.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TreeGroup", "TreeUsage", "probe", "make_group", "sweep"]

_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()
# A group of mesh's is named ``mesh-<pid>-<n>-<ns>``: ``sweep`` removes those of processes gone.
_NAME = re.compile(r"^mesh-(\d+)-\d+-\d+$")
# A group younger than this is never swept: its maker may live in another pid namespace (a
# container sharing the hierarchy) and be about to join it.
_SWEEP_MIN_AGE_S = 120.0


@dataclass
class TreeUsage:
    """Which caps of a group were hit while it ran."""

    memory: bool = False
    processes: bool = False


@dataclass
class TreeGroup:
    """One control group (v2: one folder; v1: one folder per controller) for one process tree."""

    folders: list[Path]
    version: int
    memory_bytes: int
    max_processes: int
    _start_events: dict[str, int] = field(default_factory=dict)

    def join(self) -> None:
        """Move the calling process into the group (meant for a child before exec: no allocation-heavy code)."""
        pid = str(os.getpid()).encode()
        for folder in self.folders:
            fd = os.open(folder / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def usage(self) -> TreeUsage:
        """Which caps were reached (read from the kernel's counters, not from the tree's output)."""
        if self.version == 2:
            events = _read_keyed(self.folders[0] / "memory.events")
            pids = _read_keyed(self.folders[0] / "pids.events")
            return TreeUsage(memory=events.get("max", 0) > 0 or events.get("oom_kill", 0) > 0,
                             processes=pids.get("max", 0) > 0)
        memory = next(f for f in self.folders if f.parent.name == "memory")
        pids = next(f for f in self.folders if f.parent.name == "pids")
        failcnt = _read_int(memory / "memory.failcnt")
        return TreeUsage(memory=failcnt > 0 or _read_keyed(memory / "memory.oom_control").get("oom_kill", 0) > 0,
                         processes=_read_keyed(pids / "pids.events").get("max", 0) > 0)

    def kill_and_remove(self) -> None:
        """SIGKILL whatever is still in the group, then remove it (a few tries while the kernel reaps)."""
        deadline = time.monotonic() + 10.0
        for folder in self.folders:
            while folder.exists():
                for pid in _procs(folder):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    folder.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _read_keyed(path: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return values
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            values[parts[0]] = int(parts[1])
    return values


def _procs(folder: Path) -> list[int]:
    try:
        return [int(line) for line in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _v2_parent() -> Path | None:
    """The folder under which mesh may make v2 groups (its own group's, or a leaf beside it)."""
    if not (_ROOT / "cgroup.controllers").is_file():
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    own = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    if own is None:
        return None
    return _ROOT / own.lstrip("/")


def _v2_ready(parent: Path) -> str | None:
    """None when groups can be made under ``parent`` with memory and pids, else why not.

    cgroup v2 lets a group hand controllers to its children only while it has no processes
    of its own (the root group excepted), and mesh runs in ``parent``: the controllers must
    already be enabled there (the root group, where mesh enables them itself) or groups
    cannot be capped.
    """
    if not os.access(parent, os.W_OK):
        return f"{parent} is not writable"
    enabled = (parent / "cgroup.subtree_control").read_text().split()
    missing = [name for name in ("memory", "pids") if name not in enabled]
    if not missing:
        return None
    if parent == _ROOT:
        try:
            _write(parent / "cgroup.subtree_control", " ".join(f"+{name}" for name in missing))
            return None
        except OSError as exc:
            return f"cannot enable {'/'.join(missing)} in {parent}: {exc.strerror or exc}"
    return (f"mesh's group {parent} has processes, so it cannot give the {'/'.join(missing)} controller to "
            f"child groups; run mesh in a delegated scope (systemd-run --user --scope -p Delegate=yes mesh ...)")


def _v1_folders() -> list[Path] | str:
    folders = [_ROOT / "memory", _ROOT / "pids"]
    for folder in folders:
        if not (folder / "cgroup.procs").is_file():
            return f"no cgroup v1 {folder.name} hierarchy at {folder}"
        if not os.access(folder, os.W_OK):
            return f"{folder} is not writable (cgroup v1 needs root)"
    return folders


_probed: tuple[str, object] | None = None


def probe() -> str | None:
    """None when whole-tree caps can be made here, else one line saying why not (cached)."""
    global _probed
    if _probed is None:
        parent = _v2_parent()
        if parent is not None:
            problem = _v2_ready(parent)
            _probed = ("v2", parent) if problem is None else ("none", f"cgroup v2: {problem}")
        else:
            folders = _v1_folders()
            _probed = ("v1", folders) if isinstance(folders, list) else ("none", folders)
        if _probed[0] != "none":
            try:
                make_group(64 << 20, 8).kill_and_remove()
            except OSError as exc:
                _probed = ("none", f"cannot make a control group: {exc.strerror or exc}")
            else:
                sweep()
    return _probed[1] if _probed[0] == "none" else None  # type: ignore[return-value]


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def make_group(memory_bytes: int, max_processes: int) -> TreeGroup:
    """A new group capped at ``memory_bytes`` (no swap beyond it) and ``max_processes``.

    Raises OSError when it cannot be made; call ``probe()`` first to know whether it can.
    """
    if _probed is None or _probed[0] == "none":
        if _probed is None:
            probe()
        if _probed is None or _probed[0] == "none":
            raise OSError(f"no usable control groups: {_probed[1] if _probed else 'not probed'}")
    name = f"mesh-{os.getpid()}-{next(_counter)}-{time.monotonic_ns() % 1_000_000}"
    if _probed[0] == "v2":
        parent: Path = _probed[1]  # type: ignore[assignment]
        folder = parent / name
        folder.mkdir()
        _write(folder / "memory.max", str(memory_bytes))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
        _write(folder / "pids.max", str(max_processes))
        return TreeGroup([folder], 2, memory_bytes, max_processes)
    memory_root, pids_root = _probed[1]  # type: ignore[misc]
    memory, pids = memory_root / name, pids_root / name
    memory.mkdir()
    try:
        pids.mkdir()
        _write(memory / "memory.limit_in_bytes", str(memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():
            try:
                _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))
            except OSError:
                pass  # swap accounting off: memory.limit_in_bytes alone holds
        _write(pids / "pids.max", str(max_processes))
    except OSError:
        TreeGroup([memory, pids], 1, memory_bytes, max_processes).kill_and_remove()
        raise
    return TreeGroup([memory, pids], 1, memory_bytes, max_processes)


def _parents() -> list[Path]:
    if _probed is None or _probed[0] == "none":
        return []
    return [_probed[1]] if _probed[0] == "v2" else list(_probed[1])  # type: ignore[list-item]


def alive(pid: int) -> bool:
    """True while a process ``pid`` exists (one of another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(*, min_age_s: float = _SWEEP_MIN_AGE_S) -> list[str]:
    """Remove the groups that mesh processes no longer running left behind (a run killed
    outright never removes the group of the call it was in): empty ones whose maker is gone and
    that are older than ``min_age_s``. Returns their paths. Run once per process, on the first
    ``probe``. A group with a process in it is left alone: its process may belong to a pid
    namespace this one cannot see."""
    removed: list[str] = []
    now = time.time()
    for parent in _parents():
        try:
            entries = list(parent.iterdir())
        except OSError:
            continue
        for folder in entries:
            found = _NAME.match(folder.name)
            if found is None or int(found.group(1)) == os.getpid() or alive(int(found.group(1))):
                continue
            try:
                if now - folder.stat().st_mtime < min_age_s or _procs(folder):
                    continue
                folder.rmdir()
            except OSError:
                continue
            removed.append(str(folder))
    return removed
