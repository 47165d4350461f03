"""The table of test-result readers, in the order a command is matched against them. Adding a
runner is a module (``model.Reader``) and a row.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from orchestrator.testruns import (cargo_reader, django_reader, go_reader, jest_reader, mocha_reader, node_reader, pytest_reader,
                                   tap_reader, unittest_reader)
from orchestrator.testruns.model import Reader

__all__ = ["READERS", "reader_for"]

READERS: dict[str, Reader] = {
    "pytest": pytest_reader.READER,
    "unittest": unittest_reader.READER,
    "django": django_reader.READER,
    "go test": go_reader.READER,
    "cargo test": cargo_reader.READER,
    "jest": jest_reader.JEST,
    "vitest": jest_reader.VITEST,
    "node --test": node_reader.READER,
    "mocha": mocha_reader.READER,
    "tape": tap_reader.READER,
}


def reader_for(argv: Sequence[str], tree: Path | None = None) -> Reader | None:
    """The reader of the runner ``argv`` runs (``tree``: the tree under test, for package.json
    scripts), or None when mesh reads no runner of it."""
    for reader in READERS.values():
        if reader.recognises(argv, tree):
            return reader
    return None
