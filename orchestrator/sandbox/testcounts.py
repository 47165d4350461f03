"""How many tests a validation command ran, from its test runner's own report.

An exit status of 0 proves nothing when no test ran: a patch appending ``os._exit(0)`` to
``tests/__init__.py`` ends the runner during collection with status 0, and a ``conftest.py``
that deselects or skips every test makes an empty run succeed. For the runners mesh knows,
validation therefore asks the runner for a machine-readable report written to a folder
outside the tree under test (``SANDBOX_REPORT`` inside the sandbox), and a command that
exited 0 still fails when the report is missing (``no_test_report``), unreadable
(``test_report_unreadable``), lists a failed test (``tests_failed``) or lists no test that ran
(``no_tests_ran``).

- pytest (``pytest``, ``py.test``, ``python -m pytest``): ``--junitxml=PATH`` is added right
  after the program (a later ``--junitxml`` of the command wins and leaves mesh's file
  missing, which fails).
- unittest (``python -m unittest``): it has no report of its own, and its closing
  "Ran N tests" line is stderr that a test can print itself, so the command runs through a
  few lines given with ``-c`` (``UNITTEST_SHIM``) that are ``python -m unittest`` plus a
  runner writing the result's counts as JSON.

The argument is added after the allowlist admitted the command: it is mesh's, not the
model's. The report file is made empty before the command starts, owned by the user the
sandbox runs as, in a folder that user cannot write (when mesh runs as root): the command
can fill that one file up to the file-size limit, not create others on the host's disk, nor
put a symlink or a FIFO in its place. The report is written by the runner, in the same processes as the tests that model
output controls, so it is read as hostile input (a size cap, a regular file only, no DOCTYPE
or entity declarations) and its counts are only ever a reason to fail a command, never to
pass one whose exit status failed. Test code can still forge a report; see
docs/security.md.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import xml.parsers.expat
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from orchestrator.sandbox import canaries

__all__ = [
    "REPORT_REASONS",
    "SANDBOX_REPORT",
    "UNITTEST_SHIM",
    "Probe",
    "ReportError",
    "TestCounts",
    "instrument",
    "junit_outcomes",
    "parse_junit",
    "parse_unittest",
    "prepare",
    "read_report",
    "commands_phrase",
    "runner_args",
    "runner_counts_phrase",
    "unittest_outcomes",
    "verdict",
]

# Where a sandboxed command writes its report: a folder of its own, not inside the tree.
SANDBOX_REPORT = "/mesh/report"
REPORT_REASONS = ("no_test_report", "test_report_unreadable", "tests_failed", "no_tests_ran", "runner_forged")
# A report larger than this is not read: pytest's report lists one short element per test.
MAX_REPORT_BYTES = 32 << 20
_JUNIT_NAME = "junit.xml"
_UNITTEST_NAME = "unittest.json"
_PYTHON = re.compile(r"python(?:3(?:\.\d+)?)?")
# Interpreter options that take a value as the next argument; any other option stands alone.
_PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X")

UNITTEST_SHIM = """\
import json, sys, unittest
report = sys.argv.pop(1)
sys.argv[0] = "python -m unittest"
class MeshResult(unittest.TextTestResult):
    def startTest(self, test):
        self.mesh_ids = getattr(self, "mesh_ids", [])
        if len(self.mesh_ids) < 200000:
            self.mesh_ids.append(test.id())
        super().startTest(test)
class MeshCountingRunner(unittest.TextTestRunner):
    resultclass = MeshResult
    def run(self, test):
        result = super().run(test)
        ids = lambda pairs: [case.id() for case, *_ in pairs][:200000]
        plain = lambda cases: [case.id() for case in cases][:200000]
        counts = {"tests_run": result.testsRun, "failures": len(result.failures), "errors": len(result.errors),
                  "skipped": len(result.skipped), "unexpected_successes": len(result.unexpectedSuccesses),
                  "outcomes": {"failed": ids(result.failures), "errors": ids(result.errors),
                               "skipped": ids(result.skipped), "xfail": ids(result.expectedFailures),
                               "xpass": plain(result.unexpectedSuccesses),
                               "ran": getattr(result, "mesh_ids", [])}}
        with open(report, "w", encoding="utf-8") as handle:
            json.dump(counts, handle)
        return result
unittest.main(module=None, testRunner=MeshCountingRunner)
"""


class ReportError(ValueError):
    """A test report that cannot be trusted to be one: its message says why, in one line."""


@dataclass(frozen=True)
class TestCounts:
    """What one command's test runner reports: tests that ran (skipped ones excluded), and of
    those how many passed, failed (an assertion) or errored; plus the skipped ones, and the
    collection errors (a test module that could not be imported or collected: an error, not a
    test that ran)."""

    __test__ = False  # not a pytest test class, whatever its name

    runner: str
    ran: int
    passed: int
    failed: int
    errors: int
    skipped: int
    collection_errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (``collection_errors`` only when there were some, so
        what a clean run stores is what it always stored)."""
        out = asdict(self)
        if not self.collection_errors:
            del out["collection_errors"]
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> TestCounts | None:
        """The counts of a stored dict, or None when it is not one mesh writes (a checkpoint
        is tracker text: a forged or damaged one must not break whoever reads it)."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("runner"), str):
            return None
        numbers = {name: raw.get(name) for name in ("ran", "passed", "failed", "errors", "skipped")}
        numbers["collection_errors"] = raw.get("collection_errors", 0)  # absent from older checkpoints
        if not all(type(value) is int and value >= 0 for value in numbers.values()):
            return None
        return cls(runner=raw["runner"], **numbers)

    def line(self) -> str:
        """``12 ran: 11 passed, 1 failed, 0 errors; 2 skipped`` (and ``; 3 collection errors``)."""
        return (f"{self.ran} ran: {self.passed} passed, {self.failed} failed, {self.errors} errors;"
                f" {self.skipped} skipped"
                + (f"; {self.collection_errors} collection error(s)" if self.collection_errors else ""))


@dataclass(frozen=True)
class Probe:
    """A command as it is started: ``argv`` with the report argument, the ``runner`` found
    (None: not a runner mesh knows, nothing added), the host ``folder`` of its report and
    the ``report`` file in it."""

    argv: list[str]
    runner: str | None = None
    folder: Path | None = None
    report: Path | None = None


def _module_run(argv: Sequence[str]) -> tuple[str, list[str], list[str]] | None:
    """(module, interpreter and its options, module arguments) for ``python [options] -m
    module ...``; None for a script, ``-c`` code or stdin."""
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "-m":
            return (argv[index + 1], list(argv[:index]), list(argv[index + 2:])) if index + 1 < len(argv) else None
        if arg.startswith("-m"):  # "-mpytest"
            return arg[2:], list(argv[:index]), list(argv[index + 1:])
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            index += 2
        elif arg.startswith("-") and not arg.startswith(("-c", "--")) and arg != "-":
            index += 1
        else:
            return None
    return None


def instrument(argv: Sequence[str], folder: Path, inside: str) -> Probe:
    """``argv`` made to write its runner's report into ``folder`` (seen as ``inside`` by the
    command), or unchanged (``runner`` None) when it runs no test runner mesh knows."""
    program = os.path.basename(argv[0]) if argv else ""
    junit = f"--junitxml={inside}/{_JUNIT_NAME}"
    pytest = (folder, folder / _JUNIT_NAME)
    if program in ("pytest", "py.test"):
        return Probe([argv[0], junit, *argv[1:]], "pytest", *pytest)
    found = _module_run(argv) if _PYTHON.fullmatch(program) else None
    if found is None:
        return Probe(list(argv))
    module, python, args = found
    if module == "pytest":
        return Probe([*python, "-m", "pytest", junit, *args], "pytest", *pytest)
    if module == "unittest":
        return Probe([*python, "-c", UNITTEST_SHIM, f"{inside}/{_UNITTEST_NAME}", *args], "unittest", folder,
                     folder / _UNITTEST_NAME)
    return Probe(list(argv))


def runner_args(argv: Sequence[str]) -> list[str]:
    """The arguments the test runner of ``argv`` gets (after ``pytest`` or ``python -m pytest``/``unittest``)."""
    if argv and os.path.basename(argv[0]) in ("pytest", "py.test"):
        return list(argv[1:])
    found = _module_run(argv) if argv and _PYTHON.fullmatch(os.path.basename(argv[0])) else None
    return found[2] if found else []


def prepare(probe: Probe, owner: int | None) -> None:
    """Make ``probe``'s report file, empty, writable by ``owner`` (the sandbox's uid; None: this
    process's), in its folder made read-only: the command writes that one file and no other."""
    if probe.report is None or probe.folder is None:
        return
    fd = os.open(probe.report, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        if owner is not None:
            os.fchown(fd, owner, owner)
    finally:
        os.close(fd)
    os.chmod(probe.folder, 0o555)


def _read_capped(path: Path) -> bytes | None:
    """The bytes of ``path``; None when it does not exist. ReportError when it is no regular
    file (the test code could leave a symlink, a FIFO or a device there) or is too large."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReportError("the report is a symbolic link") from None
        raise ReportError(f"the report cannot be opened: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ReportError("the report is not a regular file")
        data = handle.read(MAX_REPORT_BYTES + 1)
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(f"the report is larger than {MAX_REPORT_BYTES >> 20} MiB")
    return data


def parse_junit(data: bytes) -> TestCounts:
    """Count the ``testcase`` elements of a JUnit XML report and their outcomes.

    Parsed with expat and nothing else: a DOCTYPE (and with it every entity declaration,
    internal or external) is refused, so no entity is ever expanded. A test case with a
    ``failure`` child failed, one with an ``error`` child errored, one with a ``skipped``
    child (pytest's skip and xfail) was skipped. ReportError for anything else.
    """
    tally = {"ran": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0, "collection_errors": 0}
    case: list[set[str]] = []  # the outcome children of the open testcase (a stack of one)
    depth = [0]

    def start(name: str, _attrs: Any) -> None:
        depth[0] += 1
        if depth[0] > 64:
            raise ReportError("the report nests deeper than any JUnit report")
        if name == "testcase":
            case.append(set())
        elif case and name == "error" and str((_attrs or {}).get("message", "")).startswith("collection failure"):
            case[-1].add("collection")  # pytest's entry for a module it could not import or collect
        elif case and name in ("failure", "error", "skipped"):
            case[-1].add(name)

    def end(name: str) -> None:
        depth[0] -= 1
        if name != "testcase" or not case:
            return
        outcome = case.pop()
        if "collection" in outcome:
            tally["collection_errors"] += 1
            return
        if "failure" in outcome:
            key = "failed"
        elif "error" in outcome:
            key = "errors"
        elif "skipped" in outcome:
            tally["skipped"] += 1
            return
        else:
            key = "passed"
        tally[key] += 1
        tally["ran"] += 1

    _parse_xml(data, start, end)
    return TestCounts(runner="pytest", **tally)


def _parse_xml(data: bytes, start: Any, end: Any) -> None:
    """Parse ``data`` with expat and nothing else, calling ``start``/``end`` per element: a
    DOCTYPE (and with it every entity declaration) is refused, so no entity is ever expanded."""
    parser = xml.parsers.expat.ParserCreate()
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def refuse(*_args: Any) -> None:
        raise ReportError("the report declares a DOCTYPE or an entity")

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except xml.parsers.expat.ExpatError as exc:
        raise ReportError(f"the report is not well-formed XML ({xml.parsers.expat.ErrorString(exc.code)})") from None


def parse_unittest(data: bytes) -> TestCounts:
    """The counts ``UNITTEST_SHIM`` wrote; ReportError when they are not its shape."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ReportError("the report is not JSON") from None
    names = ("tests_run", "failures", "errors", "skipped", "unexpected_successes")
    if not isinstance(raw, dict) or not all(type(raw.get(n)) is int and raw[n] >= 0 for n in names):
        raise ReportError("the report does not hold the counts mesh's unittest runner writes")
    ran = raw["tests_run"] - raw["skipped"]
    failed = raw["failures"] + raw["unexpected_successes"]
    if ran < 0 or failed + raw["errors"] > ran:
        raise ReportError("the report's counts contradict each other")
    return TestCounts(runner="unittest", ran=ran, passed=ran - failed - raw["errors"], failed=failed,
                      errors=raw["errors"], skipped=raw["skipped"])


def _report_data(probe: Probe) -> bytes | None:
    """The bytes of ``probe``'s report; None when the runner wrote none. ReportError when unusable."""
    if probe.report is None or probe.folder is None:
        return None
    try:
        data = _read_capped(probe.report)
    finally:
        os.chmod(probe.folder, 0o700)  # writable again, so the scratch folder can be deleted
    return data or None  # still the empty file mesh made: the runner never wrote its report


def _parse(runner: str | None, data: bytes) -> TestCounts:
    return parse_junit(data) if runner == "pytest" else parse_unittest(data)


def read_report(probe: Probe) -> TestCounts | None:
    """The counts of ``probe``'s report; None when the runner wrote none. ReportError when unusable."""
    data = _report_data(probe)
    return None if data is None else _parse(probe.runner, data)


def junit_outcomes(data: bytes) -> dict[tuple[str, str], str]:
    """Each test case's outcome in a JUnit report (``passed``, ``failed``, ``errors``,
    ``skipped``, ``xfail``), keyed by (the last part of its class name, its name); parsed as
    ``parse_junit`` parses (no DOCTYPE, no entity)."""
    found: dict[tuple[str, str], str] = {}
    case: list[tuple[tuple[str, str], set[str]]] = []

    def start(name: str, attrs: Any) -> None:
        attrs = attrs or {}
        if name == "testcase":
            key = (str(attrs.get("classname", "")).rsplit(".", 1)[-1], str(attrs.get("name", "")))
            case.append((key, set()))
        elif case and name == "skipped":
            case[-1][1].add("xfail" if attrs.get("type") == "pytest.xfail" else "skipped")
        elif case and name in ("failure", "error"):
            case[-1][1].add("failed" if name == "failure" else "errors")

    def end(name: str) -> None:
        if name == "testcase" and case:
            key, marks = case.pop()
            found[key] = next((mark for mark in ("failed", "errors", "xfail", "skipped") if mark in marks), "passed")

    _parse_xml(data, start, end)
    return found


def unittest_outcomes(data: bytes) -> dict[tuple[str, str], str]:
    """Each test's outcome in the report ``UNITTEST_SHIM`` wrote, keyed by (class, name)."""
    raw = json.loads(data.decode("utf-8"))
    lists = raw.get("outcomes") if isinstance(raw, dict) else None
    if not isinstance(lists, dict):
        return {}
    def ids(name: str) -> set[str]:
        value = lists.get(name)
        return {item for item in value if isinstance(item, str)} if isinstance(value, list) else set()
    marks = [(ids("xpass"), "xpass"), (ids("failed"), "failed"), (ids("errors"), "errors"), (ids("xfail"), "xfail"),
             (ids("skipped"), "skipped")]
    found: dict[tuple[str, str], str] = {}
    for test in ids("ran"):
        parts = test.rsplit(".", 2)
        if len(parts) >= 2:
            found[(parts[-2], parts[-1])] = next((mark for group, mark in marks if test in group), "passed")
    return found


def _discount(counts: TestCounts, planted: canaries.Planted, outcomes: dict[tuple[str, str], str]) -> TestCounts:
    """``counts`` without mesh's own control tests (a project's numbers are its own)."""
    tally = {name: getattr(counts, name) for name in ("ran", "passed", "failed", "errors", "skipped")}
    for key in planted.expected:
        outcome = outcomes.get(key)
        if outcome is None:
            continue
        if outcome == "xfail":  # pytest reports an expected failure as skipped; unittest as a test that passed
            outcome = "skipped" if counts.runner == "pytest" else "passed"
        elif outcome == "xpass":
            outcome = "failed"
        tally[outcome] = max(0, tally[outcome] - 1)
        if outcome != "skipped":
            tally["ran"] = max(0, tally["ran"] - 1)
    return replace(counts, **tally)


def verdict(probe: Probe, exit_passed: bool, planted: canaries.Planted | None = None, *,
            exit_code: int | None = None, output: str = "") -> tuple[TestCounts | None, str | None, str, bool]:
    """(counts, reason, note, passed) for a command started as ``probe`` that exited as it did
    (``exit_passed``; its ``exit_code`` and ``output``), with mesh's control tests ``planted``
    in its tree (``canaries``).

    ``reason`` is ``runner_forged`` when a control test was reported against its nature
    (whatever the exit status), one of ``REPORT_REASONS`` when the command exited 0 but its
    report does not show at least one test that ran and none that failed, else None; ``note``
    a line saying why, for the command's output. ``passed`` is the exit status as it counts:
    an honest run with control tests exits 1 (they must fail), which counts as 0 when they are
    the report's only failures. Counts never turn a failed run into a pass, and never include
    the control tests.
    """
    if probe.runner is None:
        return None, None, "", exit_passed
    try:
        data = _report_data(probe)
        counts = None if data is None else _parse(probe.runner, data)
        outcomes = {} if data is None or planted is None else \
            junit_outcomes(data) if probe.runner == "pytest" else unittest_outcomes(data)
    except ReportError as exc:
        # With control tests an honest run exits 1: an unreadable report is then the reason too.
        unreadable = exit_passed or (planted is not None and exit_code == 1)
        return None, ("test_report_unreadable" if unreadable else None), f"mesh: {probe.runner} report: {exc}", False
    forged, checked = (None, "")
    if counts is not None and planted is not None:
        forged, checked, exact = canaries.judge(planted, outcomes)
        counts = _discount(counts, planted, outcomes)
        if (exact and exit_code == 1 and not counts.failed and not counts.errors and not counts.collection_errors
                and "FAIL Required test coverage" not in output):
            exit_passed = True  # the only failures were mesh's own, as they must be
    if forged is not None:
        return counts, forged, checked, False
    if counts is None:
        if not exit_passed:
            return None, None, "", False
        return None, "no_test_report", (f"mesh: {probe.runner} exited 0 without writing its report: the run ended"
                                        " before the runner finished (os._exit, a crash, or a plugin disabled it)"), False
    if not exit_passed:
        return counts, None, checked, False
    if counts.failed or counts.errors or counts.collection_errors:
        return counts, "tests_failed", f"mesh: exit status 0, but the {probe.runner} report says {counts.line()}", False
    if counts.ran == 0:
        return counts, "no_tests_ran", f"mesh: exit status 0, but no test ran ({counts.line()})", False
    return counts, None, checked, True


def runner_counts_phrase(counts: Sequence[TestCounts]) -> str:
    """What the test runners of several commands report together, never to be read as commands:
    ``7 test(s) ran: 6 passed, 1 failed, 0 errors; 2 collection error(s)``; '' without counts."""
    if not counts:
        return ""
    total = {name: sum(getattr(c, name) for c in counts)
             for name in ("ran", "passed", "failed", "errors", "skipped", "collection_errors")}
    return (f"{total['ran']} test(s) ran: {total['passed']} passed, {total['failed']} failed, {total['errors']} errors"
            + (f", {total['skipped']} skipped" if total["skipped"] else "")
            + (f"; {total['collection_errors']} collection error(s) (a test module could not be imported)"
               if total["collection_errors"] else ""))


def commands_phrase(passed: int, failed: int, rejected: int = 0) -> str:
    """``1 of 2 command(s) failed`` / ``2 of 2 command(s) passed``: validation commands, never tests."""
    total = passed + failed
    head = f"{failed} of {total} command(s) failed" if failed else f"{passed} of {total} command(s) passed"
    return head + (f", {rejected} rejected" if rejected else "")
