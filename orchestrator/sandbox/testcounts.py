"""Which tests a validation command ran, and how each ended, from its test runner's own report.

An exit status of 0 proves nothing when no test ran: a patch appending ``os._exit(0)`` to
``tests/__init__.py`` ends the runner during collection with status 0, and a ``conftest.py``
that deselects or skips every test makes an empty run succeed. For every runner mesh reads
(``orchestrator.testruns``: pytest, unittest, Django's runner, go test, cargo test, Jest, Vitest, node --test,
mocha, tape), validation asks the runner for a machine-readable account of its run: a report
file written to a folder outside the tree under test (``SANDBOX_REPORT`` inside the sandbox),
or the runner's own standard output, kept whole up to ``MAX_REPORT_BYTES``. A command that
exited 0 still fails when the report is missing (``no_test_report``), unreadable
(``test_report_unreadable``), lists a failed test or a collection error (``tests_failed``) or
lists no test that ran (``no_tests_ran``).

The reporter arguments are added after the allowlist admitted the command: they are mesh's,
not the model's (each reader's module says which). The report file is made empty before the
command starts, owned by the user the sandbox runs as, in a folder that user cannot write
(when mesh runs as root): the command can fill that one file up to the file-size limit, not
create others on the host's disk, nor put a symlink or a FIFO in its place. The report is
written by the runner, in the same processes as the tests that model output controls, so it
is read as hostile input (a size cap, a regular file only, no DOCTYPE or entity declarations)
and its counts are only ever a reason to fail a command, never to pass one whose exit status
failed. Test code can still forge a report: mesh's control tests (``canaries``) catch a forger
that does not know what they are, for every runner mesh reads; see docs/forged-verdicts.md.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from orchestrator.mutants.model import Planting
from orchestrator.mutants.model import judge as judge_twins
from orchestrator.sandbox import canaries
from orchestrator.testruns import django_reader, pytest_reader, unittest_reader
from orchestrator.testruns.commands import module_run, program
from orchestrator.testruns.model import ReportError, Run, TestCounts, safe_id
from orchestrator.testruns.table import reader_for

__all__ = [
    "REPORT_REASONS",
    "SANDBOX_REPORT",
    "UNITTEST_SHIM",
    "Capture",
    "Probe",
    "ReportError",
    "TestCounts",
    "commands_phrase",
    "instrument",
    "parse_junit",
    "parse_unittest",
    "prepare",
    "read_report",
    "runner_args",
    "runner_of",
    "select",
    "runner_counts_phrase",
    "unittest_outcomes",
    "verdict",
]

# Where a sandboxed command writes its report: a folder of its own, not inside the tree.
SANDBOX_REPORT = "/mesh/report"
REPORT_REASONS = ("no_test_report", "test_report_unreadable", "tests_failed", "no_tests_ran", "runner_forged")
# A report (or a runner's output read as one) larger than this is not read.
MAX_REPORT_BYTES = 32 << 20
_REPORT_NAMES = {"pytest": "junit.xml", "unittest": "unittest.json", "django": "unittest.json"}
UNITTEST_SHIM = unittest_reader.SHIM


class Capture:
    """A command's standard output kept whole, up to ``MAX_REPORT_BYTES`` (a runner that reports
    on its output); past that it keeps nothing more and says so."""

    def __init__(self, limit: int = MAX_REPORT_BYTES) -> None:
        self.limit = limit
        self.data = bytearray()
        self.overflowed = False
        self.lock = threading.Lock()

    def feed(self, chunk: bytes) -> bool:
        """Keep ``chunk`` while under the limit; always True (the command's output is read on)."""
        with self.lock:
            if not self.overflowed and len(self.data) + len(chunk) <= self.limit:
                self.data += chunk
            else:
                self.overflowed = True
        return True


@dataclass(frozen=True)
class Probe:
    """A command as it is started: ``argv`` with the reporter arguments, the ``runner`` found
    (None: not a runner mesh reads, nothing added), the host ``folder`` of its report and the
    ``report`` file in it, or the ``capture`` of its output a ``stdout`` reader reads."""

    argv: list[str]
    runner: str | None = None
    folder: Path | None = None
    report: Path | None = None
    reader: Any = None
    capture: Capture | None = field(default=None, compare=False)
    # Variables the command gets besides its environment's (``NODE_OPTIONS`` is added to).
    env: dict[str, str] = field(default_factory=dict)
    # The tree's path as the command sees it (reports that name files absolutely).
    root: str = ""
    # mesh's own files the runner loads, put in the report's folder (name: text; read-only).
    files: dict[str, str] = field(default_factory=dict)

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this probe's variables (``NODE_OPTIONS`` and ``PYTHONPATH`` added to the
        ones there, after them)."""
        if not self.env:
            return base
        env = dict(base)
        for name, value in self.env.items():
            joint = {"NODE_OPTIONS": " ", "PYTHONPATH": os.pathsep}.get(name)
            env[name] = f"{env[name]}{joint}{value}" if joint and env.get(name) else value
        return env


def instrument(argv: Sequence[str], folder: Path, inside: str, tree: Path | None = None, root: str = "") -> Probe:
    """``argv`` made to report its runner's tests, into a file of ``folder`` (seen as ``inside``
    by the command) or on its captured output, or unchanged (``runner`` None) when it runs no
    runner mesh reads. ``tree`` is the tree the command runs in (its package.json scripts),
    ``root`` that tree's path as the command sees it."""
    reader = reader_for(argv, tree)
    if reader is None:
        return Probe(list(argv))
    if reader.source == "stdout":
        return Probe(reader.instrument(argv, "", tree), reader.name, reader=reader, capture=Capture(), root=root)
    name = _REPORT_NAMES.get(reader.name, "report")
    report = f"{inside}/{name}"
    extra, files = getattr(reader, "environment", None), getattr(reader, "files", None)
    return Probe(reader.instrument(argv, report, tree), reader.name, folder, folder / name, reader,
                 env=extra(argv, report, tree) if extra else {}, root=root, files=files(argv) if files else {})


def select(argv: Sequence[str], test_id: str, tree: Path | None = None) -> list[str] | None:
    """``argv`` narrowed to the one test ``test_id`` by its runner's own selection; None when
    the runner cannot select it (or the id, read from a report the code under test wrote, is
    not one to give back as an argument)."""
    reader = reader_for(argv, tree)
    chooser = getattr(reader, "select", None)
    if chooser is None or not safe_id(test_id):
        return None
    return chooser(list(argv), test_id)


def runner_of(argv: Sequence[str], tree: Path | None = None) -> str | None:
    """The name of the runner ``argv`` runs (as ``orchestrator.testruns.table`` names it); None
    when mesh reads no runner of it."""
    reader = reader_for(argv, tree)
    return None if reader is None else reader.name


def runner_args(argv: Sequence[str], tree: Path | None = None) -> list[str]:
    """The arguments the test runner of ``argv`` gets (after ``pytest`` or ``python -m pytest``/``unittest``;
    for Django's runner, the tests it runs in unittest's terms)."""
    as_unittest = django_reader.unittest_args(argv, tree)
    if as_unittest is not None:
        return as_unittest
    if argv and program(argv) in ("pytest", "py.test"):
        return list(argv[1:])
    found = module_run(argv)
    return found[2] if found else []


def prepare(probe: Probe, owner: int | None) -> None:
    """Make ``probe``'s report file, empty, writable by ``owner`` (the sandbox's uid; None: this
    process's), in its folder made read-only: the command writes that one file and no other. mesh's
    own files for the runner (``probe.files``: its pytest plugin) are put there first, read-only."""
    if probe.report is None or probe.folder is None:
        return
    for name, text in probe.files.items():
        fd = os.open(probe.folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
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
    """The counts of a pytest JUnit XML report (``pytest_reader``)."""
    return pytest_reader.READER.read(data).counts()


def parse_unittest(data: bytes) -> TestCounts:
    """The counts ``UNITTEST_SHIM`` wrote; ReportError when they are not its shape."""
    return unittest_reader.READER.read(data).counts()


def _report_data(probe: Probe) -> bytes | None:
    """The bytes of ``probe``'s report (or captured output); None when the runner wrote none.
    ReportError when unusable."""
    if probe.capture is not None:
        if probe.capture.overflowed:
            raise ReportError(f"the output is larger than {MAX_REPORT_BYTES >> 20} MiB")
        return bytes(probe.capture.data) or None
    if probe.report is None or probe.folder is None:
        return None
    try:
        data = _read_capped(probe.report)
    finally:
        os.chmod(probe.folder, 0o700)  # writable again, so the scratch folder can be deleted
    return data or None  # still the empty file mesh made: the runner never wrote its report


def _read_run(probe: Probe, data: bytes | None,
              outcomes: dict[tuple[str, str], str] | None = None) -> Run | None:
    """The run ``probe``'s report ``data`` describes; ``outcomes`` (pytest's reader only) gets
    each case's outcome by (class, name) from the same parse."""
    if data is None or probe.reader is None:
        return None
    run = probe.reader.read(data, probe.root, outcomes) if outcomes is not None else probe.reader.read(data, probe.root)
    return run.relative_to(probe.root) if run.reported else None


def read_report(probe: Probe) -> TestCounts | None:
    """The counts of ``probe``'s report; None when the runner wrote none. ReportError when unusable."""
    run = _read_run(probe, _report_data(probe))
    return None if run is None else run.counts()


def shown_output(probe: Probe, hidden: frozenset[str] = frozenset()) -> str | None:
    """What a person reads of a ``stdout`` reader's output when it is not the runner's plain
    text (``go test -json``: its events' text again, without the ``hidden`` tests, mesh's
    own); None to show the output as it is."""
    shown = getattr(probe.reader, "shown", None)
    if probe.capture is None or shown is None or probe.capture.overflowed:
        return None
    return shown(bytes(probe.capture.data), hidden) if hidden else shown(bytes(probe.capture.data))


unittest_outcomes = unittest_reader.outcomes


def _control_ids(run: Run, planted: canaries.Planted) -> set[str]:
    """The ids of ``run``'s cases that are mesh's control tests."""
    suffixes = [(f"{cls}::{name}", f".{cls}.{name}") for cls, name in planted.expected]
    return {case.id for case in run.cases
            if any(case.id.endswith(a) or case.id.endswith(b) or case.id == b[1:] for a, b in suffixes)}


def verdict(probe: Probe, exit_passed: bool, planted: canaries.Planted | None = None, *,
            twins: Planting | None = None, exit_code: int | None = None,
            output: str = "") -> tuple[Run | None, str | None, str, bool, canaries.Shown]:
    """(run, reason, note, passed, shown) for a command started as ``probe`` that exited as it
    did (``exit_passed``; its ``exit_code`` and ``output``), with mesh's control tests
    ``planted`` and the project's tests' ``twins`` in its tree (``canaries``,
    ``orchestrator.mutants``).

    ``run`` is every test the runner reported, mesh's own tests taken out (None: no runner
    mesh reads, or no readable report). ``reason`` is ``runner_forged`` when a control test or
    a twin was reported against its nature (whatever the exit status), one of
    ``REPORT_REASONS`` when the command exited 0 but its report does not show at least one test
    that ran and none that failed, else None; ``note`` a line saying why, for the command's
    output. ``passed`` is the exit status as it counts: an honest run with control tests or
    twins exits 1 (they must fail), which counts as 0 when they are the report's only
    failures. Counts never turn a failed run into a pass. ``shown``: mesh's tests as the
    output names them, to take out of it.
    """
    shown = canaries.Shown()
    if probe.runner is None:
        return None, None, "", exit_passed, shown
    planted_any = planted is not None or twins is not None
    try:
        data = _report_data(probe)
        # pytest's report is parsed once: its cases and the control tests' outcomes together.
        outcomes: dict[tuple[str, str], str] = {}
        run = _read_run(probe, data, outcomes if planted is not None and probe.runner == "pytest" else None)
        if run is not None and planted is not None and probe.runner != "pytest":
            outcomes = unittest_outcomes(data)
    except ReportError as exc:
        # With control tests an honest run exits 1: an unreadable report is then the reason too.
        unreadable = exit_passed or (planted_any and exit_code == 1)
        return (None, ("test_report_unreadable" if unreadable else None), f"mesh: {probe.runner} report: {exc}",
                False, shown)
    forged, checked = (None, "")
    if run is not None and planted_any:
        exact = False
        if planted is not None:
            forged, checked, exact = canaries.judge(planted, outcomes)
            mine = _control_ids(run, planted)
            shown.names |= {name for _, name in planted.expected} | {cls for cls, _ in planted.expected}
            for key, must in planted.expected.items():
                if key in outcomes:
                    shown.counts[outcomes[key]] = shown.counts.get(outcomes[key], 0) + 1
            shown.checked = exact
        else:
            mine = set()
        if twins is not None:
            judged = judge_twins(twins.twins, run)
            mine |= judged.ids
            shown.names |= twins.names()
            for case in run.cases:
                if case.id in judged.ids:
                    key = {"errored": "errors"}.get(case.status, case.status)
                    shown.counts[key] = shown.counts.get(key, 0) + 1
            shown.checked = shown.checked or judged.reported > 0
            if forged is None and judged.forged is not None:
                forged, checked = "runner_forged", (
                    f"mesh: the test runner's verdicts are forged: {judged.forged}; a module, test package or helper"
                    " replaced the runner's assertions, how it runs tests or what it reports")
            elif judged.failed and checked.startswith("mesh: its control tests"):
                checked = ""  # the twins put the runner to the test where the control tests could not
            exact = exact or judged.failed > 0
            if probe.runner == "mocha" and judged.failed and exit_code == min(judged.failed, 255):
                exit_code = 1  # mocha exits with its number of failures: here, the twins'
            elif probe.runner == "cargo test" and exit_code == 101 and "could not compile" not in output:
                exit_code = 1  # cargo's status for failed tests (and for a target that did not build)
        shown.order = [case.id in mine for case in run.cases]
        run = run.without(mine)
        counts = run.counts()
        shown.runner = probe.runner or ""
        shown.project_failed = bool(counts.failed or counts.errors or counts.collection_errors)
        if (exact and exit_code == 1 and not counts.failed and not counts.errors and not counts.collection_errors
                and "FAIL Required test coverage" not in output):
            exit_passed = True  # the only failures were mesh's own, as they must be
    if forged is not None:
        return run, forged, checked, False, shown
    if run is None:
        if not exit_passed:
            return None, None, "", False, shown
        return None, "no_test_report", (f"mesh: {probe.runner} exited 0 without writing its report: the run ended"
                                        " before the runner finished (os._exit, a crash, or a plugin disabled it)"), False, shown
    if not exit_passed:
        return run, None, checked, False, shown
    counts = run.counts()
    if counts.failed or counts.errors or counts.collection_errors:
        return run, "tests_failed", f"mesh: exit status 0, but the {probe.runner} report says {counts.line()}", False, shown
    if counts.ran == 0:
        return run, "no_tests_ran", f"mesh: exit status 0, but no test ran ({counts.line()})", False, shown
    return run, None, checked, True, shown


def runner_counts_phrase(counts: Sequence[TestCounts]) -> str:
    """What the test runners of several commands report together, never to be read as commands:
    ``7 test(s) ran: 6 passed, 1 failed, 0 errors; 2 collection error(s)``; '' without counts."""
    if not counts:
        return ""
    total = {name: sum(getattr(c, name) for c in counts)
             for name in ("ran", "passed", "failed", "errors", "skipped", "collection_errors")}
    return (f"{total['ran']} test(s) ran: {total['passed']} passed, {total['failed']} failed, {total['errors']} errors"
            + (f", {total['skipped']} skipped" if total["skipped"] else "")
            + (f"; {total['collection_errors']} collection error(s) (a test module or package could not be"
               " imported or built)"
               if total["collection_errors"] else ""))


def commands_phrase(passed: int, failed: int, rejected: int = 0) -> str:
    """``1 of 2 command(s) failed`` / ``2 of 2 command(s) passed``: validation commands, never tests."""
    total = passed + failed
    head = f"{failed} of {total} command(s) failed" if failed else f"{passed} of {total} command(s) passed"
    return head + (f", {rejected} rejected" if rejected else "")
