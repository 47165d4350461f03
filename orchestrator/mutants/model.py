"""What every language's twins share: the ``Twin``, the ``Mutator`` protocol, the twins' names,
which files a command's twins go to, and how a run's report is judged.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestrator.testruns.model import Run

__all__ = ["Candidate", "Collected", "Taken", "Judgement", "MAX_LINKED", "MAX_NAMED", "MAX_SAMPLED", "Mutator", "Planting",
           "Twin", "changed_names", "fresh_name", "judge", "plan_files"]

# At most this many twins per command: of the tests a command names; in the files that reach
# the change, those that call what it changed first; and, when no file reaches it, in a sample
# of the others. A twin costs about its original, and its failure's report.
MAX_NAMED = 200
MAX_LINKED = 32
MAX_SAMPLED = 12
_TOKEN = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
# A line defining a function, method, type or constant, by file suffix: the names a change touches.
_DEFINITIONS: dict[str, re.Pattern[str]] = {
    ".py": re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)"),
    ".go": re.compile(r"^(?:func\s+(?:\([^)]*\)\s*)?|type\s+|var\s+|const\s+)([A-Za-z_]\w*)"),
    ".rs": re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern \"C\")\s+)*"
                      r"(?:fn|struct|enum|trait|type|const|static)\s+([A-Za-z_]\w*)"),
    ".js": re.compile(r"^\s*(?:export\s+(?:default\s+)?)?(?:async\s+)?(?:function\s*\*?\s*([A-Za-z_$][\w$]*)"
                      r"|(?:const|let|var|class)\s+([A-Za-z_$][\w$]*))"
                      r"|^\s*(?:static\s+|async\s+|get\s+|set\s+)*([A-Za-z_$][\w$]*)\s*\([^)]*\)\s*\{"
                      r"|^\s*(?:module\.)?exports\.([A-Za-z_$][\w$]*)\s*="),
}
for _suffix in (".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".mts", ".cts"):
    _DEFINITIONS[_suffix] = _DEFINITIONS[".js"]
# A name bound at a file's top level by assignment (``mean = lambda xs: ...``, ``module.exports.f =``).
_ASSIGNED = re.compile(r"^(?:module\.)?(?:exports\.)?([A-Za-z_$][\w$]*)\s*(?::[^=]*)?=(?!=)")
_NOT_NAMES = frozenset({"if", "for", "while", "switch", "catch", "function", "return", "constructor", "main", "init",
                        "test", "setUp", "tearDown", "new", "default"})


@dataclass(frozen=True)
class Twin:
    """A copy named ``mutant`` of the test ``original`` (in ``scope``: its class, suite or
    package, '' at a module's top) of the file ``file`` (relative to the tree), whose last
    assertion expects another value. ``marks``: words every report id of the original holds
    (its file's or package's name, its scope), to find the original's results when the twin
    went unreported."""

    file: str
    scope: str
    original: str
    mutant: str
    marks: tuple[str, ...] = ()
    # Where it went: after this line of the file as it was, this many lines.
    at: int = 0
    size: int = 0


@dataclass
class Planting:
    """Twins planted in a tree copy: the files they went into with their text before, the twins
    and the arguments that make the command run them (a command that names its tests)."""

    originals: dict[Path, bytes] = field(default_factory=dict)
    twins: list[Twin] = field(default_factory=list)
    args: list[str] = field(default_factory=list)

    def remove(self) -> None:
        """Put every file back as it was."""
        for path, text in self.originals.items():
            path.write_bytes(text)

    def names(self) -> set[str]:
        return {twin.mutant for twin in self.twins}

    def original_line(self, rel: str, line: int) -> int:
        """The line of ``rel`` as it was that its line ``line`` (with the twins) is."""
        shift = 0
        for twin in sorted((t for t in self.twins if t.file == rel), key=lambda t: t.at):
            if line <= twin.at + shift:
                break
            if line <= twin.at + shift + twin.size:
                return twin.at  # a twin's own line: its original's end
            shift += twin.size
        return line - shift

    def unshift(self, text: str) -> str:
        """``text`` (output, a failure's message) with the line numbers of the files that got
        twins given back as those files have them (``path:LINE``, ``path", line LINE``)."""
        files = sorted({twin.file for twin in self.twins}, key=len, reverse=True)
        if not files or not text:
            return text
        names = "|".join(re.escape(Path(rel).name) for rel in files)
        # A path starts where no path character stands before it: tried anywhere inside a long
        # word, the pattern would read that word once from each of its characters.
        pattern = re.compile(rf"(?<![\w.@+/-])((?:[\w.@+-]*/)*(?:{names}))(:|\"?, line )(\d+)")

        def fix(found: re.Match[str]) -> str:
            path = found.group(1)
            rel = next((rel for rel in files if path == rel or path.endswith("/" + rel)
                        or rel.endswith("/" + path) or Path(rel).name == path), None)
            if rel is None:
                return found.group(0)
            return f"{path}{found.group(2)}{self.original_line(rel, int(found.group(3)))}"

        return pattern.sub(fix, text)


class Taken(set):
    """Names no twin may take: every word of the files a command collects (a twin's name is new
    to all of them, so a report id holding it is the twin's), and those texts themselves (a
    title with spaces must be no part of any)."""

    def __init__(self, corpus: Sequence[str] = ()) -> None:
        super().__init__()
        self.corpus = list(corpus)
        for text in self.corpus:
            self.update(_TOKEN.findall(text))

    def free(self, name: str) -> bool:
        """Whether ``name`` may be taken: no name taken, no part of any collected text."""
        return name not in self and not any(name in text for text in self.corpus)


@dataclass(frozen=True)
class Collected:
    """The test files (relative to the tree) a command collects, in order, and, when the command
    names its tests, which ones by file: {file: {(scope, name)}}."""

    files: tuple[str, ...]
    named: Mapping[str, frozenset[tuple[str, str]]] | None = None
    explicit: bool = False  # the command names these files itself
    # The words a report id of a folder's tests holds, where the file alone does not say them
    # (a Go module's root package: its module path's last element).
    marks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidate:
    """A test that can be twinned: its ``scope`` and ``name``, and the ``words`` its body uses."""

    scope: str
    name: str
    words: frozenset[str]


class Mutator(Protocol):
    """One language's twins (a module of this package, a row of ``table.MUTATORS``)."""

    def collected(self, args: Sequence[str], runner: str, root: Path) -> Collected | None:
        """What a ``runner`` given ``args`` (its own arguments) collects in the tree at ``root``;
        None when mesh cannot know (a selection by keyword or pattern, an option that stops at the
        first failure)."""

    def candidates(self, rel: str, text: str) -> list[Candidate]:
        """The tests of ``text`` (the file ``rel``) that can be twinned."""

    def twin(self, rel: str, text: str, rng: random.Random, chosen: frozenset[tuple[str, str]],
             taken: set[str]) -> tuple[str, list[Twin]]:
        """``text`` (the file ``rel``) with a twin of each ``chosen`` test added after it, and the
        twins; names in ``taken`` (and the file's own) are not used, new ones are added."""

    def reaches(self, rel: str, text: str, changed: Sequence[str]) -> int:
        """How closely the test file ``rel`` reaches the ``changed`` files: 2 (it names a changed
        module, or is changed), 1 (it names a package holding one), 0."""

    def selection_args(self, runner: str, twins: Sequence[Twin]) -> list[str]:
        """Arguments to add so that a ``runner`` command that names its tests runs ``twins`` too."""


def fresh_name(rng: random.Random, original: str, words: Sequence[str], taken: set[str]) -> str:
    """A test name made from ``original`` itself, in its exact form (prefix, separators, case of
    each part): one of its parts swapped for a word of the tests around it (``words``), or such a
    word put in among them, styled like the parts beside it; so that neither name tells which of
    the two is the copy. Not in ``taken`` (and added to it)."""
    prefix = re.match(r"^(test_?|Test_?|it_|should_?)?", original).group(0) or ""
    body = original[len(prefix):]
    snake = "_" in body or not any(ch.isupper() for ch in body)
    parts = body.split("_") if snake else re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+|[0-9]+|[^A-Za-z0-9]+", body)
    parts = parts or [body or "case"]
    own = {part.lower() for part in parts}
    pool = [w for w in dict.fromkeys(words) if w.isalnum() and w.lower() not in own] or [
        "case", "value", "input", "result"]

    def styled(word: str, like: str) -> str:
        if like.isupper() and len(like) > 1:
            return word.upper()
        if like[:1].isupper() or (not snake):
            return word[:1].upper() + word[1:].lower()
        return word.lower()

    for attempt in range(200):
        changed = list(parts)
        if len(changed) > 1 and (rng.random() < 0.5 or attempt >= 50):
            at = rng.randrange(len(changed))
            changed[at] = styled(rng.choice(pool), changed[at])
        if changed == parts or attempt >= 50:
            at = rng.randrange(len(changed) + 1)
            beside = changed[at - 1] if at else changed[0]
            changed.insert(at, styled(rng.choice(pool), beside))
        name = prefix + ("_" if snake else "").join(changed)
        if name != original and name.isidentifier() and (taken.free(name) if isinstance(taken, Taken)
                                                         else name not in taken):
            taken.add(name)
            return name
    name = f"{prefix}{'_'.join(rng.choice(pool) for _ in range(3))}_{rng.randint(2, 999)}"
    taken.add(name)
    return name


def mixed_words(rng: random.Random, own: Sequence[str], pool: Sequence[str], attempt: int) -> list[str]:
    """``own`` (an original's words, in their order) with one swapped for a word of ``pool`` or
    one of ``pool`` put in among them (a later ``attempt`` does both): a name as natural as the
    original's, so neither reads as the made one."""
    parts = list(own)
    change = rng.choice(("swap", "add")) if len(parts) > 1 else "add"
    if change == "swap" or attempt >= 50:
        parts[rng.randrange(len(parts))] = rng.choice(pool)
    if change == "add" or attempt >= 50:
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(pool))
    return parts


# The largest value of each integer width: a typed literal moved past one may not compile.
_WIDTHS = tuple((1 << bits) - 1 for bits in (7, 8, 15, 16, 31, 32, 63, 64))


def moved_integer(value: int, rng: random.Random, typed: bool) -> int:
    """``value`` (a literal's, its sign apart) moved by 1..9, up or down at random, so that the
    direction never tells the copy from its original; ``typed`` (Go, Rust): never below 0 nor
    past the largest value of a width it is within."""
    shift = rng.randint(1, 9)
    up = value + shift
    down = value - shift
    can_up = not typed or not any(value <= top < up for top in _WIDTHS)
    can_down = not typed or down >= 0
    if can_up and can_down:
        return up if rng.random() < 0.5 else down
    return up if can_up else down


def edited_text(inner: str, rng: random.Random) -> str:
    """``inner`` (a string literal's characters, escapes as written) with one letter added,
    removed or changed, at random, where no escape is touched: a copy's string is as likely
    shorter as longer than its original's."""
    safe = [index for index, ch in enumerate(inner) if ch.isalnum() and (index == 0 or inner[index - 1] != "\\")]
    letters = "abcdefghkmnprstuvwxyz"
    operation = rng.choice(["add", "remove", "change"] if safe else ["add"])
    if operation == "add":
        at = rng.choice([*safe, len(inner)])
        return inner[:at] + rng.choice(letters) + inner[at:]
    at = rng.choice(safe)
    if operation == "remove":
        return inner[:at] + inner[at + 1:]
    return inner[:at] + rng.choice([ch for ch in letters if ch != inner[at].lower()]) + inner[at + 1:]


def name_words(names: Sequence[str]) -> list[str]:
    """The words test names are made of (``test_parse_empty_input`` -> parse, empty, input)."""
    words: list[str] = []
    for name in names:
        stripped = re.sub(r"^(test_?|Test_?|it_|should_?)", "", name)
        for part in re.split(r"_+", stripped):
            words.extend(w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", part) if len(w) > 1)
    return words


def changed_names(root: Path, changed: Mapping[str, Sequence[tuple[int, int]]]) -> frozenset[str]:
    """The names of the functions, methods, types and constants whose definitions hold (or
    precede) the lines ``changed`` (path: hunks' line ranges in the tree at ``root``)."""
    names: set[str] = set()
    for rel, ranges in list(changed.items())[:200]:
        pattern = _DEFINITIONS.get(Path(rel).suffix)
        if pattern is None or not ranges:
            continue
        try:
            lines = (root / rel).read_text(encoding="utf-8", errors="replace").splitlines()[:50_000]
        except OSError:
            continue
        defined: list[tuple[int, str]] = []
        for number, line in enumerate(lines, 1):
            match = pattern.match(line) or _ASSIGNED.match(line)
            if match is not None:
                name = next(group for group in match.groups() if group)
                if name not in _NOT_NAMES:
                    defined.append((number, name))
        known = {name for _, name in defined}
        for first, count in ranges:
            last = first + max(count, 1) - 1
            before = [name for number, name in defined if number <= first]
            names.update(before[-1:])
            names.update(name for number, name in defined if first <= number <= last)
            # A name the changed lines use that the file defines (a rebinding after the last
            # definition, a helper called from the change) is the change's too.
            for line in lines[first - 1:last]:
                names.update(set(_TOKEN.findall(line)) & known)
    return frozenset(names)


def plan_files(mutator: Mutator, collected: Collected, root: Path, changed: Sequence[str],
               rng: random.Random) -> tuple[list[tuple[str, frozenset[tuple[str, str]] | None]], int]:
    """Which files' tests may get twins (with the tests a command names, by file) and how many
    twins in all: the tests a command names; else every file it names; else the files that
    reach the ``changed`` paths (closest first), up to ``MAX_LINKED``; when none reaches them,
    a random order of the others, up to ``MAX_SAMPLED``."""
    if collected.named is not None:
        return [(rel, frozenset(names)) for rel, names in collected.named.items()], MAX_NAMED
    if collected.explicit:
        return [(rel, None) for rel in collected.files], MAX_NAMED
    ranked: list[tuple[int, str]] = []
    for rel in collected.files:
        try:
            text = (root / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        rank = mutator.reaches(rel, text, changed) if changed else 0
        if rank:
            ranked.append((-rank, rel))
    if ranked:
        return [(rel, None) for _, rel in sorted(ranked)], MAX_LINKED
    others = list(collected.files)
    rng.shuffle(others)
    return [(rel, None) for rel in others], MAX_SAMPLED


@dataclass
class Judgement:
    """A run's twins judged: ``forged`` (a line saying which twin was reported against its
    nature) or None; the report ids that are twins' (``ids``, to take out of the counts); how
    many twins' results failed (``failed``: an honest run's exit status 1 is theirs)."""

    forged: str | None = None
    ids: set[str] = field(default_factory=set)
    failed: int = 0
    reported: int = 0


def judge(twins: Sequence[Twin], run: Run) -> Judgement:
    """The twins' results in ``run`` (each report id holding a twin's name is the twin's; its
    original's id is the same with the original's name). A twin reported passed or skipped
    while its original passed, passed while its original went unreported, or unreported while
    its original passed, means the verdicts were forged."""
    out = Judgement()
    if not twins:
        return out
    by_name = {twin.mutant: twin for twin in twins}
    status = {case.id: case.status for case in run.cases}
    seen: set[str] = set()
    named = re.compile(r"(?<![A-Za-z0-9_$])(" + "|".join(re.escape(name) for name in sorted(by_name, key=len, reverse=True))
                       + r")(?![A-Za-z0-9_$])")
    for case in run.cases:
        # A twin's name (or title) is new to every file the command collects (``planting``):
        # wherever it shows, it is the twin (in its class, or a subclass that inherits it).
        # (The names are looked for as plain text first: the pattern alone costs milliseconds an id.)
        found = named.search(case.id) if any(name in case.id for name in by_name) else None
        if found is None:
            continue
        twin = by_name[found.group(1)]
        seen.add(twin.mutant)
        out.ids.add(case.id)
        out.reported += 1
        if case.status in ("failed", "errored"):
            out.failed += 1
        original_id = case.id[:found.start(1)] + twin.original + case.id[found.end(1):]
        original = status.get(original_id)
        if out.forged is None and ((original == "passed" and case.status in ("passed", "skipped"))
                                   or (original is None and case.status == "passed")):
            out.forged = (f"a copy of {original_id} that must fail (it expects another value) was reported"
                          f" {case.status}" + ("" if original else f", and {original_id} not at all")
                          + f" (the copy: {case.id})")
    if out.forged is None:
        for twin in twins:
            if twin.mutant in seen or not twin.marks:
                continue  # without its file's or package's words, another's test could be taken for it
            wanted = {twin.original, *twin.marks}
            passed = next((case.id for case in run.cases if case.status == "passed"
                           and wanted <= set(_TOKEN.findall(case.id))), None)
            if passed is not None:
                out.forged = (f"{passed} passed, and a copy of it that must fail (it expects another value) was"
                              f" not reported at all (the copy: {twin.mutant})")
                break
    return out
