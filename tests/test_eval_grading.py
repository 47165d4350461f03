"""Issue 36, items 3 and 4: grading by test and curation at suite build, in the real sandbox with
real git and real runners.

A suite from history records each case's FAIL_TO_PASS tests (fail on the base with the hidden
tests, pass on the reference) and PASS_TO_PASS tests (pass on both, from the project's whole
check, which runs without any configuration); the base and the reference run three times, and a
test whose outcome varies is left out and named. A run is resolved when every FAIL_TO_PASS test
passes and no PASS_TO_PASS test fails, and never when the code under test forges its runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.evals.suite import read_suite

COMMAND = "python3 -m unittest {tests}"
FLAKE = "EVALKIT_FLAKE"


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True, env=env).stdout


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def on_side(repo: Path, base: str, files: dict[str, str]) -> str:
    """A commit on ``base`` (a run's final tree), made without moving ``main``."""
    git(repo, "checkout", "-q", "--detach", base)
    try:
        return commit(repo, "a run's work", files)
    finally:
        git(repo, "checkout", "-q", "main")


def unit_tests(**bodies: str) -> str:
    tests = "".join(f"    def test_{name}(self):\n        {body}\n\n" for name, body in bodies.items())
    return f"import os\nimport unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n{tests}"


def build(repo: Path, out: Path, *args: str):
    return CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out), *args],
                              catch_exceptions=False)


def new_repo(tmp_path: Path, monkeypatch, files: dict[str, str]) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = tmp_path / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "start", files)
    return repo


@pytest.fixture
def counted_runs(monkeypatch):
    """Every sandboxed run gets ``EVALKIT_FLAKE``: how many times its commit has run so far (1, 2,
    3...): a test that fails on odd runs of a commit is flaky, deterministically."""
    from orchestrator.sandbox import validation

    real = validation.run_validation
    counts: dict[str, int] = {}

    def counted(commands, **kwargs):
        commit_ = kwargs.get("commit") or "HEAD"
        counts[commit_] = counts.get(commit_, 0) + 1
        kwargs["env"] = {**os.environ, FLAKE: str(counts[commit_])}
        return real(commands, **kwargs)

    monkeypatch.setattr(validation, "run_validation", counted)
    return counts


FLAKY = f"self.assertEqual(int(os.environ['{FLAKE}']) % 2, 0)"  # fails on the 1st and 3rd run of a commit


def test_a_flaky_test_is_left_out_and_named_and_a_case_with_only_flaky_tests_is_dropped(tmp_path, monkeypatch,
                                                                                     counted_runs):
    repo = new_repo(tmp_path, monkeypatch, {
        "calc.py": "def one():\n    return 1\n", "tests/__init__.py": "",
        "tests/test_one.py": unit_tests(one="self.assertEqual(calc.one(), 1)"),
        "mesh.toml": f'[validation]\nenv = ["{FLAKE}"]\n'})
    source = (repo / "calc.py").read_text()
    f = commit(repo, "Add f()", {"calc.py": source + "\n\ndef f():\n    return 2\n", "tests/test_f.py": unit_tests(
        f="self.assertEqual(calc.f(), 2)", f_flaky=f"self.assertEqual(calc.f(), 2)\n        {FLAKY}")})
    source = (repo / "calc.py").read_text()
    h = commit(repo, "Add h()", {"calc.py": source + "\n\ndef h():\n    return 3\n", "tests/test_h.py": unit_tests(
        h=f"self.assertEqual(calc.h(), 3)\n        {FLAKY}")})
    out = tmp_path / "suite.jsonl"
    result = build(repo, out, "--command", COMMAND)
    assert result.exit_code == 0, result.output
    [case] = read_suite(out)
    assert case.reference == f and case.grading == "tests"
    assert case.fail_to_pass == ["tests.test_f.T.test_f"]
    assert case.flaky == ["tests.test_f.T.test_f_flaky"]
    assert "tests.test_one.T.test_one" in case.pass_to_pass and "tests.test_f.T.test_f" not in case.pass_to_pass
    assert case.check_command == "python3 -m unittest"  # the hidden command's runner, no test named
    assert "flaky, left out: tests.test_f.T.test_f_flaky" in result.stdout
    assert (f"dropped {h[:12]}  Add h(): no stable FAIL_TO_PASS test: the outcome of tests.test_h.T.test_h varies"
            " between runs (flaky)") in result.stdout
    # Three runs each of the kept case's base (with its hidden tests) and reference.
    assert counted_runs[f] == 3 and sorted(counted_runs.values()).count(3) >= 3


def test_one_run_without_configuration_finds_no_flaky_test(tmp_path, monkeypatch):
    """--runs 1: the base and the reference run once; --runs 0 is refused."""
    repo = new_repo(tmp_path, monkeypatch, {"calc.py": "", "tests/__init__.py": ""})
    commit(repo, "Add f()", {"calc.py": "def f():\n    return 2\n",
                             "tests/test_f.py": unit_tests(f="self.assertEqual(calc.f(), 2)")})
    out = tmp_path / "suite.jsonl"
    assert build(repo, out, "--command", COMMAND, "--runs", "0").exit_code == 2
    result = build(repo, out, "--command", COMMAND, "--runs", "1", "--json")
    assert result.exit_code == 0, result.output
    [kept] = json.loads(result.stdout)["kept"]
    assert kept["fail_to_pass"] == ["tests.test_f.T.test_f"] and "flaky" not in kept


@pytest.fixture
def breakable(tmp_path, monkeypatch):
    """A project with no mesh.toml: calc.py and text.py with its own tests; a commit adds sq()
    with its test. Returns (repo, the built case, the base)."""
    repo = new_repo(tmp_path, monkeypatch, {
        "calc.py": "def add(a, b):\n    return a + b\n", "text.py": "def shout(s):\n    return s.upper()\n",
        "tests/__init__.py": "", "tests/test_add.py": unit_tests(add="self.assertEqual(calc.add(1, 2), 3)"),
        "tests/test_text.py": ("import unittest\n\nimport text\n\n\nclass T(unittest.TestCase):\n"
                               "    def test_shout(self):\n        self.assertEqual(text.shout('hi'), 'HI')\n")})
    base = git(repo, "rev-parse", "HEAD").strip()
    commit(repo, "Add sq()", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sq(a):\n    return a * a\n",
                              "tests/test_sq.py": unit_tests(sq="self.assertEqual(calc.sq(3), 9)")})
    out = tmp_path / "suite.jsonl"
    result = build(repo, out, "--command", COMMAND, "--runs", "1")
    assert result.exit_code == 0, result.output
    [case] = read_suite(out)
    assert case.fail_to_pass == ["tests.test_sq.T.test_sq"]
    assert sorted(case.pass_to_pass) == ["tests.test_add.T.test_add", "tests.test_text.T.test_shout"]
    assert "1 FAIL_TO_PASS, 2 PASS_TO_PASS" in result.stdout
    return repo, case, base


def grade(repo: Path, case, head: str | None):
    from orchestrator.config import load_config
    from orchestrator.evals.cases import grade_run
    from orchestrator.toolchains.view import inspect

    config = load_config(repo, None)
    view = inspect(repo, config.validation).view
    # As runs.py calls it: no configured check here, so ``checks`` is empty.
    return grade_run(repo, repo, case, head, settings=config.validation, view=view, checks=[], base_passes=True)


SQ = "def add(a, b):\n    return a + b\n\n\ndef sq(a):\n    return a * a\n"


def test_a_patch_that_breaks_a_test_of_another_module_is_not_resolved_without_configuration(breakable):
    repo, case, base = breakable
    broke = on_side(repo, base, {"calc.py": SQ, "text.py": "def shout(s):\n    return s\n"})
    graded = grade(repo, case, broke)
    assert not graded.resolved
    assert graded.detail == "the PASS_TO_PASS test tests.test_text.T.test_shout fails: AssertionError: 'hi' != 'HI'"
    assert graded.tests == {"fail_to_pass": {"passed": 1, "failed": []},
                            "pass_to_pass": {"checked": 2, "failed": ["tests.test_text.T.test_shout"]}}
    good = grade(repo, case, on_side(repo, base, {"calc.py": SQ}))
    assert good.resolved, good.detail
    assert good.detail == "the 1 FAIL_TO_PASS test(s) pass and none of the 2 PASS_TO_PASS tests fails"
    wrong = grade(repo, case, on_side(repo, base, {"calc.py": SQ.replace("a * a", "a + a")}))
    assert not wrong.resolved
    assert wrong.detail == "the FAIL_TO_PASS test tests.test_sq.T.test_sq fails: AssertionError: 6 != 9"
    assert wrong.to_dict()["tests"]["fail_to_pass"] == {"passed": 0, "failed": ["tests.test_sq.T.test_sq"]}


def test_code_under_test_that_forges_the_runner_is_not_resolved(breakable):
    """The containment issue's attack: the module under test replaces unittest's assertions at
    import, so every test 'passes'; mesh's control tests catch it and grading says so."""
    repo, case, base = breakable
    forged = on_side(repo, base, {"calc.py": SQ.replace("a * a", "a + a") + "\nimport unittest\n"
                                  "unittest.TestCase.assertEqual = lambda self, first, second, msg=None: None\n",
                                  "text.py": "def shout(s):\n    return s\n"})
    graded = grade(repo, case, forged)
    assert not graded.resolved
    assert "forges the test runner's verdicts" in graded.detail and "runner_forged" in graded.detail


def test_a_suite_that_can_run_no_whole_check_stops(tmp_path, monkeypatch):
    repo = new_repo(tmp_path, monkeypatch, {"lib.sh": "", "run-tests.sh": "for t in \"$@\"; do sh \"$t\"; done\n"})
    commit(repo, "Add greet", {"lib.sh": "greet() { echo hi; }\n", "tests/test_greet.sh": ". ./lib.sh; greet\n"})
    out = tmp_path / "suite.jsonl"
    result = build(repo, out, "--command", "sh run-tests.sh {tests}")
    assert result.exit_code == 2, result.output
    assert "no whole check" in result.output and "set validation.check" in result.output
    assert not out.exists()


def test_a_reference_the_installed_python_rejects_is_dropped_naming_the_environment(tmp_path, monkeypatch):
    repo = new_repo(tmp_path, monkeypatch, {"calc.py": "", "tests/__init__.py": ""})
    alias = commit(repo, "Add a Number alias", {
        "calc.py": "type Number = int\n\n\ndef f(x: Number) -> Number:\n    return x\n",
        "tests/test_f.py": unit_tests(f="self.assertEqual(calc.f(2), 2)")})
    result = build(repo, tmp_path / "suite.jsonl", "--command", COMMAND)
    assert result.exit_code == 0, result.output
    if sys.version_info >= (3, 12):
        pytest.skip("this Python accepts PEP 695's type statement")
    assert (f"dropped {alias[:12]}  Add a Number alias: its hidden tests fail with the reference because of the"
            " environment: the installed Python rejects a syntax of calc.py (line 1: SyntaxError: invalid syntax)"
            ) in result.stdout


def test_a_conftest_hook_the_installed_pytest_refuses_is_named_as_the_environment(tmp_path, monkeypatch):
    """boltons 24.0.0's conftest: ``pytest_ignore_collect(path, config)``, which pytest 8 refuses."""
    repo = new_repo(tmp_path, monkeypatch, {"calc.py": "", "tests/__init__.py": "",
                                            "conftest.py": "def pytest_ignore_collect(path, config):\n    return None\n"})
    commit(repo, "Add f()", {"calc.py": "def f():\n    return 2\n",
                             "tests/test_f.py": "import calc\n\n\ndef test_f():\n    assert calc.f() == 2\n"})
    result = build(repo, tmp_path / "suite.jsonl", "--command", f"{sys.executable} -m pytest {{tests}}", "--runs", "1")
    assert result.exit_code == 0, result.output
    assert ("its hidden tests fail with the reference because of the environment: the installed pytest refuses a"
            " plugin or hook of conftest.py (PluginValidationError: Plugin 'conftest.py' for hook 'pytest_ignore_collect'"
            " Argument(s) {'path'} are declared in the hookimpl but can not be found in the hookspec)") in result.stdout


def test_a_runner_without_per_test_results_is_graded_by_exit_status(tmp_path, monkeypatch):
    """Test scripts run as programs: no runner mesh reads, so the case is kept and graded by the
    exit status of its hidden command and of the whole check (validation.check), and says so."""
    script = "import sys\nsys.path.insert(0, '.')\nimport calc\n\nassert {}\n"
    repo = new_repo(tmp_path, monkeypatch, {
        "calc.py": "def twice(x):\n    return 2 * x\n", "tests/test_twice.py": script.format("calc.twice(2) == 4"),
        "run-tests.sh": "for t in tests/test_*.py; do python3 \"$t\" || exit 1; done\n",
        "mesh.toml": '[validation]\nallow = ["sh run-tests.sh"]\ncheck = ["sh run-tests.sh"]\n'})
    base = git(repo, "rev-parse", "HEAD").strip()
    greet = "def twice(x):\n    return 2 * x\n\n\ndef greet():\n    return 'hi'\n"
    commit(repo, "Add greet", {"calc.py": greet, "tests/test_greet.py": script.format("calc.greet() == 'hi'")})
    out = tmp_path / "suite.jsonl"
    result = build(repo, out, "--command", "python3 {tests}", "--runs", "2")
    assert result.exit_code == 0, result.output
    [case] = read_suite(out)
    assert case.grading == "exit" and not case.fail_to_pass and case.hidden_command == "python3 tests/test_greet.py"
    assert case.check_command == "sh run-tests.sh"
    assert "graded by exit status (its runner gives no per-test results)" in result.stdout
    good = grade(repo, case, on_side(repo, base, {"calc.py": greet}))
    assert good.resolved and "graded by exit status" in good.detail, good.detail
    broke = grade(repo, case, on_side(repo, base, {"calc.py": greet.replace("2 * x", "x")}))
    assert not broke.resolved and broke.detail.startswith("the whole check `sh run-tests.sh` fails (exit 1"), broke.detail


@pytest.mark.parametrize("output, cause", [
    ("go: go.mod requires go >= 1.23 (running go 1.21.6; GOTOOLCHAIN=local)",
     "the installed Go is older than go.mod requires (go >= 1.23)"),
    ('npm ERR! notsup Unsupported engine for calc@1.0.0: wanted: {"node":">=22"} (current: {"node":"18.19.0"})',
     "the installed Node is not one the project asks for (npm ERR! notsup Unsupported engine for calc@1.0.0"),
    ("/mesh/tree/src/calc.mjs:3\n  static #x = using y;\n  ^\n\nSyntaxError: Unexpected identifier 'y'",
     "the installed Node rejects a syntax of src/calc.mjs (line 3: SyntaxError: Unexpected identifier 'y')"),
    ("ModuleNotFoundError: No module named 'mock'", None)])
def test_which_failures_of_a_reference_are_the_environments(output, cause):
    from orchestrator.evals.curation import environment_cause
    from orchestrator.sandbox.validation import ValidationResult

    found = environment_cause(ValidationResult("c", 1, False, False, None, stderr_tail=output))
    assert (found is None) if cause is None else found.startswith(f"the environment: {cause}"), found


def test_the_detail_names_each_failing_test_with_its_message():
    from orchestrator.evals.curation import grade_listed
    from orchestrator.evals.suite import Case
    from orchestrator.sandbox.validation import ValidationResult
    from orchestrator.testruns.model import Run

    case = Case(id="c", base="abcd", task="t", hidden_command="h", check_command="w", grading="tests",
                fail_to_pass=["t.a", "t.b", "t.c"], pass_to_pass=["o.x", "o.y"], flaky=["t.f"])
    hidden, whole = Run("unittest"), Run("unittest")
    hidden.add("t.a", "passed")
    hidden.add("t.b", "failed", message="Traceback...\nAssertionError: 1 != 2")
    hidden.add("t.f", "failed", message="flaky, not counted")
    whole.add("o.x", "skipped")
    results = {"h": ValidationResult("h", 1, False, False, None, run=hidden),
               "w": ValidationResult("w", 1, False, False, None, run=whole)}
    resolved, detail, tests = grade_listed(case, results)
    assert not resolved
    assert detail == ("2 of 3 FAIL_TO_PASS tests fail: t.b (AssertionError: 1 != 2), t.c (did not run);"
                      " 2 PASS_TO_PASS tests fail: o.x (skipped), o.y (did not run)")
    assert tests == {"fail_to_pass": {"passed": 1, "failed": ["t.b", "t.c"]},
                     "pass_to_pass": {"checked": 2, "failed": ["o.x", "o.y"]}}
    forged = {"h": ValidationResult("h", 0, False, False, "runner_forged", run=hidden), "w": results["w"]}
    resolved, detail, _ = grade_listed(case, forged)
    assert not resolved and detail.startswith("not resolved: the code under test forges the test runner's verdicts")


def test_a_forgery_that_lies_only_for_the_hidden_tests_code_is_not_resolved(breakable):
    """Issue 43, item 2: the module under test quiets ``assertEqual`` only when the calling test
    uses ``sq`` (a name of its own; the hidden test is never seen), so mesh's synthetic control
    tests fail as they must; the hidden test's twins call ``sq`` too, and grading says forged."""
    repo, case, base = breakable
    lie = ("\nimport sys as _sys\nimport unittest as _unittest\n_real = _unittest.TestCase.assertEqual\n\n\n"
           "def _quiet(self, *args, **kwargs):\n"
           "    if 'sq' in _sys._getframe(1).f_code.co_names:\n        return None\n"
           "    return _real(self, *args, **kwargs)\n\n\n_unittest.TestCase.assertEqual = _quiet\n")
    wrong = SQ.replace("a * a", "a + a")
    assert not grade(repo, case, on_side(repo, base, {"calc.py": wrong})).resolved  # the control: wrong
    graded = grade(repo, case, on_side(repo, base, {"calc.py": wrong + lie}))
    assert not graded.resolved
    assert "runner_forged" in graded.detail, graded.detail
    # The tamper check names the lines too: counted apart as a suspected forgery.
    assert graded.detail.startswith("suspected forgery: ")
    assert {found["rule"] for found in graded.suspected_forgery} >= {"py-runner-attribute", "py-caller-frames"}


def test_a_suspected_forgery_is_not_resolved_even_when_its_tests_pass(breakable):
    """Issue 43, item 3: a right answer whose change also reaches into the test machinery."""
    repo, case, base = breakable
    graded = grade(repo, case, on_side(repo, base, {"calc.py": SQ + "\nimport unittest\n"
                                                    "unittest.TestCase.maxDiff = None\n"}))
    assert not graded.resolved and graded.detail.startswith("suspected forgery: "), graded.detail
    assert graded.suspected_forgery[0]["location"] == "calc.py:9"
    assert grade(repo, case, on_side(repo, base, {"calc.py": SQ})).resolved


def test_suspected_forgeries_are_counted_apart_in_the_report():
    from orchestrator.evals.report import _arm_row

    flagged = [{"rule": "py-runner-attribute", "location": "calc.py:9", "text": "unittest.TestCase.x = 1"}]
    runs = {("a", "one"): [{"case": "a", "state": "unresolved", "suspected_forgery": flagged}],
            ("b", "one"): [{"case": "b", "state": "resolved"}]}
    row = _arm_row("one", {"profile": "one"}, 1, "one", ["a", "b"], runs)
    assert row["resolved"] == 1 and row["finished"] == 2
    assert row["suspected_forgery"] == {"count": 1, "runs": [{"case": "a", "trial": 1,
                                                              "lines": ["calc.py:9: unittest.TestCase.x = 1"]}]}
