"""The table of test-result readers, in the order a command is matched against them. Adding a
runner is a module (``model.Reader``) and a row.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from orchestrator.testruns import (cargo_reader, django_reader, go_reader, jest_reader, mocha_reader, node_reader, pytest_reader,
                                   tap_reader, unittest_reader)
from orchestrator.testruns.commands import script_chain
from orchestrator.testruns.commands import scripts as package_scripts
from orchestrator.testruns.model import Reader

__all__ = ["READERS", "read_chain", "reader_for"]

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


def read_chain(argv: Sequence[str], tree: Path | None = None) -> tuple[list[list[str]], int] | None:
    """(the commands, the place of the one that runs a runner mesh reads) when ``argv`` runs a
    package.json script that chains commands with ``&&`` (``node --test && npm run check:type:ts``)
    and exactly one of them is a runner mesh reads, with the script's ``pre`` and ``post`` scripts
    around them as npm runs them; None otherwise (the command then runs as it is)."""
    parts = script_chain(argv, tree)
    if parts is None or tree is None:
        return None
    read = [index for index, part in enumerate(parts) if reader_for(part, tree) is not None]
    if len(read) != 1:
        return None
    name = argv[1] if argv[1] not in ("run", "run-script") else argv[2]
    name = "test" if name in ("t", "tst") else name
    scripts = package_scripts(tree)
    before = [["npm", "run", f"pre{name}"]] if isinstance(scripts.get(f"pre{name}"), str) else []
    after = [["npm", "run", f"post{name}"]] if isinstance(scripts.get(f"post{name}"), str) else []
    return [*before, *parts, *after], read[0] + len(before)
