"""pytest: ``--junitxml=REPORT`` added right after the program (a later ``--junitxml`` of the
command wins and leaves mesh's file missing, which fails). A test is
``<classname>::<name>``; pytest's entry for a module it could not import or collect is a
collection error; an expected failure (xfail) counts as skipped, as pytest counts it.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from orchestrator.testruns.commands import module_run, program
from orchestrator.testruns.model import Run
from orchestrator.testruns.xml_reports import read_junit

__all__ = ["READER"]


class Pytest:
    name = "pytest"
    source = "file"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        found = module_run(argv)
        return program(argv) in ("pytest", "py.test") or (found is not None and found[0] == "pytest")

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        junit = f"--junitxml={report}"
        if program(argv) in ("pytest", "py.test"):
            return [argv[0], junit, *argv[1:]]
        _module, python, args = module_run(argv) or ("", [], [])
        return [*python, "-m", "pytest", junit, *args]

    def select(self, argv: Sequence[str], test_id: str) -> list[str] | None:
        """``-k`` with the test's class and name (a parametrized test's base name: ``-k`` takes no brackets)."""
        owner, _, name = test_id.rpartition("::")
        name = name.split("[", 1)[0]
        words = [word for word in (owner.rsplit(".", 1)[-1], name) if word]
        if not name or not all(word.isidentifier() for word in words):
            return None
        return [*argv, "-k", " and ".join(words)]

    def read(self, data: bytes, root: str = "", outcomes: dict[tuple[str, str], str] | None = None) -> Run:
        """The run of pytest's JUnit report ``data``; ``outcomes``, when given, gets each case's
        outcome by (class, name), xfail told apart, from the same parse (``read_junit``)."""
        return read_junit(
            data, self.name,
            lambda attrs: f"{attrs.get('classname', '')}::{attrs.get('name', '')}".lstrip(":"),
            lambda attrs, message: message.startswith("collection failure"), outcomes)


READER = Pytest()
