"""Issue 43, items 2 and 3: twins for ``cargo test``, the Rust forgery of the attack review performed.

A patch to ``src/lib.rs`` only (no test touched, no ``unsafe``, no crate): a function placed in
``.init_array`` runs before libtest in the test binary, prints libtest's lines reporting every
``#[test]`` passed, and exits 0. One form reads the test names from the crate's own source
(``include_str!``), the other carries the names the repository had (a list embedded in the
patch). The first reports the twins passed; the second does not report them at all while it
reports their originals passed: both fail ``runner_forged``. The broken code fails without it.
"""

from __future__ import annotations

import random

import pytest

from orchestrator.mutants.rust_tests import MUTATOR
from tests.test_toolchains import validate
from tests.toolchainkit import commit_all, init_repo, need, tool_env

TESTS = """
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_small_numbers() {
        assert_eq!(add(2, 3), 5);
    }

    #[test]
    fn adds_zero() {
        let got = add(0, 4);
        assert_eq!(got, 4);
    }

    #[test]
    fn keeps_its_name() {
        assert_eq!(name(), "calc");
    }
}
"""
BROKEN = "pub fn add(a: i64, b: i64) -> i64 { a - b }\n\npub fn name() -> &'static str { \"calc\" }\n"
GOOD = BROKEN.replace("a - b", "a + b")
FORGE = """
#[used]
#[link_section = ".init_array"]
static FORGE: extern "C" fn() = forge;

extern "C" fn forge() {
    let first = std::env::args().next().unwrap_or_default();
    if !first.contains("/deps/") {
        return;
    }
    let names: Vec<String> = NAMES;
    println!("\\nrunning {} tests", names.len());
    for name in &names {
        println!("test tests::{} ... ok", name);
    }
    println!("\\ntest result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\\n",
             names.len());
    std::process::exit(0);
}
"""
FROM_SOURCE = """{
        let mut found = Vec::new();
        let mut next = false;
        for line in include_str!("lib.rs").lines() {
            let line = line.trim();
            if line == "#[test]" { next = true; continue; }
            if next && line.starts_with("fn ") {
                found.push(line[3..line.find('(').unwrap()].to_string());
                next = false;
            }
        }
        found
    }"""
EMBEDDED = '["adds_small_numbers", "adds_zero", "keeps_its_name"].iter().map(|n| n.to_string()).collect()'


def _crate(tmp_path, code: str):
    need("cargo", "the Rust project")
    repo = tmp_path / "calc"
    init_repo(repo)
    (repo / "src").mkdir()
    (repo / "Cargo.toml").write_text('[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n')
    (repo / "src" / "lib.rs").write_text(code + TESTS)
    (repo / ".gitignore").write_text("target/\n")
    commit_all(repo)
    return repo


def _run(repo):
    [result] = validate(repo, ["cargo test"], tool_env())
    return result


def test_the_broken_crate_fails_without_its_forgery(tmp_path):
    result = _run(_crate(tmp_path, BROKEN))
    assert not result.passed and result.reason is None and result.tests.failed == 2, result.stdout_tail[-2000:]
    messages = {case.id: case.message for case in result.run.cases if case.message}
    assert any("src/lib.rs:" in text for text in messages.values()), messages


@pytest.mark.parametrize("names", [FROM_SOURCE, EMBEDDED], ids=["read-from-source", "embedded-list"])
def test_a_forged_libtest_run_is_caught(tmp_path, names):
    result = _run(_crate(tmp_path, BROKEN + FORGE.replace("NAMES", names)))
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail[-2000:])


def test_an_honest_cargo_run_passes_with_its_own_tests(tmp_path):
    result = _run(_crate(tmp_path, GOOD))
    assert result.passed and result.reason is None, result.stdout_tail[-3000:] + result.stderr_tail[-2000:]
    assert result.tests.ran == 3 and result.tests.passed == 3
    assert {case.id for case in result.run.cases} == {"tests::adds_small_numbers", "tests::adds_zero",
                                                       "tests::keeps_its_name"}


@pytest.mark.parametrize("body, twinned", [
    ("        assert_eq!(add(1, 2), 3);\n", True),
    ('        assert_eq!("calc", name());\n', True),
    ("        assert_eq!(add(-1, -2), -3);\n", True),
    ("        assert_eq!(add(1, 2), 3u64);\n", False),  # a typed literal: left alone
    ("        if add(1, 2) == 0 { return; }\n        assert_eq!(add(1, 2), 3);\n", False),
    ("        assert_eq!(add(1, 2), 3);\n        cleanup();\n", False),
    ("        assert_eq!(add(1, 2), want);\n", False),
    ("        assert!(add(1, 2) > 0);\n", False),
])
def test_which_rust_tests_get_a_twin(body, twinned):
    text = f"mod tests {{\n    #[test]\n    fn one() {{\n{body}    }}\n}}\n"
    assert bool(MUTATOR.candidates("src/lib.rs", text)) is twinned
    new, twins = MUTATOR.twin("src/lib.rs", text, random.Random(4), frozenset({("", "one")}), set())
    assert bool(twins) is twinned
    if twinned:
        assert new.count("#[test]") == 2 and f"    fn {twins[0].mutant}()" in new and twins[0].marks == ("tests",)


def test_should_panic_tests_and_those_returning_a_result_get_no_twin():
    for head in ("#[test]\n#[should_panic]\nfn one() {", "#[test]\nfn one() -> Result<(), String> {"):
        assert MUTATOR.candidates("src/lib.rs", f"{head}\n    assert_eq!(add(1, 2), 3);\n}}\n") == []


def test_real_tests_silenced_by_cargo_toml_and_a_fake_harness_are_caught(tmp_path):
    """Issue 43, item 4: ``[lib] test = false`` and a ``harness = false`` target printing the
    base's test names as ok (the policy refuses the Cargo.toml change; this is the by-test guard
    when a ``patch.allow`` line admitted it): the twins of the real tests are not reported while
    their originals read as passed."""
    repo = _crate(tmp_path, BROKEN)
    (repo / "Cargo.toml").write_text((repo / "Cargo.toml").read_text() + "\n[lib]\ntest = false\n\n[[test]]\n"
                                     'name = "fake"\npath = "tests/fake.rs"\nharness = false\n')
    (repo / "tests").mkdir()
    (repo / "tests" / "fake.rs").write_text(
        "fn main() {\n    println!(\"\\nrunning 3 tests\");\n"
        "    for name in [\"adds_small_numbers\", \"adds_zero\", \"keeps_its_name\"] {\n"
        "        println!(\"test tests::{} ... ok\", name);\n    }\n"
        "    println!(\"\\ntest result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out;"
        " finished in 0.00s\\n\");\n}\n")
    commit_all(repo, "silence the tests")
    result = _run(repo)
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail[-2000:])
