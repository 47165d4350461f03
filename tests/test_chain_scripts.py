"""A package.json script chaining commands with ``&&`` is read as its runner (issue 48's trial:
commander.js's ``npm test`` is ``node --test && npm run check:type:ts``, which mesh did not read,
so the base comparison and the twins never reached its tests).

Real npm, node --test and tape from the registry, in real bwrap: the runner's part read (tests,
twins), the other parts counted by their status in the script's order, stopping at a failure,
the ``pre`` script first, a bare tool found in node_modules/.bin as npm finds it.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.testruns.table import read_chain
from tests.test_attack_twins_js import BROKEN, GOOD, NODE_TEST, QUIET_ASSERT, TAPE_TEST
from tests.test_testruns import node_repo, node_runners, statuses  # noqa: F401
from tests.test_toolchains import validate
from tests.toolchainkit import own_cache, templates, tool_env  # noqa: F401

pytestmark = pytest.mark.usefixtures("own_cache")

CHECK_OK = "console.log('types fine');\n"
CHECK_BAD = "console.error('types: 1 error'); process.exit(2);\n"


def _repo(tmp_path, runners, script, library=GOOD, check=CHECK_OK, scripts=None, tests=NODE_TEST):
    repo = node_repo(tmp_path, runners, {"add.js": library, "test/calc.test.js": tests, "check.js": check,
                                         "pre.js": "require('fs').writeFileSync('built.txt', 'yes');\n"}, script)
    if scripts:
        package = json.loads((repo / "package.json").read_text())
        package["scripts"].update(scripts)
        (repo / "package.json").write_text(json.dumps(package, indent=2))
        from tests.test_toolchains import commit_all
        commit_all(repo, "scripts")
    return repo


def test_which_scripts_are_read_as_a_chain(tmp_path):
    def chain(script, **scripts):
        (tmp_path / "package.json").write_text(json.dumps({"scripts": {"test": script, **scripts}}))
        return read_chain(["npm", "test"], tmp_path)

    assert chain("node --test && npm run check:type:ts") == ([["node", "--test"], ["npm", "run", "check:type:ts"]], 0)
    assert chain("eslint . && jest --ci") == ([["eslint", "."], ["jest", "--ci"]], 1)
    assert chain("tsc && node --test", pretest="tsc -b", posttest="echo done") == (
        [["npm", "run", "pretest"], ["tsc"], ["node", "--test"], ["npm", "run", "posttest"]], 2)
    assert chain("jest") is None  # one command: read as it always was
    assert chain("tsc && eslint .") is None  # no runner mesh reads
    assert chain("jest && node --test") is None  # two runners: whose is a test id?
    assert chain("node --test || true") is None and chain("node --test && x | y") is None
    assert chain("CI=1 node --test && tsc") is None
    assert read_chain(["npm", "test", "--", "x"], tmp_path) is None


def test_a_chained_scripts_runner_is_read_and_its_other_commands_count(tmp_path, node_runners):
    repo = _repo(tmp_path / "ok", node_runners, "node --test test/ && node check.js", scripts={"pretest": "node pre.js"})
    [result] = validate(repo, ["npm test"], tool_env())
    shown = result.stdout_tail + result.stderr_tail
    assert result.passed and result.reason is None, shown
    assert result.tests.ran == 3 and result.tests.passed == 3, statuses(result)  # the twins left out
    assert "── npm run pretest ──" in shown and "── node check.js ──" in shown and "types fine" in shown, shown

    failing = _repo(tmp_path / "types", node_runners, "node --test test/ && node check.js", check=CHECK_BAD)
    [result] = validate(failing, ["npm test"], tool_env())
    assert not result.passed and result.exit_code == 2 and result.tests.passed == 3, result.stderr_tail
    assert "types: 1 error" in result.stderr_tail

    broken = _repo(tmp_path / "broken", node_runners, "node --test test/ && node check.js", library=BROKEN)
    [result] = validate(broken, ["npm test"], tool_env())
    assert not result.passed and result.tests.failed == 2, statuses(result)
    assert "not run, as the script's && stops at a failure: node check.js" in result.stderr_tail


def test_a_forgery_under_a_chained_script_is_caught(tmp_path, node_runners):
    forged = _repo(tmp_path, node_runners, "node --test test/ && node check.js", library=BROKEN + QUIET_ASSERT)
    [result] = validate(forged, ["npm test"], tool_env())
    assert not result.passed and result.reason == "runner_forged", result.stderr_tail[-2000:]


def test_a_bare_tool_of_a_chain_is_found_where_npm_finds_it(tmp_path, node_runners):
    repo = _repo(tmp_path, node_runners, "node check.js && tape test/calc.test.js", tests=TAPE_TEST)
    [result] = validate(repo, ["npm test"], tool_env())
    assert result.passed and result.reason is None, result.stdout_tail + result.stderr_tail
    assert result.tests.ran == 2, statuses(result)


def test_a_command_a_chained_scripts_runner_covers_is_judged_from_it(tmp_path):
    from orchestrator.testruns.subsets import covered_by

    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"test": "jest --ci && node check.js"}}))
    pick = covered_by(["jest", "--ci", "test/calc.test.js"], ["npm", "test"], tmp_path)
    assert pick is not None and pick("test/calc.test.js > adds") and not pick("test/other.test.js > adds")
    assert covered_by(["jest", "--ci", "-t", "adds"], ["npm", "test"], tmp_path) is None
