"""Issue 46, item 2: reasons that are true. A timeout is named as one (not as an unread runner),
and the environment's commonest faults for old instances on new tools are recognised and named:
pytest 8 no longer calling nose-style ``setup()``, tests reaching for the network the sandbox does
not have, a syntax the installed Python rejects."""

from __future__ import annotations

import os
import subprocess

import pytest
from types import SimpleNamespace

from orchestrator.evals.curation import environment_cause
from orchestrator.evals.swebench import Instance, _case_of, check_instance
from orchestrator.sandbox.validation import ValidationResult
from orchestrator.testruns.model import Run


def _failed(message: str, output: str = "") -> SimpleNamespace:
    run = Run("pytest")
    run.add("tests/test_io.py::TestWriteFile::test_write", "failed", 0.1, message)
    return SimpleNamespace(stdout_tail=output, stderr_tail="", run=run)


def _one_commit(tmp_path):
    """A repository of one commit (``mod.py``) and that commit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "mod.py").write_text("X = 1\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit",
                                                                "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)
    return repo, subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, env=env, capture_output=True,
                                text=True).stdout.strip()


def test_a_nose_style_setup_pytest_8_skips_is_named(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_io.py").write_text(
        "class TestWriteFile:\n    def setup(self):\n        self.file_out = open('x', 'w')\n\n"
        "    def test_write(self):\n        self.file_out.write('a')\n")
    result = _failed("AttributeError: 'TestWriteFile' object has no attribute 'file_out'",
                     "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0")
    cause = environment_cause(result, str(tmp_path))
    assert cause is not None and "nose-style setup()" in cause and "pytest < 8" in cause, cause
    # Under pytest 7 the same failure is not the environment's; nor a class without a nose set-up.
    older = _failed("AttributeError: 'TestWriteFile' object has no attribute 'file_out'",
                    "platform linux -- Python 3.11.7, pytest-7.4.4")
    assert environment_cause(older, str(tmp_path)) is None
    plain = _failed("AttributeError: 'TestOther' object has no attribute 'x'", "pytest-8.3.2")
    assert environment_cause(plain, str(tmp_path)) is None


def test_a_nose_style_setup_is_read_in_the_commit_that_ran(tmp_path):
    """An old instance's class had a nose-style setup() at its base and a setup_method() in the
    checkout (years later): the class is read where the tests ran (pydicom__pydicom-1194: its
    TestWriteFile has setup() at the base, setup_method() on pydicom's main branch)."""
    repo, _ = _one_commit(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def commit(body: str) -> str:
        (repo / "tests").mkdir(exist_ok=True)
        (repo / "tests" / "test_io.py").write_text(f"class TestWriteFile:\n    def {body}(self):\n"
                                                   "        self.file_out = open('x', 'w')\n\n"
                                                   "    def test_write(self):\n        self.file_out.write('a')\n")
        for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", body]):
            subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, env=env, capture_output=True,
                              text=True).stdout.strip()

    old, _new = commit("setup"), commit("setup_method")
    result = _failed("AttributeError: 'TestWriteFile' object has no attribute 'file_out'",
                     "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0")
    assert environment_cause(result, str(repo)) is None  # the checkout's class has setup_method()
    cause = environment_cause(result, str(repo), old)
    assert cause is not None and "nose-style setup()" in cause and "pytest < 8" in cause, cause
    assert environment_cause(result, str(repo), _new) is None


def test_tests_reaching_for_the_network_are_named():
    result = _failed("urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>\n"
                     "during GET https://data.example.org/sample.dcm")
    cause = environment_cause(result)
    assert cause is not None and "reach for the network" in cause and "data.example.org" in cause, cause
    # pydicom catches the error and warns in words of its own (SWE-bench's pydicom instances).
    warned = _failed("UserWarning: A download failure occurred while attempting to retrieve ct_small.dcm\n"
                     "FileNotFoundError: [Errno 2] No such file or directory: 'ct_small.dcm'")
    cause = environment_cause(warned)
    assert cause is not None and "reach for the network" in cause, cause


def test_a_syntax_too_new_is_named_and_a_missing_module_only_when_the_repository_never_had_it(tmp_path):
    # Without the repository, a module missing may be the commit's (one it deleted) or a set-up
    # step's (a generated one): not named.
    assert environment_cause(_failed("ModuleNotFoundError: No module named 'numpy'")) is None
    repo, _ = _one_commit(tmp_path)  # holds mod.py
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    (repo / "gone.py").write_text("X = 1\n")
    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "gone"],
                 ["rm", "-q", "gone.py"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "rm"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env, capture_output=True)
    cause = environment_cause(_failed("ModuleNotFoundError: No module named 'numpy.linalg'"), str(repo))
    assert cause is not None and "'numpy.linalg' is not installed" in cause, cause
    # A module of the repository (a submodule a set-up step builds), or one a commit deleted: not named.
    assert environment_cause(_failed("ModuleNotFoundError: No module named 'mod._speedups'"), str(repo)) is None
    assert environment_cause(_failed("ModuleNotFoundError: No module named 'gone'"), str(repo)) is None
    (repo / ".gitignore").write_text("_generated.py\n")  # one the set-up writes, ignored
    assert environment_cause(_failed("ModuleNotFoundError: No module named '_generated'"), str(repo)) is None
    syntax = SimpleNamespace(stdout_tail='  File "/mesh/tree/pkg/mod.py", line 3\n    match x:\n          ^\n'
                                         "SyntaxError: invalid syntax\n", stderr_tail="", run=None)
    cause = environment_cause(syntax)
    assert cause is not None and "rejects a syntax of pkg/mod.py" in cause, cause


def test_a_timeout_is_named_as_a_timeout_with_its_command_and_limit(tmp_path):
    repo, base = _one_commit(tmp_path)
    test_patch = ("diff --git a/tests/test_slow.py b/tests/test_slow.py\nnew file mode 100644\n--- /dev/null\n"
                  "+++ b/tests/test_slow.py\n@@ -0,0 +1,2 @@\n+def test_slow():\n+    assert True\n")
    instance = Instance(instance_id="x__y-1", base_commit=base, problem_statement="slow", test_patch=test_patch,
                        FAIL_TO_PASS=["tests/test_slow.py::test_slow"])
    command = "python -m pytest tests/test_slow.py"
    case = _case_of(instance, repo, command, None, [])

    def run(tree, commands):
        return [ValidationResult(commands[0], None, False, False, "timeout", 300.0, limit=None)]

    run.timeout_s = 300
    found, why = check_instance(repo, instance, case, run, runs=1)
    assert found is None and "did not finish within 300s on the base tree" in why, why
    assert "--timeout" in why and "reads no per-test results" not in why


def test_a_shallow_clone_gives_its_base_or_says_what_to_run(tmp_path):
    """Issue 46, item 3: every run of an eval from a `--depth 1` clone failed ("Needed a single
    revision"): the base was fetched without --update-shallow."""
    from orchestrator.evals.cases import case_repo
    from orchestrator.evals.suite import Case

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(cwd, *args):
        return subprocess.run(["git", *args], cwd=cwd, check=True, env=env, capture_output=True, text=True).stdout

    git(repo, "init", "-q", "-b", "main")
    commits = []
    for n in range(3):
        (repo / "mod.py").write_text(f"X = {n}\n")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{n}")
        commits.append(git(repo, "rev-parse", "HEAD").strip())
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    case = Case(id="c1", base=commits[-1], title="t", task="t", hidden_command="python -m pytest")
    work = case_repo(tmp_path / "eval", shallow, case, "full")
    assert git(work, "rev-parse", "HEAD").strip() == commits[-1]
    assert (work / "mod.py").read_text() == "X = 2\n"
    older = Case(id="c0", base=commits[0], title="t", task="t", hidden_command="python -m pytest")
    try:
        case_repo(tmp_path / "eval", shallow, older, "full")
    except ValueError as exc:
        assert "shallow clone without commit" in str(exc) and "fetch --unshallow" in str(exc), exc
    else:
        raise AssertionError("a base the shallow clone lacks was taken")


def test_ids_naming_another_machines_paths_are_counted_and_not_graded(tmp_path):
    """Issue 46, item 2: ids holding machine-specific paths can never match; the instance says how
    many (a PASS_TO_PASS one is left out of the grading, not a reason to drop the instance)."""
    repo, base = _one_commit(tmp_path)
    test_patch = ("diff --git a/tests/test_a.py b/tests/test_a.py\nnew file mode 100644\n--- /dev/null\n"
                  "+++ b/tests/test_a.py\n@@ -0,0 +1,2 @@\n+def test_new():\n+    assert True\n")
    gold = ("diff --git a/mod.py b/mod.py\n--- a/mod.py\n+++ b/mod.py\n@@ -1 +1 @@\n-X = 1\n+X = 2\n")
    instance = Instance(instance_id="x__y-2", base_commit=base, problem_statement="p", test_patch=test_patch,
                        patch=gold, FAIL_TO_PASS=["tests/test_a.py::test_new"],
                        PASS_TO_PASS=["tests/test_a.py::test_old", "tests/test_a.py::test_path[/home/swe/data/x.csv]",
                                      # SWE-bench's own records (pydicom__pydicom-1458: 44 such ids): its
                                      # logs were made under Princeton's /n/fs/p-swe-bench
                                      "tests/test_a.py::test_path[/n/fs/p-swe-bench/temp/tmpqcg17m39/x__y__2.2/"
                                      "data/x.csv-data0]"])
    case = _case_of(instance, repo, "python -m pytest tests/test_a.py", None, [])
    calls = []

    def run(tree, commands):
        calls.append(tree)
        result = Run("pytest")
        result.add("tests.test_a::test_new", "failed" if len(calls) == 1 else "passed", 0.1, "assert X == 2")
        result.add("tests.test_a::test_old", "passed", 0.1)
        result.add("tests.test_a::test_path[/tmp/run/data/x.csv]", "passed", 0.1)
        return [ValidationResult(commands[0], 1 if len(calls) == 1 else 0, len(calls) > 1, False, None,
                                 tests=result.counts(), run=result)]

    found, note = check_instance(repo, instance, case, run, runs=1)
    assert found is not None, note
    assert found.pass_to_pass == ["tests.test_a::test_old"] and found.fail_to_pass == ["tests.test_a::test_new"]
    assert "2 PASS_TO_PASS test id(s) name a path of the machine SWE-bench's logs came from" in note, note


def test_ids_swebench_cut_at_a_space_are_matched_as_its_grading_matches_them(tmp_path):
    """Issue 46, item 4: SWE-bench's log parser keeps a status line's second word, so a
    parametrized id holding a space is recorded cut (``test_expr[assert``, pytest-dev__pytest-11143).
    It names every test of which it is the first word; it passes only when they all pass (pytest's
    summary puts failures after passes, and SWE-bench keeps the last line of a name)."""
    from orchestrator.evals.export import _tests_status

    repo, base = _one_commit(tmp_path)
    test_patch = ("diff --git a/tests/test_a.py b/tests/test_a.py\nnew file mode 100644\n--- /dev/null\n"
                  "+++ b/tests/test_a.py\n@@ -0,0 +1,2 @@\n+def test_expr():\n+    assert True\n")
    gold = "diff --git a/mod.py b/mod.py\n--- a/mod.py\n+++ b/mod.py\n@@ -1 +1 @@\n-X = 1\n+X = 2\n"
    instance = Instance(instance_id="x__y-3", base_commit=base, problem_statement="p", test_patch=test_patch,
                        patch=gold, FAIL_TO_PASS=["tests/test_a.py::test_expr[assert"],
                        PASS_TO_PASS=["tests/test_a.py::test_old"])
    case = _case_of(instance, repo, "python -m pytest tests/test_a.py", None, [])
    calls = []

    def run(tree, commands):
        calls.append(tree)
        on_base = len(calls) == 1
        result = Run("pytest")
        result.add("tests.test_a::test_expr[assert x == 1]", "failed" if on_base else "passed", 0.1, "assert")
        result.add("tests.test_a::test_expr[assert  y]", "failed" if on_base else "passed", 0.1, "assert")
        result.add("tests.test_a::test_expression", "passed", 0.1)
        result.add("tests.test_a::test_old", "passed", 0.1)
        return [ValidationResult(commands[0], 1 if on_base else 0, not on_base, False, None, tests=result.counts(),
                                 run=result)]

    found, note = check_instance(repo, instance, case, run, runs=1)
    assert found is not None, note
    assert found.fail_to_pass == ["tests.test_a::test_expr[assert x == 1]", "tests.test_a::test_expr[assert  y]"]
    # Exported as SWE-bench names it, once: a failure when one of the tests it stands for failed.
    graded = {"fail_to_pass": {"failed": ["tests.test_a::test_expr[assert  y]"]}, "pass_to_pass": {"failed": []}}
    status = _tests_status(found, graded)
    assert status["FAIL_TO_PASS"] == {"success": [], "failure": ["tests/test_a.py::test_expr[assert"]}
    graded["fail_to_pass"]["failed"] = []
    assert _tests_status(found, graded)["FAIL_TO_PASS"] == {"success": ["tests/test_a.py::test_expr[assert"],
                                                           "failure": []}


def test_an_instances_test_file_outside_the_usual_names_is_run_itself_not_the_whole_suite(tmp_path):
    """Issue 46, item 8: astroid's tests/unittest_nodes.py is the instance's test file: named to the
    instance's command, as SWE-bench's harness names it, never replaced by the whole check."""
    from orchestrator.evals.swebench import instance_test_files

    repo, base = _one_commit(tmp_path)
    test_patch = "".join(
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
        for path in ("tests/unittest_nodes.py", "tests/conftest.py", "tests/testdata/python3/module.py",
                     "tests/test_other.py", "tests/testdata/notes.txt"))
    assert instance_test_files(test_patch) == ["tests/test_other.py", "tests/unittest_nodes.py"]
    instance = Instance(instance_id="pylint-dev__astroid-1", base_commit=base, problem_statement="p",
                        test_patch=test_patch, patch="", FAIL_TO_PASS=["tests/unittest_nodes.py::test_x"],
                        PASS_TO_PASS=[])
    case = _case_of(instance, repo, "python -m pytest -rA {tests}", "python -m pytest", [])
    assert case.hidden_command == "python -m pytest -rA tests/test_other.py tests/unittest_nodes.py"


def test_a_partial_clone_gives_its_base_fetching_what_it_lacks_or_says_what_to_run(tmp_path):
    """Issue 46, item 3: a partial clone (old files fetched on demand) failed as "repository
    corruption": git serving a fetch from it does not fetch what it lacks unless told to."""
    from orchestrator.evals.cases import case_repo
    from orchestrator.evals.suite import Case

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def git(cwd, *args):
        return subprocess.run(["git", *args], cwd=cwd, check=True, env=env, capture_output=True, text=True).stdout

    source = tmp_path / "src"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    git(source, "config", "uploadpack.allowFilter", "true")
    commits = []
    for n in range(3):
        (source / f"f{n}.txt").write_text(f"v{n}\n")
        git(source, "add", "-A")
        git(source, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{n}")
        commits.append(git(source, "rev-parse", "HEAD").strip())
    partial = tmp_path / "partial"
    git(tmp_path, "clone", "-q", "--filter=blob:none", "--no-checkout", f"file://{source}", str(partial))
    case = Case(id="c1", base=commits[0], title="t", task="t", hidden_command="python -m pytest")
    work = case_repo(tmp_path / "eval", partial, case, "full")  # its remote reachable: the files fetched
    assert (work / "f0.txt").read_text() == "v0\n"
    source.rename(tmp_path / "gone")  # its remote out of reach: what to run
    other = Case(id="c2", base=commits[1], title="t", task="t", hidden_command="python -m pytest")
    with pytest.raises(ValueError, match="is a partial clone whose files of .* are fetched on demand from 'origin'.*"
                                         "fetch --refetch origin"):
        case_repo(tmp_path / "eval", partial, other, "full")
