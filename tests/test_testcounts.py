"""Validation that proves nothing does not pass (issue 16, item 2): the attacks run for real.

Each test commits a small project with real tests, runs its real test runner through
``run_validation`` (inside bwrap, and without a sandbox), and checks what the user relies on:
a command whose runner ran no test, hid its failures, or wrote no report fails with a
reason of its own, whatever its exit status; the counts come from the runner's report.
"""

from __future__ import annotations

import shlex
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from orchestrator.sandbox.bwrap import sandbox_user
from orchestrator.sandbox.testcounts import (
    MAX_REPORT_BYTES,
    UNITTEST_SHIM,
    ReportError,
    TestCounts,
    instrument,
    parse_junit,
    parse_unittest,
)
from tests.test_validation import commit_all, mode, run  # noqa: F401  (mode is a fixture)

PY = shlex.quote(sys.executable)
PYTEST = f"{PY} -m pytest -q -p no:cacheprovider tests"
UNITTEST = f"{PY} -m unittest discover -s tests -t ."
RUNNERS = {"pytest": PYTEST, "unittest": UNITTEST}

GOOD_TESTS = '''\
import unittest


class Arithmetic(unittest.TestCase):
    def test_add(self):
        self.assertEqual(1 + 1, 2)

    def test_mul(self):
        self.assertEqual(2 * 3, 6)

    @unittest.skip("not on this platform")
    def test_skipped(self):
        raise AssertionError("never runs")
'''


def project(root: Path, files: dict[str, str] | None = None) -> Path:
    """A project with a test package holding two passing tests and a skipped one, plus ``files``."""
    (root / "tests").mkdir(parents=True, exist_ok=True)
    (root / "tests" / "__init__.py").write_text("")
    (root / "tests" / "test_arith.py").write_text(GOOD_TESTS)
    for name, text in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_the_counts_come_from_the_runners_own_report(tmp_path, mode, runner):
    [result] = run([RUNNERS[runner]], project(tmp_path), sandbox=mode)
    assert result.passed, result.stderr_tail
    assert result.reason is None
    assert result.tests == TestCounts(runner=runner, ran=2, passed=2, failed=0, errors=0, skipped=1)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_a_failing_run_keeps_its_counts_and_its_exit_status(tmp_path, mode, runner):
    failing = {"tests/test_broken.py": """\
        import unittest


        class Broken(unittest.TestCase):
            def test_wrong(self):
                self.assertEqual(1 + 1, 3)
        """}
    [result] = run([RUNNERS[runner]], project(tmp_path, failing), sandbox=mode)
    assert not result.passed and result.exit_code == 1 and result.reason is None
    assert result.tests == TestCounts(runner=runner, ran=3, passed=2, failed=1, errors=0, skipped=1)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_attack_os_exit_in_the_test_package_fails_without_a_report(tmp_path, mode, runner):
    # The attack of the issue: the runner imports tests/__init__.py while collecting and the
    # process ends there with status 0, before any test ran.
    [result] = run([RUNNERS[runner]], project(tmp_path, {"tests/__init__.py": "import os\nos._exit(0)\n"}),
                   sandbox=mode)
    assert result.exit_code == 0
    assert not result.passed
    assert result.reason == "no_test_report"
    assert result.tests is None
    assert "exited 0 without writing its report" in result.stderr_tail


def test_attack_a_conftest_deselecting_every_test_and_forcing_exit_0_fails(tmp_path, mode):
    conftest = {"conftest.py": """\
        def pytest_collection_modifyitems(session, config, items):
            config.hook.pytest_deselected(items=list(items))
            items.clear()


        def pytest_sessionfinish(session, exitstatus):
            session.exitstatus = 0
        """}
    [result] = run([PYTEST], project(tmp_path, conftest), sandbox=mode)
    assert result.exit_code == 0
    assert not result.passed and result.reason == "no_tests_ran"
    assert result.tests == TestCounts(runner="pytest", ran=0, passed=0, failed=0, errors=0, skipped=0)


def test_attack_a_conftest_skipping_every_test_fails(tmp_path, mode):
    conftest = {"conftest.py": """\
        import pytest


        def pytest_collection_modifyitems(session, config, items):
            for item in items:
                item.add_marker(pytest.mark.skip(reason="later"))
        """}
    [result] = run([PYTEST], project(tmp_path, conftest), sandbox=mode)
    assert result.exit_code == 0
    assert not result.passed and result.reason == "no_tests_ran"
    assert result.tests == TestCounts(runner="pytest", ran=0, passed=0, failed=0, errors=0, skipped=3)


def test_attack_a_conftest_hiding_a_failure_behind_exit_0_fails(tmp_path, mode):
    files = {"conftest.py": "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n",
             "tests/test_broken.py": "def test_wrong():\n    assert 1 + 1 == 3\n"}
    [result] = run([PYTEST], project(tmp_path, files), sandbox=mode)
    assert result.exit_code == 0
    assert not result.passed and result.reason == "tests_failed"
    assert result.tests.failed == 1


def test_attack_a_report_forged_by_a_test_never_passes_a_failing_command(tmp_path, mode):
    # The test code overwrites mesh's report at exit, after the runner wrote it, with a claim
    # of 100 passing tests; the run itself fails. The counts are only ever a reason to fail.
    forger = {"tests/test_forge.py": """\
        import __main__, atexit, json, unittest

        FORGED = {"tests_run": 100, "failures": 0, "errors": 0, "skipped": 0, "unexpected_successes": 0}


        class Forge(unittest.TestCase):
            def test_forge(self):
                atexit.register(lambda: json.dump(FORGED, open(__main__.report, "w")))
                self.fail("the real outcome")
        """}
    [result] = run([UNITTEST], project(tmp_path, forger), sandbox=mode)
    assert result.exit_code == 1 and not result.passed
    assert result.tests.ran == 100  # the forged claim is recorded as what it is, and changes nothing


@pytest.mark.parametrize("swap", ["fifo", "symlink", "entities", "huge"])
def test_attack_a_hostile_report_is_refused_without_hanging(tmp_path, swap):
    # pytest_unconfigure runs after the JUnit plugin wrote its report: the test code swaps it.
    # Where the sandbox runs as its own user (mesh is root) the report's folder is not
    # writable, so a swap of the file itself is refused and the report stays the runner's.
    swapped = {
        "fifo": "os.unlink(path); os.mkfifo(path)",
        "symlink": "os.unlink(path); os.symlink('/etc/passwd', path)",
        "entities": "open(path, 'w').write('<?xml version=\"1.0\"?><!DOCTYPE t [<!ENTITY a \"aaaaaaaaaa\">"
                    "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]><testsuite><testcase name=\"&b;\"/></testsuite>')",
        "huge": f"open(path, 'w').write('<testsuite>' + ' ' * {MAX_REPORT_BYTES} + '<testcase/></testsuite>')",
    }[swap]
    conftest = {"conftest.py": f"""\
        import os


        def pytest_unconfigure(config):
            path = config.option.xmlpath
            try:
                {swapped}
            except OSError as exc:
                print("swap refused:", exc)
            else:
                print("swapped")
        """}
    [result] = run([PYTEST], project(tmp_path, conftest), timeout_s=120)
    # 1 where the report cannot be read: mesh's control tests failed, as they must, and
    # without the report nothing shows they were the only failures.
    assert result.exit_code in (0, 1)
    if "swapped" in result.stdout_tail:
        assert not result.passed and result.reason == "test_report_unreadable"
        assert result.tests is None
    else:
        assert "swap refused" in result.stdout_tail and sandbox_user() is not None
        assert result.passed and result.tests.ran == 2


@pytest.mark.skipif(sandbox_user() is None, reason="the sandbox runs as its own user only when mesh is root")
def test_attack_the_report_folder_takes_no_other_file(tmp_path):
    # The report folder is on the host's disk: the command may fill its one report file up to
    # the file-size limit, and create nothing else there.
    test = {"tests/test_fill.py": """\
        import os


        def test_fill():
            for name in ("other", ".hidden", "junit.xml.tmp"):
                try:
                    open(os.path.join("/mesh/report", name), "w").write("x" * 1000)
                except OSError:
                    continue
                raise AssertionError(f"wrote /mesh/report/{name}")
        """}
    [result] = run([PYTEST], project(tmp_path, test))
    assert result.passed, result.stdout_tail
    assert result.tests.ran == 3


def test_commands_of_no_known_runner_run_unchanged_and_uncounted(tmp_path, mode):
    [result] = run([f"{PY} -c print(42)"], project(tmp_path), sandbox=mode)
    assert result.passed and result.tests is None and result.reason is None
    assert result.stdout_tail.strip() == "42"


# ---------------------------------------------------------------- the pieces


@pytest.mark.parametrize(("argv", "expected"), [
    (["pytest", "-q"], ["pytest", "--junitxml=/r/junit.xml", "-p", "mesh_pytest_ids", "-q"]),
    (["/venv/bin/py.test"], ["/venv/bin/py.test", "--junitxml=/r/junit.xml", "-p", "mesh_pytest_ids"]),
    (["python3", "-m", "pytest", "tests"],
     ["python3", "-m", "pytest", "--junitxml=/r/junit.xml", "-p", "mesh_pytest_ids", "tests"]),
    (["python", "-X", "dev", "-mpytest"],
     ["python", "-X", "dev", "-m", "pytest", "--junitxml=/r/junit.xml", "-p", "mesh_pytest_ids"]),
    (["python", "-I", "-m", "pytest"], ["python", "-I", "-m", "pytest", "--junitxml=/r/junit.xml"]),
    (["python3.12", "-B", "-m", "unittest", "discover"],
     ["python3.12", "-B", "-c", UNITTEST_SHIM, "/r/unittest.json", "discover"]),
])
def test_the_report_argument_is_added_for_known_runners(argv, expected):
    probe = instrument(argv, Path("/host"), "/r")
    assert probe.argv == expected
    assert probe.runner == ("unittest" if "unittest" in argv else "pytest")


@pytest.mark.parametrize("argv", [
    ["python3", "script.py", "-m", "pytest"], ["python3", "-c", "import pytest"], ["make", "test"],
    ["python3", "-m", "mypkg"], ["python3", "-m"], ["tox", "-e", "py"],
])
def test_other_commands_are_left_alone(argv):
    probe = instrument(argv, Path("/host"), "/r")
    assert probe.argv == argv and probe.runner is None


def test_junit_counts_each_testcase_by_its_outcome():
    report = b"""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite tests="99">
        <testcase name="a"/><testcase name="b"><failure message="x"/></testcase>
        <testcase name="c"><error/></testcase><testcase name="d"><skipped type="pytest.xfail"/></testcase>
        <testcase name="e"><failure/><error/></testcase></testsuite></testsuites>"""
    # The suite's own "tests" attribute is a claim; the test cases are counted.
    assert parse_junit(report) == TestCounts(runner="pytest", ran=4, passed=1, failed=2, errors=1, skipped=1)


@pytest.mark.parametrize("report", [
    b'<!DOCTYPE t [<!ENTITY a "x">]><testsuite><testcase name="&a;"/></testsuite>',
    b'<!DOCTYPE t SYSTEM "file:///etc/passwd"><testsuite/>',
    b"<testsuite><testcase>",
    b"not xml",
    b"<a>" * 100 + b"</a>" * 100,
])
def test_junit_refuses_declarations_and_malformed_reports(report):
    with pytest.raises(ReportError):
        parse_junit(report)


@pytest.mark.parametrize("raw", [
    b"[]", b'{"tests_run": 1}', b'{"tests_run": 1, "failures": 2, "errors": 0, "skipped": 0, "unexpected_successes": 0}',
    b'{"tests_run": 1, "failures": 0, "errors": 0, "skipped": 2, "unexpected_successes": 0}',
    b'{"tests_run": true, "failures": 0, "errors": 0, "skipped": 0, "unexpected_successes": 0}', b"\xff",
])
def test_unittest_reports_of_another_shape_are_refused(raw):
    with pytest.raises(ReportError):
        parse_unittest(raw)


@settings(derandomize=True, max_examples=200)
@given(st.binary(max_size=400) | st.text(alphabet="<>/!&;\"= testcasefailureskippedDOCTYPE", max_size=200)
       .map(str.encode))
@example(b"<testsuite><testcase/></testsuite>")
def test_any_report_is_counts_or_a_typed_refusal(data):
    try:
        counts = parse_junit(data)
    except ReportError:
        return
    assert counts.ran == counts.passed + counts.failed + counts.errors


@given(st.dictionaries(st.sampled_from(["runner", "ran", "passed", "failed", "errors", "skipped", "x"]),
                       st.one_of(st.integers(-2, 5), st.text(max_size=3), st.none(), st.booleans())))
@settings(derandomize=True, max_examples=200)
def test_stored_counts_of_any_shape_read_as_counts_or_none(raw):
    counts = TestCounts.from_dict(raw)
    assert counts is None or TestCounts.from_dict(counts.to_dict()) == counts
