"""The table of twin makers by runner (as ``testruns.table`` names the runners). Adding a
language is a module (``model.Mutator``) and rows.

May import the standard library and ``orchestrator.mutants`` only.
"""

from __future__ import annotations

from orchestrator.mutants import go_tests, js_tests, python_tests, rust_tests
from orchestrator.mutants.model import Mutator

__all__ = ["MUTATORS"]

MUTATORS: dict[str, Mutator] = {
    "pytest": python_tests.MUTATOR,
    "unittest": python_tests.MUTATOR,
    "django": python_tests.MUTATOR,
    "go test": go_tests.MUTATOR,
    "cargo test": rust_tests.MUTATOR,
    "jest": js_tests.MUTATOR,
    "vitest": js_tests.MUTATOR,
    "node --test": js_tests.MUTATOR,
    "mocha": js_tests.MUTATOR,
    "tape": js_tests.MUTATOR,
}
