"""``mesh eval suite --from-git`` on a repository with a history of a dozen commits (functions and
their tests, a bug fixed later, docs, a merge, a commit too large, tests that already pass or fail
with the reference), verified in the real validation sandbox; hand-written cases; the statistics
of a report against hand-computed values."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.evals.stats import mcnemar_exact, wilson
from orchestrator.evals.suite import Case, build_tree, read_suite, write_suite

COMMAND = "python3 -m unittest {tests}"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def unit_test(name: str, body: str) -> str:
    return (f"import unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n"
            f"    def test_{name}(self):\n        {body}\n")


@pytest.fixture
def history(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = tmp_path / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    made = {}
    made["root"] = commit(repo, "start", {"calc.py": "", "tests/__init__.py": ""})
    made["add"] = commit(repo, "Add add()", {"calc.py": "def add(a, b):\n    return a + b\n",
                                            "tests/test_add.py": unit_test("add", "self.assertEqual(calc.add(1, 2), 3)")})
    made["sub"] = commit(repo, "Add sub()", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
                                                       "    return a - b\n",
                                            "tests/test_sub.py": unit_test("sub", "self.assertEqual(calc.sub(3, 1), 2)")})
    made["docs"] = commit(repo, "Document calc", {"README.md": "calc\n"})
    source = (repo / "calc.py").read_text()
    made["mul"] = commit(repo, "Add mul()", {"calc.py": source + "\n\ndef mul(a, b):\n    return a + b\n",
                                            "tests/test_mul.py": unit_test("mul", "self.assertEqual(calc.mul(2, 2), 4)")})
    made["fix"] = commit(repo, "Fix mul() for odd numbers", {
        "calc.py": source + "\n\ndef mul(a, b):\n    return a * b\n",
        "tests/test_mul.py": unit_test("mul", "self.assertEqual(calc.mul(2, 3), 6)")})
    made["tests-only"] = commit(repo, "More tests for add", {
        "tests/test_add_more.py": unit_test("add_more", "self.assertEqual(calc.add(0, 0), 0)")})
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, "A side change", {"side.py": "X = 1\n"})
    git(repo, "checkout", "-q", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--no-ff", "-m", "Merge side", "side")
    made["merge"] = git(repo, "rev-parse", "HEAD").strip()
    source = (repo / "calc.py").read_text()
    made["big"] = commit(repo, "A large table", {"table.py": "".join(f"T{i} = {i}\n" for i in range(300)),
                                                 "tests/test_table.py": unit_test("t", "self.assertTrue(True)")})
    made["already"] = commit(repo, "Add div(), test add again", {
        "calc.py": source + "\n\ndef div(a, b):\n    return a / b\n",
        "tests/test_add_again.py": unit_test("again", "self.assertEqual(calc.add(2, 2), 4)")})
    source = (repo / "calc.py").read_text()
    made["wrong"] = commit(repo, "Add neg() with a wrong test", {
        "calc.py": source + "\n\ndef neg(a):\n    return -a\n",
        "tests/test_neg.py": unit_test("neg", "self.assertEqual(calc.neg(1), 1)")})
    source = (repo / "calc.py").read_text()
    made["policy"] = commit(repo, "Add pos() and its lint settings", {
        "calc.py": source + "\n\ndef pos(a):\n    return abs(a)\n", "setup.cfg": "[flake8]\nmax-line-length = 99\n",
        "tests/test_pos.py": unit_test("pos", "self.assertEqual(calc.pos(-2), 2)")})
    made["sq"] = commit(repo, "Add sq() (closes calc-7)", {"calc.py": source + "\n\ndef sq(a):\n    return a * a\n",
                                                           "tests/test_sq.py": unit_test("sq", "self.assertEqual(calc.sq(3), 9)")})
    return repo, made


def test_a_suite_from_history_keeps_the_cases_its_tests_prove(history, tmp_path):
    repo, made = history
    out = tmp_path / "suite.jsonl"
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                      "--command", COMMAND, "--max-lines", "100", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    kept = {case["reference"]: case for case in report["kept"]}
    assert set(kept) == {made["add"], made["sub"], made["mul"], made["fix"], made["sq"]}
    why = {d["commit"]: d["why"] for d in report["dropped"]}
    assert why[made["root"]].startswith("the root commit")
    assert why[made["docs"]] == "it adds or changes no test file"
    assert why[made["tests-only"]] == "it changes tests only"
    assert why[made["merge"]] == "a merge; --merges makes cases of merges"
    assert why[made["big"]].startswith("too large")
    assert why[made["already"]] == "its hidden tests pass on the base already"
    assert why[made["wrong"]].startswith("its hidden tests fail with the reference (exit 1: failing tests.test_neg.T.test_neg: AssertionError: -1 != 1")
    # setup.cfg is protected: no run could land this reference, so it is no case.
    assert why[made["policy"]].startswith("the patch policy refuses its reference (setup.cfg is protected")
    fix = kept[made["fix"]]
    assert fix["base"] == made["mul"] and fix["hidden_tests"] == ["tests/test_mul.py"]
    assert fix["task"] == "Fix mul() for odd numbers" and fix["hidden_command"] == "python3 -m unittest tests/test_mul.py"
    cases = read_suite(out)
    assert [case.reference for case in cases] == [made["add"], made["sub"], made["mul"], made["fix"], made["sq"]]


def test_the_newest_cases_come_first_and_since_bounds_the_history(history, tmp_path):
    """``--limit`` keeps the newest cases that pass their checks (history walked newest first, the
    suite written oldest first); ``--since`` looks only after a commit; each candidate is said
    before its tests run."""
    repo, made = history
    out = tmp_path / "suite.jsonl"
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                      "--command", COMMAND, "--limit", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [case.reference for case in read_suite(out)] == [made["fix"], made["sq"]]
    assert "checking " + made["sq"][:12] in result.stderr
    assert "the limit was reached" in result.stdout
    assert made["add"][:12] not in result.output  # older commits were not looked at
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                      "--command", COMMAND, "--since", made["mul"], "--until", made["already"]],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [case.reference for case in read_suite(out)] == [made["fix"]]
    bad = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                   "--command", COMMAND, "--since", "no-such-tag"])
    assert bad.exit_code == 2 and "'no-such-tag' names no commit" in bad.output


def test_a_hidden_test_that_hangs_on_its_base_is_cut_by_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = tmp_path / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "start", {"calc.py": "", "tests/__init__.py": ""})
    ready = commit(repo, "Add ready()", {"calc.py": "def ready():\n    return True\n", "tests/test_ready.py": (
        "import time\nimport unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n"
        "    def test_ready(self):\n        while not hasattr(calc, 'ready'):\n            time.sleep(0.1)\n")})
    out = tmp_path / "suite.jsonl"
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                      "--command", COMMAND, "--timeout", "3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"checking {ready[:12]}" in result.stderr  # said before the wait
    assert [case.reference for case in read_suite(out)] == [ready]  # a hang on the base is a failure there


def test_a_commit_that_changes_test_data_only_is_checked_by_the_whole_suite(tmp_path, monkeypatch):
    """The test files a runner takes are named on the hidden command; data files are copied in,
    not named. A commit whose test changes are data only (a new case for a data-driven test) is
    checked by the project's whole check, which runs the test that reads the data."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = tmp_path / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    check = "python3 -m unittest discover -s tests -t ."
    driven = ("import json\nimport pathlib\nimport unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n"
              "    def test_data(self):\n        for path in sorted(pathlib.Path('tests/data').glob('*.json')):\n"
              "            case = json.loads(path.read_text())\n"
              "            self.assertEqual(getattr(calc, case['fn'])(*case['args']), case['out'])\n")
    commit(repo, "start", {"calc.py": "def add(a, b):\n    return a + b\n", "tests/__init__.py": "",
                           "tests/test_driven.py": driven,
                           "tests/data/add.json": '{"fn": "add", "args": [1, 2], "out": 3}\n',
                           "mesh.toml": f'[validation]\nallow = ["{check}"]\ncheck = ["{check}"]\n'})
    sub = commit(repo, "Add sub()", {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
                                                "    return a - b\n",
                                     "tests/data/sub.json": '{"fn": "sub", "args": [3, 1], "out": 2}\n'})
    both = commit(repo, "Add mul()", {"calc.py": (repo / "calc.py").read_text() + "\n\ndef mul(a, b):\n"
                                                                                "    return a * b\n",
                                      "tests/data/mul.json": '{"fn": "mul", "args": [2, 3], "out": 6}\n',
                                      "tests/test_mul.py": unit_test("mul", "self.assertEqual(calc.mul(2, 2), 4)")})
    out = tmp_path / "suite.jsonl"
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                      "--command", COMMAND], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    cases = {case.reference: case for case in read_suite(out)}
    assert set(cases) == {sub, both}
    assert cases[sub].hidden_tests == ["tests/data/sub.json"] and cases[sub].hidden_command == check
    assert f"run by the whole check: {check}" in result.stdout
    assert cases[both].hidden_command == "python3 -m unittest tests/test_mul.py"
    assert sorted(cases[both].hidden_tests) == ["tests/data/mul.json", "tests/test_mul.py"]


@pytest.mark.parametrize("path, runnable", [
    ("tests/test_x.py", True), ("pkg/x_test.py", True), ("app/tests.py", True), ("tests/data/x.toml", False),
    ("tests/conftest.py", False), ("tests/helpers.py", False), ("src/a.test.ts", True), ("__tests__/a.js", True),
    ("x_test.go", True), ("tests/fixtures/a.json", False), ("spec/a_spec.rb", True),
    # tape, tap and mocha keep scripts in test/; node --test runs every script under test/
    ("test/bool.js", True), ("test/unit/parse.mjs", True), ("test/fixtures/input.js", False),
    ("test/helpers/setup.js", False), ("tests/data/valid/x.toml", False)])
def test_which_test_paths_a_runner_takes(path, runnable):
    from orchestrator.evals.history import is_test_file, is_test_path

    assert is_test_path(path) and is_test_file(path) == runnable


def test_a_hidden_command_whose_program_is_not_installed_stops_the_build_once(history, tmp_path):
    repo, _ = history
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(tmp_path / "s"),
                                      "--command", "no-such-runner {tests}"])
    assert result.exit_code == 2 and result.output.count("the hidden tests' command") == 1, result.output
    assert "cannot run: not_found" in result.output and not (tmp_path / "s").exists()


def test_the_task_of_a_case_is_the_tracker_issue_its_commit_names(history, tmp_path):
    from orchestrator.evals.history import from_git

    repo, made = history
    issues = {"calc-7": {"title": "Square numbers", "description": "sq(a) returns a squared",
                         "acceptance_criteria": "sq(3) == 9"}}
    cases, _ = from_git(repo, command=COMMAND, issue_of=issues.get)
    [sq] = [case for case in cases if case.reference == made["sq"]]
    assert sq.title == "Square numbers" and "sq(3) == 9" in sq.task and "closes" not in sq.task


def test_hand_written_cases_read_write_and_build_their_tree(history, tmp_path):
    repo, made = history
    case = Case(id="hand-1", base=made["add"], task="Add sub()", hidden_files={"tests/test_hand.py": unit_test(
        "hand", "self.assertEqual(calc.sub(5, 2), 3)")}, hidden_command="python3 -m unittest tests/test_hand.py")
    path = tmp_path / "hand.jsonl"
    write_suite(path, [case])
    [back] = read_suite(path)
    assert back == case
    tree = build_tree(repo, back, back.base)
    assert "tests/test_hand.py" in git(repo, "ls-tree", "-r", "--name-only", tree)
    assert git(repo, "rev-parse", f"{tree}^").strip() == made["add"]
    assert git(repo, "status", "--porcelain") == ""  # nothing the user sees
    path.write_text('{"id": "x", "base": "abcd", "task": "t", "unknown": 1}\n')
    with pytest.raises(ValueError, match="hand.jsonl:1"):
        read_suite(path)


@pytest.mark.parametrize("k, n, low, high", [
    (7, 10, 0.3968, 0.8922), (0, 12, 0.0, 0.2425), (12, 12, 0.7575, 1.0), (5, 12, 0.1933, 0.6805), (0, 0, 0.0, 1.0)])
def test_wilson_intervals_match_hand_computed_values(k, n, low, high):
    lower, upper = wilson(k, n)
    assert (round(lower, 4), round(upper, 4)) == (low, high)


@pytest.mark.parametrize("b, c, p", [(1, 6, 0.125), (0, 0, 1.0), (3, 3, 1.0), (0, 5, 0.0625), (2, 10, 0.0386)])
def test_mcnemar_exact_matches_hand_computed_values(b, c, p):
    assert round(mcnemar_exact(b, c), 4) == p


def test_a_reference_that_rewrites_the_tests_its_fix_breaks_is_flagged(tmp_path, monkeypatch):
    """Issue 46, item 5: a commit that changes behaviour rewrites the existing tests that pinned the
    old one; such a case is kept but flagged (a worker keeping the old tests green cannot resolve
    it, so its task must say what changes), and a fix that keeps the old tests passing is not."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = tmp_path / "greet"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "start", {"greet.py": "def hello():\n    return 'hi'\n\n\ndef bye():\n    return 'by'\n",
                           "tests/__init__.py": "",
                           "tests/test_greet.py": unit_test("hello", "self.assertEqual(greet.hello(), 'hi')")
                           .replace("import calc", "import greet")
                           + "\n    def test_bye(self):\n        self.assertEqual(greet.bye(), 'by')\n"})
    changed = commit(repo, "Say hello in full", {
        "greet.py": "def hello():\n    return 'hello'\n\n\ndef bye():\n    return 'by'\n",
        "tests/test_greet.py": unit_test("hello", "self.assertEqual(greet.hello(), 'hello')")
        .replace("import calc", "import greet")
        + "\n    def test_bye(self):\n        self.assertEqual(greet.bye(), 'by')\n"})
    fixed = commit(repo, "Fix bye", {
        "greet.py": "def hello():\n    return 'hello'\n\n\ndef bye():\n    return 'bye'\n",
        "tests/test_greet.py": unit_test("hello", "self.assertEqual(greet.hello(), 'hello')")
        .replace("import calc", "import greet")
        + "\n    def test_bye(self):\n        self.assertEqual(greet.bye(), 'bye')\n"
        + "\n    def test_bye_twice(self):\n        self.assertEqual(greet.bye() * 2, 'byebye')\n"})
    out = tmp_path / "suite.jsonl"
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                      "--command", COMMAND, "--runs", "1", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    kept = {case["reference"]: case for case in json.loads(result.stdout)["kept"]}
    assert kept[changed]["rewritten"] == ["tests.test_greet.T.test_hello"]
    assert kept[fixed]["rewritten"] == ["tests.test_greet.T.test_bye"]  # 'by' pinned the bug: the fix breaks it
    text = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                    "--command", COMMAND, "--runs", "1"], catch_exceptions=False).output
    assert "its reference rewrote 1 test(s) its fix breaks as the base had them (tests.test_greet.T.test_hello)" \
        in text, text
