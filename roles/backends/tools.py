"""Read-only repository tools a model may call: ``read_file``, ``list_dir`` and ``grep``.

Roles never touch files (ARCHITECTURE section 5), but a reviewer or critic may need to
look at more code than the context pack holds. These tools only read, and only inside
one root (the task's worktree):

- a path is relative to the root; an absolute path, a ``..`` component, or one that
  resolves outside the root (a symlink pointing out, at any depth) is refused;
- ``.git``, ``.beads`` and ``.mesh`` are refused too, at any depth and whether a directory
  or a file (a worktree's ``.git`` file names the repository's real location): they hold the
  repository's configuration (remote URLs can carry credentials) and mesh's own state, and
  are never listed or searched;
- only regular files are read or searched, and only they, folders and symlinks that stay
  inside are listed: a FIFO (which would block a reader), a device, a socket, or a file
  with more than one hard link (one may be a link to a file outside the repository) is
  refused by ``read_file``, left out of ``list_dir`` and skipped by ``grep``. A file is opened without following a final symlink and without blocking, then
  checked on the open descriptor (``fstat``, and where it really lives through
  ``/proc/self/fd``), so that swapping it between the check and the read changes nothing;
  ``grep`` searches those open descriptors, never a path;
- every output is bounded (lines, entries, characters) and passed through the same
  credential scrubber as everything mesh records.

A refused or failed call is a ``ToolResult`` with ``is_error`` set, never an exception:
the model sees the reason in its ``tool_result`` and can try something else.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from redact import scrub

__all__ = ["TOOL_DEFINITIONS", "TOOL_NAMES", "ToolResult", "RepoTools"]

TOOL_NAMES = ("read_file", "list_dir", "grep")

MAX_OUTPUT_CHARS = 16_000  # ~4k tokens per tool result
MAX_FILE_BYTES = 2_000_000
MAX_LINES = 400
MAX_ENTRIES = 500
MAX_MATCHES = 200
MAX_MATCH_LINE_CHARS = 300
MAX_PATTERN_CHARS = 500
GREP_TIMEOUT_S = 10.0
MAX_GREP_FILES = 20_000
_GREP_BATCH = 128  # descriptors handed to one grep process
_PRIVATE_DIRS = frozenset({".git", ".beads", ".mesh"})
_OPEN_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

TOOL_DEFINITIONS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": (
            "Read a text file of the repository, with line numbers. Paths are relative to the "
            f"repository root. At most {MAX_LINES} lines per call: use start_line/end_line for more."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the repository root."},
                "start_line": {"type": "integer", "description": "First line to show (1-based, default 1)."},
                "end_line": {"type": "integer", "description": "Last line to show (inclusive)."},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    {
        "name": "list_dir",
        "description": "List a directory of the repository (directories end with '/'). Default: the root.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the repository root."},
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "grep",
        "description": (
            "Search the repository's text files for an extended regular expression (grep -E); "
            f"prints path:line:text, at most {MAX_MATCHES} matches."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Extended regular expression."},
                "path": {"type": "string", "description": "File or directory to search (default: the root)."},
                "ignore_case": {"type": "boolean", "description": "Match case-insensitively."},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    },
]


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gives back: text for the model, and whether it is an error."""

    content: str
    is_error: bool = False


class _Refused(Exception):
    """A call the tools will not make; its message goes back to the model."""


class RepoTools:
    """The read-only tools, confined to ``root``. Stateless after construction: thread-safe."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    def run(self, name: str, arguments: Any) -> ToolResult:
        """Run tool ``name`` with the model's ``arguments``; never raises."""
        handler = {"read_file": self._read_file, "list_dir": self._list_dir, "grep": self._grep}.get(name)
        if handler is None:
            return ToolResult(f"unknown tool {name!r}; available: {', '.join(TOOL_NAMES)}", is_error=True)
        if not isinstance(arguments, Mapping):
            return ToolResult("tool input must be a JSON object", is_error=True)
        try:
            text = handler(arguments)
        except _Refused as exc:
            return ToolResult(str(exc), is_error=True)
        except OSError as exc:
            return ToolResult(f"cannot read: {exc.strerror or exc}", is_error=True)
        return ToolResult(_bound(scrub(text)))

    # ------------------------------------------------------------------ paths

    def resolve(self, path: Any) -> tuple[Path, str]:
        """The real path of ``path`` inside the root and its display form; refuses escapes."""
        if path is None:
            path = "."
        if not isinstance(path, str):
            raise _Refused("path must be a string")
        text = path.strip() or "."
        if "\x00" in text:
            raise _Refused("path must not contain NUL")
        if text.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", text):
            raise _Refused(f"{text}: absolute paths are refused; give a path relative to the repository root")
        parts = PurePosixPath(text.replace("\\", "/")).parts
        if ".." in parts:
            raise _Refused(f"{text}: '..' is refused; paths stay inside the repository")
        if any(_private(part) for part in parts):
            raise _Refused(f"{text}: {', '.join(sorted(_PRIVATE_DIRS))} are not readable")
        resolved = (self.root / Path(*parts) if parts else self.root).resolve()
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise _Refused(f"{text}: leads outside the repository (symlink); refused")
        display = resolved.relative_to(self.root).as_posix() if resolved != self.root else "."
        if any(_private(part) for part in PurePosixPath(display).parts):
            raise _Refused(f"{text}: {', '.join(sorted(_PRIVATE_DIRS))} are not readable")
        return resolved, display

    def _inside(self, real: str | Path) -> bool:
        """Whether a real path lies in the root and outside its private folders."""
        where = Path(real)
        if where != self.root and not where.is_relative_to(self.root):
            return False
        return not any(_private(part) for part in where.relative_to(self.root).parts)

    def _check_descriptor(self, fd: int, display: str) -> None:
        """Refuse an open file or folder that does not really live inside the root (a path
        component swapped for a symlink after it was checked)."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return  # no /proc here: the lstat and fstat checks stand alone
        if not self._inside(real):
            raise _Refused(f"{display}: leads outside the repository; refused")

    def _open_file(self, path: Path, display: str) -> int:
        """A descriptor open on ``path``, which must be a regular file with one link.

        Checked before opening (so a FIFO or a device is never opened), opened without
        following a final symlink and without blocking, and checked again on the descriptor:
        the file read is the file checked.
        """
        try:
            before = os.lstat(path)
        except FileNotFoundError:
            raise _Refused(f"{display}: no such file") from None
        _require_regular(before, display)
        fd = os.open(path, _OPEN_FILE)
        try:
            now = os.fstat(fd)
            _require_regular(now, display)
            if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
                raise _Refused(f"{display}: changed while being opened; refused")
            self._check_descriptor(fd, display)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _listed_name(self, entry: os.DirEntry, folder: Path) -> str | None:
        """How a folder entry is listed (``name``, ``name/``, ``name@``), or None when it is
        not shown: anything but a folder, a regular file with one link, or a symlink to one
        of those inside the repository."""
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            return f"{entry.name}/"
        if stat.S_ISREG(info.st_mode):
            return entry.name if info.st_nlink == 1 else None
        if not stat.S_ISLNK(info.st_mode):
            return None
        target = os.path.realpath(folder / entry.name)
        if not self._inside(target):
            return None
        try:
            info = os.stat(target)
        except OSError:
            return None
        if stat.S_ISDIR(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink == 1):
            return f"{entry.name}@"
        return None

    def _walk(self, top: Path, display: str) -> tuple[list[tuple[Path, str]], int, bool]:
        """The regular, singly linked files under ``top`` (sorted, depth first), how many
        entries were skipped, and whether the walk stopped at MAX_GREP_FILES. Private folders
        and files are left out; symlinks are not followed (as ``grep -r`` does)."""
        files: list[tuple[Path, str]] = []
        skipped = 0
        stack = [(top, display)]
        while stack:
            folder, shown = stack.pop()
            try:
                with os.scandir(folder) as found:
                    entries = sorted(found, key=lambda e: e.name)
            except OSError:
                skipped += 1
                continue
            folders = []
            for entry in entries:
                if _private(entry.name):
                    continue
                child = entry.name if shown == "." else f"{shown}/{entry.name}"
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    skipped += 1
                    continue
                if stat.S_ISDIR(info.st_mode):
                    folders.append((folder / entry.name, child))
                elif stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                    files.append((folder / entry.name, child))
                    if len(files) >= MAX_GREP_FILES:
                        return files, skipped, True
                else:
                    skipped += 1
            stack.extend(reversed(folders))
        return files, skipped, False

    # ------------------------------------------------------------------ tools

    def _read_file(self, arguments: Mapping[str, Any]) -> str:
        path, display = self.resolve(arguments.get("path"))
        start = _positive_int(arguments.get("start_line"), "start_line", default=1)
        end = _positive_int(arguments.get("end_line"), "end_line", default=None)
        with os.fdopen(self._open_file(path, display), "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if b"\x00" in data[:8192]:
            raise _Refused(f"{display}: binary file, not shown")
        cut = len(data) > MAX_FILE_BYTES
        lines = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace").splitlines()
        total = len(lines)
        if not total:
            return f"{display} (empty file)"
        if start > total:
            raise _Refused(f"{display}: start_line {start} is past the end ({total} lines)")
        last = min(total, end if end is not None else total, start + MAX_LINES - 1)
        if last < start:
            raise _Refused("end_line must not be before start_line")
        width = len(str(last))
        body = "\n".join(f"{n:>{width}}| {lines[n - 1]}" for n in range(start, last + 1))
        header = f"{display} (lines {start}-{last} of {total}{', file cut at 2 MB' if cut else ''})"
        more = f"\n[more: read_file with start_line={last + 1}]" if last < total else ""
        return f"{header}\n{body}{more}"

    def _list_dir(self, arguments: Mapping[str, Any]) -> str:
        path, display = self.resolve(arguments.get("path"))
        try:
            fd = os.open(path, _OPEN_DIR)
        except FileNotFoundError:
            raise _Refused(f"{display}: no such directory") from None
        except NotADirectoryError:
            raise _Refused(f"{display}: not a directory") from None
        try:
            self._check_descriptor(fd, display)
            with os.scandir(fd) as found:
                entries = sorted(found, key=lambda e: e.name)
            names = [self._listed_name(entry, path) for entry in entries if not _private(entry.name)]
        finally:
            os.close(fd)
        shown = [name for name in names if name is not None]
        hidden = len(names) - len(shown)
        listed = shown[:MAX_ENTRIES]
        more = f"\n[{len(shown) - len(listed)} more entries not shown]" if len(shown) > len(listed) else ""
        if hidden:
            more += (f"\n[{hidden} entries not shown: not regular files, hard-linked files or symlinks"
                     " leaving the repository]")
        return f"{display}/ ({len(shown)} entries)\n" + "\n".join(listed) + more

    def _grep(self, arguments: Mapping[str, Any]) -> str:
        pattern = arguments.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise _Refused("pattern must be a non-empty string")
        if len(pattern) > MAX_PATTERN_CHARS or "\n" in pattern:
            raise _Refused(f"pattern must be one line of at most {MAX_PATTERN_CHARS} characters")
        path, display = self.resolve(arguments.get("path"))
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise _Refused(f"{display}: no such file or directory") from None
        grep = shutil.which("grep")
        if grep is None:
            raise _Refused("grep is not available on this machine")
        if not os.path.isdir("/proc/self/fd"):
            raise _Refused("grep needs /proc on this machine")
        if stat.S_ISDIR(info.st_mode):
            files, _, stopped = self._walk(path, display)
        else:
            _require_regular(info, display)
            files, stopped = [(path, display)], False
        argv = [grep, "-nIH", "-E", "--no-messages", "--max-count=50", "--color=never", "-D", "skip"]
        if arguments.get("ignore_case") is True:
            argv.append("-i")
        # -e keeps a pattern that starts with '-' a pattern; '--' ends the options.
        argv += ["-e", pattern, "--"]
        deadline = time.monotonic() + GREP_TIMEOUT_S
        shown: list[str] = []
        total = 0
        for first in range(0, len(files), _GREP_BATCH):
            for line in self._grep_batch(argv, files[first : first + _GREP_BATCH], deadline):
                total += 1
                if len(shown) < MAX_MATCHES:
                    shown.append(_clip(line))
        if not total:
            return f"no match for {pattern!r} in {display}"
        more = f"\n[{total - len(shown)} more matches not shown]" if total > len(shown) else ""
        if stopped:
            more += f"\n[search stopped after {MAX_GREP_FILES} files; narrow the path]"
        return "\n".join(shown) + more

    def _grep_batch(self, argv: list[str], batch: list[tuple[Path, str]], deadline: float) -> list[str]:
        """Matching lines (``path:line:text``) of one batch of files, searched through open
        descriptors: grep reads exactly the files that passed the checks."""
        opened: dict[int, str] = {}
        try:
            for path, display in batch:
                try:
                    opened[self._open_file(path, display)] = display
                except (_Refused, OSError):
                    continue  # changed since the walk: skipped like any other special file
            if not opened:
                return []
            names = {f"/proc/self/fd/{fd}": display for fd, display in opened.items()}
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(argv, GREP_TIMEOUT_S)
            # No shell, fixed cwd, a hard timeout: a pathological pattern costs at most that.
            done = subprocess.run(argv + list(names), cwd=self.root, capture_output=True, timeout=left,
                                  pass_fds=tuple(opened), env={"LC_ALL": "C.UTF-8", "PATH": os.environ.get("PATH", "")})
        except subprocess.TimeoutExpired:
            raise _Refused(f"grep took longer than {GREP_TIMEOUT_S:.0f}s; narrow the pattern or the path") from None
        finally:
            for fd in opened:
                os.close(fd)
        if done.returncode not in (0, 1) and not done.stdout:
            message = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
            raise _Refused(f"grep failed: {message[-1] if message else 'exit ' + str(done.returncode)}")
        out = []
        for line in done.stdout.decode("utf-8", errors="replace").splitlines():
            name, _, rest = line.partition(":")
            if name in names:
                out.append(f"{names[name]}:{rest}")
        return out


def _private(name: str) -> bool:
    # Case-folded: on a case-insensitive file system ".GIT" is the same folder, and git
    # treats it as such.
    return name.casefold() in _PRIVATE_DIRS


def _require_regular(info: os.stat_result, display: str) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise _Refused(f"{display}: not a file")
    if not stat.S_ISREG(info.st_mode):
        raise _Refused(f"{display}: not a regular file (a FIFO, device, socket or symlink); refused")
    if info.st_nlink > 1:
        raise _Refused(f"{display}: has {info.st_nlink} hard links (one may be outside the repository); refused")


def _positive_int(value: Any, name: str, *, default: int | None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Refused(f"{name} must be a positive integer")
    return value


def _clip(line: str) -> str:
    return line if len(line) <= MAX_MATCH_LINE_CHARS else line[:MAX_MATCH_LINE_CHARS] + " [...]"


def _bound(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    return text[:MAX_OUTPUT_CHARS] + f"\n[output cut at {MAX_OUTPUT_CHARS} characters]"
