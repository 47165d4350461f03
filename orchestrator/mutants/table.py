"""The table of twin makers by runner (as ``testruns.table`` names the runners). Adding a
language is a module (``model.Mutator``) and rows.

May import the standard library and ``orchestrator.mutants`` only.
"""

from __future__ import annotations

from orchestrator.mutants import go_tests, python_tests
from orchestrator.mutants.model import Mutator

__all__ = ["MUTATORS"]

MUTATORS: dict[str, Mutator] = {
    "pytest": python_tests.MUTATOR,
    "unittest": python_tests.MUTATOR,
    "go test": go_tests.MUTATOR,
}
