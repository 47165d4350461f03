"""node --test: Node's ``junit`` reporter to a file mesh names, with the ``spec`` reporter kept
on standard output for people (``--test-reporter=spec --test-reporter-destination=stdout
--test-reporter=junit --test-reporter-destination=REPORT``, right after ``node``: Node reads
options only before the test files). Needs Node 20.13 or later (the ``junit`` reporter). A test
is its name under its suites (``suite > test``). Run directly, or as the plain package.json script
``npm test`` runs: then the same options reach it in ``NODE_OPTIONS`` (which Node admits them
in), since after ``--`` they would land behind the script's own file arguments.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from orchestrator.testruns.commands import program, script_command
from orchestrator.testruns.model import Run
from orchestrator.testruns.xml_reports import read_junit

__all__ = ["READER"]


def _options(report: str) -> list[str]:
    return ["--test-reporter=spec", "--test-reporter-destination=stdout", "--test-reporter=junit",
            f"--test-reporter-destination={report}"]


class NodeTest:
    name = "node --test"
    source = "file"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        script = script_command(argv, tree, follow=True)  # NODE_OPTIONS reaches it through npm run
        return self._direct(argv) or (script is not None and self._direct(script))

    def _direct(self, argv: Sequence[str]) -> bool:
        if program(argv) not in ("node", "nodejs"):
            return False
        options = []
        for arg in argv[1:]:
            if not arg.startswith("-"):
                break
            options.append(arg.split("=", 1)[0])
        return "--test" in options and "--test-reporter" not in options and "--watch" not in options

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        if not self._direct(argv):
            return list(argv)  # an npm script: the options go in NODE_OPTIONS (``environment``)
        return [argv[0], *_options(report), *argv[1:]]

    def environment(self, argv: Sequence[str], report: str, tree: Path | None) -> dict[str, str]:
        """``NODE_OPTIONS`` for an npm script (``extend``: added to the environment's own)."""
        return {} if self._direct(argv) else {"NODE_OPTIONS": " ".join(_options(report))}

    def read(self, data: bytes, root: str = "") -> Run:
        return read_junit(data, self.name, lambda attrs: " > ".join([*attrs.get("\0suites", []), attrs.get("name", "")]))


READER = NodeTest()
