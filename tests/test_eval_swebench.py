"""Issue 37, items 2 and 3: SWE-bench tasks in, predictions out, with real git, the real sandbox
and real runs.

The library of ``tests/evalkit.py`` gets SWE-bench instances of its own history (a base commit,
the commit's message as the problem statement, its test changes as the test patch, its source
changes as the gold patch, FAIL_TO_PASS and PASS_TO_PASS as SWE-bench writes pytest's and
Django's ids); ``mesh eval suite --from-swebench`` imports and checks them, each gold patch
resolves its case, a short eval runs with a scripted worker, ``mesh eval export`` writes its
predictions, and each exported patch applied to its base again grades as the eval graded it.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

import pytest

from tests.evalkit import git, make_library, mesh, write_worker
from orchestrator.evals.swebench import mesh_test_id

COMMAND = f"{sys.executable} -m pytest {{tests}}"


def commit_of(repo: Path, subject: str) -> str:
    return git(repo, "log", "--format=%H", "--fixed-strings", f"--grep={subject}", "-1").strip()


def instance(repo: Path, subject: str, fail_to_pass, pass_to_pass=(), **extra) -> dict:
    """The SWE-bench instance of the library's commit ``subject``: its parent is the base."""
    commit = commit_of(repo, subject)
    base = git(repo, "rev-parse", f"{commit}^").strip()
    return {"instance_id": f"ada__mathlib-{commit[:4]}", "repo": "ada/mathlib", "base_commit": base,
            "problem_statement": git(repo, "log", "-1", "--format=%B", commit),
            "patch": git(repo, "diff", base, commit, "--", ".", ":(exclude)tests"),
            "test_patch": git(repo, "diff", base, commit, "--", "tests"), "hints_text": "",
            "created_at": "2024-01-01T00:00:00Z", "version": "1.0", "environment_setup_commit": base,
            "FAIL_TO_PASS": fail_to_pass,
            "PASS_TO_PASS": pass_to_pass if isinstance(pass_to_pass, str) else list(pass_to_pass), **extra}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The library, its instances file (three good instances and four to drop) and the suite built."""
    root = tmp_path_factory.mktemp("swebench")
    repo = make_library(root)
    git(repo, "remote", "add", "origin", "https://github.com/ada/mathlib.git")
    good = [instance(repo, "Add cube", ["tests/test_cube.py::T::test_cube"]),
            # The Hugging Face dataset's form: the lists as JSON strings; Django's test ids.
            instance(repo, "Add sign", json.dumps(["test_sign (tests.test_sign.T)"]), "[]"),
            instance(repo, "Fix mean of an empty list", ["tests/test_mean.py::T::test_empty"],
                     ["tests/test_mean.py::T::test_mean"])]
    other = {**instance(repo, "Add halve", ["tests/test_halve.py::T::test_halve"]), "repo": "someone/else",
             "instance_id": "someone__else-1", "base_commit": "1" * 40}
    missing = {**instance(repo, "Add square", ["tests/test_square.py::T::test_square"]), "base_commit": "0" * 40,
               "instance_id": "ada__mathlib-gone"}
    unmatched = {**instance(repo, "Add clamp", ["tests/test_clamp.py::T::test_clamp_nowhere"]),
                 "instance_id": "ada__mathlib-nowhere"}
    broken = {"instance_id": "ada__mathlib-broken", "base_commit": good[0]["base_commit"]}
    instances = root / "instances.jsonl"
    instances.write_text("".join(json.dumps(i) + "\n" for i in [good[0], other, good[1], missing, unmatched, broken,
                                                                  good[2]]))
    suite = root / "suite.jsonl"
    built = mesh("eval", "suite", "--from-swebench", str(instances), "--command", COMMAND, "--runs", "1", "-o",
                 str(suite), "--json", cwd=repo)
    assert built.returncode == 0, built.stderr
    from orchestrator.evals.suite import read_suite

    return root, repo, good, read_suite(suite), json.loads(built.stdout), built.stderr


def test_the_instances_of_this_repository_are_imported_checked_and_sealed(imported):
    root, repo, good, cases, built, progress = imported
    assert [c.instance_id for c in cases] == [i["instance_id"] for i in good]
    assert [c.id for c in cases] == ["case-001", "case-002", "case-003"]
    assert all(c.source == "swebench" and c.grading == "tests" and c.check_command is None for c in cases)
    assert [c.fail_to_pass for c in cases] == [["tests.test_cube.T::test_cube"], ["tests.test_sign.T::test_sign"],
                                               ["tests.test_mean.T::test_empty"]]
    assert cases[2].pass_to_pass == ["tests.test_mean.T::test_mean"]
    assert cases[1].swebench_ids == {"tests.test_sign.T::test_sign": "test_sign (tests.test_sign.T)"}
    assert cases[0].hidden_command == COMMAND.replace("{tests}", "tests/test_cube.py")
    assert cases[0].hidden_paths() == ["tests/test_cube.py"] and cases[0].test_patch == good[0]["test_patch"]
    assert cases[2].task.startswith("Fix mean of an empty list") and cases[0].base == good[0]["base_commit"]
    dropped = {d["commit"]: d["why"] for d in built["dropped"]}
    assert dropped["someone__else-1"] == "an instance of another repository (someone/else; this one is ada/mathlib)"
    assert dropped["ada__mathlib-gone"].startswith("its base_commit 000000000000 is not in this repository")
    assert dropped["ada__mathlib-nowhere"].startswith(
        "1 of its test id(s) are not among the tests")
    assert "(tests/test_clamp.py::T::test_clamp_nowhere); mesh's pytest names them like" \
           " tests.test_clamp.T::test_clamp" in dropped["ada__mathlib-nowhere"]
    assert dropped["ada__mathlib-broken"].startswith("not a SWE-bench instance (line 6: problem_statement: Field"
                                                     " required")
    assert "checking ada__mathlib-" in progress
    # Nothing of the import is in the user's checkout: no branch, no change.
    assert git(repo, "status", "--porcelain") == "" and git(repo, "branch", "--format=%(refname)").split() == [
        "refs/heads/main"]


def _grading(repo: Path):
    from orchestrator.config import load_config
    from orchestrator.toolchains.view import inspect

    config = load_config(repo, None)
    return {"settings": config.validation, "view": inspect(repo, config.validation).view, "checks": [],
            "base_passes": False}


def test_each_gold_patch_resolves_its_case_and_the_base_does_not(imported):
    from orchestrator.evals.cases import grade_run
    from orchestrator.evals.suite import patched_commit

    root, repo, good, cases, _, _ = imported
    for case, found in zip(cases, good):
        head = patched_commit(repo, case.base, found["patch"])
        grade = grade_run(repo, repo, case, head, **_grading(repo))
        assert grade.resolved, grade.detail
        assert grade.tests["fail_to_pass"] == {"passed": 1, "failed": []}
        unsolved = grade_run(repo, repo, case, case.base, **_grading(repo))
        assert not unsolved.resolved and unsolved.tests["fail_to_pass"]["failed"] == case.fail_to_pass
    # A run's own edit of a file the test patch touches does not count: the file is put back as the
    # base has it before the test patch applies, as SWE-bench's harness does.
    case, found = cases[2], good[2]
    before = git(repo, "show", f"{case.base}:tests/test_mean.py")
    edit = "".join(difflib.unified_diff(before.splitlines(True), before.replace("m.mean([1, 2, 3]), 2", "1, 1")
                                        .splitlines(True), "a/tests/test_mean.py", "b/tests/test_mean.py"))
    assert not grade_run(repo, repo, case, patched_commit(repo, case.base, edit), **_grading(repo)).resolved
    fixed = patched_commit(repo, patched_commit(repo, case.base, found["patch"]), edit)
    assert grade_run(repo, repo, case, fixed, **_grading(repo)).resolved


def test_the_exported_predictions_grade_again_as_the_eval_graded_them(imported, tmp_path):
    from orchestrator.evals.cases import grade_run
    from orchestrator.evals.suite import patched_commit

    root, repo, good, cases, _, _ = imported
    command = write_worker(tmp_path, repo, [], {"single": [cases[0].id, cases[2].id]})
    table = json.loads((tmp_path / "worker" / "table.json").read_text())
    table["patches"] = {case.id: found["patch"] for case, found in zip(cases, good)}
    (tmp_path / "worker" / "table.json").write_text(json.dumps(table))
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(root / "suite.jsonl"), "--profile", "single", "--worker-cmd", command, "--out",
                str(out), "--yes", cwd=repo)
    assert done.returncode == 0, done.stderr
    exported = mesh("eval", "export", str(out), "-o", str(tmp_path / "export"), "--json", cwd=repo)
    assert exported.returncode == 0, exported.stderr
    files = json.loads(exported.stdout)
    assert files["counts"] == {"single": {"predictions": 3, "errors": 0, "pending": 0}}
    predictions = [json.loads(line) for line in Path(files["predictions"]["single"]).read_text().splitlines()]
    rows = {row["instance_id"]: row for row in map(json.loads, Path(files["results"]).read_text().splitlines())}
    assert [p["instance_id"] for p in predictions] == [c.instance_id for c in cases]
    assert {p["model_name_or_path"] for p in predictions} == {"single"}
    assert [rows[c.instance_id]["resolved"] for c in cases] == [True, False, True]
    assert rows[cases[1].instance_id]["state"] == "unresolved" and predictions[1]["model_patch"] == ""
    for case, prediction in zip(cases, predictions):
        row = rows[case.instance_id]
        assert row["case"] == case.id and row["arm"] == "single" and row["trial"] == 1 and row["error_kind"] is None
        assert "tests/" not in prediction["model_patch"]  # the hidden tests are no part of a prediction
        result = json.loads((out / "results" / case.id / "single.json").read_text())
        # Applied to its base again, each prediction grades as the eval graded its run.
        head = patched_commit(repo, case.base, prediction["model_patch"]) if prediction["model_patch"] else None
        again = grade_run(repo, repo, case, head, **_grading(repo))
        assert again.resolved == (result["state"] == "resolved") == row["resolved"], again.detail
        if head is not None:
            assert git(repo, "rev-parse", f"{head}^{{tree}}") == git(out / "repos" / case.id / "single", "rev-parse",
                                                                     f"{result['head']}^{{tree}}")
            assert row["tests"] == result["tests"] and row["tests"]["fail_to_pass"]["failed"] == []
            # SWE-bench's report shape, with the instance's own test ids.
            assert row["tests_status"]["FAIL_TO_PASS"] == {"success": good[cases.index(case)]["FAIL_TO_PASS"],
                                                           "failure": []}
    assert mesh("eval", "export", str(out), "--arm", "team", cwd=repo).returncode == 2


def test_a_file_that_is_no_swebench_file_stops_the_import(tmp_path):
    repo = make_library(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "a"}\n{not json\n')
    done = mesh("eval", "suite", "--from-swebench", str(bad), "--command", COMMAND, "-o", str(tmp_path / "s.jsonl"),
                cwd=repo)
    assert done.returncode == 2 and f"{bad}:2: neither JSON nor JSONL" in done.stderr
    both = mesh("eval", "suite", "--from-swebench", str(bad), "--from-git", cwd=repo)
    assert both.returncode == 2 and "--from-git or --from-swebench FILE" in both.stderr
    since = mesh("eval", "suite", "--from-swebench", str(bad), "--since", "HEAD~2", "--merges", cwd=repo)
    assert since.returncode == 2 and "--since, --merges: for --from-git only" in since.stderr


@pytest.mark.parametrize("test, runner, mapped", [
    ("tests/test_x.py::test_a", "pytest", "tests.test_x::test_a"),
    ("tests/test_x.py::T::test_a[1-2]", "pytest", "tests.test_x.T::test_a[1-2]"),
    ("tests/test_x.py::T::test_a", "unittest", "tests.test_x.T.test_a"),
    ("test_a (tests.test_x.T)", "unittest", "tests.test_x.T.test_a"),
    ("test_a (tests.test_x.T.test_a)", "unittest", "tests.test_x.T.test_a"),
    ("test_a (tests.test_x.T)\nWhat it checks.", "pytest", "tests.test_x.T::test_a"),
    ("test_a", "pytest", None),
])
def test_swebench_test_ids_are_mapped_to_the_ids_mesh_reads(test, runner, mapped):
    assert mesh_test_id(test, runner) == mapped


def test_a_gold_patch_that_does_not_fix_a_patch_that_does_not_apply_and_no_gold_patch(tmp_path):
    """A wrong gold patch drops its instance with the failing test's message; a test patch that does
    not apply drops its instance saying so; an instance without a gold patch is checked on its base
    alone, and its line says so."""
    repo = make_library(tmp_path)
    git(repo, "remote", "add", "origin", "/srv/mirrors/mathlib.git")  # a mirror: no owner/name of GitHub's
    git(repo, "remote", "add", "upstream", "https://github.com/ada/mathlib.git")
    wrong = instance(repo, "Add double", ["tests/test_double.py::T::test_double"])
    wrong["patch"] = wrong["patch"].replace("2 * x", "3 * x")
    torn = {**instance(repo, "Add negate", ["tests/test_negate.py::T::test_negate"]), "instance_id": "torn"}
    torn["test_patch"] = torn["test_patch"].replace("new file mode 100644\n", "").replace("--- /dev/null",
                                                                                         "--- a/tests/test_negate.py")
    bare = {**instance(repo, "Fix mean of an empty list", ["tests/test_mean.py::T::test_empty"],
                       ["tests/test_mean.py::T::test_mean"]), "instance_id": "bare", "patch": None,
            "repo": "someone/mathlib-fork"}  # a fork's instance: its base is here, so it is of this history
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps([wrong, torn, bare]))  # a JSON list, as a dataset's export may be
    out = tmp_path / "suite.jsonl"
    done = mesh("eval", "suite", "--from-swebench", str(instances), "--command", COMMAND, "--runs", "1", "-o",
                str(out), cwd=repo)
    assert done.returncode == 0, done.stderr
    assert (f"dropped {wrong['instance_id']}  Add double: the FAIL_TO_PASS test tests/test_double.py::T::test_double"
            " fails with the gold patch: AssertionError: 12 != 8") in done.stdout
    assert "dropped torn  Add negate: its test patch does not apply: " in done.stdout
    assert ("kept    case-001  bare  Fix mean of an empty list  (1 test file(s); 1 FAIL_TO_PASS, 1 PASS_TO_PASS;"
            " no gold patch: checked on the base only; someone/mathlib-fork is no remote of this checkout"
            " (ada/mathlib, mirrors/mathlib): taken as a fork or mirror of it, its base commit being here)") in done.stdout, done.stdout
    assert "1 case(s) written to" in done.stdout and "2 instance(s) dropped (3 looked at, in the file's order)" \
        in done.stdout


def test_the_paths_of_a_patch_are_read_from_its_headers_only():
    from orchestrator.evals.suite import patch_paths

    patch = ("diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n+++ b/tests/test_x.py\n"
             "@@ -1,2 +1,2 @@\n--- a removed SQL comment\n+++ an added line\n"
             "diff --git a/tests/old.py b/tests/old.py\ndeleted file mode 100644\n--- a/tests/old.py\n+++ /dev/null\n"
             "@@ -1 +0,0 @@\n-x\ndiff --git a/tests/a.py b/tests/b.py\nrename from tests/a.py\nrename to tests/b.py\n"
             'diff --git "a/t\\303\\251st.py" "b/t\\303\\251st.py"\n'
             '--- "a/t\\303\\251st.py"\n+++ "b/t\\303\\251st.py"\n')
    assert patch_paths(patch) == ["tests/test_x.py", "tests/old.py", "tests/a.py", "tests/b.py", "tést.py"]
    assert patch_paths(patch, after=True) == ["tests/test_x.py", "tests/b.py", "tést.py"]


def test_pytest_node_ids_are_matched_to_unittest_ids_when_unittest_runs_the_tests(tmp_path):
    repo = make_library(tmp_path)
    found = instance(repo, "Fix mean of an empty list", ["tests/test_mean.py::T::test_empty"],
                     ["tests/test_mean.py::T::test_mean"])
    (tmp_path / "one.jsonl").write_text(json.dumps(found) + "\n")
    done = mesh("eval", "suite", "--from-swebench", str(tmp_path / "one.jsonl"), "--command",
                "python3 -m unittest {tests}", "--runs", "2", "-o", str(tmp_path / "suite.jsonl"), "--json", cwd=repo)
    assert done.returncode == 0, done.stderr
    [case] = json.loads(done.stdout)["kept"]
    assert (case["fail_to_pass"], case["pass_to_pass"]) == (["tests.test_mean.T.test_empty"],
                                                            ["tests.test_mean.T.test_mean"])
    assert case["hidden_command"] == "python3 -m unittest tests/test_mean.py" and "flaky" not in case


def test_export_of_trials_errors_pending_runs_and_an_attempts_repository(tmp_path):
    """An eval folder written by hand: trial 1 of case-001 resolved in its chosen attempt's
    repository (a budget-matched arm's ``a.a2``), trial 2 in error, case-002 never run. The
    prediction excludes the hidden test file the run also changed; errors and pending runs are no
    predictions, and every (case, arm, trial) has its line in results.jsonl."""
    from orchestrator.evals.suite import Case, write_suite

    repo = make_library(tmp_path)
    base = git(repo, "rev-parse", "HEAD~1").strip()
    cases = [Case(id="case-001", base=base, task="t", hidden_files={"tests/test_mean.py": "x"}),
             Case(id="case-002", base=base, task="u", instance_id="ada__mathlib-2")]
    write_suite(tmp_path / "suite.jsonl", cases)
    folder = tmp_path / "ev"
    work = folder / "repos" / "case-001" / "a.a2"
    work.parent.mkdir(parents=True)
    git(tmp_path, "clone", "-q", str(repo), str(work))
    git(work, "checkout", "-q", base)
    (work / "mathlib.py").write_text((work / "mathlib.py").read_text() + "\n\ndef tenfold(x):\n    return 10 * x\n")
    (work / "tests" / "test_mean.py").write_text("# the run's own edit of a hidden file\n")
    git(work, "commit", "-qam", "the run's work")
    head = git(work, "rev-parse", "HEAD").strip()
    (folder / "eval.json").write_text(json.dumps({"eval": "ev-x", "suite": str(tmp_path / "suite.jsonl"),
                                                  "order": ["a"], "trials": {"a": 2}, "arms": {"a": {}}}))
    results = folder / "results" / "case-001"
    results.mkdir(parents=True)
    (results / "a.json").write_text(json.dumps({"arm": "a", "trial": 1, "state": "resolved", "head": head,
                                                "attempts": [{"slot": "a"}, {"slot": "a.a2"}], "cost_usd": 0.5,
                                                "tests": {"fail_to_pass": {"passed": 1, "failed": []}}}))
    (results / "a.t2.json").write_text(json.dumps({"arm": "a", "trial": 2, "state": "error",
                                                   "error": {"kind": "api", "reason": "HTTP 529"}}))
    done = mesh("eval", "export", str(folder), cwd=repo)
    assert done.returncode == 0, done.stderr
    assert f"{folder / 'export' / 'predictions-a.jsonl'}: 1 prediction(s) (1 not run yet: no prediction)" in done.stdout
    assert "predictions-a.t2.jsonl: 0 prediction(s) (1 run(s) in error, 1 not run yet: no prediction)" in done.stdout
    [prediction] = [json.loads(line) for line in (folder / "export" / "predictions-a.jsonl").read_text().splitlines()]
    assert prediction["instance_id"] == "case-001" and prediction["model_name_or_path"] == "a"
    assert "+def tenfold(x):" in prediction["model_patch"] and "tests/test_mean.py" not in prediction["model_patch"]
    assert (folder / "export" / "predictions-a.t2.jsonl").read_text() == ""
    rows = [json.loads(line) for line in (folder / "export" / "results.jsonl").read_text().splitlines()]
    assert [(r["instance_id"], r["trial"], r["state"], r["resolved"], r["error_kind"]) for r in rows] == [
        ("case-001", 1, "resolved", True, None), ("ada__mathlib-2", 1, "pending", None, None),
        ("case-001", 2, "error", None, "api"), ("ada__mathlib-2", 2, "pending", None, None)]
    assert rows[0]["cost_usd"] == 0.5 and rows[0]["head"] == head and rows[0]["base"] == base
