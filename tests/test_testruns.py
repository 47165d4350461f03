"""Per-test results for every runner mesh reads (issue 35, item 1): real runners, real projects.

Each test commits a small project whose tests pass, fail (with a message of their own), are
skipped, and sometimes cannot be collected; validates it with its real runner in the real
sandbox (the runner's dependencies from the npm registry, Go and Rust from Debian); and checks
each test's id, status and message as the result holds them, and the counts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.test_toolchains import validate
from tests.toolchainkit import (_INSTALL, _run, commit_all, go_project, init_repo, need, own_cache,  # noqa: F401
                                rust_project, templates, tool_env)

pytestmark = pytest.mark.usefixtures("own_cache")


def statuses(result) -> dict[str, str]:
    assert result.run is not None, result.stdout_tail + result.stderr_tail
    return {case.id: case.status for case in result.run.cases}


def message(result, test_id: str) -> str:
    [case] = [c for c in result.run.cases if c.id == test_id]
    return case.message


def kept(result) -> dict[str, str]:
    """The failing tests the stored result keeps, with their messages."""
    return {entry["id"]: entry.get("message", "") for entry in result.to_dict().get("failures", [])}


GO_TESTS = """package gop

import "testing"

func TestAdds(t *testing.T) {
\tif 1+1 != 2 {
\t\tt.Fatal("arithmetic")
\t}
}

func TestBreaks(t *testing.T) {
\tgot, want := Same([]int{1}, []int{1}), false
\tif got != want {
\t\tt.Errorf("Same([1], [1]) = %v, want %v", got, want)
\t}
}

func TestLater(t *testing.T) { t.Skip("not yet") }

func TestTable(t *testing.T) {
\tfor _, name := range []string{"one", "two"} {
\t\tt.Run(name, func(t *testing.T) {})
\t}
}
"""


def test_go_test_reports_each_test_with_its_own_message(tmp_path):
    repo, env = go_project(tmp_path)
    (repo / "gop_test.go").write_text(GO_TESTS)
    commit_all(repo, "tests")
    [result] = validate(repo, ["go test ./..."], env)
    assert not result.passed
    assert statuses(result) == {
        "example.com/gop.TestAdds": "passed", "example.com/gop.TestBreaks": "failed",
        "example.com/gop.TestLater": "skipped", "example.com/gop.TestTable/one": "passed",
        "example.com/gop.TestTable/two": "passed", "example.com/gop.TestTable": "passed"}
    assert "Same([1], [1]) = true, want false" in message(result, "example.com/gop.TestBreaks")
    assert result.tests.line() == "5 ran: 4 passed, 1 failed, 0 errors; 1 skipped"
    # What a person reads is go test -v's text, not its JSON events.
    assert "--- FAIL: TestBreaks" in result.stdout_tail and '"Action"' not in result.stdout_tail
    assert "want false" in kept(result)["example.com/gop.TestBreaks"]


def test_a_go_package_that_does_not_build_is_a_collection_error(tmp_path):
    repo, env = go_project(tmp_path)
    (repo / "gop_test.go").write_text("package gop\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { undefined() }\n")
    commit_all(repo, "broken")
    [result] = validate(repo, ["go test ./..."], env)
    assert not result.passed
    assert result.tests is not None and result.tests.collection_errors == 1 and result.tests.ran == 0


RUST_TESTS = """pub fn add(a: i32, b: i32) -> i32 { a + b }

#[cfg(test)]
mod tests {
    #[test]
    fn adds() { assert_eq!(super::add(1, 1), 2); }

    #[test]
    fn breaks() { assert_eq!(super::add(2, 2), 5, "two and two"); }

    #[test]
    #[ignore]
    fn later() {}
}
"""


def test_cargo_test_shows_the_panic_with_its_values(tmp_path):
    repo = rust_project(tmp_path)
    (repo / "src" / "lib.rs").write_text(RUST_TESTS)
    (repo / "tests").mkdir()
    (repo / "tests" / "outside.rs").write_text("#[test]\nfn from_outside() { assert_eq!(rustp::add(0, 0), 0); }\n")
    commit_all(repo, "tests")
    [result] = validate(repo, ["cargo test"])
    assert not result.passed
    # --no-fail-fast: the integration test binary runs although the unit tests failed.
    assert statuses(result) == {"tests::adds": "passed", "tests::breaks": "failed", "tests::later": "skipped",
                                "from_outside": "passed"}
    text = message(result, "tests::breaks")
    assert "panicked at" in text and "left: 4" in text and "right: 5" in text and "two and two" in text


# The Node runners from the npm registry, installed once per session.
NODE_RUNNERS = {"jest": "^29", "mocha": "^10", "tape": "^5"}


@pytest.fixture(scope="session")
def node_runners(templates):
    """A folder whose node_modules holds Jest, mocha and tape (copied into each project)."""
    npm = need("npm", "the Node test runners")
    need("node", "the Node test runners")
    folder = templates / "node-runners"
    if not (folder / "node_modules").is_dir():
        folder.mkdir(exist_ok=True)
        (folder / "package.json").write_text(json.dumps({"name": "runners", "version": "1.0.0", "private": True,
                                                         "devDependencies": NODE_RUNNERS}))
        _run([npm, *_INSTALL["npm"]], folder, tool_env())
    return folder


def node_repo(tmp_path: Path, runners: Path, files: dict[str, str], script: str) -> Path:
    repo = tmp_path / "np"
    init_repo(repo)
    package = {"name": "np", "version": "1.0.0", "private": True, "scripts": {"test": script},
               "devDependencies": NODE_RUNNERS}
    (repo / "package.json").write_text(json.dumps(package, indent=2))
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (repo / ".gitignore").write_text("node_modules/\n")
    shutil.copytree(runners / "node_modules", repo / "node_modules", symlinks=True)
    commit_all(repo)
    return repo


ADD = "exports.add = (a, b) => a + b;\n"
JEST_TEST = """const { add } = require('../add');
describe('add', () => {
  test('adds', () => { expect(add(1, 1)).toBe(2); });
  test('breaks', () => { expect(add(2, 2)).toBe(5); });
  test.skip('later', () => {});
});
"""


@pytest.mark.parametrize("command", ["npm test", "npx jest", "node_modules/.bin/jest"])
def test_jest_reports_each_test_with_expected_and_received(tmp_path, node_runners, command):
    repo = node_repo(tmp_path, node_runners, {"add.js": ADD, "test/add.test.js": JEST_TEST,
                                              "test/broken.test.js": "const x = ;\n"}, "jest")
    [result] = validate(repo, [command], tool_env())
    assert not result.passed
    assert statuses(result) == {"test/add.test.js > add adds": "passed", "test/add.test.js > add breaks": "failed",
                                "test/add.test.js > add later": "skipped"}
    text = message(result, "test/add.test.js > add breaks")
    assert "Expected: 5" in text and "Received: 4" in text
    assert result.tests.collection_errors == 1  # broken.test.js does not parse
    assert "test/broken.test.js (collection)" in kept(result)


MOCHA_TEST = """const assert = require('assert');
const { add } = require('../add');
describe('add', () => {
  it('adds', () => { assert.strictEqual(add(1, 1), 2); });
  it('breaks', () => { assert.strictEqual(add(2, 2), 5); });
  it.skip('later', () => {});
});
"""


def test_mocha_reports_each_test_through_its_xunit_reporter(tmp_path, node_runners):
    repo = node_repo(tmp_path, node_runners, {"add.js": ADD, "test/add.test.js": MOCHA_TEST}, "mocha")
    [result] = validate(repo, ["npm test"], tool_env())
    assert statuses(result) == {"add adds": "passed", "add breaks": "failed", "add later": "skipped"}
    assert "4 !== 5" in message(result, "add breaks")


TAPE_TEST = """const test = require('tape');
const { add } = require('../add');
test('adds', (t) => { t.equal(add(1, 1), 2, 'one and one'); t.end(); });
test('breaks', (t) => { t.equal(add(2, 2), 5, 'two and two'); t.equal(add(0, 0), 0); t.end(); });
test('later', { skip: true }, (t) => { t.end(); });
"""


def test_tape_groups_its_assertions_by_test(tmp_path, node_runners):
    repo = node_repo(tmp_path, node_runners, {"add.js": ADD, "test/add.test.js": TAPE_TEST}, "tape test/add.test.js")
    [result] = validate(repo, ["npm test"], tool_env())
    assert not result.passed
    found = statuses(result)
    assert found["adds"] == "passed" and found["breaks"] == "failed"
    text = message(result, "breaks")
    assert "two and two" in text and "expected: 5" in text and "actual:   4" in text


NODE_TEST = """const test = require('node:test');
const assert = require('node:assert');
const { add } = require('../add');
test.describe('add', () => {
  test.it('adds', () => { assert.strictEqual(add(1, 1), 2); });
  test.it('breaks', () => { assert.strictEqual(add(2, 2), 5); });
});
test('later', { skip: true }, () => {});
"""


@pytest.mark.parametrize("command", ["node --test", "npm test"])
def test_node_test_reports_each_test_and_keeps_its_spec_output(tmp_path, node_runners, command):
    second = "const test = require('node:test');\ntest('second file', () => {});\n"
    repo = node_repo(tmp_path, node_runners, {"add.js": ADD, "test/add.test.js": NODE_TEST,
                                              "test/other.test.js": second}, "node --test")
    [result] = validate(repo, [command], tool_env())
    assert not result.passed
    assert statuses(result) == {"add > adds": "passed", "add > breaks": "failed", "later": "skipped",
                                "second file": "passed"}
    assert "4 !== 5" in message(result, "add > breaks")
    assert "✖ breaks" in result.stdout_tail  # the spec reporter, for people


def test_vitest_reports_each_test_and_keeps_its_console_output(templates, tmp_path):
    from tests.toolchainkit import vitest_project

    repo = vitest_project(templates, tmp_path)
    (repo / "src" / "add.test.js").write_text(
        "import { test, expect } from 'vitest';\nimport { add } from './add.js';\n"
        "test('adds', () => { expect(add(1, 2)).toBe(3); });\n"
        "test('breaks', () => { expect(add(2, 2)).toBe(5); });\n")
    commit_all(repo, "tests")
    [result] = validate(repo, ["npm test"], tool_env())
    assert statuses(result) == {"src/add.test.js > adds": "passed", "src/add.test.js > breaks": "failed"}
    text = message(result, "src/add.test.js > breaks")
    assert "expected 4 to be 5" in text
    assert "breaks" in result.stdout_tail + result.stderr_tail  # the default reporter, for people


def test_a_runner_mesh_does_not_read_is_not_counted(tmp_path):
    repo = tmp_path / "plain"
    init_repo(repo)
    (repo / "check.sh").write_text("#!/bin/sh\necho fine\n")
    (repo / "check.sh").chmod(0o755)
    commit_all(repo)
    [result] = validate(repo, ["./check.sh"])
    assert result.passed and result.tests is None and result.run is None
    assert "failures" not in result.to_dict()


def _selected(repo, command, test_id, env=None):
    from orchestrator.sandbox.validation import run_validation
    from orchestrator.toolchains.view import inspect

    environ = env or tool_env()
    view = inspect(repo, None, environ).view
    [result] = run_validation([command], cwd=repo, allow=[command], timeout_s=300, environment=view, env=environ,
                              select={command: test_id})
    return result


def test_a_failing_test_is_run_again_alone_by_each_runner_that_can_select_one(tmp_path, node_runners):
    """What the flaky retry relies on (issue 35 item 5): the runner's own selection runs one test."""
    repo, env = go_project(tmp_path / "go")
    (repo / "gop_test.go").write_text(GO_TESTS)
    commit_all(repo, "tests")
    alone = _selected(repo, "go test ./...", "example.com/gop.TestTable/two", env)
    assert statuses(alone) == {"example.com/gop.TestTable": "passed", "example.com/gop.TestTable/two": "passed"}

    crate = rust_project(tmp_path / "rust")
    (crate / "src" / "lib.rs").write_text(RUST_TESTS)
    commit_all(crate, "tests")
    assert statuses(_selected(crate, "cargo test", "tests::breaks")) == {"tests::breaks": "failed"}

    node = node_repo(tmp_path / "node", node_runners, {"add.js": ADD, "test/add.test.js": JEST_TEST}, "jest")
    found = statuses(_selected(node, "npm test", "test/add.test.js > add adds"))
    assert found["test/add.test.js > add adds"] == "passed" and found["test/add.test.js > add breaks"] == "skipped"


def test_a_test_id_that_is_an_option_is_never_given_back_to_the_runner(tmp_path):
    from orchestrator.sandbox import testcounts

    assert testcounts.select(["go", "test", "./..."], "-exec=/bin/sh") is None
    assert testcounts.select(["cargo", "test"], "x\ny") is None
    assert testcounts.select(["python3", "-m", "unittest"], "tests.x.T.test_a; rm") is None
    assert testcounts.select(["python3", "-m", "unittest"], "tests.x.T.test_a")[-2:] == ["-k", "tests.x.T.test_a"]


def test_tape_through_npm_run_scripts_and_a_coverage_wrapper_is_read(tmp_path, node_runners):
    """Found by the trial on minimist: npm test -> npm run tests-only -> nyc tape 'test/**/*.js'. The
    npm run chain is followed (tape reads nothing mesh adds); a coverage wrapper is seen through."""
    from orchestrator.testruns.table import reader_for

    repo = node_repo(tmp_path, node_runners, {"add.js": ADD, "test/add.test.js": TAPE_TEST}, "npm run tests-only")
    package = json.loads((repo / "package.json").read_text())
    package["scripts"]["tests-only"] = "tape 'test/**/*.js'"
    (repo / "package.json").write_text(json.dumps(package))
    commit_all(repo, "nested script")
    [result] = validate(repo, ["npm test"], tool_env())
    assert statuses(result)["breaks"] == "failed" and "two and two" in message(result, "breaks")
    assert reader_for(["nyc", "--silent", "tape", "t.js"]).name == "tape"
    assert reader_for(["c8", "node_modules/.bin/tape", "t.js"]).name == "tape"
    # Arguments after -- would reach the inner npm, not Jest: a nested script is not instrumented.
    (repo / "package.json").write_text(json.dumps({**package, "scripts": {"test": "npm run unit", "unit": "jest"}}))
    assert reader_for(["npm", "test"], repo) is None
    assert reader_for(["npm", "run", "unit"], repo).name == "jest"
    (repo / "package.json").write_text(json.dumps({**package, "scripts": {"test": "tape t.js | tap-spec"}}))
    assert reader_for(["npm", "test"], repo) is None


def test_a_runner_mesh_does_not_read_still_shows_the_lines_that_failed(tmp_path):
    """The trial's nyc + tape output ended in a coverage table: the `not ok` lines and their values,
    earlier in the output, reach the model before the tail."""
    from roles.validation_text import failure_text

    repo = tmp_path / "tapish"
    init_repo(repo)
    lines = ["TAP version 13", "# nums", "ok 1 should be equal", "not ok 2 should be deeply equivalent",
             "  ---", "    operator: deepEqual", "    expected: 3735928559", "    actual:   '0xdeadbeef'", "  ...",
             *[f"ok {n} fine" for n in range(3, 60)], "# fail 1",
             *["-----|---------|", "File | % Stmts |", "all  |   100   |"] * 8]
    (repo / "check.sh").write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(lines) + "\nEOF\nexit 1\n")
    (repo / "check.sh").chmod(0o755)
    commit_all(repo)
    [result] = validate(repo, ["./check.sh"])
    assert not result.passed and result.tests is None
    text = failure_text(result.to_dict())
    assert text.index("not ok 2 should be deeply equivalent") < text.index("Last lines of output:")
    assert "    expected: 3735928559" in text and "actual:   '0xdeadbeef'" in text


def test_pytests_report_is_read_once_for_its_cases_and_the_control_tests_outcomes():
    """The control tests' outcomes (xfail told from skipped) come from the same parse as the run."""
    from orchestrator.testruns.pytest_reader import READER

    report = (b'<?xml version="1.0"?><testsuites><testsuite name="pytest">'
              b'<testcase classname="tests.test_a.T" name="test_ok" time="0.1"/>'
              b'<testcase classname="tests.test_a.T" name="test_bad"><failure message="no">x</failure></testcase>'
              b'<testcase classname="tests.test_a" name="test_err"><error message="boom">y</error></testcase>'
              b'<testcase classname="tests.test_a" name="test_skip"><skipped type="pytest.skip" message="s"/></testcase>'
              b'<testcase classname="tests.test_a" name="test_xf"><skipped type="pytest.xfail" message="x"/></testcase>'
              b'</testsuite></testsuites>')
    outcomes: dict = {}
    run = READER.read(report, "", outcomes)
    assert outcomes == {("T", "test_ok"): "passed", ("T", "test_bad"): "failed", ("test_a", "test_err"): "errors",
                        ("test_a", "test_skip"): "skipped", ("test_a", "test_xf"): "xfail"}
    assert {case.id: case.status for case in run.cases} == {
        "tests.test_a.T::test_ok": "passed", "tests.test_a.T::test_bad": "failed", "tests.test_a::test_err": "errored",
        "tests.test_a::test_skip": "skipped", "tests.test_a::test_xf": "skipped"}
    assert READER.read(report).counts() == run.counts()


def test_a_long_test_id_is_cut_to_its_head_and_a_digest_that_tells_it_apart():
    from orchestrator.testruns.model import MAX_ID_CHARS, Run, bounded_id, safe_id

    short = "tests/test_x.py::test_y[" + "a" * 900 + "]"
    assert bounded_id(short) == short
    params = "b" * 5_000
    one, other = f"t.py::test_one[{params}]", f"t.py::test_one[{params[:-1]}c]"
    twin = f"t.py::test_one_again_copy[{params}]"
    cut = [bounded_id(i) for i in (one, other, twin)]
    assert len(set(cut)) == 3 and all(len(i) <= MAX_ID_CHARS and not safe_id(i) for i in cut), cut
    assert cut[0].startswith("t.py::test_one[bbbb") and cut[0].endswith("]")
    # The copy's id is its original's with the other name: the same digest of the same parameters.
    assert cut[2] == cut[0].replace("test_one[", "test_one_again_copy[")
    named = "m.T::test_" + "x" * 3_000
    assert bounded_id(named) != bounded_id(named + "y") and bounded_id(named).startswith("m.T::test_xxx")
    run = Run("pytest")
    run.add(one, "passed")
    run.add(one, "failed", message="boom")  # the same id twice: told apart after the cut as before it
    assert [c.id for c in run.cases] == [cut[0], cut[0] + " #2"]
