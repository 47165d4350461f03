"""The repository context pack: what every role of a round is shown of the code.

``build_repo_context`` renders, within a token budget (about four characters a token):

1. the files the current patch touches, with their current content (in a task worktree
   the patch is already applied, so this is the code under review);
2. the files the task names: paths mentioned in its title, description, design,
   acceptance criteria or notes (a bare file name counts when it names at most three);
3. the files that define a code name the task mentions (``celsius_to_fahrenheit``,
   ``ReplayBackend``): a task rarely names a path, but it names the function to change;
4. the file tree (git-tracked files, or a bounded walk outside git).

The pack is part of the prompt's shared prefix, so it must be byte-identical for every
role of a round: it depends only on its inputs and on the files' contents, sections and
files come in a fixed order, and truncation is deterministic (whole lines, fair shares
of the budget). The engine asks for it before every call, so results are cached by
(root, the tree's state, the stamps of the files shown, task, patch, budget), where the
state is the git index's stamp (the engine commits every change it makes) or, outside
git, the stamps of the files; a change to any file shown makes a new pack. Contents are
scrubbed of credentials like everything mesh records, and nothing outside the root is
read: a path with ``..``, an absolute path or a symlink leading out is skipped.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path, PurePosixPath

from redact import scrub

__all__ = ["CHARS_PER_TOKEN", "build_repo_context", "code_names", "named_paths", "patch_paths"]

CHARS_PER_TOKEN = 4
# The tree orients; file contents answer questions. The tree never takes more than this
# share of the budget when there are files to show.
_TREE_SHARE = 0.25
_MAX_WALK_FILES = 5000
_MAX_NAMED_FILES = 20
_MAX_CODE_NAMES = 10
_MAX_SYMBOL_FILES = 5
_MAX_SCAN_FILES = 3000
_MAX_SCAN_FILE_BYTES = 512 * 1024
_PRIVATE_DIRS = frozenset({".git", ".beads", ".mesh"})
_WALK_SKIP = frozenset({"__pycache__", "node_modules"})
_TASK_FIELDS = ("title", "description", "design", "acceptance_criteria", "acceptance", "notes")
_GIT_TIMEOUT_S = 10

# A path-like token: dir/name, or name.ext; an optional :line suffix is dropped.
_PATH_TOKEN = re.compile(r"(?<![\w/.\-])((?:[\w.\-]+/)*[\w.\-]+)(?::\d+(?:-\d+)?)?")
# A code name: snake_case with an inner underscore, or camelCase / PascalCase with an
# inner capital; plain words ("the", "Reviewer") are too common to look up.
_CODE_NAME = re.compile(r"(?<![\w.])([A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+"
                        r"|[A-Za-z][a-z0-9]+[A-Z][A-Za-z0-9]*)(?![\w/])")
_DEFINITION = (r"^[ \t]*(?:export[ \t]+|pub[ \t]+|async[ \t]+)*"
               r"(?:def|class|function|func|fn|struct|interface|type|enum|trait)[ \t]+({names})\b"
               r"|^({names})[ \t]*(?::[^=\n]*)?=")


def build_repo_context(root: Path, *, task: Mapping[str, str], patch: str | None, budget_tokens: int) -> str:
    """The context pack of ``root`` for ``task`` and the current ``patch``, at most
    ``budget_tokens`` tokens (``CHARS_PER_TOKEN`` characters each); "" when there is
    nothing to show or no budget."""
    if budget_tokens <= 0:
        return ""
    try:
        base = Path(root).resolve()
    except OSError:
        return ""
    if not base.is_dir():
        return ""
    files, state = _list_files(base)
    touched = tuple(p for p in patch_paths(patch or "") if _inside(base, p))
    named = tuple(p for p in named_paths(task, files) if p not in touched)
    names = tuple(code_names(task))
    defining = _symbol_files(base, files, state, names) if names else ()
    defining = tuple(p for p in defining if p not in touched and p not in named)
    shown = touched + named + defining
    stamps = tuple(_stamp(base / p) for p in shown)
    return _render(base, files, touched, named, defining, stamps, budget_tokens * CHARS_PER_TOKEN)


# ---------------------------------------------------------------------- what to show


def named_paths(task: Mapping[str, str | None], files: Iterable[str]) -> list[str]:
    """Files of ``files`` that the task's text mentions, in order of first mention.

    A token with a slash must match a path exactly (``./`` and ``:line`` tolerated); a
    bare ``name.ext`` matches every file with that name, when at most three do.
    """
    listed = list(files)
    known = set(listed)
    by_name: dict[str, list[str]] = {}
    for path in listed:
        by_name.setdefault(PurePosixPath(path).name, []).append(path)
    found: list[str] = []
    for key in _TASK_FIELDS:
        text = task.get(key) or ""
        for match in _PATH_TOKEN.finditer(str(text)):
            # A sentence may end right after a path: "see temperature.py."
            candidate = match.group(1).removeprefix("./").rstrip(".")
            if candidate in known:
                hits = [candidate]
            elif "/" not in candidate and "." in candidate.strip("."):
                hits = by_name.get(candidate, [])
                hits = hits if len(hits) <= 3 else []
            else:
                hits = []
            for hit in hits:
                if hit not in found:
                    found.append(hit)
            if len(found) >= _MAX_NAMED_FILES:
                return found[:_MAX_NAMED_FILES]
    return found


def code_names(task: Mapping[str, str | None]) -> list[str]:
    """Code names (snake_case, camelCase) the task's text mentions, in order, at most ten."""
    found: list[str] = []
    for key in _TASK_FIELDS:
        for match in _CODE_NAME.finditer(str(task.get(key) or "")):
            name = match.group(1)
            if name not in found:
                found.append(name)
                if len(found) >= _MAX_CODE_NAMES:
                    return found
    return found


@functools.lru_cache(maxsize=64)
def _symbol_files(base: Path, files: tuple[str, ...], state: Hashable, names: tuple[str, ...]) -> tuple[str, ...]:
    """Files that define one of ``names`` (def/class/function/... or a top-level
    assignment), ordered by the name's first mention, then path; bounded scan, cached
    while the tree's ``state`` holds."""
    joined = "|".join(re.escape(name) for name in names)
    pattern = re.compile(_DEFINITION.format(names=joined), re.M)
    hits: dict[str, list[str]] = {}
    for path in files[:_MAX_SCAN_FILES]:
        full = base / path
        try:
            if full.is_symlink() or full.stat().st_size > _MAX_SCAN_FILE_BYTES:
                continue
            data = full.read_bytes()
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            continue
        for match in pattern.finditer(data.decode("utf-8", errors="replace")):
            name = match.group(1) or match.group(2)
            if path not in hits.setdefault(name, []):
                hits[name].append(path)
    ordered: list[str] = []
    for name in names:
        for path in hits.get(name, []):
            if path not in ordered:
                ordered.append(path)
    return tuple(ordered[:_MAX_SYMBOL_FILES])


def patch_paths(patch: str) -> list[str]:
    """Paths a unified diff touches (old and new names), in order of appearance."""
    found: list[str] = []

    def add(raw: str) -> None:
        path = raw.strip().split("\t", 1)[0].strip('"')
        if path == "/dev/null" or not path:
            return
        if path.startswith(("a/", "b/")):
            path = path[2:]
        if path not in found:
            found.append(path)

    for line in patch.splitlines():
        if line.startswith(("--- ", "+++ ")):
            add(line[4:])
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            add(line.split(" ", 2)[2])
    return found


def _inside(base: Path, path: str) -> bool:
    """Whether ``path`` is a relative path that stays in ``base`` (symlinks resolved)."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or _PRIVATE_DIRS & set(pure.parts) or not pure.parts:
        return False
    try:
        return (base / pure).resolve().is_relative_to(base)
    except OSError:
        return False


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


# ---------------------------------------------------------------------- the file list


def _list_files(base: Path) -> tuple[tuple[str, ...], Hashable]:
    """The files of ``base`` and a stamp of the tree's state: the index's stamp in a git
    checkout (the engine commits every change), else the stamps of the files."""
    index = _git_index(base)
    if index is not None:
        stamp = _stamp(index)
        if stamp is not None:
            listed = _git_files(base, index, stamp)
            if listed is not None:
                return listed, stamp
    walked = _walk_files(base)
    return walked, tuple(_stamp(base / path) for path in walked[:_MAX_SCAN_FILES])


@functools.lru_cache(maxsize=64)
def _git_index(base: Path) -> Path | None:
    """The index file of the git checkout at ``base`` (a worktree has its own), or None."""
    try:
        done = subprocess.run(["git", "rev-parse", "--git-path", "index"], cwd=base, capture_output=True,
                              text=True, timeout=_GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    # Relative to ``base`` in a plain checkout, absolute in a linked worktree.
    return base / done.stdout.strip()


@functools.lru_cache(maxsize=64)
def _git_files(base: Path, index: Path, stamp: tuple[int, int]) -> tuple[str, ...] | None:
    """Tracked files under ``base``; cached until the index changes (``stamp``)."""
    try:
        done = subprocess.run(["git", "ls-files", "-z"], cwd=base, capture_output=True, timeout=_GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    paths = (p.decode("utf-8", errors="replace") for p in done.stdout.split(b"\0") if p)
    return tuple(sorted(p for p in paths if not _PRIVATE_DIRS & set(PurePosixPath(p).parts)))


def _walk_files(base: Path) -> tuple[str, ...]:
    """Files under ``base`` outside git: hidden and private folders skipped, bounded."""
    found: list[str] = []
    for folder, dirs, names in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _WALK_SKIP)
        rel = Path(folder).relative_to(base)
        for name in sorted(names):
            found.append((rel / name).as_posix())
            if len(found) >= _MAX_WALK_FILES:
                return tuple(sorted(found))
    return tuple(sorted(found))


# ---------------------------------------------------------------------- rendering


@functools.lru_cache(maxsize=128)
def _render(base: Path, files: tuple[str, ...], touched: tuple[str, ...], named: tuple[str, ...],
            defining: tuple[str, ...], stamps: tuple[tuple[int, int] | None, ...], budget_chars: int) -> str:
    """Render the pack; ``stamps`` is only part of the cache key (file contents changed)."""
    sections: list[tuple[str, list[_FileBlock]]] = []
    if touched:
        sections.append(("## Files the current patch touches (current content)",
                         [_FileBlock.load(base, p, budget_chars) for p in touched]))
    if named:
        sections.append(("## Files the task names", [_FileBlock.load(base, p, budget_chars) for p in named]))
    if defining:
        sections.append(("## Files defining names the task mentions",
                         [_FileBlock.load(base, p, budget_chars) for p in defining]))
    tree_head = f"## File tree ({len(files)} files)"
    tree_full = "\n".join(files)

    # Each section costs its title, a blank line, and the blank line before the next part;
    # the tree its heading and a newline.
    fixed = sum(len(title) + 4 for title, _ in sections) + len(tree_head) + 1
    blocks = [block for _, section in sections for block in section]
    sizes = [block.full_size for block in blocks]
    available = max(budget_chars - fixed, 0)
    tree_reserve = min(len(tree_full), max(int(available * _TREE_SHARE), available - sum(sizes)))
    shares = iter(_fair_shares(sizes, available - tree_reserve))

    parts: list[str] = []
    for title, section in sections:
        rendered = [text for text in (block.render(next(shares)) for block in section) if text]
        if rendered:
            parts.append(title + "\n\n" + "\n\n".join(rendered))
    # Whatever the files left unused (a cut at a line boundary, a block too big to show)
    # goes back to the tree.
    used = sum(len(part) + 2 for part in parts) + len(tree_head) + 1
    parts.append(tree_head + "\n" + _truncate_tree(files, budget_chars - used))
    # The shares keep every part within budget; the clamp only guards the arithmetic.
    return "\n\n".join(parts)[:budget_chars]


class _FileBlock:
    """One file's section: a heading and a fenced body, cut to a share of the budget."""

    def __init__(self, path: str, heading: str, body: str | None, lines: int, partial: bool = False):
        self.path = path
        self.heading = heading
        self.body = body
        self.lines = lines
        self.partial = partial  # only the file's head was read: ``lines`` is a lower bound

    @classmethod
    def load(cls, base: Path, path: str, cap: int) -> _FileBlock:
        """Read ``path`` (at most ``cap`` characters are ever needed)."""
        full = base / path
        try:
            if full.is_symlink() and not full.resolve().is_relative_to(base):
                return cls(path, f"### {path} (symlink out of the repository; not shown)", None, 0)
            if not full.exists():
                return cls(path, f"### {path} (not in the worktree: deleted or not created yet)", None, 0)
            if not full.is_file():
                return cls(path, f"### {path} (not a file)", None, 0)
            with full.open("rb") as handle:
                data = handle.read(cap + 1)
            size = full.stat().st_size
        except OSError as exc:
            return cls(path, f"### {path} (unreadable: {exc.strerror or exc})", None, 0)
        if b"\x00" in data[:8192]:
            return cls(path, f"### {path} (binary, {size} bytes; not shown)", None, 0)
        partial = len(data) > cap
        text = scrub(data.decode("utf-8", errors="replace"))
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        return cls(path, f"### {path}", text, lines, partial)

    @property
    def full_size(self) -> int:
        """Characters this block takes in full."""
        return len(self.render(None))

    def render(self, room: int | None) -> str:
        """The block within ``room`` characters (None: whole); "" when even the heading
        does not fit."""
        if self.body is None:
            return self.heading if room is None or len(self.heading) <= room else ""
        fence = _fence(self.body)
        lang = _LANGUAGES.get(PurePosixPath(self.path).suffix.lower(), "")
        body = self.body if self.body.endswith("\n") or not self.body else self.body + "\n"
        whole = f"{self.heading}\n{fence}{lang}\n{body}{fence}"
        if room is None or len(whole) <= room:
            return whole
        frame = len(self.heading) + 2 * len(fence) + len(lang) + 3  # heading, fences, newlines
        kept_lines: list[str] = []
        used = 0
        for line in body.splitlines(keepends=True):
            if frame + used + len(line) + len(self._cut_note(len(kept_lines) + 1)) > room:
                break
            kept_lines.append(line)
            used += len(line)
        note = self._cut_note(len(kept_lines))
        cut = f"{self.heading}\n{fence}{lang}\n{''.join(kept_lines)}{fence}\n{note}"
        if not kept_lines or len(cut) > room:
            short = f"{self.heading} ({self.lines} lines; not shown for lack of room: use read_file)"
            return short if len(short) <= room else ""
        return cut

    def _cut_note(self, shown: int) -> str:
        total = f"{self.lines}+" if self.partial else str(self.lines)
        return f"[{self.path}: cut after line {shown} of {total}; read_file {self.path} start_line={shown + 1}]"


_LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go", ".rs": "rust",
              ".java": "java", ".c": "c", ".h": "c", ".cpp": "cpp", ".rb": "ruby", ".sh": "sh",
              ".toml": "toml", ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".md": "markdown"}


def _fence(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    return "`" * (longest + 1)


def _fair_shares(sizes: list[int], room: int) -> list[int]:
    """Split ``room`` among blocks: small ones whole, the rest an equal share (water-filling),
    so one large file cannot crowd every other out."""
    shares = [0] * len(sizes)
    left = max(room, 0)
    pending = sorted(range(len(sizes)), key=lambda i: (sizes[i], i))
    separators = 2 * len(sizes)  # the blank lines between blocks
    left = max(left - separators, 0)
    while pending:
        share = left // len(pending)
        i = pending[0]
        if sizes[i] <= share:
            shares[i] = sizes[i]
            left -= sizes[i]
            pending.pop(0)
            continue
        for i in pending:
            shares[i] = share
        break
    return shares


def _truncate_tree(files: tuple[str, ...], room: int) -> str:
    """The sorted file list within ``room`` characters, with a count of what is left out."""
    if not files:
        return "(no files)"
    full = "\n".join(files)
    if len(full) <= room:
        return full
    kept: list[str] = []
    used = 0
    for position, path in enumerate(files):
        note = f"[... and {len(files) - position - 1} more files]"
        if used + len(path) + 1 + len(note) > room:
            break
        kept.append(path)
        used += len(path) + 1
    note = f"[... and {len(files) - len(kept)} more files]"
    if len(note) > room:
        return ""
    return "\n".join(kept + [note])
