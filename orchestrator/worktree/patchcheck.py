"""Check a model-written patch before git ever sees it.

The synthesizer's patch is untrusted. ``check_patch`` parses it as ``git apply`` would
(plain and git-style unified diffs) and refuses it, with a reason code, if it is malformed
or would touch anything no configuration may let a worker touch: paths outside the
worktree, git's own directory, the tracker's ``.beads/``, mesh's ``.mesh/`` and
``mesh.toml``, symlinks, submodules, binary content, or more bytes or files than the
configured caps. What a project may adjust (CI files, hooks, test-runner configuration, ...)
is ``orchestrator.worktree.policy``'s, judged on the summary this returns: ``changes`` holds every
reading of every name, and each file's hunks.

The parser errs on the side of refusing. Every name a header could mean is checked: each
way of splitting an unquoted ``diff --git`` line, each prefix of a traditional name that
git might cut a timestamp from, and both the name as written and with its first component
stripped (``-p1``). Lines are split on ``\\n`` only, as git does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "REFUSAL_REASONS",
    "FileChange",
    "Hunk",
    "PatchRefused",
    "PatchSummary",
    "check_patch",
    "extract_touched_files",
]

REFUSAL_REASONS = frozenset({
    "empty", "malformed", "too_large", "too_many_files", "path_outside_worktree", "git_dir",
    "beads_dir", "mesh_dir", "symlink", "submodule", "binary",
})

_HUNK_RE = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(?:[ \t].*)?")
_MODE_RE = re.compile(r"([0-7]+)")
_INDEX_RE = re.compile(r"[0-9a-fA-F]+\.\.[0-9a-fA-F]+(?: ([0-7]+))?")
_DRIVE_RE = re.compile(r"[A-Za-z]:")
# A timestamp that `diff -u` appends to a traditional name when no tab separates them.
_TIMESTAMP_RE = re.compile(
    r"\s+(?:\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?: ?[+-]\d{4})?"
    r"|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}(?: [+-]\d{4})?)$"
)
# Characters macOS (HFS+) ignores in file names, so ".g\u200cit" is ".git" there; git strips
# the same set when it checks for .git.
_HFS_IGNORABLE = dict.fromkeys(map(ord, (
    "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u206a\u206b\u206c\u206d\u206e\u206f\ufeff"
)))

_MAX_DETAIL = 300

_GIT_EXTENDED = (
    "old mode ", "new mode ", "deleted file mode ", "new file mode ", "copy from ", "copy to ",
    "rename old ", "rename new ", "rename from ", "rename to ", "similarity index ",
    "dissimilarity index ", "index ",
)


class PatchRefused(Exception):
    """The patch must not be applied; ``reason`` is one of REFUSAL_REASONS."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        # The detail quotes patch text, which ends up in comments: keep it short.
        self.detail = detail if len(detail) <= _MAX_DETAIL else detail[: _MAX_DETAIL - 3] + "..."
        super().__init__(f"{reason}: {self.detail}" if self.detail else reason)


@dataclass
class Hunk:
    """One hunk: where it starts in the old file and its lines, each with its marker."""

    old_start: int
    old_count: int
    lines: list[str] = field(default_factory=list)


@dataclass
class FileChange:
    """One file section of a patch.

    ``paths`` holds every name the section's headers could mean as ``git apply -p1``
    reads them (each reading of an ambiguous header), so a policy that looks at names sees
    at least what git will; ``created`` is true when the section makes a new file
    (``/dev/null`` old side, ``new file mode``, a rename or copy target), ``deleted`` when it
    removes one (``/dev/null`` new side, ``deleted file mode``), ``moved`` when it renames or
    copies (the new file's text is then the old file's, not only its hunks).
    """

    paths: list[str] = field(default_factory=list)
    created: bool = False
    deleted: bool = False
    moved: bool = False
    hunks: list[Hunk] = field(default_factory=list)


@dataclass
class PatchSummary:
    """What a patch that passed the checks touches.

    ``changes`` is the per-file detail (names and hunks) for policy checks; it takes no
    part in comparing two summaries.
    """

    files: list[str] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    changes: list[FileChange] = field(default_factory=list, compare=False, repr=False)


def _unquote(text: str) -> tuple[str, str]:
    """Decode a C-quoted name at the start of ``text``; return it and the rest.

    Git quotes names holding special characters: "a/\\303\\251.txt". Octal escapes are
    bytes, so the result is decoded as UTF-8 (invalid bytes refuse the patch).
    """
    assert text.startswith('"')
    out = bytearray()
    index = 1
    simple = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
    while index < len(text):
        char = text[index]
        if char == '"':
            try:
                return out.decode("utf-8"), text[index + 1 :]
            except UnicodeDecodeError:
                raise PatchRefused("malformed", f"quoted name is not UTF-8: {text!r}") from None
        if char == "\\":
            nxt = text[index + 1 : index + 2]
            if nxt in simple:
                out.append(simple[nxt])
                index += 2
                continue
            octal = text[index + 1 : index + 4]
            if len(octal) == 3 and all(c in "01234567" for c in octal) and int(octal, 8) < 256:
                out.append(int(octal, 8))
                index += 4
                continue
            raise PatchRefused("malformed", f"bad escape in quoted name: {text!r}")
        out.extend(char.encode("utf-8"))
        index += 1
    raise PatchRefused("malformed", f"unterminated quoted name: {text!r}")


def _strip_component(path: str) -> str:
    # git squashes repeated slashes, then `-p1` drops everything up to the first one.
    squashed = re.sub(r"/+", "/", path)
    return squashed.split("/", 1)[1] if "/" in squashed else squashed


def _normalize_component(component: str) -> str:
    # What a case-insensitive, trailing-dot-and-space-trimming (Windows) or ignorable-
    # character-dropping (macOS) file system would make of the name.
    return component.translate(_HFS_IGNORABLE).lower().rstrip(". ")


def _check_path(path: str) -> None:
    """Refuse ``path`` (a name as written in the patch) if it is unsafe in any reading."""
    if not path:
        raise PatchRefused("malformed", "empty path")
    if any(ord(ch) < 32 or ord(ch) == 127 or 0x80 <= ord(ch) < 0xA0 for ch in path):
        raise PatchRefused("malformed", f"control character in path {path!r}")
    if "\\" in path or "//" in path:
        # A backslash is a separator on Windows; git squashes "a//b", and "a//etc" would
        # strip to the absolute "/etc".
        raise PatchRefused("path_outside_worktree", path)
    for candidate in (path, _strip_component(path)):
        if candidate.startswith(("/", "~")) or _DRIVE_RE.match(candidate):
            raise PatchRefused("path_outside_worktree", path)
        components = candidate.split("/")
        normalized = [_normalize_component(c) for c in components]
        for raw, name in zip(components, normalized):
            if raw == ".." or name == "..":
                raise PatchRefused("path_outside_worktree", path)
            if name == ".git" or name == "git~1" or name.startswith(".git:"):
                raise PatchRefused("git_dir", path)
            if name == ".beads":
                raise PatchRefused("beads_dir", path)
            if name in (".mesh", "mesh.toml"):
                raise PatchRefused("mesh_dir", path)


def _check_mode(text: str, line: str) -> None:
    match = _MODE_RE.fullmatch(text.strip())
    if not match:
        raise PatchRefused("malformed", f"bad mode line {line!r}")
    _check_mode_value(int(match.group(1), 8), line)


def _check_mode_value(mode: int, line: str) -> None:
    # git canonicalises any non-regular, non-symlink, non-directory mode to a gitlink, so
    # everything but a regular file is refused: 120000 symlink, 160000 or other submodule.
    file_type = mode & 0o170000
    if file_type == 0o100000:
        return
    if file_type == 0o120000:
        raise PatchRefused("symlink", line)
    raise PatchRefused("submodule", line)


class _Parser:
    """One pass over the lines of a patch, collecting names and counting hunk lines."""

    def __init__(self, patch: str) -> None:
        self.lines = patch.split("\n")
        # A final newline leaves one empty string behind; it is not a line.
        if self.lines and self.lines[-1] == "":
            self.lines.pop()
        self.index = 0
        self.files: list[str] = []
        self.added = 0
        self.removed = 0
        self.sections = 0
        self.changes: list[FileChange] = []

    def start_change(self) -> FileChange:
        change = FileChange()
        self.changes.append(change)
        return change

    def note_name(self, name: str) -> None:
        # Every reading git could make of a header name (it applies with -p1) is what a
        # policy must judge.
        stripped = _strip_component(name)
        if self.changes and stripped and stripped not in self.changes[-1].paths:
            self.changes[-1].paths.append(stripped)

    def line(self, offset: int = 0) -> str | None:
        position = self.index + offset
        return self.lines[position] if position < len(self.lines) else None

    @staticmethod
    def header_text(line: str) -> str:
        # Tolerate CRLF patches in header lines; hunk content keeps its "\r".
        return line[:-1] if line.endswith("\r") else line

    def add_file(self, name: str) -> None:
        if name not in self.files:
            self.files.append(name)

    def parse(self) -> None:
        while (line := self.line()) is not None:
            if line.startswith("diff --git "):
                self.parse_git_section()
            elif line.startswith("--- ") and (nxt := self.line(1)) is not None and nxt.startswith("+++ "):
                self.parse_traditional_section()
            elif line.startswith("@@"):
                raise PatchRefused("malformed", f"hunk without a file header at line {self.index + 1}")
            elif line.startswith(("diff --cc ", "diff --combined ")):
                raise PatchRefused("malformed", "combined (merge) diffs cannot be applied")
            else:
                self.check_binary_marker(self.header_text(line))
                self.index += 1  # text between file sections, which git also skips

    def check_binary_marker(self, line: str) -> None:
        if line.startswith("GIT binary patch") or (
            line.startswith("Binary files ") and line.endswith(" differ")
        ):
            raise PatchRefused("binary", line)

    def parse_git_section(self) -> None:
        header = self.header_text(self.lines[self.index])
        self.sections += 1
        change = self.start_change()
        listed = self.git_header_names(header[len("diff --git ") :])
        self.index += 1
        has_old = has_new = False
        while (line := self.line()) is not None:
            text = self.header_text(line)
            if text.startswith("--- "):
                if has_old:
                    raise PatchRefused("malformed", f"second '---' line in one file at line {self.index + 1}")
                if self.traditional_name(text[4:], git=True) is None:
                    change.created = True
                has_old = True
            elif text.startswith("+++ "):
                if not has_old or has_new:
                    raise PatchRefused("malformed", f"misplaced '+++' line at line {self.index + 1}")
                if self.traditional_name(text[4:], git=True) is None:
                    change.deleted = True
                has_new = True
            elif text.startswith(("old mode ", "new mode ", "deleted file mode ", "new file mode ")):
                self.check_mode_line(text)
                if text.startswith("new file mode "):
                    change.created = True
                elif text.startswith("deleted file mode "):
                    change.deleted = True
            elif text.startswith("index "):
                match = _INDEX_RE.fullmatch(text[len("index ") :])
                if not match:
                    raise PatchRefused("malformed", f"bad index line {text!r}")
                if match.group(1):
                    _check_mode_value(int(match.group(1), 8), text)
            elif text.startswith(_GIT_EXTENDED):
                self.extended_name(text)
            else:
                break
            self.index += 1
        for name in listed:
            self.add_file(name)
        line = self.line()
        if line is not None and line.startswith("@@"):
            if not (has_old and has_new):
                raise PatchRefused("malformed", f"hunk without '---'/'+++' lines at line {self.index + 1}")
            self.parse_hunks()
        elif has_old or has_new:
            raise PatchRefused("malformed", f"'---'/'+++' lines without a hunk at line {self.index + 1}")

    def check_mode_line(self, text: str) -> None:
        for prefix in ("old mode ", "new mode ", "deleted file mode ", "new file mode "):
            if text.startswith(prefix):
                _check_mode(text[len(prefix) :], text)
                return

    def extended_name(self, text: str) -> None:
        for prefix in ("copy from ", "copy to ", "rename old ", "rename new ", "rename from ", "rename to "):
            if text.startswith(prefix):
                rest = text[len(prefix) :]
                if rest.startswith('"'):
                    name, tail = _unquote(rest)
                    if tail:
                        raise PatchRefused("malformed", f"text after a quoted name: {text!r}")
                else:
                    name = rest
                # rename and copy names are written without the a/ b/ prefix.
                _check_path(name)
                self.add_file(name)
                change = self.changes[-1]
                if name not in change.paths:
                    change.paths.append(name)
                change.moved = True
                if prefix in ("copy to ", "rename new ", "rename to "):
                    change.created = True
                return

    def git_header_names(self, rest: str) -> list[str]:
        """Check every reading of a ``diff --git`` line; return the names it surely means."""
        if rest.startswith('"'):
            old, tail = _unquote(rest)
            if not tail.startswith(" "):
                raise PatchRefused("malformed", f"bad diff --git line: {rest!r}")
            tail = tail[1:]
            if tail.startswith('"'):
                new, after = _unquote(tail)
                if after:
                    raise PatchRefused("malformed", f"bad diff --git line: {rest!r}")
            else:
                new = tail
            pairs = [(old, new)]
        elif '"' in rest:
            old, _, tail = rest.partition(' "')
            new, after = _unquote('"' + tail)
            if after:
                raise PatchRefused("malformed", f"bad diff --git line: {rest!r}")
            pairs = [(old, new)]
        else:
            # Unquoted names may hold spaces; every split point is a possible reading.
            pairs = [(rest[:i], rest[i + 1 :]) for i, ch in enumerate(rest) if ch == " "]
            if not pairs:
                raise PatchRefused("malformed", f"bad diff --git line: {rest!r}")
        for old, new in pairs:
            _check_path(old)
            _check_path(new)
            self.note_name(old)
            self.note_name(new)
        # List names only from a reading that is certain: a single split, or the one where
        # both sides name the same file (the common case); renames list via their lines.
        if len(pairs) == 1:
            old, new = pairs[0]
            return list(dict.fromkeys([_strip_component(old), _strip_component(new)]))
        same = [old for old, new in pairs if _strip_component(old) == _strip_component(new)]
        return [_strip_component(same[0])] if len(same) == 1 else []

    def traditional_name(self, rest: str, *, git: bool) -> str | None:
        """Check the name of a ``---``/``+++`` line; return it with -p1 applied."""
        if rest.startswith('"'):
            name, _ = _unquote(rest)
            candidates = [name]
        else:
            name = rest.split("\t", 1)[0]
            # Without a tab git may still cut a trailing timestamp at a space: check each
            # prefix that ends before a space as well as the whole.
            candidates = [name] + [name[:i] for i, ch in enumerate(name) if ch == " " and i > 0]
            stamp = _TIMESTAMP_RE.search(name)
            if stamp and not git:
                name = name[: stamp.start()]
            name = name.rstrip(" ") if not git else name
        if name == "/dev/null":
            return None
        for candidate in candidates:
            _check_path(candidate)
            self.note_name(candidate)
        self.note_name(name)
        stripped = _strip_component(name)
        self.add_file(stripped)
        return stripped

    def parse_traditional_section(self) -> None:
        self.sections += 1
        change = self.start_change()
        old_line = self.header_text(self.lines[self.index])
        new_line = self.header_text(self.lines[self.index + 1])
        old = self.traditional_name(old_line[4:], git=False)
        new = self.traditional_name(new_line[4:], git=False)
        if old is None and new is None:
            raise PatchRefused("malformed", f"both sides are /dev/null at line {self.index + 1}")
        change.created = old is None
        change.deleted = new is None
        self.index += 2
        line = self.line()
        if line is None or not line.startswith("@@"):
            raise PatchRefused("malformed", f"'---'/'+++' lines without a hunk at line {self.index + 1}")
        self.parse_hunks()

    def parse_hunks(self) -> None:
        while (line := self.line()) is not None and line.startswith("@@"):
            header = self.header_text(line)
            match = _HUNK_RE.fullmatch(header)
            if not match:
                raise PatchRefused("malformed", f"bad hunk header {header!r} at line {self.index + 1}")
            old_count = int(match.group(2)) if match.group(2) is not None else 1
            new_count = int(match.group(4)) if match.group(4) is not None else 1
            hunk = Hunk(old_start=int(match.group(1)), old_count=old_count)
            self.changes[-1].hunks.append(hunk)
            self.index += 1
            self.parse_hunk_body(old_count, new_count, header, hunk)

    def parse_hunk_body(self, old_count: int, new_count: int, header: str, hunk: Hunk) -> None:
        changed = False
        while old_count > 0 or new_count > 0:
            line = self.line()
            if line is None:
                raise PatchRefused("malformed", f"hunk {header!r} ends early")
            marker = line[:1]
            if marker in (" ", ""):
                # An empty line is an empty context line (some tools strip the space).
                old_count -= 1
                new_count -= 1
            elif marker == "-":
                old_count -= 1
                self.removed += 1
                changed = True
            elif marker == "+":
                new_count -= 1
                self.added += 1
                changed = True
            elif marker == "\\":
                if not line.startswith("\\ "):
                    raise PatchRefused("malformed", f"bad line {line!r} in hunk {header!r}")
            else:
                raise PatchRefused(
                    "malformed", f"line {self.index + 1} does not match hunk {header!r} line counts"
                )
            if old_count < 0 or new_count < 0:
                raise PatchRefused("malformed", f"hunk {header!r} has more lines than its header says")
            if marker != "\\":
                hunk.lines.append(line if marker else " ")
            self.index += 1
        if not changed:
            raise PatchRefused("malformed", f"hunk {header!r} changes nothing")
        # "\ No newline at end of file" may follow the hunk's last line.
        line = self.line()
        if line is not None and line.startswith("\\"):
            if not line.startswith("\\ "):
                raise PatchRefused("malformed", f"bad line {line!r} after hunk {header!r}")
            self.index += 1
        line = self.line()
        if line is None or line.startswith(("@@", "diff --git ")) or line in ("", "-- "):
            return
        if line.startswith("--- ") and (nxt := self.line(1)) is not None and nxt.startswith("+++ "):
            return
        if line[:1] in (" ", "+", "-"):
            raise PatchRefused("malformed", f"hunk {header!r} has more lines than its header says")


def check_patch(patch: str, *, max_bytes: int = 1_000_000, max_files: int = 200) -> PatchSummary:
    """Parse ``patch`` and refuse it unless it is a well-formed, safe text diff.

    Returns the files it touches (as git will name them) and its added/removed line
    counts; raises PatchRefused with a reason code and a detail otherwise.
    """
    if not patch.strip():
        raise PatchRefused("empty", "the patch is empty")
    try:
        size = len(patch.encode("utf-8"))
    except UnicodeEncodeError:
        raise PatchRefused("malformed", "the patch is not valid text (lone surrogate)") from None
    if size > max_bytes:
        raise PatchRefused("too_large", f"{size} bytes > {max_bytes}")
    if "\x00" in patch:
        raise PatchRefused("binary", "NUL byte in the patch")
    parser = _Parser(patch)
    parser.parse()
    if parser.sections == 0:
        raise PatchRefused("malformed", "no file header ('diff --git' or '---'/'+++') found")
    if len(parser.files) > max_files:
        raise PatchRefused("too_many_files", f"{len(parser.files)} files > {max_files}")
    return PatchSummary(files=parser.files, added=parser.added, removed=parser.removed, changes=parser.changes)


_NAME_LINE = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)$")


def extract_touched_files(patch: str) -> list[str]:
    """The files ``patch`` names, as git will name them; never raises.

    For a patch that passes ``check_patch`` this is its ``files``; for any other text it is
    a best-effort reading of the header lines (useful in messages about a refused patch).
    """
    try:
        return check_patch(patch, max_bytes=max(1, len(patch) * 4 + 1), max_files=1 << 30).files
    except PatchRefused:
        pass
    names: list[str] = []
    lines = patch.split("\n")
    for position, line in enumerate(lines):
        line = line.rstrip("\r")
        if line.startswith("--- ") and not (
            position + 1 < len(lines) and lines[position + 1].startswith("+++ ")
        ):
            continue
        match = _NAME_LINE.match(line)
        if not match:
            continue
        raw = match.group(1)
        if raw.startswith('"'):
            try:
                raw, _ = _unquote(raw)
            except PatchRefused:
                continue
        else:
            raw = raw.split("\t", 1)[0]
        if raw == "/dev/null" or not raw:
            continue
        name = raw if line.startswith(("rename ", "copy ")) else _strip_component(raw)
        if name and name not in names:
            names.append(name)
    return names
