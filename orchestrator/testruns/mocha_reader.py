"""mocha: its ``xunit`` reporter writing to a file mesh names (``--reporter=xunit
--reporter-option=output=REPORT``), run directly, through ``npx``, or as the plain package.json
script ``npm test`` runs. mocha has one reporter at a time, so the console shows no per-test
lines: the failures, with their messages, are what mesh shows. A test is its full title
(``suite test``). A command that picks a reporter of its own, or watches, is not counted.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from orchestrator.testruns.commands import node_tool, with_tool_args
from orchestrator.testruns.model import Run
from orchestrator.testruns.xml_reports import read_junit

__all__ = ["READER"]

_TOOLS = ("mocha", "_mocha")


class Mocha:
    name = "mocha"
    source = "file"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        found = node_tool(argv, tree, _TOOLS)
        taken = ("--reporter", "-R", "--reporter-option", "--reporter-options", "-O", "--watch", "-w", "--list-files")
        return found is not None and not any(arg.split("=", 1)[0] in taken for arg in found[1])

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        return with_tool_args(argv, tree, _TOOLS, ["--reporter=xunit", f"--reporter-option=output={report}"])

    def read(self, data: bytes, root: str = "") -> Run:
        return read_junit(data, self.name, lambda attrs: " ".join(
            part for part in (attrs.get("classname", ""), attrs.get("name", "")) if part))


READER = Mocha()
