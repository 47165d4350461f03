"""Suites from history as it is, sealed: ``mesh eval suite --merges`` on a history whose fixes come
as GitHub-style pull-request merges; task texts without trailers, cherry-pick lines or hex strings
naming later commits (``--task-text message|subject|issue``); case ids, titles, tasks and case
repositories that name no reference commit; an ``[[eval.history]]`` range whose setup command and
environment make an older commit's tests pass. Real git, real validation sandbox (bwrap)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.evals.history import clean_message, from_git
from orchestrator.evals.suite import read_suite
from tests.test_eval_suite import commit, git

COMMAND = "python3 -m unittest {tests}"
PR_MESSAGE = "Merge pull request #12 from ada/fix-x\n\nFix x for empty input\n\nx('') raised IndexError."
GEN = ("import pathlib\n\npathlib.Path('_built.py').write_text('BUILT = True\\n')\n")
RANGE_TOML = '[[eval.history]]\nbefore = "{before}"\nsetup = "python3 tools/gen.py"\nenv = {{ CALC_MODE = "old" }}\n'


def unit_test(module: str, name: str, body: str, head: str = "") -> str:
    return (f"import os\nimport unittest\n{head}\nimport {module}\n\n\nclass T(unittest.TestCase):\n"
            f"    def test_{name}(self):\n        {body}\n")


@pytest.fixture
def history(tmp_path, monkeypatch):
    """root; div (its test needs CALC_MODE=old and the _built module tools/gen.py writes); modern
    (the test no longer needs them: the range's ``before``); x (no test); on a branch, the fix of
    x for empty input with its test; on main, sub (with trailers, a cherry-pick line, the branch
    commit's id and the root's); the branch merged as pull request #12; mul (closes calc-7)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = tmp_path / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    made = {"root": commit(repo, "start", {"calc.py": "", "ops.py": "", "tests/__init__.py": "",
                                           "tools/gen.py": GEN, ".gitignore": "_built.py\n__pycache__/\n"})}
    made["div"] = commit(repo, "Add div()", {
        "calc.py": "def div(a, b):\n    return a / b\n",
        "tests/test_div.py": unit_test("calc", "div", "self.assertEqual((os.environ['CALC_MODE'], _built.BUILT,"
                                                      " calc.div(6, 3)), ('old', True, 2))", head="import _built")})
    made["modern"] = commit(repo, "Test div() without the generated module", {
        "tests/test_div.py": unit_test("calc", "div", "self.assertEqual(calc.div(6, 3), 2)")})
    made["x"] = commit(repo, "Add x()", {"calc.py": "def div(a, b):\n    return a / b\n\n\ndef x(s):\n"
                                                     "    return s[0]\n"})
    git(repo, "checkout", "-q", "-b", "fix-x")
    made["branch"] = commit(repo, "Handle the empty string in x()", {
        "calc.py": "def div(a, b):\n    return a / b\n\n\ndef x(s):\n    return s[:1]\n",
        "tests/test_x.py": unit_test("calc", "x", "self.assertEqual(calc.x(''), '')")})
    git(repo, "checkout", "-q", "main")
    made["sub"] = commit(repo, (
        f"Add sub() (#9)\n\nsub(a, b) is a - b, as {made['branch'][:12]} will do for x; the layout of"
        f" {made['root'][:7]} stays.\n\n(cherry picked from commit {made['branch']})\n\n"
        "Signed-off-by: Ada <ada@example.org>\nCo-authored-by: Bob <bob@example.org>\n"
        "Change-Id: I8d2f6c1e0b9a7d3c5e4f2a1b0c9d8e7f6a5b4c3d\nReviewed-on: https://review.example.org/c/calc/+/4711"),
        {"ops.py": "def sub(a, b):\n    return a - b\n",
         "tests/test_sub.py": unit_test("ops", "sub", "self.assertEqual(ops.sub(3, 1), 2)")})
    git(repo, "-c", "user.name=Ada", "-c", "user.email=ada@example.org", "merge", "-q", "--no-ff", "-m", PR_MESSAGE,
        "fix-x")
    made["merge"] = git(repo, "rev-parse", "HEAD").strip()
    made["mul"] = commit(repo, "Add mul() (closes calc-7)", {
        "ops.py": "def sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
        "tests/test_mul.py": unit_test("ops", "mul", "self.assertEqual(ops.mul(2, 3), 6)")})
    config = tmp_path / "mesh.toml"
    config.write_text(RANGE_TOML.format(before=made["modern"]))
    return repo, made, config


def build(repo: Path, out: Path, *args: str):
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(out),
                                      "--command", COMMAND, "--json", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def prefixes(sha: str) -> list[str]:
    return [sha[:n] for n in range(7, 41)]


def test_merges_trailers_ranges_and_sealed_ids(history, tmp_path):
    """With --merges and the range: the PR merge is a case on its first parent, its task the PR's
    title and text; sub's task has no trailer, no cherry-pick line and no id of a later commit;
    div runs with the range's setup and environment; ids are case-001.. oldest first, and no id,
    title or task names a reference. Progress is on stderr with --json."""
    repo, made, config = history
    report, progress = build(repo, tmp_path / "suite.jsonl", "--merges", "--config", str(config))
    assert f"checking {made['merge'][:12]}  Fix x for empty input" in progress
    cases = read_suite(tmp_path / "suite.jsonl")
    assert [c.reference for c in cases] == [made["div"], made["sub"], made["merge"], made["mul"]]
    assert [c.id for c in cases] == ["case-001", "case-002", "case-003", "case-004"]
    div, sub, merge, mul = cases
    assert (div.setup, div.env) == ("python3 tools/gen.py", {"CALC_MODE": "old"})
    assert all(c.setup is None and c.env == {} for c in (sub, merge, mul))  # their base is not before it
    assert merge.base == made["sub"] and merge.hidden_tests == ["tests/test_x.py"]
    assert merge.title == "Fix x for empty input" and merge.task == "Fix x for empty input\n\nx('') raised IndexError."
    assert sub.title == "Add sub()"
    assert sub.task == f"Add sub()\n\nsub(a, b) is a - b, as will do for x; the layout of {made['root'][:7]} stays."
    for case in cases:
        named = json.dumps([case.id, case.title, case.task])
        assert not any(p in named for p in prefixes(case.reference)), case
    why = {d["commit"]: d["why"] for d in report["dropped"]}
    assert why[made["modern"]] == "it changes tests only" and why[made["x"]] == "it adds or changes no test file"
    # Old suites are unchanged: a case without a range writes no setup or env.
    assert '"env"' not in (tmp_path / "suite.jsonl").read_text().splitlines()[1]


def test_without_merges_or_the_range_those_cases_are_dropped(history, tmp_path):
    repo, made, _ = history
    report, _ = build(repo, tmp_path / "suite.jsonl")
    why = {d["commit"]: d["why"] for d in report["dropped"]}
    assert why[made["merge"]] == "a merge; --merges makes cases of merges"
    assert why[made["div"]].startswith("its hidden tests fail with the reference (")
    assert "_built" in why[made["div"]] or "CALC_MODE" in why[made["div"]]
    assert [c["reference"] for c in report["kept"]] == [made["sub"], made["mul"]]


def test_a_case_is_graded_with_its_range_and_its_repository_names_no_reference(history, tmp_path):
    """The merge's and div's cases graded on a tree holding their reference's change (div's needs
    the range's setup and environment); nothing in a case's repository (its path, its .git, the
    bare base.git it was cloned from, its config) names the reference."""
    from orchestrator.config import load_config
    from orchestrator.evals.cases import case_repo, grade_run
    from orchestrator.evals.suite import reference_patch
    from orchestrator.toolchains.view import inspect

    repo, made, config_file = history
    build(repo, tmp_path / "suite.jsonl", "--merges", "--config", str(config_file))
    cases = {c.reference: c for c in read_suite(tmp_path / "suite.jsonl")}
    config = load_config(repo, config_file)
    view = inspect(repo, config.validation).view
    folder = tmp_path / "ev"
    for reference in (made["merge"], made["div"]):
        case = cases[reference]
        work = case_repo(folder, repo, case, "team", view)
        readable = [path for path in (folder / "repos" / case.id).rglob("*") if path.is_file()]
        text = b"".join(path.read_bytes() for path in readable) + str(work).encode()
        text += git(work, "config", "-l").encode() + git(work, "reflog", "--all").encode()
        assert not any(p.encode() in text for p in prefixes(reference)), case.id
        assert reference not in git(work, "cat-file", "--batch-all-objects", "--batch-check")  # nor the commit itself
        (work / "fix.patch").write_text(reference_patch(repo, case))
        git(work, "apply", "fix.patch")
        (work / "fix.patch").unlink()
        git(work, "-c", "user.name=Ada", "-c", "user.email=a@x", "commit", "-qam", "the fix")
        head = git(work, "rev-parse", "HEAD").strip()
        grade = grade_run(work, repo, case, head, settings=config.validation, view=view, checks=[], base_passes=False)
        assert grade.resolved, grade.detail
        if reference == made["div"]:  # without its range the same tree fails
            bare = case.model_copy(update={"setup": None, "env": {}})
            assert not grade_run(work, repo, bare, head, settings=config.validation, view=view, checks=[],
                                 base_passes=False).resolved


def test_the_task_text_is_the_message_the_subject_or_the_issue(history, tmp_path):
    repo, made, _ = history
    issues = {"calc-7": {"title": "Multiply numbers", "description": "mul(a, b) returns a times b"}}
    cases, dropped = from_git(repo, command=COMMAND, issue_of=issues.get, merges=True, task="subject")
    texts = {c.reference: (c.title, c.task) for c in cases}
    assert texts[made["sub"]] == ("Add sub()", "Add sub()")
    assert texts[made["merge"]] == ("Fix x for empty input", "Fix x for empty input")
    assert texts[made["mul"]] == ("Add mul() (closes calc-7)",) * 2
    cases, dropped = from_git(repo, command=COMMAND, issue_of=issues.get, merges=True, task="issue")
    assert [(c.reference, c.title, c.task) for c in cases] == [
        (made["mul"], "Multiply numbers", "Multiply numbers\n\nmul(a, b) returns a times b")]
    why = {d.commit: d.why for d in dropped}
    assert why[made["sub"]] == why[made["merge"]] == "it names no tracker issue (--task-text issue)"
    result = CliRunner().invoke(cli, ["eval", "suite", "--from-git", "--repo", str(repo), "-o", str(tmp_path / "s"),
                                      "--command", COMMAND, "--task-text", "issue"])
    assert result.exit_code == 2 and "no tracker found" in result.output


def test_task_text_issue_reads_the_tracker_a_commit_names(history, tmp_path):
    """``mesh --db T eval suite --task-text issue``: the case's task is the tracker issue its
    commit names, the other commits are dropped for naming none."""
    from tracker.store import Tracker

    repo, made, _ = history
    with Tracker.init(tmp_path, db_path=tmp_path / "tracker.db", prefix="calc") as tracker:
        issue = tracker.create("Negate numbers", description="neg(a) returns -a",
                               acceptance_criteria="neg(2) == -2")["id"]
    neg = commit(repo, f"Add neg() (closes {issue})", {
        "ops.py": (repo / "ops.py").read_text() + "\n\ndef neg(a):\n    return -a\n",
        "tests/test_neg.py": unit_test("ops", "neg", "self.assertEqual(ops.neg(2), -2)")})
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "tracker.db"), "eval", "suite", "--from-git", "--repo",
                                      str(repo), "-o", str(tmp_path / "s.jsonl"), "--command", COMMAND,
                                      "--task-text", "issue", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [case] = read_suite(tmp_path / "s.jsonl")
    assert (case.id, case.reference, case.title) == ("case-001", neg, "Negate numbers")
    assert case.task == "Negate numbers\n\nneg(a) returns -a\n\nneg(2) == -2"
    why = {d["commit"]: d["why"] for d in json.loads(result.stdout)["dropped"]}
    assert why[made["mul"]] == "it names no tracker issue (--task-text issue)"


@pytest.mark.parametrize("message, merge, cleaned", [
    ("Fix y\n\nThe body.\n\nSigned-off-by: A <a@x>\nAcked-by: B <b@x>\nTested-by: C\nChange-Id: I0123abcd\n"
     "Bug-Id: 42\nPiperOrigin-RevId: 1234\nDifferential Revision: https://reviews.example.org/D12", False,
     "Fix y\n\nThe body."),
    ("fix: keep a conventional subject\n\nRefs: #12\nFixes: the parser", False, "fix: keep a conventional subject"),
    ("Fix y\n\nNote the body.\nCo-authored-by: B <b@x>\n\n(cherry picked from commit 0123456789abcdef)", False,
     "Fix y\n\nNote the body."),
    ("Fix y (#120)\n\nBody", False, "Fix y\n\nBody"),
    ("Merge branch 'fix-y' into 'main'\n\nFix y\n\nCloses calc-3\n\nSee merge request group/calc!34", True,
     "Fix y\n\nCloses calc-3"),
    ("Merge pull request #7 from ada/fix-y", True, ""),
    ("Merge y into the main line", False, "Merge y into the main line"),
])
def test_clean_message(message, merge, cleaned):
    assert clean_message(message, merge=merge) == cleaned
