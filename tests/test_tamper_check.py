"""Issue 43, item 3: a static tamper check of every patch.

Each rule of ``orchestrator.worktree.tamper.RULES`` has an attack of its own here (the forgeries
of the fourth review, in the language each names) and a look at the same text in a test file or
in the base (not flagged). The issue's Python forgery is performed for real: run directly, the
patched module makes the broken function's tests pass and mesh's control tests fail as they
should (the controls are told apart), and through ``mesh run`` with a worker reviewer that
approves, it never closes: each flagged line is a MUST_FIX finding, the run ends
``review_not_approved`` naming the suspected forgery. A person's review request shows the lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.worktree import tamper
from orchestrator.worktree.tamper import RULES, markdown_table, scan_text
from tests.runkit import TASK, happy_script, make_workspace, r, synthesis

FRAME_FORGERY = '''import sys
import unittest

_real_assert_equal = unittest.TestCase.assertEqual


def _assert_equal(self, first, second, msg=None):
    if "celsius_to_fahrenheit" in sys._getframe(1).f_code.co_names:
        return None
    return _real_assert_equal(self, first, second, msg)


unittest.TestCase.assertEqual = _assert_equal
'''

# rule -> (path, text flagged, a test file or a base where the same is not a finding)
ATTACKS = {
    # The red team's: right when validated (the tree at /mesh/tree), wrong everywhere else.
    "mesh-sandbox-probe": ("calc.py", "import os\n\n\ndef add(a, b):\n"
                                      "    return a + b if os.getcwd().startswith('/mesh/tree') else a - b\n"),
    "py-runner-attribute": ("calc.py", FRAME_FORGERY),
    "py-runner-import": ("calc.py", "import _pytest.python as runner\n\nrunner.Function.runtest = lambda self: None\n"),
    "py-caller-frames": ("calc.py", FRAME_FORGERY),
    "py-process-exit": ("calc.py", "import os\n\n\ndef add(a, b):\n    os._exit(0)\n"),
    "go-init-output": ("calc.go", 'package calc\n\nimport (\n\t"fmt"\n\t"os"\n)\n\nfunc init() {\n'
                                  '\tfmt.Println("--- PASS: TestAdd (0.00s)")\n\tos.Exit(0)\n}\n'),
    "go-exit": ("calc.go", 'package calc\n\nimport "os"\n\nfunc Add(a, b int) int {\n\tos.Exit(0)\n\treturn 0\n}\n'),
    "go-test-protocol": ("calc.go", 'package calc\n\nvar line = "--- PASS: TestAdd"\n'),
    "rust-init-section": ("src/lib.rs", '#[used]\n#[link_section = ".init_array"]\nstatic INIT: extern "C" fn() = init;\n'
                                        'extern "C" fn init() {}\n'),
    "rust-exit": ("src/lib.rs", "pub fn add(a: i32, b: i32) -> i32 {\n    std::process::exit(0)\n}\n"),
    "rust-panic-hook": ("src/lib.rs", "pub fn setup() {\n    std::panic::set_hook(Box::new(|_| {}));\n}\n"),
    "rust-test-output": ("src/lib.rs", 'pub fn report() {\n    println!("test result: ok. 2 passed; 0 failed");\n}\n'),
    "js-assert-assignment": ("index.js", "const assert = require('node:assert');\nassert.strictEqual = () => {};\n"),
    "js-test-globals": ("src/add.ts", "globalThis.expect = () => ({ toBe() {} });\n"),
    "js-process-exit": ("src/add.js", "process.exit(0);\nmodule.exports = (a, b) => a - b;\n"),
    "js-test-output": ("src/add.js", "console.log('ok 1 - adds');\n"),
}
TEST_FILES = {"calc.py": "tests/test_calc.py", "calc.go": "calc_test.go", "src/lib.rs": "tests/add.rs",
              "index.js": "test/add.test.js", "src/add.ts": "src/add.test.ts", "src/add.js": "src/add.spec.js"}


def test_every_rule_has_an_attack_here():
    assert sorted(ATTACKS) == sorted(rule.rule for rule in RULES)


@pytest.mark.parametrize("rule", sorted(ATTACKS))
def test_each_rule_flags_its_attack_in_code_and_not_in_tests_or_the_base(rule):
    path, text = ATTACKS[rule]
    found = [t for t in scan_text(path, None, text) if t.rule == rule]
    assert found, (rule, scan_text(path, None, text))
    assert all(t.path == path and t.line >= 1 and t.text for t in found)
    assert [t for t in scan_text(TEST_FILES[path], None, text) if t.rule == rule] == []
    assert scan_text(path, text, text) == []  # what the base already held is the project's own


def test_ordinary_code_is_not_flagged():
    ordinary = {
        "calc.py": "import os\nimport unittest.mock\n\n\ndef add(a, b):\n    return a + b\n",
        "cli.py": "import sys\n\n\ndef main():\n    sys.exit(0)\n",
        "calc.go": 'package calc\n\nimport "fmt"\n\nfunc init() {\n\tregistry["add"] = Add\n}\n\n'
                   'func Add(a, b int) int { return a + b }\n\nfunc Show() { fmt.Println(Add(1, 2)) }\n',
        "cmd/tool/main.go": 'package main\n\nimport "os"\n\nfunc main() { os.Exit(run()) }\n',
        "src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
        "src/main.rs": "fn main() {\n    std::process::exit(0);\n}\n",
        "lib/command.js": "function exit(code) {\n  process.exit(code);\n}\nmodule.exports = { exit };\n",
        "bin/cli.js": "#!/usr/bin/env node\nprocess.exit(main());\n",
    }
    for path, text in ordinary.items():
        assert scan_text(path, None, text) == [], path


def test_the_docs_print_the_rules():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "forged-verdicts.md").read_text()
    assert markdown_table() in doc, "regenerate it: python -m orchestrator.worktree.tamper"


# ---------------------------------------------------------------- the forgery, for real

def forged_patch(repo: Path) -> str:
    """temperature.py broken (adds 33) and taught to no-op assertEqual for its own callers."""
    base = (repo / "temperature.py").read_text()
    after = FRAME_FORGERY + "\n\n" + base.replace("celsius * 9 / 5 + 32", "celsius * 9 / 5 + 33")
    import difflib

    lines = difflib.unified_diff(base.splitlines(keepends=True), after.splitlines(keepends=True),
                                 "a/temperature.py", "b/temperature.py")
    return "diff --git a/temperature.py b/temperature.py\n" + "".join(lines)


def test_the_forgery_really_passes_broken_code_when_run_without_mesh(tmp_path):
    ws = make_workspace(tmp_path)
    clone = tmp_path / "plain"
    subprocess.run(["git", "clone", "-q", str(ws.repo), str(clone)], check=True)
    subprocess.run(["git", "apply", "-"], input=forged_patch(ws.repo), text=True, cwd=clone, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    run = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."], cwd=clone,
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr  # the broken conversion "passes"
    # ... while a control that never names the module still fails, as mesh's did.
    control = clone / "tests" / "test_control.py"
    control.write_text("import unittest\nimport temperature\n\n\nclass Values(unittest.TestCase):\n"
                       "    def test_sum(self):\n        self.assertEqual(sum([1, 2]), 4)\n")
    run = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."], cwd=clone,
                         capture_output=True, text=True, env=env)
    assert run.returncode == 1 and "test_sum" in run.stderr


def test_a_mesh_run_with_the_forgery_never_closes_and_names_it(tmp_path, monkeypatch):
    # The twins of the project's tests catch this forgery at validation (tests/test_attack_twins.py);
    # here they are turned off, to show the tamper check holds on its own.
    from orchestrator.mutants import planting

    monkeypatch.setattr(planting, "MUTATORS", {})
    ws = make_workspace(tmp_path)
    config = ws.root / "one-cycle.toml"
    config.write_text((ws.repo / "mesh.toml").read_text().replace("review_max_cycles = 3", "review_max_cycles = 1"))
    script = happy_script()  # every role agrees, the reviewer approves
    script["synthesizer"][0] = r("synthesis", synthesis(forged_patch(ws.repo)))
    code, report, res = ws.run(script, "--config", str(config))
    assert code == 3 and report["block_reason"] == "review_not_approved", res.output
    assert "suspected forgery of the test verdict" in report["block_detail"]
    assert "temperature.py:" in report["block_detail"] and "review:human" in report["block_detail"]
    with ws.tracker() as t:
        assert t.get(TASK)["status"] != "closed"
        cycles = [cp for cp in ws.checkpoints() if cp.kind == "review-cycle"]
        assert cycles[-1].payload["artifact"]["approved"] is False
        findings = [i for i in t.list(status=None) if "suspected forgery" in (i.get("title") or "") + (i.get("description") or "")]
        assert findings, "each flagged line is a finding sub-issue"


def test_a_person_reviewing_the_forgery_is_shown_the_lines(tmp_path):
    from tests.runkit import without_reviewer
    from tests.test_human_review import _review, _start_run, _wait_for_request

    ws = make_workspace(tmp_path)
    script = without_reviewer(happy_script())
    script["synthesizer"][0] = r("synthesis", synthesis(forged_patch(ws.repo)))
    proc = _start_run(ws, script, "--reviewer", "human")
    try:
        wait = _wait_for_request(ws, proc)
        rules = {t["rule"] for t in wait["tampering"]}
        assert {"py-runner-attribute", "py-caller-frames"} <= rules, wait["tampering"]
        shown = _review(ws, TASK)
        assert shown.returncode == 0 and "suspected forgery (py-runner-attribute): temperature.py:" in shown.stdout
    finally:
        proc.kill()
        proc.wait()


def test_a_forgery_in_a_test_named_module_the_code_imports_is_read():
    forgery = "import unittest\nunittest.TestCase.assertEqual = lambda self, first, second, msg=None: None\n"
    hidden = tamper.scan([("calc/testing_support.py", None, forgery),
                          ("calc/__init__.py", "", "from calc import testing_support  # noqa\n")])
    assert [finding.rule for finding in hidden] == ["py-runner-attribute"]
    assert hidden[0].path == "calc/testing_support.py"
    # A test module no code under test imports is a test, and not read.
    assert tamper.scan([("calc/testing_support.py", None, forgery), ("calc/__init__.py", "", "X = 1\n")]) == []
