"""Read-only repository tools a model may call: ``read_file``, ``list_dir`` and ``grep``.

Roles never touch files (ARCHITECTURE section 5), but a reviewer or critic may need to
look at more code than the context pack holds. These tools only read, and only inside
one root (the task's worktree):

- a path is relative to the root; an absolute path, a ``..`` component, or one that
  resolves outside the root (a symlink pointing out, at any depth) is refused;
- ``.git``, ``.beads`` and ``.mesh`` are refused too: they hold the repository's
  configuration (remote URLs can carry credentials) and mesh's own state;
- every output is bounded (lines, entries, characters) and passed through the same
  credential scrubber as everything mesh records.

A refused or failed call is a ``ToolResult`` with ``is_error`` set, never an exception:
the model sees the reason in its ``tool_result`` and can try something else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator.scrub import scrub

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
_PRIVATE_DIRS = frozenset({".git", ".beads", ".mesh"})

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
        if _PRIVATE_DIRS & set(parts):
            raise _Refused(f"{text}: {', '.join(sorted(_PRIVATE_DIRS))} are not readable")
        resolved = (self.root / Path(*parts) if parts else self.root).resolve()
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise _Refused(f"{text}: leads outside the repository (symlink); refused")
        display = resolved.relative_to(self.root).as_posix() if resolved != self.root else "."
        if _PRIVATE_DIRS & set(PurePosixPath(display).parts):
            raise _Refused(f"{text}: {', '.join(sorted(_PRIVATE_DIRS))} are not readable")
        return resolved, display

    # ------------------------------------------------------------------ tools

    def _read_file(self, arguments: Mapping[str, Any]) -> str:
        path, display = self.resolve(arguments.get("path"))
        if not path.is_file():
            raise _Refused(f"{display}: no such file" if not path.exists() else f"{display}: not a file")
        start = _positive_int(arguments.get("start_line"), "start_line", default=1)
        end = _positive_int(arguments.get("end_line"), "end_line", default=None)
        with path.open("rb") as handle:
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
        if not path.is_dir():
            raise _Refused(f"{display}: no such directory" if not path.exists() else f"{display}: not a directory")
        entries = []
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.name in _PRIVATE_DIRS:
                continue
            if entry.is_symlink():
                entries.append(f"{entry.name}@")
            elif entry.is_dir():
                entries.append(f"{entry.name}/")
            else:
                entries.append(entry.name)
        shown = entries[:MAX_ENTRIES]
        more = f"\n[{len(entries) - len(shown)} more entries not shown]" if len(entries) > len(shown) else ""
        return f"{display}/ ({len(entries)} entries)\n" + "\n".join(shown) + more

    def _grep(self, arguments: Mapping[str, Any]) -> str:
        pattern = arguments.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise _Refused("pattern must be a non-empty string")
        if len(pattern) > MAX_PATTERN_CHARS or "\n" in pattern:
            raise _Refused(f"pattern must be one line of at most {MAX_PATTERN_CHARS} characters")
        path, display = self.resolve(arguments.get("path"))
        if not path.exists():
            raise _Refused(f"{display}: no such file or directory")
        grep = shutil.which("grep")
        if grep is None:
            raise _Refused("grep is not available on this machine")
        argv = [grep, "-rnIH", "-E", "--no-messages", "--max-count=50", "--color=never"]
        argv += [f"--exclude-dir={name}" for name in sorted(_PRIVATE_DIRS)]
        if arguments.get("ignore_case") is True:
            argv.append("-i")
        # -e keeps a pattern that starts with '-' a pattern; '--' does the same for the path.
        argv += ["-e", pattern, "--", display]
        try:
            # No shell, fixed cwd, a hard timeout: a pathological pattern costs at most that.
            done = subprocess.run(argv, cwd=self.root, capture_output=True, timeout=GREP_TIMEOUT_S,
                                  env={"LC_ALL": "C.UTF-8", "PATH": os.environ.get("PATH", "")})
        except subprocess.TimeoutExpired:
            raise _Refused(f"grep took longer than {GREP_TIMEOUT_S:.0f}s; narrow the pattern or the path") from None
        if done.returncode == 1:
            return f"no match for {pattern!r} in {display}"
        if done.returncode != 0:
            message = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
            raise _Refused(f"grep failed: {message[-1] if message else 'exit ' + str(done.returncode)}")
        lines = done.stdout.decode("utf-8", errors="replace").splitlines()
        shown = [_clip(line.removeprefix("./")) for line in lines[:MAX_MATCHES]]
        more = f"\n[{len(lines) - len(shown)} more matches not shown]" if len(lines) > len(shown) else ""
        return "\n".join(shown) + more


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
