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

__all__ = ["Collected", "Judgement", "MAX_LINKED", "MAX_SAMPLED", "Mutator", "Planting", "Twin", "fresh_name",
           "judge", "plan_files"]

# At most this many twins per command: in the files that reach the change (or that the command
# names), and, when none does, in a sample of the others. Each twin costs about its original.
MAX_LINKED = 120
MAX_SAMPLED = 24
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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


@dataclass(frozen=True)
class Collected:
    """The test files (relative to the tree) a command collects, in order, and, when the command
    names its tests, which ones by file: {file: {(scope, name)}}."""

    files: tuple[str, ...]
    named: Mapping[str, frozenset[tuple[str, str]]] | None = None
    explicit: bool = False  # the command names these files itself


class Mutator(Protocol):
    """One language's twins (a module of this package, a row of ``table.MUTATORS``)."""

    def collected(self, args: Sequence[str], runner: str, root: Path) -> Collected | None:
        """What a ``runner`` given ``args`` (its own arguments) collects in the tree at ``root``;
        None when mesh cannot know (a selection by keyword or pattern, an option that stops at the
        first failure)."""

    def twin(self, rel: str, text: str, rng: random.Random, wanted: frozenset[tuple[str, str]] | None,
             taken: set[str], limit: int) -> tuple[str, list[Twin]]:
        """``text`` (the file ``rel``) with up to ``limit`` twins added (of ``wanted`` tests only,
        when given), and the twins; names in ``taken`` are not used (and new ones are added)."""

    def reaches(self, rel: str, text: str, changed: Sequence[str]) -> int:
        """How closely the test file ``rel`` reaches the ``changed`` files: 2 (it names a changed
        module, or is changed), 1 (it names a package holding one), 0."""

    def selection_args(self, runner: str, twins: Sequence[Twin]) -> list[str]:
        """Arguments to add so that a ``runner`` command that names its tests runs ``twins`` too."""


def fresh_name(rng: random.Random, original: str, words: Sequence[str], taken: set[str]) -> str:
    """A test name in the style of ``original`` (its prefix, snake or camel case), made of
    ``words`` (those of the tests around it), not in ``taken`` (and added to it)."""
    prefix = re.match(r"^(test_?|Test_?|it_|should_?)?", original).group(0) or ""
    camel = "_" not in original[len(prefix):] and any(ch.isupper() for ch in original[len(prefix):])
    pool = [w for w in dict.fromkeys(words) if w.isalnum()] or ["case", "value", "input", "result", "check"]
    for attempt in range(200):
        count = 2 + (attempt // 50) + rng.randint(0, 1)
        parts = [rng.choice(pool) for _ in range(count)]
        if camel or (prefix and prefix[-1].isupper() and "_" not in prefix):
            body = "".join(part[:1].upper() + part[1:] for part in parts)
        else:
            body = "_".join(part.lower() for part in parts)
        name = f"{prefix}{body}"
        if name not in taken and name.isidentifier():
            taken.add(name)
            return name
    name = f"{prefix}{'_'.join(rng.choice(pool) for _ in range(3))}_{rng.randint(2, 999)}"
    taken.add(name)
    return name


def name_words(names: Sequence[str]) -> list[str]:
    """The words test names are made of (``test_parse_empty_input`` -> parse, empty, input)."""
    words: list[str] = []
    for name in names:
        stripped = re.sub(r"^(test_?|Test_?|it_|should_?)", "", name)
        for part in re.split(r"_+", stripped):
            words.extend(w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", part) if len(w) > 1)
    return words


def plan_files(mutator: Mutator, collected: Collected, root: Path, changed: Sequence[str],
               rng: random.Random) -> list[tuple[str, frozenset[tuple[str, str]] | None, int]]:
    """Which files get twins, of which tests, at most how many: the tests a command names; else
    the files it names; else those that reach the ``changed`` files (closest first), up to
    ``MAX_LINKED`` twins; when none reaches them, a random few of the others (``MAX_SAMPLED``)."""
    if collected.named is not None:
        return [(rel, frozenset(names), MAX_LINKED) for rel, names in collected.named.items()]
    if collected.explicit:
        return [(rel, None, MAX_LINKED) for rel in collected.files]
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
        return [(rel, None, MAX_LINKED) for _, rel in sorted(ranked)]
    others = list(collected.files)
    rng.shuffle(others)
    return [(rel, None, MAX_SAMPLED) for rel in others]


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
    for case in run.cases:
        tokens = set(_TOKEN.findall(case.id)) & by_name.keys()
        if not tokens:
            continue
        twin = by_name[sorted(tokens)[0]]
        seen.add(twin.mutant)
        out.ids.add(case.id)
        out.reported += 1
        if case.status in ("failed", "errored"):
            out.failed += 1
        original_id = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(twin.mutant)}(?![A-Za-z0-9_])", twin.original.replace("\\", "\\\\"),
                             case.id, count=1)
        original = status.get(original_id)
        if out.forged is None and ((original == "passed" and case.status in ("passed", "skipped"))
                                   or (original is None and case.status == "passed")):
            out.forged = (f"{case.id} (a copy of {original_id} expecting another value, so it must fail) was"
                          f" reported {case.status}" + ("" if original else f" and {original_id} not at all"))
    if out.forged is None:
        for twin in twins:
            if twin.mutant in seen:
                continue
            wanted = {twin.original, *twin.marks}
            passed = next((case.id for case in run.cases if case.status == "passed"
                           and wanted <= set(_TOKEN.findall(case.id))), None)
            if passed is not None:
                out.forged = (f"{passed} passed, and its copy expecting another value ({twin.mutant}), which must"
                              " fail, was not reported at all")
                break
    return out
