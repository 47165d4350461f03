"""Issue 43, items 2 and 3: twins for ``go test``, the Go forgery of the attack review performed.

A patch to the library only (no test touched): a ``func init()`` that, when the binary runs as
``go test``'s test binary, reads the package's ``*_test.go`` files, prints test2json-framed
PASS lines for every ``func Test*`` it finds, and exits 0 before any test runs. Without twins
the run reads as every test passed. The twins (copies of the package's own tests, each
comparing against a changed literal) are in the files it reads, so it prints PASS for them too,
and mesh fails the command ``runner_forged``. The broken code without the forgery fails.
"""

from __future__ import annotations

import random

import pytest

from orchestrator.mutants.go_tests import MUTATOR
from orchestrator.sandbox.bwrap import require_bwrap
from orchestrator.sandbox.validation import run_validation
from orchestrator.toolchains.view import inspect
from tests.toolchainkit import commit_all, init_repo, need, tool_env

GO_MOD = "module example.com/calc\n\ngo 1.19\n"
BROKEN = "package calc\n\nfunc Add(a, b int) int { return a - b }\n\nfunc Name() string { return \"calc\" }\n"
GOOD = BROKEN.replace("a - b", "a + b")
TESTS = ('package calc\n\nimport "testing"\n\n'
         'func TestAdd(t *testing.T) {\n\tif got := Add(2, 3); got != 5 {\n\t\tt.Errorf("Add(2, 3) = %d", got)\n\t}\n}\n\n'
         'func TestAddZero(t *testing.T) {\n\tgot := Add(0, 4)\n\tif got != 4 {\n\t\tt.Fatalf("got %d", got)\n\t}\n}\n\n'
         'func TestName(t *testing.T) {\n\tif Name() != "calc" {\n\t\tt.Error("name")\n\t}\n}\n')
# Runs before any test: every Test function the package's test files hold reported passed.
FORGE = '''
import (
\t"fmt"
\t"os"
\t"path/filepath"
\t"regexp"
\t"strings"
)

func init() {
\tif !strings.HasSuffix(os.Args[0], ".test") {
\t\treturn
\t}
\tfiles, _ := filepath.Glob("*_test.go")
\tname := regexp.MustCompile(`(?m)^func (Test\\w*)\\(`)
\tfor _, file := range files {
\t\tsource, _ := os.ReadFile(file)
\t\tfor _, found := range name.FindAllStringSubmatch(string(source), -1) {
\t\t\tfmt.Printf("=== RUN   %s\\n--- PASS: %s (0.00s)\\n", found[1], found[1])
\t\t}
\t}
\tfmt.Println("PASS")
\tos.Exit(0)
}
'''


# The same, carrying the repository's test names instead of reading them.
EMBEDDED = (FORGE.replace('\tfiles, _ := filepath.Glob("*_test.go")\n', "")
            .replace("\tname := regexp.MustCompile(`(?m)^func (Test\\w*)\\(`)\n", "")
            .replace("\tfor _, file := range files {\n\t\tsource, _ := os.ReadFile(file)\n"
                     "\t\tfor _, found := range name.FindAllStringSubmatch(string(source), -1) {\n"
                     "\t\t\tfmt.Printf(\"=== RUN   %s\\n--- PASS: %s (0.00s)\\n\", found[1], found[1])\n\t\t}\n\t}\n",
                     "\tfor _, name := range []string{\"TestAdd\", \"TestAddZero\", \"TestName\"} {\n"
                     "\t\tfmt.Printf(\"=== RUN   %s\\n--- PASS: %s (0.00s)\\n\", name, name)\n\t}\n")
            .replace('\t"path/filepath"\n\t"regexp"\n', ""))


def _go_project(tmp_path, code: str):
    need("go", "the Go project")
    require_bwrap()
    repo = tmp_path / "calc"
    init_repo(repo)
    (repo / "go.mod").write_text(GO_MOD)
    (repo / "calc.go").write_text(code)
    (repo / "calc_test.go").write_text(TESTS)
    commit_all(repo)
    return repo


def _validate(repo, command="go test ./..."):
    env = tool_env(GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    view = inspect(repo, None, env).view
    [result] = run_validation([command], cwd=repo, allow=[command], timeout_s=300, environment=view, env=env)
    return result


def test_the_forged_go_run_is_caught_and_the_broken_code_fails_without_it(tmp_path):
    broken = _validate(_go_project(tmp_path / "b", BROKEN))
    assert not broken.passed and broken.reason is None and broken.tests.failed == 2, broken.stderr_tail
    # Its failures point at the lines of the user's file, not of the tree with the twins in it.
    messages = {case.id.rsplit(".", 1)[1]: case.message for case in broken.run.cases if case.message}
    assert "calc_test.go:7:" in messages["TestAdd"] and "calc_test.go:14:" in messages["TestAddZero"], messages
    assert "calc_test.go:14:" in broken.stdout_tail and "FAIL: Test" in broken.stdout_tail
    forged_code = BROKEN.replace("package calc\n", "package calc\n" + FORGE, 1)
    forged = _validate(_go_project(tmp_path / "f", forged_code))
    assert not forged.passed and forged.reason == "runner_forged", (forged.reason, forged.stderr_tail)
    assert "for _, name := range" in EMBEDDED and "Glob" not in EMBEDDED
    embedded = _validate(_go_project(tmp_path / "e", BROKEN.replace("package calc\n", "package calc\n" + EMBEDDED, 1)))
    assert not embedded.passed and embedded.reason == "runner_forged", (embedded.reason, embedded.stderr_tail)
    assert "not reported" in embedded.stderr_tail


def test_an_honest_go_run_passes_with_its_own_tests(tmp_path):
    result = _validate(_go_project(tmp_path, GOOD))
    assert result.passed and result.reason is None, result.stdout_tail + result.stderr_tail
    assert result.tests.ran == 3 and result.tests.passed == 3
    assert {case.id for case in result.run.cases} == {f"example.com/calc.{name}"
                                                       for name in ("TestAdd", "TestAddZero", "TestName")}
    assert "FAIL" not in result.stdout_tail, result.stdout_tail


@pytest.mark.parametrize("body, twinned", [
    ('\tif got := Add(1, 2); got != 3 {\n\t\tt.Errorf("x")\n\t}\n', True),
    ('\tif Name() != "calc" {\n\t\tt.Fatal("x")\n\t}\n', True),
    ('\tif -4 != Add(-2, -2) {\n\t\tt.Fatal("x")\n\t}\n', True),
    ('\tassert.Equal(t, 3, Add(1, 2))\n', True),
    ('\tif Add(1, 2) != 3 {\n\t\treturn\n\t}\n', False),  # may end before a check
    ('\tif Add(1, 2) != 3 {\n\t\tt.Log("x")\n\t}\n', False),  # the check fails nothing
    ('\tif Add(1, 2) != 3 {\n\t\tt.Error("x")\n\t} else {\n\t\tt.Log("y")\n\t}\n', False),
    ('\tif Add(1, 2) != 3 {\n\t\tt.Error("x")\n\t}\n\tcleanup()\n', False),
    ('\tif Add(1, 2) != want {\n\t\tt.Error("x")\n\t}\n', False),
    ('\t// if Add(1, 2) != 3 { t.Error("x") }\n\tx := "}"\n\t_ = x\n', False),
])
def test_which_go_tests_get_a_twin(body, twinned):
    text = f'package calc\n\nimport "testing"\n\nfunc TestOne(t *testing.T) {{\n{body}}}\n'
    assert bool(MUTATOR.candidates("calc_test.go", text)) is twinned
    new, twins = MUTATOR.twin("calc_test.go", text, random.Random(3), frozenset({("", "TestOne")}), set())
    assert bool(twins) is twinned
    if twinned:
        assert text.rstrip("\n").split("\n", 1)[1] in new and new.count("func Test") == 2
        assert f"func {twins[0].mutant}(t *testing.T)" in new and twins[0].mutant.startswith("Test")


def test_a_large_literal_moves_down_so_it_keeps_its_type(tmp_path):
    text = 'package calc\n\nimport "testing"\n\nfunc TestByte(t *testing.T) {\n\tif byte(Add(200, 55)) != 255 {\n\t\tt.Error("x")\n\t}\n}\n'
    new, twins = MUTATOR.twin("calc_test.go", text, random.Random(3), frozenset({("", "TestByte")}), set())
    values = [int(part.split(" ")[0]) for part in new.split("!= ")[1:]]
    value = next(v for v in values if v != 255)
    assert 246 <= value < 255
