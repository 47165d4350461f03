"""unittest (``python -m unittest``): it has no report of its own, and its closing "Ran N tests"
line is stderr that a test can print itself, so the command runs through a few lines given with
``-c`` (``SHIM``) that are ``python -m unittest`` plus a runner that writes each test's outcome,
and each failure's traceback, as JSON. A test is its ``id()``; an expected failure counts as
passed and an unexpected success as failed, as unittest counts them.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from orchestrator.testruns.commands import module_run
from orchestrator.testruns.model import ReportError, Run

__all__ = ["READER", "RESULT_CODE", "SHIM", "Unittest", "outcomes"]

# The result and runner that write the report: shared by ``SHIM`` and Django's (``django_reader``),
# whose runner may be given a result class of its own (mixed with mesh's).
RESULT_CODE = """\
import json, sys, time, unittest
report = sys.argv.pop(1)
LIMIT = 200000
class MeshResultMixin:
    def startTest(self, test):
        self.mesh_ids = getattr(self, "mesh_ids", [])
        self.mesh_times = getattr(self, "mesh_times", {})
        if len(self.mesh_ids) < LIMIT:
            self.mesh_ids.append(test.id())
        self.mesh_started = time.perf_counter()
        super().startTest(test)
    def stopTest(self, test):
        if len(self.mesh_times) < LIMIT:
            self.mesh_times[test.id()] = time.perf_counter() - getattr(self, "mesh_started", time.perf_counter())
        super().stopTest(test)
class MeshResult(MeshResultMixin, unittest.TextTestResult):
    pass
class MeshCountingRunner(unittest.TextTestRunner):
    resultclass = MeshResult
    def __init__(self, *args, resultclass=None, **kwargs):
        super().__init__(*args, **kwargs)
        if resultclass is not None:
            self.resultclass = resultclass if issubclass(resultclass, MeshResultMixin) else \\
                type(resultclass.__name__, (MeshResultMixin, resultclass), {})
    def run(self, test):
        result = super().run(test)
        ids = lambda pairs: [case.id() for case, *_ in pairs][:LIMIT]
        plain = lambda cases: [case.id() for case in cases][:LIMIT]
        messages = {case.id(): text[-6000:] for case, text in (result.failures + result.errors)[:500]}
        counts = {"tests_run": result.testsRun, "failures": len(result.failures), "errors": len(result.errors),
                  "skipped": len(result.skipped), "unexpected_successes": len(result.unexpectedSuccesses),
                  "outcomes": {"failed": ids(result.failures), "errors": ids(result.errors),
                               "skipped": ids(result.skipped), "xfail": ids(result.expectedFailures),
                               "xpass": plain(result.unexpectedSuccesses),
                               "ran": getattr(result, "mesh_ids", [])},
                  "messages": messages, "times": getattr(result, "mesh_times", {})}
        with open(report, "w", encoding="utf-8") as handle:
            json.dump(counts, handle)
        return result
"""

SHIM = RESULT_CODE + """\
sys.argv[0] = "python -m unittest"
unittest.main(module=None, testRunner=MeshCountingRunner)
"""


def _load(data: bytes) -> dict[str, Any]:
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ReportError("the report is not JSON") from None
    names = ("tests_run", "failures", "errors", "skipped", "unexpected_successes")
    if not isinstance(raw, dict) or not all(type(raw.get(n)) is int and raw[n] >= 0 for n in names):
        raise ReportError("the report does not hold the counts mesh's unittest runner writes")
    errors = raw["errors"]
    lists = raw.get("outcomes")
    if isinstance(lists, dict):
        # A class's or module's set-up that fails is an error outside any test run: only the
        # errors of tests that ran are held against the number run.
        errors = len(set(_ids(lists, "errors")) & set(_ids(lists, "ran")))
    if raw["tests_run"] < raw["skipped"] or \
            raw["failures"] + raw["unexpected_successes"] + errors > raw["tests_run"] - raw["skipped"]:
        raise ReportError("the report's counts contradict each other")
    return raw


def _ids(lists: Any, name: str) -> list[str]:
    value = lists.get(name) if isinstance(lists, dict) else None
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def outcomes(data: bytes) -> dict[tuple[str, str], str]:
    """Each test's outcome (``passed``, ``failed``, ``errors``, ``skipped``, ``xfail``,
    ``xpass``) in the report ``SHIM`` wrote, keyed by (class, name): what mesh's control tests
    are judged by."""
    lists = _load(data).get("outcomes")
    marks = [(set(_ids(lists, "xpass")), "xpass"), (set(_ids(lists, "failed")), "failed"),
             (set(_ids(lists, "errors")), "errors"), (set(_ids(lists, "xfail")), "xfail"),
             (set(_ids(lists, "skipped")), "skipped")]
    found: dict[tuple[str, str], str] = {}
    for test in _ids(lists, "ran"):
        parts = test.rsplit(".", 2)
        if len(parts) >= 2:
            found[(parts[-2], parts[-1])] = next((mark for group, mark in marks if test in group), "passed")
    return found


class Unittest:
    name = "unittest"
    source = "file"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        found = module_run(argv)
        return found is not None and found[0] == "unittest"

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        _module, python, args = module_run(argv) or ("", [], [])
        return [*python, "-c", SHIM, report, *args]

    def select(self, argv: Sequence[str], test_id: str) -> list[str] | None:
        """``-k`` with the test's whole id (unittest matches it as a substring of each test's id)."""
        if not all(part.isidentifier() for part in test_id.split(".")):
            return None
        return [*argv, "-k", test_id]

    def read(self, data: bytes, root: str = "") -> Run:
        raw = _load(data)
        lists = raw.get("outcomes")
        messages = raw.get("messages") if isinstance(raw.get("messages"), dict) else {}
        times = raw.get("times") if isinstance(raw.get("times"), dict) else {}
        status_of = {}
        for name, status in (("skipped", "skipped"), ("xfail", "passed"), ("errors", "errored"),
                             ("failed", "failed"), ("xpass", "failed")):
            for test in _ids(lists, name):
                status_of[test] = status
        run = Run(self.name)
        ran = _ids(lists, "ran")
        for test in ran:
            duration = times.get(test)
            message = messages.get(test)
            run.add(test, status_of.get(test, "passed"), float(duration) if isinstance(duration, (int, float)) else None,
                    message if isinstance(message, str) else "")
        # Errors outside any test (a class's or module's set-up) are errors of the run.
        listed = set(ran)
        for test in _ids(lists, "errors"):
            if test not in listed:
                message = messages.get(test)
                run.add(test, "errored", None, message if isinstance(message, str) else "")
        if not isinstance(lists, dict):  # an older shim's report: the counts alone
            _from_counts(run, raw)
        return run


def _from_counts(run: Run, raw: dict[str, Any]) -> None:
    failed = raw["failures"] + raw["unexpected_successes"]
    ran = raw["tests_run"] - raw["skipped"]
    for index in range(ran):
        status = "failed" if index < failed else "errored" if index < failed + raw["errors"] else "passed"
        run.add(f"test #{index + 1}", status)
    for index in range(raw["skipped"]):
        run.add(f"skipped #{index + 1}", "skipped")


READER = Unittest()
