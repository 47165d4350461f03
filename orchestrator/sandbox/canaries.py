"""Control tests that prove a test runner honest: verdicts the code under test cannot forge.

A patch can change how its own tests are judged: a module under test, a test package's
``__init__.py`` or a test helper that replaces ``unittest.TestCase.assertEqual`` with a no-op,
or pytest's ``Function.runtest``, or the hook that writes the report, makes every test
"pass" whatever the code does. The report and the exit status are then written by the code
under test, so neither can be believed on its own.

So for the runners mesh reads (pytest and unittest), before a validation command runs in its
tree copy, mesh **appends control tests to a test module the command collects** (``plant``):
tests whose outcome mesh knows in advance. Each control set holds, in the unittest form every
runner collects (and for pytest also as plain functions):

- tests that **must fail**: plain tests whose assertion is false (an honest runner reports
  them failed; one whose assertions, test execution or reports were replaced reports them
  passed), and one marked as an expected failure (``unittest.expectedFailure``: reported as an
  unexpected success when assertions do nothing);
- tests that **must pass**: a runner that reports them failed, or does not report them while
  it reports the others, is not running tests as written.

An honest run therefore exits 1 (its control tests failed); ``testcounts.verdict`` reads it as
an exit status of 0 when the report's only failures are exactly the must-fail control tests
and nothing else failed or errored. (A pytest run whose status is 1 for another reason, a
coverage threshold, prints so: ``FAIL Required test coverage``, and stays failed.)

Their names, classes and values are drawn at random for each command from plain words, in
the module's own file, so they look like the tests around them; nothing on the command line,
in the environment or on disk outside the tree copy names them. After the run, ``judge``
reads each control test's outcome from the runner's report: a control test reported against
its nature fails the command as ``runner_forged``; the control tests are then taken out of
the counts, so a project's numbers are its own.

What remains possible (docs/forged-verdicts.md): code that knows the project's real test names
(from the repository a patch is written against) can stay honest for any test it does not
know, so a forger that targets known names is not caught; a control set that the runner
never collects (a ``-k``/``-m`` selection, a node id, a ``python_files`` pattern mesh did not
guess) leaves the run unchecked, which the command's output says.

May import the standard library and ``orchestrator.sandbox.node_output``.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.sandbox import node_output

__all__ = ["Planted", "RUNNERS", "Shown", "UNCHECKED", "clean_output", "judge", "plant", "test_module_for"]

# The runners control tests are planted for.
RUNNERS = ("pytest", "unittest", "django")
# What a command's output says when mesh's control tests were not part of its run.
UNCHECKED = ("mesh: none of its control tests or twins of the project's tests ran with this command (it selects"
             " tests or stops at a first failure, mesh did not find its test modules, or none of its tests ends in a"
             " check mesh can twin), so the runner's honesty is not checked")

_VERBS = ("parses", "keeps", "handles", "returns", "rejects", "accepts", "merges", "splits", "formats", "sorts",
          "reads", "counts", "matches", "updates", "resolves", "converts", "loads", "builds")
_NOUNS = ("empty_input", "boundary_values", "nested_items", "unicode_text", "large_numbers", "duplicates",
          "missing_keys", "whitespace", "order", "defaults", "negative_values", "long_lines", "single_item",
          "mixed_types", "trailing_newline", "repeated_calls")
_CLASSES = ("Behaviour", "EdgeCases", "Regressions", "Basics", "Roundtrip", "Values", "Inputs", "Output")
_SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "env", "node_modules", "__pycache__", "build", "dist",
                        ".tox", ".nox", "site-packages", ".eggs"})
_SELECTING = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--sw", "--stepwise", "--collect-only", "--co")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass
class Planted:
    """Control tests appended to ``path`` (host), whose text before was ``original``: each by
    (class, or the module's name for a plain function; test name), with the outcome it must
    have (``failed``, ``xfail`` or ``passed``)."""

    path: Path
    original: bytes
    expected: dict[tuple[str, str], str] = field(default_factory=dict)

    def remove(self) -> None:
        """Put the module back as it was."""
        self.path.write_bytes(self.original)


@dataclass
class Shown:
    """mesh's own tests in a command's run, to take out of what a person reads: their ``names``
    (control tests', twins', their classes'), how many were reported by outcome (``failed``,
    ``passed``, ``xfail``, ``errors``, ``skipped``), and whether any was reported (``checked``:
    the runner's honesty was put to the test)."""

    names: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)
    checked: bool = False
    runner: str = ""
    project_failed: bool = True  # a test of the project's own failed (or its report said nothing)
    # For each test of the run in the runner's order, whether it is mesh's (unittest's and
    # Django's progress marks are one per test, in that order).
    order: list[bool] = field(default_factory=list)


def _words(rng: random.Random, used: set[str]) -> str:
    while True:
        name = f"test_{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}"
        if name not in used:
            used.add(name)
            return name


def _values(rng: random.Random) -> tuple[list[int], int]:
    items = rng.sample(range(2, 60), rng.randint(3, 5))
    return items, sum(items)


def _source(rng: random.Random, pytest_form: bool, text: str, module_stem: str) -> tuple[str, dict[tuple[str, str], str]]:
    """The appended source and what each of its tests must do, by (class, or the module's
    name for a function; test name)."""
    used = set(re.findall(r"def (test\w+)", text))
    cls = f"Test{rng.choice(_CLASSES)}{rng.choice(_CLASSES)}"
    while f"class {cls}" in text:
        cls += rng.choice(_CLASSES)
    expected: dict[tuple[str, str], str] = {}
    unittest_name = "unittest" if re.search(r"^import unittest\s*$", text, re.M) else "_unittest"
    lines = ["", ""]
    if unittest_name == "_unittest":
        lines += ["import unittest as _unittest", "", ""]
    lines.append(f"class {cls}({unittest_name}.TestCase):")
    for index, outcome in enumerate(("failed", "passed", "xfail", "passed")):
        name = _words(rng, used)
        items, total = _values(rng)
        if index:
            lines.append("")
        if outcome == "xfail":
            lines.append(f"    @{unittest_name}.expectedFailure")
        lines += [f"    def {name}(self):",
                  f"        self.assertEqual(sum({items}), {total if outcome == 'passed' else total + rng.randint(1, 9)})"]
        expected[(cls, name)] = outcome
    if pytest_form:
        lines += ["", ""]
        for index, outcome in enumerate(("failed", "passed")):
            name = _words(rng, used)
            items, total = _values(rng)
            if index:
                lines += ["", ""]
            lines += [f"def {name}():",
                      f"    assert sum({items}) == {total if outcome == 'passed' else total + rng.randint(1, 9)}"]
            expected[(module_stem, name)] = outcome
    return "\n".join(lines).rstrip() + "\n", expected


def _is_test_file(name: str) -> bool:
    return name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py"))


# A module whose every test a line like these can skip or change: not one to carry control tests.
_MODULE_WIDE = re.compile(rb"^(pytestmark\b|def setUpModule|def tearDownModule|@pytest\.fixture\(.*autouse)", re.M)


def _plain_module(path: Path) -> bool:
    try:
        return _MODULE_WIDE.search(path.read_bytes()) is None
    except OSError:
        return False


def _first_test_file(root: Path, start: Path, *, packages_only: bool) -> Path | None:
    """The first test module under ``start`` with no module-wide mark, fixture or set-up (sorted
    walk; with ``packages_only``, only where unittest's discovery imports: every folder below
    ``start`` a package)."""
    for folder, dirs, files in os.walk(start):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")
                         and (not packages_only or os.path.isfile(os.path.join(folder, d, "__init__.py"))))
        for name in sorted(files):
            path = Path(folder) / name
            if _is_test_file(name) and not path.is_symlink() and path.is_file() and _plain_module(path):
                return path
    return None


def _inside(root: Path, rel: str) -> Path | None:
    path = (root / rel).resolve()
    top = root.resolve()
    return path if path == top or top in path.parents else None


def test_module_for(args: Sequence[str], runner: str, root: Path) -> Path | None:
    """The test module of the tree at ``root`` that a ``runner`` given ``args`` (its own
    arguments, after the program or ``-m runner``) collects, to carry the control tests; None
    when it cannot be known (a selection by keyword, mark or node id; a file mesh cannot find)."""
    args = list(args)
    if runner == "pytest":
        if any(arg.split("=", 1)[0] in _SELECTING or "::" in arg for arg in args):
            return None
        paths = [arg for arg in args if not arg.startswith("-") and (root / arg).exists()]
        for rel in paths or ["."]:
            path = _inside(root, rel)
            if path is None:
                continue
            if path.is_file():
                return path if path.suffix == ".py" else None
            found = _first_test_file(root, path, packages_only=False)
            if found is not None:
                return found
        return None
    # unittest: the module names given, or what discovery finds.
    if "-k" in args:
        return None
    if args and args[0] == "discover" or not [a for a in args if not a.startswith("-")]:
        start = "."
        rest = args[1:] if args and args[0] == "discover" else args
        for index, arg in enumerate(rest):
            if arg in ("-s", "--start-directory") and index + 1 < len(rest):
                start = rest[index + 1]
            if arg in ("-p", "--pattern") and rest[index + 1:index + 2] != ["test*.py"]:
                return None
        top = _inside(root, start)
        if top is None or not top.is_dir():
            return None
        found = _first_test_file(root, top, packages_only=True)
        return found if found is not None and found.name.startswith("test") else None
    for arg in args:
        if arg.startswith("-"):
            continue
        if arg.endswith(".py"):
            path = _inside(root, arg)
        elif _MODULE_NAME.match(arg):
            path = _inside(root, arg.replace(".", "/") + ".py")
        else:
            path = None
        if path is not None and path.is_file():
            return path
        return None  # a test case or method named: the control tests would not be loaded
    return None


def plant(args: Sequence[str], runner: str | None, root: Path, *, seed: int | None = None) -> Planted | None:
    """Append control tests to the module that a ``runner`` given ``args`` collects (in the
    tree copy at ``root``); None when there is none to append to (the runner is not one mesh
    reads, or the module cannot be known)."""
    if runner not in RUNNERS:
        return None
    module = test_module_for(args, runner, root)
    if module is None:
        return None
    original = module.read_bytes()
    text = original.decode("utf-8", "replace")
    rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "big"))
    source, expected = _source(rng, runner == "pytest", text, module.stem)
    module.write_bytes(original + (b"" if original.endswith(b"\n") or not original else b"\n") + source.encode())
    return Planted(module, original, expected)


def judge(planted: Planted, outcomes: Mapping[tuple[str, str], str]) -> tuple[str | None, str, bool]:
    """(why the runner's verdicts are forged or None, a note for the command's output, whether
    every control test had exactly its outcome) from the control tests' ``outcomes`` as the
    report has them (``passed``, ``failed``, ``errors``, ``skipped``, ``xfail``), keyed by (the
    last part of the test's class or module, test name).

    Forged: a test that must fail reported passed. A control test that did not run as written
    (skipped by a module-wide mark, failing where it must pass) makes the run unchecked, not
    forged: that cannot turn a failure into a pass."""
    seen = {key: outcomes[key] for key in planted.expected if key in outcomes}
    if not seen:
        return None, UNCHECKED, False
    for key, must in planted.expected.items():
        got = seen.get(key)
        if must != "passed" and got in ("passed", "xpass"):
            return "runner_forged", (f"mesh: the test runner's verdicts are forged: mesh's control test "
                                     f"{key[0]}.{key[1]} (an assertion that must fail) was reported passed; a module,"
                                     " test package or helper replaced the runner's assertions, how it runs tests or"
                                     " what it reports"), False
    if any(seen.get(key) != must for key, must in planted.expected.items()):
        odd = next(f"{key[0]}.{key[1]} was {seen.get(key, 'not reported')}" for key, must in planted.expected.items()
                   if seen.get(key) != must)
        return None, (f"mesh: its control tests did not run as written ({odd}), so the runner's honesty is not"
                      " checked"), False
    return None, "", True


_PYTEST_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")
_PYTEST_SUMMARY = re.compile(r"^(=+ )?(\d+ [\w ]+(?:, \d+ [\w ]+)*) in ([\d.]+s(?: \([^)]*\))?)( =+)?$")
_UNITTEST_RULE = "=" * 70
_EMPTY_SECTION = re.compile(r"^=+ (FAILURES|ERRORS|short test summary info|XFAIL.*) =+$")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ")
# Django's runner says how many tests it found before running them.
_DJANGO_FOUND = re.compile(r"^Found (\d+) test(\(s\)|s?)\.$")
_UNITTEST_RESULT = re.compile(r"^(OK|FAILED)(?: \((.*)\))?$")


def clean_output(shown: Shown, text: str) -> str:
    """``text`` (a runner's output) as it would read without mesh's own tests (``shown``): their
    failure sections and result lines taken out, the closing counts put back to the project's
    own. The output is the code under test's writing either way; this only keeps mesh's tests
    from confusing a person or a worker (and from naming them)."""
    if not shown.names:
        return text
    mine = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(re.escape(name) for name in sorted(shown.names, key=len, reverse=True))
                      + r")(?![A-Za-z0-9_])")
    counts = {"failed": 0, "passed": 0, "xfail": 0, "errors": 0, "skipped": 0, **shown.counts}
    if shown.runner == "vitest":
        return node_output.clean_vitest(text, mine, counts)
    if shown.runner == "jest":
        return node_output.clean_jest(text, mine, counts, shown.project_failed)
    if shown.runner == "node --test":
        return node_output.clean_node_test(text, mine, counts, shown.project_failed)
    if shown.runner == "tape":
        return node_output.clean_tap(text, mine, counts)
    out: list[str] = []
    dropping = False
    lines = text.split("\n")
    for index, line in enumerate(lines):
        header = _PYTEST_HEADER.match(line)
        if header is not None:
            dropping = bool(mine.search(header.group(1)))
        elif line.startswith("=") or _UNITTEST_RAN.match(line) or (
                line == "-" * 70 and index + 1 < len(lines) and _UNITTEST_RAN.match(lines[index + 1])):
            dropping = False
        if line == _UNITTEST_RULE and index + 1 < len(lines) and mine.search(lines[index + 1]):
            dropping = True
        if dropping or mine.search(line):
            continue
        out.append(_recount(line, counts))
    ordered = _without_marks_in_order(out, shown.order) if shown.runner in ("unittest", "django") else None
    out = ordered if ordered is not None else _without_progress_marks(out, counts)
    # Section headers left with nothing under them (pytest's FAILURES when only mesh's failed).
    return "\n".join(line for index, line in enumerate(out)
                     if not (_EMPTY_SECTION.match(line) and (index + 1 == len(out) or out[index + 1].startswith("=")
                                                             or _PYTEST_SUMMARY.match(out[index + 1].strip()))))


_PROGRESS = re.compile(r"^(?P<file>\S+\.py )?(?P<marks>[.FEsxX]+)(?P<rest>\s+\[\s*\d+%\])?$")


def _without_marks_in_order(lines: list[str], order: Sequence[bool]) -> list[str] | None:
    """unittest's progress lines (``..F.sx``, one mark per test in the order the tests ran) without
    the marks of mesh's tests, by their places in ``order``; None when the marks shown are not
    one per test of the run (output of the tests' own between them, subtests)."""
    rows = [(index, match) for index, line in enumerate(lines)
            if (match := _PROGRESS.match(line.strip())) is not None and not match.group("file")
            and not match.group("rest")]
    if not rows or not any(order) or sum(len(match.group("marks")) for _, match in rows) != len(order):
        return None
    out = list(lines)
    position = 0
    for index, match in rows:
        marks = match.group("marks")
        out[index] = "".join(mark for offset, mark in enumerate(marks) if not order[position + offset])
        position += len(marks)
    emptied = {index for index, _ in rows if not out[index]}
    return [line for index, line in enumerate(out) if index not in emptied]


def _without_progress_marks(lines: list[str], counts: Mapping[str, int]) -> list[str]:
    """Progress lines (pytest's ``..F.s [ 40%]``, unittest's ``..F.``) without the marks of
    mesh's failed tests, when every ``F`` and ``E`` in them is mesh's (their numbers match)."""
    found = {index: _PROGRESS.match(line.strip()) for index, line in enumerate(lines)}
    rows = {index: match for index, match in found.items() if match is not None}
    failed = sum(match.group("marks").count("F") for match in rows.values())
    errors = sum(match.group("marks").count("E") for match in rows.values())
    if not (failed or errors) or failed != counts.get("failed", 0) or errors != counts.get("errors", 0):
        return lines
    out = list(lines)
    for index, match in rows.items():
        marks = match.group("marks").replace("F", "").replace("E", "")
        out[index] = f"{match.group('file') or ''}{marks}{match.group('rest') or ''}" if marks else ""
    return [line for index, line in enumerate(out) if line or index not in rows]


def _recount(line: str, counts: Mapping[str, int]) -> str:
    """A closing line of pytest or unittest (or Django's "Found N test(s).") with mesh's control
    tests taken out of its numbers."""
    found = _PYTEST_SUMMARY.match(line.strip())
    if found is not None:
        take = {"failed": counts["failed"], "passed": counts["passed"], "xfailed": counts["xfail"],
                "error": counts["errors"], "errors": counts["errors"], "skipped": counts["skipped"]}
        parts = []
        for part in found.group(2).split(", "):
            term = re.fullmatch(r"(\d+) (\w+)", part)
            if term is not None and term.group(2) in take:
                left = int(term.group(1)) - take[term.group(2)]
                word = term.group(2) if term.group(2) not in ("error", "errors") else "error" if left == 1 else "errors"
                part = f"{left} {word}" if left > 0 else ""
            if part:
                parts.append(part)
        return f"{found.group(1) or ''}{', '.join(parts) or 'no tests ran'} in {found.group(3)}{found.group(4) or ''}"
    found_line = _DJANGO_FOUND.match(line)
    if found_line is not None:
        total = int(found_line.group(1)) - sum(counts.values())
        return f"Found {total} test{found_line.group(2)}."
    ran = _UNITTEST_RAN.match(line)
    if ran is not None:
        total = int(ran.group(1)) - sum(counts.values())
        return _UNITTEST_RAN.sub(f"Ran {total} test{'s' if total != 1 else ''} in ", line)
    result = _UNITTEST_RESULT.match(line)
    if result is not None:
        terms = dict(term.split("=", 1) for term in (result.group(2) or "").split(", ") if "=" in term)
        for key, mine in (("failures", counts["failed"]), ("expected failures", counts["xfail"]),
                          ("errors", counts["errors"]), ("skipped", counts["skipped"])):
            if key in terms:
                left = int(terms[key]) - mine
                terms = {k: v for k, v in terms.items() if k != key} if left <= 0 else {**terms, key: str(left)}
        state = "FAILED" if any(key in terms for key in ("failures", "errors", "unexpected successes")) else "OK"
        return state + (f" ({', '.join(f'{k}={v}' for k, v in terms.items())})" if terms else "")
    return line
