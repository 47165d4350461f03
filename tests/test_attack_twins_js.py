"""Issue 43, items 2 and 3: twins for the Node runners, the Node forgery of the attack review performed.

A patch to the library only: the module replaces ``node:assert``'s equality checks (or Jest's
``expect``) with ones that do nothing when called from a test file, and work otherwise. Without
twins every test of the module reads as passed; the twins (copies of the file's own tests with
another title, comparing against a changed literal) are in the same file, so the forgery spares
them too, and mesh fails the command ``runner_forged``. Each broken library fails without its
forgery; honest runs pass with their own tests' results, run by the real runners.
"""

from __future__ import annotations

import random
import re

import pytest

from orchestrator.mutants.js_tests import MUTATOR
from tests.test_testruns import ADD, node_repo, node_runners, statuses  # noqa: F401
from tests.test_toolchains import validate
from tests.toolchainkit import own_cache, templates, tool_env  # noqa: F401

pytestmark = pytest.mark.usefixtures("own_cache")

BROKEN = "exports.add = (a, b) => a - b;\nexports.name = () => 'calc';\n"
GOOD = ADD + "exports.name = () => 'calc';\n"
# Equality checks that do nothing when a test file calls them.
QUIET_ASSERT = """
const assert = require('assert');
for (const name of ['equal', 'strictEqual', 'deepEqual', 'deepStrictEqual']) {
  const real = assert[name];
  assert[name] = function (...args) {
    if (/\\.test\\.js/.test(new Error().stack.split('\\n').slice(2, 3).join(''))) return;
    return real.apply(this, args);
  };
}
"""
QUIET_TAPE = """
const Test = require('tape/lib/test');
const real = Test.prototype.equal;
Test.prototype.equal = Test.prototype.is = function (...args) {
  if (/\\.test\\.js/.test(new Error().stack.split('\\n').slice(2, 3).join(''))) return this.pass('equal');
  return real.apply(this, args);
};
"""
QUIET_EXPECT = """
if (typeof globalThis.expect === 'function') {
  const real = globalThis.expect;
  globalThis.expect = (value) => {
    const made = real(value);
    made.toBe = () => {};
    return made;
  };
}
"""
NODE_TEST = """const test = require('node:test');
const assert = require('node:assert');
const { add, name } = require('../add');

test('adds small numbers', () => {
  assert.strictEqual(add(2, 3), 5);
});

test('adds zero', () => {
  const got = add(0, 4);
  assert.strictEqual(got, 4);
});

test('keeps its name', () => {
  assert.strictEqual(name(), 'calc');
});
"""
JEST_TEST = """const { add, name } = require('../add');

describe('add', () => {
  test('adds small numbers', () => {
    expect(add(2, 3)).toBe(5);
  });

  test('adds zero', () => {
    expect(add(0, 4)).toBe(4);
  });

  test('keeps its name', () => {
    expect(name()).toBe('calc');
  });
});
"""
TAPE_TEST = """const test = require('tape');
const { add, name } = require('../add');

test('adds small numbers', (t) => {
  t.equal(add(2, 3), 5);
  t.end();
});

test('keeps its name', (t) => {
  t.equal(name(), 'calc');
  t.end();
});
"""
MOCHA_TEST = NODE_TEST.replace("const test = require('node:test');\n", "").replace("test(", "it(")
CASES = {  # runner: (script, test file, forgery, the broken library's failing tests)
    "node --test": ("node --test test/", NODE_TEST, QUIET_ASSERT, 2),
    "jest": ("jest", JEST_TEST, QUIET_EXPECT, 2),
    "tape": ("tape test/calc.test.js", TAPE_TEST, QUIET_TAPE, 1),
    "mocha": ("mocha test/calc.test.js", MOCHA_TEST, QUIET_ASSERT, 2),
}


@pytest.mark.parametrize("runner", list(CASES))
def test_a_forged_node_run_is_caught_and_the_broken_library_fails_without_it(tmp_path, node_runners, runner):
    script, tests, forgery, failing = CASES[runner]
    broken = node_repo(tmp_path / "b", node_runners, {"add.js": BROKEN, "test/calc.test.js": tests}, script)
    [result] = validate(broken, ["npm test"], tool_env())
    assert not result.passed and result.reason is None, (result.reason, result.stdout_tail[-2000:])
    assert result.tests.failed == failing, statuses(result)
    forged = node_repo(tmp_path / "f", node_runners, {"add.js": BROKEN + forgery, "test/calc.test.js": tests},
                       script)
    [result] = validate(forged, ["npm test"], tool_env())
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail[-2000:])


@pytest.mark.parametrize("runner", list(CASES))
def test_an_honest_node_run_passes_with_its_own_tests(tmp_path, node_runners, runner):
    script, tests, _, _ = CASES[runner]
    repo = node_repo(tmp_path, node_runners, {"add.js": GOOD, "test/calc.test.js": tests}, script)
    [result] = validate(repo, ["npm test"], tool_env())
    assert result.passed and result.reason is None, result.stdout_tail[-3000:] + result.stderr_tail[-2000:]
    own = 2 if runner == "tape" else 3
    assert result.tests.ran == own and result.tests.passed == own, statuses(result)
    assert all(any(title in test_id for title in ("adds small numbers", "adds zero", "keeps its name"))
               for test_id in statuses(result)), statuses(result)
    # What a person reads is the project's run: no twin's failure, the project's own counts.
    shown = result.stdout_tail + result.stderr_tail
    if runner == "jest":
        assert "●" not in shown and "FAIL " not in shown and "✕" not in shown, shown
        assert re.search(rf"Tests:\s+{own} passed, {own} total", shown), shown
    if runner == "tape":
        assert "not ok" not in shown and "# fail" not in shown and f"# pass  {own}" in shown, shown
    if runner == "node --test":
        assert "ℹ fail 0" in shown and f"ℹ pass {own}" in shown and f"ℹ tests {own}" in shown, shown
        assert "✖" not in shown, shown


@pytest.mark.parametrize("body, twinned", [
    ("  assert.strictEqual(add(1, 2), 3);\n", True),
    ("  expect(add(1, 2)).toBe(3);\n", True),
    ("  expect(name()).toEqual('calc');\n", True),
    ("  t.equal(add(1, 2), 3, 'sum');\n  t.end();\n", True),
    ("  expect(add(1, 2)).to.equal(-3);\n", True),
    ("  if (x) return;\n  assert.strictEqual(add(1, 2), 3);\n", False),
    ("  assert.strictEqual(add(1, 2), 3);\n  cleanup();\n", False),
    ("  expect(add(1, 2)).toBe(want);\n", False),
    ("  expect(3).toBe(3);\n", False),
    ("  expect(`${a}`).toBe(`${b}`);\n", False),
    ("  // expect(add(1, 2)).toBe(3);\n  const s = '}';\n", False),
])
def test_which_node_tests_get_a_twin(body, twinned):
    text = f"test('adds two numbers', () => {{\n{body}}});\n"
    assert bool(MUTATOR.candidates("test/a.test.js", text)) is twinned, text
    new, twins = MUTATOR.twin("test/a.test.js", text, random.Random(2), frozenset({("", "adds two numbers")}), set())
    assert bool(twins) is twinned
    if twinned:
        assert text.rstrip("\n").split("\n", 1)[1] in new and new.count("test(") == 2 and twins[0].mutant in new


def test_skipped_parametrized_and_callback_tests_get_no_twin():
    for text in ("test.skip('adds', () => {\n  expect(add(1, 2)).toBe(3);\n});\n",
                 "test.each([[1]])('adds %i', (n) => {\n  expect(add(n, 2)).toBe(3);\n});\n",
                 "it('adds', (done) => {\n  expect(add(1, 2)).toBe(3);\n});\n"):
        assert MUTATOR.candidates("test/a.test.js", text) == [], text


@pytest.mark.parametrize("lang, literal", [
    ("js", "''"), ("js", '""'), ("js", "``"), ("js", "'it\\'s'"), ("js", '"a\\""'), ("js", '"abc"'),
    ("rust", 'r#"a"#'), ("rust", '""'), ("go", '""'), ("go", '"say \\"hi\\""'), ("go", "`raw`"),
])
def test_a_changed_string_literal_is_one_string_one_character_longer(lang, literal):
    """Found on commander.js: an empty expected string ('') became w'' and the file no longer parsed."""
    from orchestrator.mutants.braces import changed_literal, mask

    changed = changed_literal(literal, 0, len(literal), mask(literal, lang), random.Random(1), lang)
    assert changed is not None and len(changed) == len(literal) + 1
    assert mask(changed, lang).strings == ((0, len(changed)),), changed
    assert changed[0] == literal[0] and changed[-1] == literal[-1]


# Vitest's toBe compares with Object.is: made to say "same" when a test file asks.
QUIET_OBJECT_IS = """
const realIs = Object.is;
Object.is = (a, b) => (/\\.test\\.js/.test(new Error().stack) ? true : realIs(a, b));
"""
VITEST_TESTS = """import { test, expect } from 'vitest';
import { add } from './add.js';

test('adds small numbers', () => {
  expect(add(2, 3)).toBe(5);
});

test('adds zero', () => {
  const got = add(0, 4);
  expect(got).toBe(4);
});
"""


def test_a_forged_vitest_run_is_caught_and_the_broken_library_fails_without_it(templates, tmp_path):
    """Vitest, a runner of item 2 the other attacks leave out: the library module makes
    ``Object.is`` (what Vitest's ``toBe`` asks) answer "same" for callers in a test file."""
    from tests.test_toolchains import commit_all
    from tests.toolchainkit import vitest_project

    for name, library, reason in (("b", "export const add = (a, b) => a - b;\n", None),
                                  ("f", QUIET_OBJECT_IS + "export const add = (a, b) => a - b;\n", "runner_forged"),
                                  ("g", "export const add = (a, b) => a + b;\n", None)):
        repo = vitest_project(templates, tmp_path / name)
        (repo / "src" / "add.js").write_text(library)
        (repo / "src" / "add.test.js").write_text(VITEST_TESTS)
        commit_all(repo, "tests")
        [result] = validate(repo, ["npm test"], tool_env())
        shown = result.stdout_tail[-2000:] + result.stderr_tail[-2000:]
        assert result.reason == reason, (name, result.reason, shown)
        if name == "b":
            assert not result.passed and result.tests.failed == 2, statuses(result)
        if name == "g":
            assert result.passed and result.tests.ran == 2 and result.tests.passed == 2, statuses(result)
