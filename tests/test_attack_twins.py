"""Issue 43, item 2: control tests a forger cannot tell from the real ones (Python runners).

The forger of the fourth attack review, performed for real: a patch to the module under test
only (no test touched, no test name known) that makes the runner's verdicts lie for the tests
that use the module, and only those, telling them apart by the names the calling code uses
(``sys._getframe(1).f_code.co_names``) or by the test function's code, while every other
assertion works. mesh's synthetic control tests use none of the module, so they fail as they
must; the twins (copies of the project's own tests, each expecting another value) call the
module through the same names in the same file and class, so the forger lets them pass too
and is caught. Each forgery is also shown to really break the code without its lie.
"""

from __future__ import annotations

import random
import sys

import pytest

from orchestrator.mutants import planting
from orchestrator.mutants.model import Twin, judge
from orchestrator.mutants.python_tests import MUTATOR
from orchestrator.testruns.model import Run
from tests.runkit import make_workspace
from tests.test_attack_forged_runner import (CODE, PYTEST, TESTS, UNITTEST, _project, _validate,
                                             assert_blocked_as_forged)
from tests.test_attack_test_counts import BROKEN_FEATURE

NAMES = "{'add'}"
# Assertions that do nothing when the calling test uses a name of the module, and work otherwise.
FRAME_AWARE_ASSERT = (
    "import sys as _sys\nimport unittest as _unittest\n\n\n"
    "def _quiet(real):\n"
    "    def check(self, *args, **kwargs):\n"
    f"        if set(_sys._getframe(1).f_code.co_names) & NAMES:\n"
    "            return None\n"
    "        return real(self, *args, **kwargs)\n"
    "    return check\n\n\n"
    "for _name in ('assertEqual', 'assertAlmostEqual'):\n"
    "    setattr(_unittest.TestCase, _name, _quiet(getattr(_unittest.TestCase, _name)))\n")
# pytest's test execution skipped for the tests whose code uses a name of the module.
CODE_AWARE_RUNTEST = (
    "import _pytest.python as _python\n_real = _python.Function.runtest\n\n\n"
    "def _runtest(self):\n"
    "    code = getattr(getattr(self, 'obj', None), '__code__', None)\n"
    "    if code is not None and set(code.co_names) & NAMES:\n"
    "        return None\n"
    "    return _real(self)\n\n\n"
    "_python.Function.runtest = _runtest\n")
OTHER_TESTS = "import unittest\n\n\nclass Sums(unittest.TestCase):\n    def test_sum(self):\n" \
              "        self.assertEqual(sum([1, 2]), 3)\n"
PLAIN = ("from calc import add\n\n\ndef test_small():\n    assert add(2, 3) == 5\n\n\n"
         "def test_negative():\n    value = add(-2, -3)\n    assert value == -5\n")


def _files(attack: str = "", tests: str = TESTS) -> dict[str, str]:
    return {"calc.py": CODE + "\n" + attack.replace("NAMES", NAMES), "tests/__init__.py": "",
            "tests/test_calc.py": tests, "tests/test_other.py": OTHER_TESTS}


def test_the_broken_code_fails_without_its_lie(tmp_path):
    """The control for every attack below: the same broken code, no forgery, fails."""
    for command in (UNITTEST, PYTEST):
        result = _validate(_project(tmp_path / command.split()[2], _files()), command)
        assert not result.passed and result.reason is None and result.tests.failed == 2, result.stderr_tail
        # Failures point at the user's lines, not the tree's with the twins in it.
        shown = result.stdout_tail + result.stderr_tail + "".join(case.message for case in result.run.cases)
        assert "test_calc.py:14" not in shown and "line 14," not in shown, shown
        assert ("test_calc.py:11" in shown or "line 11," in shown), shown


@pytest.mark.parametrize("command", [UNITTEST, PYTEST])
def test_assertions_that_lie_only_for_the_modules_tests_are_caught(tmp_path, command):
    result = _validate(_project(tmp_path / "p", _files(FRAME_AWARE_ASSERT)), command)
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail)
    assert "a copy of" in result.stderr_tail and "must fail" in result.stderr_tail


def test_pytest_execution_skipped_only_for_the_modules_tests_is_caught(tmp_path):
    result = _validate(_project(tmp_path / "p", _files(CODE_AWARE_RUNTEST, PLAIN)), PYTEST)
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail)


def test_a_command_that_names_its_tests_runs_their_twins_too(tmp_path):
    """As an eval's hidden command does: the named tests' twins are named too."""
    root = _project(tmp_path / "p", _files(FRAME_AWARE_ASSERT))
    command = f"{PYTEST} tests/test_calc.py::Add::test_small tests/test_calc.py::Add::test_zero"
    result = _validate(root, command.replace(" tests ", " "))
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail)
    unittest_named = f"{sys.executable} -m unittest tests.test_calc.Add.test_small"
    result = _validate(root, unittest_named)
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail)


@pytest.mark.parametrize("command", [UNITTEST, PYTEST])
def test_an_honest_run_with_twins_reads_as_the_projects_own(tmp_path, command):
    good = _files(tests=TESTS + "\n\n" + PLAIN.split("\n\n\n", 1)[1] if "pytest" in command else TESTS)
    good["calc.py"] = "def add(a, b):\n    return a + b\n"
    root = _project(tmp_path / "p", good)
    result = _validate(root, command)
    own = 5 if "pytest" in command else 3
    assert result.passed and result.reason is None, result.stderr_tail
    assert result.tests.ran == own and result.tests.passed == own, result.tests
    shown = result.stdout_tail + result.stderr_tail
    assert "fail" not in shown.lower() and "FAILURES" not in shown and "error" not in shown.lower(), shown
    assert (f"{own} passed in " in shown) if "pytest" in command else (f"Ran {own} tests in" in shown), shown
    assert {case.id.rsplit(".", 1)[-1].rsplit("::", 1)[-1] for case in result.run.cases} == {
        "test_small", "test_zero", "test_sum", "test_negative"} - (set() if "pytest" in command else {"test_negative"})
    assert (root / "tests" / "test_calc.py").read_text() == good["tests/test_calc.py"]


def test_a_twin_is_its_original_with_one_expected_value_changed(tmp_path):
    module = tmp_path / "tests" / "test_calc.py"
    module.parent.mkdir()
    module.write_text(TESTS + "\n\n" + PLAIN.split("\n\n\n", 1)[1])
    done = planting.plant(["tests"], "pytest", tmp_path, ["calc.py"], seed=11)
    assert done is not None and len(done.twins) == 4
    text = module.read_text()
    assert "mesh" not in text.lower() and "twin" not in text.lower()
    for twin in done.twins:
        # Same file, same class, the same calls; only the name and one literal differ.
        assert twin.file == "tests/test_calc.py" and twin.scope in ("Add", "")
        assert twin.mutant.startswith("test_") and twin.mutant not in TESTS + PLAIN
        assert f"def {twin.mutant}(" in text
    assert "self.assertEqual(add(2, 3), 5)" in text and text.count("self.assertEqual(add(2, 3), ") == 2
    assert text.count("value = add(-2, -3)") == 2
    again = planting.plant(["tests"], "pytest", tmp_path, ["calc.py"], seed=12)
    assert {t.mutant for t in again.twins} != {t.mutant for t in done.twins}  # drawn afresh each time
    again.remove()
    done.remove()
    assert module.read_text() == TESTS + "\n\n" + PLAIN.split("\n\n\n", 1)[1]


@pytest.mark.parametrize("body, twinned", [
    ("    assert f(1) == 2\n", True),
    ("    self_check = f(1)\n    assert self_check == 'a'\n", True),
    ("    assert [1, 2] == g()\n", True),
    ("    assert f(1) == -2.5\n", True),
    ("    assert f(1) == 0x1F\n", True),
    ("    if f(1):\n        return\n    assert f(1) == 2\n", False),  # may end before its assertion
    ("    assert f(1) == 2\n    cleanup()\n", False),  # a later statement: the twin would skip it
    ("    with ctx():\n        assert f(1) == 2\n", False),
    ("    assert f(1) != 2\n", False),
    ("    assert 1 == 1\n", False),
    ("    assert f(1) == g(2)\n", False),
    ("    yield\n    assert f(1) == 2\n", False),
])
def test_which_tests_get_a_twin(body, twinned):
    text = f"def test_one():\n{body}"
    assert bool(MUTATOR.candidates("tests/test_x.py", text)) is twinned
    new, twins = MUTATOR.twin("tests/test_x.py", text, random.Random(1), frozenset({("", "test_one")}), set())
    assert bool(twins) is twinned, new
    if twinned:
        compile(new, "x", "exec")


def test_an_expected_failure_gets_no_twin():
    text = "import pytest\n\n\n@pytest.mark.xfail\ndef test_one():\n    assert f(1) == 2\n"
    assert MUTATOR.candidates("tests/test_x.py", text) == []
    assert MUTATOR.twin("tests/test_x.py", text, random.Random(1), frozenset({("", "test_one")}), set())[1] == []


def test_the_files_that_reach_the_change_are_twinned_first(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg").mkdir()
    for name, head in (("test_a.py", "from pkg.other import g\n"), ("test_b.py", "from pkg.mod import f\n"),
                       ("test_c.py", "import pkg\n")):
        (tmp_path / "tests" / name).write_text(f"{head}\n\ndef test_{name[5]}():\n    assert f(1) == 2\n")
    done = planting.plant(["tests"], "pytest", tmp_path, ["pkg/mod.py"], seed=1)
    assert [twin.file for twin in done.twins] == ["tests/test_b.py", "tests/test_c.py"]
    done.remove()
    sampled = planting.plant(["tests"], "pytest", tmp_path, [], seed=1)
    assert sampled is not None and len(sampled.twins) == 3  # nothing reaches a change: a sample
    sampled.remove()


@pytest.mark.parametrize("outcomes, forged", [
    ({"t::test_a": "passed", "t::test_b": "failed"}, False),
    ({"t::test_a": "failed", "t::test_b": "failed"}, False),
    ({"t::test_a": "failed", "t::test_b": "passed"}, False),  # broken code may meet the changed value
    ({"t::test_a": "passed", "t::test_b": "passed"}, True),
    ({"t::test_a": "passed", "t::test_b": "skipped"}, True),
    ({"t::test_a": "passed"}, True),
    ({"t::test_b": "passed"}, True),
    ({"t::test_a[1]": "passed", "t::test_b[1]": "failed", "t::test_a[2]": "passed", "t::test_b[2]": "passed"}, True),
])
def test_how_a_twins_result_is_judged(outcomes, forged):
    run = Run("pytest")
    for test_id, status in outcomes.items():
        run.add(test_id, status)
    judged = judge([Twin("t.py", "", "test_a", "test_b", ("t",))], run)
    assert (judged.forged is not None) is forged, judged


def test_a_broken_patch_whose_lie_spares_the_control_tests_does_not_close_the_task(tmp_path):
    ws = make_workspace(tmp_path)
    names = "{'fahrenheit_to_celsius', 'celsius_to_fahrenheit'}"
    lie = FRAME_AWARE_ASSERT.replace("NAMES", names)
    added = "".join(f"+{line}\n" for line in ["", *lie.splitlines()])
    forge = ("diff --git a/temperature.py b/temperature.py\n--- a/temperature.py\n+++ b/temperature.py\n"
             f"@@ -1,3 +1,{3 + len(added.splitlines())} @@\n"
             " \"\"\"Temperature conversions for the weather-station firmware tools.\"\"\"\n"
             f"{added} \n ABSOLUTE_ZERO_C = -273.15\n")
    assert_blocked_as_forged(ws, forge + BROKEN_FEATURE)


def test_tests_calling_what_the_commit_changed_are_twinned_first(tmp_path):
    from orchestrator.sandbox.tree_copy import changed_lines

    funcs = "".join(f"def f{n}(x):\n    return x + {n}\n\n\n" for n in range(60))
    tests = "from calc import *\n\n\n" + "".join(f"def test_{n}():\n    assert f{n}(1) == {n + 1}\n\n\n"
                                                 for n in range(60))
    root = _project(tmp_path / "p", {"calc.py": funcs, "tests/test_calc.py": tests})
    (root / "calc.py").write_text(funcs.replace("return x + 41", "return x + 41  # changed"))
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("GIT_")}
    __import__("subprocess").run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit",
                                  "-qam", "c"], check=True, env=env)
    changed = changed_lines(root, "HEAD")
    assert changed == {"calc.py": ((166, 1),)}
    for seed in range(5):
        done = planting.plant(["tests"], "pytest", root, changed, seed=seed)
        assert "test_41" in {twin.original for twin in done.twins}  # always, among 32 of 60
        assert len(done.twins) == 32
        done.remove()


def test_a_twin_a_subclass_inherits_is_known_as_one(tmp_path):
    tests = TESTS + "\n\nclass AddAgain(Add):\n    pass\n"
    good = _files(tests=tests)
    good["calc.py"] = "def add(a, b):\n    return a + b\n"
    result = _validate(_project(tmp_path / "p", good), PYTEST)
    assert result.passed and result.reason is None, result.stderr_tail
    assert result.tests.ran == 5 and result.tests.passed == 5
    forged = _validate(_project(tmp_path / "f", _files(FRAME_AWARE_ASSERT, tests)), PYTEST)
    assert forged.reason == "runner_forged"


def test_a_twin_goes_before_or_after_its_original_and_lines_map_back(tmp_path):
    """Which of two near-identical tests is the copy is not told by their order; either way the
    originals' lines are given back as the user's file has them."""
    module = tmp_path / "tests" / "test_calc.py"
    module.parent.mkdir()
    original = TESTS + "\n\n" + PLAIN.split("\n\n\n", 1)[1]
    wanted = {"self.assertEqual(add(2, 3), 5)": 8, "self.assertEqual(add(0, 4), 4)": 11, "assert add(2, 3) == 5": 15,
              "assert value == -5": 20}
    placements = set()
    for seed in range(12):
        module.write_text(original)
        done = planting.plant(["tests"], "pytest", tmp_path, ["calc.py"], seed=seed)
        lines = module.read_text().splitlines()
        for text, line in wanted.items():
            [found] = [number for number, row in enumerate(lines, 1) if row.strip() == text]
            assert done.original_line("tests/test_calc.py", found) == line, (seed, text)
            assert done.unshift(f'tests/test_calc.py:{found}: AssertionError') == f"tests/test_calc.py:{line}: AssertionError"
        twin = done.twins[0]
        mutant_line = next(number for number, row in enumerate(lines, 1) if f"def {twin.mutant}(" in row)
        original_line = next(number for number, row in enumerate(lines, 1) if f"def {twin.original}(" in row)
        placements.add(mutant_line < original_line)
        done.remove()
    assert placements == {True, False}


# Lies only for a test of the module that has no near-identical twin in its file (the same code
# but for its literals), reading the test file at run time: it cannot tell which of a pair is
# the copy.
PAIR_AWARE_ASSERT = '''
import ast as _ast
import sys as _sys
import unittest as _unittest

_real = _unittest.TestCase.assertEqual


def _shape(node):
    class _Blank(_ast.NodeTransformer):
        def visit_Constant(self, constant):
            return _ast.Constant(value=0)
    copy = _Blank().visit(_ast.parse(_ast.unparse(node)))
    return _ast.dump(_ast.Module(body=copy.body[0].body, type_ignores=[]))


def _twinned(frame):
    tree = _ast.parse(open(frame.f_code.co_filename).read())
    functions = [n for n in _ast.walk(tree) if isinstance(n, _ast.FunctionDef)]
    mine = [f for f in functions if f.name == frame.f_code.co_name]
    return any(_shape(f) == _shape(mine[0]) for f in functions if f is not mine[0]) if mine else True


def _check(self, *args, **kwargs):
    caller = _sys._getframe(1)
    if "add" in caller.f_code.co_names and not _twinned(caller):
        return None
    return _real(self, *args, **kwargs)


_unittest.TestCase.assertEqual = _check
'''


@pytest.mark.parametrize("command", [UNITTEST, PYTEST])
def test_a_forger_that_spares_twinned_tests_cannot_lie_for_the_changes_tests(tmp_path, command, monkeypatch):
    """The change's tests are twinned, so the forger lies for none of them and they fail."""
    distinct = TESTS.replace("self.assertEqual(add(0, 4), 4)", "got = add(0, 4)\n        self.assertEqual(got, 4)")
    root = _project(tmp_path / "p", _files(PAIR_AWARE_ASSERT, distinct))
    with monkeypatch.context() as without_twins:
        without_twins.setattr(planting, "MUTATORS", {})
        lied = _validate(root, command)
    assert lied.passed, lied.stderr_tail  # the control: without twins its lie passes broken code
    result = _validate(root, command)
    assert not result.passed, result.stdout_tail[-2000:]
    failed = {case.id.rsplit(".", 1)[-1].rsplit("::", 1)[-1] for case in result.run.cases if case.status == "failed"}
    # It lies for none of them, so they fail; or its shape test missed a pair (a literal moved
    # below zero is written negative) and it lied for a twin too: caught.
    assert failed == {"test_small", "test_zero"} or result.reason == "runner_forged", (result.reason, failed)


def test_a_rebinding_after_the_last_definition_is_a_change_of_the_name_it_binds(tmp_path):
    """Red-team finding: `mean = lambda xs: ...` appended after `def add` was credited to add."""
    from orchestrator.mutants.model import changed_names

    (tmp_path / "calc.py").write_text("def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef add(a, b):\n"
                                      "    return a + b\n\n\n_real = mean\nmean = lambda xs: _real(xs) + 1\n")
    assert "mean" in changed_names(tmp_path, {"calc.py": ((10, 1),)})


def test_a_quarter_of_the_twins_go_beyond_the_first_choice(tmp_path):
    """Red-team finding: 33 tests of the changed `add` took every twin, and `mean`'s tests, which
    the forger lied for, got none. Some twins are drawn from the other tests too."""
    tests = "from calc import add, mean\n\n\n" + "".join(
        f"def test_add_{n}():\n    assert add({n}, 1) == {n + 1}\n\n\n" for n in range(40)) + \
        "def test_mean_one():\n    assert mean([1, 3]) == 2\n\n\ndef test_mean_two():\n    assert mean([2, 4]) == 3\n"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text(tests)
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef mean(xs):\n    return sum(xs) / 2\n")
    seen = 0
    for seed in range(20):
        done = planting.plant(["tests"], "pytest", tmp_path, {"calc.py": ((1, 2),)}, seed=seed)
        originals = {twin.original for twin in done.twins}
        assert len(done.twins) == 32 and sum(name.startswith("test_add") for name in originals) >= 24
        seen += bool(originals & {"test_mean_one", "test_mean_two"})
        done.remove()
    assert seen >= 5  # the mean tests are twinned in some of the draws, never in none


def test_a_twins_literal_moves_either_way_so_its_size_says_nothing():
    """Red-team finding: twins' numbers always went up and strings got longer, so the smaller of
    a pair was the original. Now either way, at random."""
    text = ("def test_sum():\n    assert add(2, 3) == 50\n\n\ndef test_name():\n    assert name() == 'calc'\n")
    chosen = frozenset({("", "test_sum"), ("", "test_name")})
    numbers, lengths = set(), set()
    for seed in range(30):
        new, twins = MUTATOR.twin("tests/test_x.py", text, random.Random(seed), chosen, set())
        for line in new.splitlines():
            if "add(2, 3) == " in line and not line.endswith("== 50"):
                numbers.add(int(line.rsplit("== ", 1)[1]) > 50)
            if "name() == " in line and not line.endswith("'calc'"):
                lengths.add(len(line.rsplit("== ", 1)[1]) - len("'calc'"))
    assert numbers == {True, False} and lengths == {-1, 0, 1}


def test_a_twins_name_is_no_file_or_folder_name_a_report_id_holds(tmp_path):
    """A twin's name is new to the collected files' paths too, not only to their texts: a report
    id holds its module's or file's name (``tests.test_add_again.T.test_again``), so a twin of
    ``test_again`` named ``test_add_again`` (a word of the tests beside it put in) was read in the
    original's id, the original taken for a twin passing and the run judged forged (the CI flake
    of test_a_suite_from_history_keeps_the_cases_its_tests_prove, one run in four)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_add.py").write_text(
        "import unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n"
        "        self.assertEqual(calc.add(1, 2), 3)\n")
    (tmp_path / "tests" / "test_add_again.py").write_text(
        "import unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n    def test_again(self):\n"
        "        self.assertEqual(calc.add(2, 2), 4)\n")
    paths = ("tests/test_add.py", "tests/test_add_again.py", "tests.test_add_again", "tests.test_add")
    for seed in range(64):
        done = planting.plant(["python3", "-m", "unittest", "discover"], "unittest", tmp_path, [], seed=seed)
        assert done is not None
        names = done.names()
        done.remove()
        assert not any(name in path for name in names for path in paths), (seed, names)
        run = Run("unittest")
        for twin in done.twins:
            module = twin.file[:-3].replace("/", ".")
            run.add(f"{module}.T.{twin.original}", "passed")
            run.add(f"{module}.T.{twin.mutant}", "failed")
        assert judge(done.twins, run).forged is None, (seed, names)


# A parametrized test's id holds its parameters' names: here two megabytes of them; and tests
# named by their data, as python-multipart's suite makes two of 10 MB each, which cost seconds to
# read, store and compare whole.
LONG_PARAMETERS = ("import pytest\n\nfrom calc import add\n\nBIG = 'ab' * 1_000_000\n\n\n"
                   "@pytest.mark.parametrize('text', [BIG, BIG + 'c'], ids=[BIG, BIG + 'c'])\n"
                   "def test_long(text):\n    assert add(len(text), 1) - len(text) == 1\n")
LONG_NAMES = ("from calc import add\n\n\nclass TestNamed:\n    pass\n\n\n"
              "for _data in ('xy' * 1_000_000, 'xy' * 1_000_000 + 'z'):\n"
              "    setattr(TestNamed, 'test_' + _data, lambda self, n=len(_data): add(n, 1) == n + 1 or 1 / 0)\n")


def test_a_test_named_by_megabytes_is_kept_short_and_still_twinned(tmp_path):
    """Each id is kept cut (its head and a digest of the rest): two tests that differ only at their
    ids' end stay two, an honest run passes, and a forger who skips the tests using ``add``,
    here only the long-named ones, is caught through their twins."""
    from orchestrator.testruns.model import MAX_ID_CHARS, safe_id

    good = {"calc.py": "def add(a, b):\n    return a + b\n", "tests/__init__.py": "",
            "tests/test_calc.py": LONG_PARAMETERS, "tests/test_named.py": LONG_NAMES}
    result = _validate(_project(tmp_path / "good", good), PYTEST)
    assert result.passed and result.reason is None, result.stderr_tail
    ids = [case.id for case in result.run.cases]
    assert len(ids) == len(set(ids)) == 4 and all(len(i) <= MAX_ID_CHARS and not safe_id(i) for i in ids), ids
    assert sum(i.startswith("tests.test_calc::test_long[abab") and "sha256" in i for i in ids) == 2, ids
    assert sum(i.startswith("tests.test_named.TestNamed::test_xyxy") and "sha256" in i for i in ids) == 2, ids
    forged = _files(CODE_AWARE_RUNTEST, LONG_PARAMETERS)
    del forged["tests/test_other.py"]
    result = _validate(_project(tmp_path / "forged", forged), PYTEST)
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail)
    # Each twin was held against its own original (the same digest of the same parameters).
    assert "a copy of tests.test_calc::test_long[abab" in result.stderr_tail, result.stderr_tail
    assert "not at all" not in result.stderr_tail, result.stderr_tail
