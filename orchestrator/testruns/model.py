"""What a test run is made of (``Case``, ``Run``, ``TestCounts``) and the reader protocol.

May import the standard library and ``redact`` only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from redact import scrub
from redact.controls import strip_terminal

__all__ = ["bounded_id", "MAX_ID_CHARS", "safe_id", "Case", "MAX_CASES", "MAX_FAILURES_KEPT", "failures_kept", "MAX_MESSAGE_CHARS", "ReportError", "Reader", "Run", "STATUSES", "TestCounts",
           "bounded_message"]

STATUSES = ("passed", "failed", "errored", "skipped")
# A run lists at most this many tests (a report claiming more is refused as unreadable).
MAX_CASES = 200_000
# What a result keeps of its failing tests (the proof checkpoint, prompts): the first ones, with messages.
MAX_FAILURES_KEPT = 20
# A failure's message keeps this many characters: its head (what failed) and its end (where).
MAX_MESSAGE_CHARS = 1_500
_HEAD_CHARS = 900


# A test id keeps this many characters; a longer one (a parameter of megabytes, as pytest names
# ``test_x[b'\\r\\n' * 5_000_000]``) is cut and ends with a digest of what was cut.
MAX_ID_CHARS = 1_000
_CUT_AT = 700
_CUT_MARK = " more characters, sha256 "
_PARAMETERS_SHOWN = 200


def bounded_id(test_id: str) -> str:
    """``test_id`` when at most ``MAX_ID_CHARS`` long; else its head and a SHA-256 digest of the
    rest, so two ids stay apart exactly when they differ and none costs megabytes to read, store
    or compare. A parametrized test's parameters (from their ``[``, when it is in the head) are
    digested whole after their first ``_PARAMETERS_SHOWN`` characters: a test and its copy under
    another name (``mutants``) keep the same digest. A cut id is never a runner's argument
    (``safe_id``)."""
    if len(test_id) <= MAX_ID_CHARS:
        return test_id
    import hashlib

    bracket = test_id.find("[", 0, _CUT_AT)
    digested = test_id[bracket + 1:] if bracket >= 0 else test_id[_CUT_AT:]
    head = test_id[:bracket + 1 + _PARAMETERS_SHOWN] if bracket >= 0 else test_id[:_CUT_AT]
    digest = hashlib.sha256(digested.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"{head}\u2026{len(test_id) - len(head)}{_CUT_MARK}{digest}" + ("]" if bracket >= 0 else "")


def safe_id(test_id: str) -> bool:
    """Whether a test id (from a report the code under test wrote) may be given back to its
    runner as an argument: printable, one line, not an option, of a sane length, not cut."""
    return (0 < len(test_id) <= 500 and test_id.isprintable() and not test_id.startswith("-")
            and _CUT_MARK not in test_id)


class ReportError(ValueError):
    """A test report that cannot be trusted to be one: its message says why, in one line."""


def bounded_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` without terminal controls or secrets, trimmed of blank edges, and at most
    ``limit`` characters: the head and the end, joined by ``[...]`` when longer."""
    text = scrub(strip_terminal(text.replace("\r\n", "\n"))).strip("\n")
    lines = [line.rstrip() for line in text.splitlines()]
    text = "\n".join(lines).strip("\n")
    if len(text) <= limit:
        return text
    head = min(_HEAD_CHARS, limit // 2)
    return f"{text[:head].rstrip()}\n[...]\n{text[-(limit - head - 7):].lstrip()}"


@dataclass(frozen=True)
class Case:
    """One test as its runner reported it: ``id`` (unique within the run), ``status`` (one of
    ``STATUSES``), ``duration_s`` (None: not reported) and, for a failed or errored test, its
    ``message``."""

    __test__ = False

    id: str
    status: str
    duration_s: float | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (no empty message, no missing duration)."""
        out: dict[str, Any] = {"id": self.id, "status": self.status}
        if self.duration_s is not None:
            out["duration_s"] = round(self.duration_s, 4)
        if self.message:
            out["message"] = self.message
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> Case | None:
        """The case of a stored dict; None when it is not one mesh writes (tracker text)."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str) or raw.get("status") not in STATUSES:
            return None
        duration = raw.get("duration_s")
        message = raw.get("message", "")
        return cls(raw["id"], raw["status"], float(duration) if isinstance(duration, (int, float)) else None,
                   message if isinstance(message, str) else "")


@dataclass(frozen=True)
class TestCounts:
    """What one command's test runner reports: tests that ran (skipped ones excluded), and of
    those how many passed, failed (an assertion) or errored; plus the skipped ones, and the
    collection errors (a test module or package that could not be imported, built or
    collected: an error, not a test that ran)."""

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


@dataclass
class Run:
    """Every test one command's runner reported (``cases``, ids made unique in order), and the
    ``collection_errors``: modules, packages or binaries that failed before their tests ran,
    each as (where, message)."""

    runner: str
    cases: list[Case] = field(default_factory=list)
    collection_errors: list[tuple[str, str]] = field(default_factory=list)
    # False when the output read held nothing of the runner's report at all (a ``stdout``
    # reader's run that ended before the runner printed anything): no report, not an empty one.
    reported: bool = True
    # Tests that failed, then passed when run again alone (counted as passed, and said so).
    flaky: list[str] = field(default_factory=list)
    # The id prefixes of the tests this run set out to run (a workspace's packages that the
    # change reaches); None: all of them. The base's other tests were not run, not lost.
    scope: tuple[str, ...] | None = None

    def add(self, test_id: str, status: str, duration_s: float | None = None, message: str = "") -> None:
        """Append a case (its id bounded, ``bounded_id``, and suffixed `` #2``, ``#3``... when
        already taken; its message bounded); ReportError past ``MAX_CASES``."""
        if len(self.cases) >= MAX_CASES:
            raise ReportError(f"the report lists more than {MAX_CASES} tests")
        test_id = bounded_id(test_id)
        seen = self._ids()
        unique, n = test_id, 1
        while unique in seen:
            n += 1
            unique = f"{test_id} #{n}"
        seen.add(unique)
        kept = bounded_message(message) if message and status in ("failed", "errored") else ""
        self.cases.append(Case(unique, status, duration_s, kept))

    def _ids(self) -> set[str]:
        ids = self.__dict__.get("_seen")
        if ids is None or len(ids) != len(self.cases):
            ids = {case.id for case in self.cases}
            self.__dict__["_seen"] = ids
        return ids

    def collection_error(self, where: str, message: str) -> None:
        """Note a module, package or binary that failed before its tests ran."""
        if len(self.collection_errors) < 1000:
            self.collection_errors.append((where, bounded_message(message)))

    def counts(self) -> TestCounts:
        """The run's ``TestCounts``."""
        tally = {status: 0 for status in STATUSES}
        for case in self.cases:
            tally[case.status] += 1
        ran = tally["passed"] + tally["failed"] + tally["errored"]
        return TestCounts(self.runner, ran, tally["passed"], tally["failed"], tally["errored"], tally["skipped"],
                          len(self.collection_errors))

    def failures(self) -> list[Case]:
        """The failed and errored cases, in the runner's order."""
        return [case for case in self.cases if case.status in ("failed", "errored")]

    def without(self, ids: set[str]) -> Run:
        """This run without the cases whose id is in ``ids`` (mesh's own control tests)."""
        return Run(self.runner, [case for case in self.cases if case.id not in ids], list(self.collection_errors),
                   self.reported, [test for test in self.flaky if test not in ids], self.scope)

    def with_messages(self, change: Callable[[str], str]) -> Run:
        """This run with each failure's message passed through ``change``."""
        cases = [Case(c.id, c.status, c.duration_s, change(c.message)) if c.message else c for c in self.cases]
        return Run(self.runner, cases, list(self.collection_errors), self.reported, list(self.flaky), self.scope)

    def relative_to(self, root: str) -> Run:
        """This run with ``root/`` taken out of its messages (a stack frame's absolute path in the
        tree becomes the path a worker knows)."""
        prefix = root.rstrip("/") + "/" if root.strip("/") else ""
        if not prefix:
            return self
        cases = [Case(c.id, c.status, c.duration_s, c.message.replace(prefix, "")) if prefix in c.message else c
                 for c in self.cases]
        errors = [(where, message.replace(prefix, "")) for where, message in self.collection_errors]
        return Run(self.runner, cases, errors, self.reported, list(self.flaky), self.scope)

    def with_flaky(self, ids: list[str]) -> Run:
        """This run with the tests ``ids`` (which failed, then passed alone) counted as passed and
        named as flaky."""
        marked = set(ids)
        cases = [Case(case.id, "passed", case.duration_s) if case.id in marked else case for case in self.cases]
        return Run(self.runner, cases, list(self.collection_errors), self.reported,
                   [*self.flaky, *(test for test in ids if test not in self.flaky)], self.scope)


class Reader(Protocol):
    """One test runner: how to recognise its command, ask for its report, and read it."""

    name: str
    # "file": the runner writes a report file mesh names; "stdout": mesh reads its standard output.
    source: str

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        """Whether ``argv`` (as admitted by the allowlist) runs this runner."""

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        """``argv`` with mesh's own reporter arguments (``report``: the report file's path as
        the command sees it; unused by a ``stdout`` reader)."""

    def read(self, data: bytes, root: str = "") -> Run:
        """The run ``data`` (the report, or the captured output) describes; ReportError when
        it is not one. ``root`` is the tree's path as the command saw it (a report naming test
        files by absolute path names them relative to it)."""

    # Optional: ``select(argv, test_id) -> list[str] | None``: ``argv`` narrowed to the one test
    # ``test_id`` (a flaky test run again alone; None: this runner cannot select one);
    # ``environment(argv, report, tree) -> dict`` of variables the command gets
    # besides (a value for ``NODE_OPTIONS`` is added to the environment's own), and
    # ``shown(data) -> str``: what a person reads of a ``stdout`` reader's output.


def failures_kept(run: Run, limit: int = MAX_FAILURES_KEPT) -> list[dict[str, Any]]:
    """The first ``limit`` failed or errored cases of ``run`` as dicts, then collection errors
    (as errored cases named by where they happened), in the runner's order."""
    kept = [case.to_dict() for case in run.failures()[:limit]]
    for where, message in run.collection_errors[:max(0, limit - len(kept))]:
        kept.append(Case(f"{where} (collection)", "errored", None, message).to_dict())
    return kept
