"""node --test: Node's ``junit`` reporter to a file mesh names, with the ``spec`` reporter kept
on standard output for people (``--test-reporter=spec --test-reporter-destination=stdout
--test-reporter=junit --test-reporter-destination=REPORT``, right after ``node``: Node reads
options only before the test files). Needs Node 20.13 or later (the ``junit`` reporter). A test
is its name under its suites (``suite > test``). Run directly; as an npm script it is not
counted (mesh could add its options only after the script's own files).

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from orchestrator.testruns.commands import program
from orchestrator.testruns.model import Run
from orchestrator.testruns.xml_reports import read_junit

__all__ = ["READER"]


class NodeTest:
    name = "node --test"
    source = "file"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        if program(argv) not in ("node", "nodejs"):
            return False
        options = []
        for arg in argv[1:]:
            if not arg.startswith("-"):
                break
            options.append(arg.split("=", 1)[0])
        return "--test" in options and "--test-reporter" not in options and "--watch" not in options

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        return [argv[0], "--test-reporter=spec", "--test-reporter-destination=stdout", "--test-reporter=junit",
                f"--test-reporter-destination={report}", *argv[1:]]

    def read(self, data: bytes) -> Run:
        return read_junit(data, self.name, lambda attrs: " > ".join([*attrs.get("\0suites", []), attrs.get("name", "")]))


READER = NodeTest()
