"""The patch check: a model's diff is untrusted input, refused before ``git apply`` when unsafe.

Parses plain and git-style unified diffs and refuses, with a typed reason:
``empty``, ``malformed``, ``too_large``, ``too_many_files``,
``path_outside_worktree``, ``git_dir``, ``beads_dir``, ``mesh_dir``,
``ci_workflow``, ``symlink``, ``submodule``, ``binary``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

__all__ = ["PatchRefused", "PatchSummary", "check_patch", "extract_touched_files", "REASONS"]

REASONS = ("empty", "malformed", "too_large", "too_many_files", "path_outside_worktree", "git_dir", "beads_dir",
           "mesh_dir", "ci_workflow", "symlink", "submodule", "binary")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_MODE = re.compile(r"^(?:new file mode|deleted file mode|old mode|new mode) (\d+)\s*$")
_INDEX = re.compile(r"^index [0-9a-fA-F]+\.\.[0-9a-fA-F]+(?: (\d+))?\s*$")
_CI_PREFIXES = (".github/workflows/", ".circleci/", ".ci/", ".gitlab/ci/", ".buildkite/", ".woodpecker/")
_CI_FILES = (".gitlab-ci.yml", ".gitlab-ci.yaml", "jenkinsfile", "azure-pipelines.yml", "azure-pipelines.yaml",
             ".travis.yml", "bitbucket-pipelines.yml", ".drone.yml", "appveyor.yml", ".appveyor.yml")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PatchRefused(Exception):
    """The patch is refused; ``reason`` is one of ``REASONS``, ``detail`` says where."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class PatchSummary:
    """What a patch that passed the check touches."""

    files: list[str] = field(default_factory=list)
    added: int = 0
    removed: int = 0


def _unquote(path: str) -> str:
    """Git's C-style quoting of unusual paths (``"a/na\\303\\257ve.txt"``)."""
    if not (len(path) >= 2 and path.startswith('"') and path.endswith('"')):
        return path
    body = path[1:-1]
    out = bytearray()
    i = 0
    simple = {"n": 10, "t": 9, '"': 34, "\\": 92, "a": 7, "b": 8, "f": 12, "r": 13, "v": 11}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in simple:
                out.append(simple[nxt])
                i += 2
                continue
            if re.match(r"[0-7]{3}", body[i + 1 : i + 4]):
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            raise PatchRefused("malformed", f"bad escape in path {path!r}")
        out.extend(ch.encode())
        i += 1
    return out.decode("utf-8", errors="replace")


def _strip_prefix(path: str) -> str:
    path = _unquote(path.split("\t", 1)[0].rstrip())
    if path in ("/dev/null",):
        return path
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path


def _check_path(path: str) -> None:
    if path == "/dev/null":
        return
    if not path or _CONTROL.search(path):
        raise PatchRefused("path_outside_worktree" if path else "malformed", f"unusable path {path!r}")
    if path.startswith("/") or "\\" in path or re.match(r"^[A-Za-z]:", path) or path.startswith("~"):
        raise PatchRefused("path_outside_worktree", path)
    parts = PurePosixPath(path).parts
    if ".." in parts or "." in path.split("/"):
        raise PatchRefused("path_outside_worktree", path)
    lowered = [p.lower() for p in parts]
    if ".git" in lowered or any(p.startswith(".git") and p.rstrip(". ") == ".git" for p in lowered):
        raise PatchRefused("git_dir", path)
    if ".beads" in lowered:
        raise PatchRefused("beads_dir", path)
    if ".mesh" in lowered:
        raise PatchRefused("mesh_dir", path)
    if lowered[-1] == ".gitmodules":
        raise PatchRefused("submodule", path)
    joined = "/".join(lowered)
    if joined.startswith(_CI_PREFIXES) or lowered[-1] in _CI_FILES:
        raise PatchRefused("ci_workflow", path)


def _check_mode(mode: str | None, where: str) -> None:
    if mode is None:
        return
    if mode.startswith("120"):
        raise PatchRefused("symlink", where)
    if mode.startswith("160"):
        raise PatchRefused("submodule", where)


def _parse(patch: str) -> tuple[list[str], int, int]:
    files: list[str] = []
    added = removed = 0
    lines = patch.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i, n = 0, len(lines)
    current: str | None = None

    def add_file(path: str) -> None:
        if path != "/dev/null" and path not in files:
            files.append(path)

    while i < n:
        line = lines[i]
        if line.startswith("diff --git "):
            rest = line[len("diff --git "):]
            m = re.match(r'^("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$', rest)
            if not m:
                raise PatchRefused("malformed", f"line {i + 1}: {line[:80]}")
            for raw in m.groups():
                path = _strip_prefix(raw)
                _check_path(path)
                add_file(path)
            current = _strip_prefix(m.group(2))
            i += 1
            continue
        if line.startswith(("GIT binary patch", "Binary files ", "literal ", "delta ")):
            raise PatchRefused("binary", current or f"line {i + 1}")
        mode = _MODE.match(line)
        if mode:
            _check_mode(mode.group(1), current or f"line {i + 1}")
            i += 1
            continue
        index = _INDEX.match(line)
        if index:
            _check_mode(index.group(1), current or f"line {i + 1}")
            i += 1
            continue
        for key in ("rename from ", "rename to ", "copy from ", "copy to "):
            if line.startswith(key):
                path = _unquote(line[len(key):].rstrip())
                _check_path(path)
                add_file(path)
                break
        else:
            if line.startswith("--- "):
                if i + 1 >= n or not lines[i + 1].startswith("+++ "):
                    raise PatchRefused("malformed", f"line {i + 1}: '---' without '+++'")
                old, new = _strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])
                for path in (old, new):
                    _check_path(path)
                    add_file(path)
                if old == "/dev/null" and new == "/dev/null":
                    raise PatchRefused("malformed", f"line {i + 1}: both sides /dev/null")
                current = new if new != "/dev/null" else old
                i += 2
                if i >= n or not _HUNK.match(lines[i]):
                    raise PatchRefused("malformed", f"line {i + 1}: file header without a hunk")
                continue
            hunk = _HUNK.match(line)
            if hunk:
                if current is None:
                    raise PatchRefused("malformed", f"line {i + 1}: hunk before any file header")
                old_left = int(hunk.group(2)) if hunk.group(2) is not None else 1
                new_left = int(hunk.group(4)) if hunk.group(4) is not None else 1
                i += 1
                while old_left > 0 or new_left > 0:
                    if i >= n:
                        raise PatchRefused("malformed", f"hunk of {current} ends early")
                    body = lines[i]
                    tag = body[:1]
                    if tag == " " or body == "":
                        old_left -= 1
                        new_left -= 1
                    elif tag == "-":
                        old_left -= 1
                        removed += 1
                    elif tag == "+":
                        new_left -= 1
                        added += 1
                    elif tag == "\\":
                        pass
                    else:
                        raise PatchRefused("malformed", f"line {i + 1}: unexpected line in a hunk of {current}")
                    if old_left < 0 or new_left < 0:
                        raise PatchRefused("malformed", f"line {i + 1}: hunk of {current} longer than its header")
                    i += 1
                while i < n and lines[i].startswith("\\"):
                    i += 1
                continue
            if line.strip() and current is None and not files:
                # Prose before the first header (a model's preamble) is tolerated by git; keep it.
                i += 1
                continue
            if line.strip() and not line.startswith(("similarity index", "dissimilarity index")):
                raise PatchRefused("malformed", f"line {i + 1}: {line[:80]!r}")
        i += 1
    return files, added, removed


def check_patch(patch: str, *, max_bytes: int = 1_000_000, max_files: int = 200) -> PatchSummary:
    """Check a unified diff; return what it touches or raise ``PatchRefused``."""
    if not patch or not patch.strip():
        raise PatchRefused("empty", "no patch text")
    if len(patch.encode("utf-8", errors="replace")) > max_bytes:
        raise PatchRefused("too_large", f"{len(patch.encode('utf-8', errors='replace'))} bytes > {max_bytes}")
    if "\x00" in patch:
        raise PatchRefused("binary", "NUL byte in patch")
    files, added, removed = _parse(patch)
    if not files:
        raise PatchRefused("malformed", "no file header found")
    if len(files) > max_files:
        raise PatchRefused("too_many_files", f"{len(files)} files > {max_files}")
    return PatchSummary(files=files, added=added, removed=removed)


def extract_touched_files(patch: str) -> list[str]:
    """The paths a patch touches (in order), or [] when it cannot be parsed."""
    try:
        return _parse(patch)[0]
    except PatchRefused:
        return []
