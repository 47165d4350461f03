"""Jest and Vitest: their JSON report (the same shape: ``testResults`` of files, each with
``assertionResults``), written to a file mesh names: ``--json --outputFile=REPORT`` for Jest
(its console output stays on stderr), ``--reporter=default --reporter=json
--outputFile=REPORT`` for Vitest. Run directly, through ``npx``, or as the plain package.json
script ``npm test`` runs (mesh's arguments after ``--``). A test is ``<file> > <full name>``
(the file relative to the tree); a file whose suite failed to run (a
syntax error, an import that failed) is a collection error. Pending, todo and disabled tests
are skipped.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from orchestrator.testruns.commands import node_tool, with_tool_args
from orchestrator.testruns.model import ReportError, Run

__all__ = ["JEST", "VITEST"]

_STATUS = {"passed": "passed", "failed": "failed"}


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


class JsonReport:
    source = "file"

    def __init__(self, name: str, tools: tuple[str, ...], args: tuple[str, ...]) -> None:
        self.name = name
        self.tools = tools
        self.args = args

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        found = node_tool(argv, tree, self.tools)
        if found is None:
            return False
        _start, args, _scripted = found
        # Watch mode never ends, and a reporter or output file of the command's own would take mesh's place.
        taken = ("--watch", "--watchAll", "--json", "--outputFile", "--reporter", "--listTests", "--list")
        return not any(arg.split("=", 1)[0] in taken for arg in args)

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        return with_tool_args(argv, tree, self.tools, [arg.format(report=report) for arg in self.args])

    def select(self, argv: Sequence[str], test_id: str) -> list[str] | None:
        """``-t`` with the test's full name, anchored (``--`` first for an npm script)."""
        _file, sep, name = test_id.partition(" > ")
        if not sep or not name:
            return None
        pattern = "^" + re.escape(re.sub(r" #\d+$", "", name)) + "$"
        return with_tool_args(argv, None, self.tools, ["-t", pattern]) if not argv or argv[0] != "npm" \
            else [*argv, *([] if "--" in argv else ["--"]), "-t", pattern]

    def read(self, data: bytes, root: str = "") -> Run:
        try:
            raw = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ReportError("the report is not JSON") from None
        files = raw.get("testResults") if isinstance(raw, dict) else None
        if not isinstance(files, list):
            raise ReportError(f"the report does not hold the testResults a {self.name} JSON report has")
        common = root.rstrip("/")
        run = Run(self.name)
        for entry in files:
            if not isinstance(entry, dict):
                continue
            name = entry.get("name") if isinstance(entry.get("name"), str) else "?"
            where = name[len(common) + 1:] if common and name.startswith(common + "/") else name
            cases = entry.get("assertionResults") if isinstance(entry.get("assertionResults"), list) else []
            if not cases and entry.get("status") == "failed":
                message = entry.get("message") if isinstance(entry.get("message"), str) else ""
                run.collection_error(where, message or f"{where} failed to run")
                continue
            for case in cases:
                if not isinstance(case, dict):
                    continue
                title = case.get("fullName") or " ".join(_strings(case.get("ancestorTitles")) +
                                                         [str(case.get("title", ""))])
                duration = case.get("duration")
                run.add(f"{where} > {title}", _STATUS.get(case.get("status"), "skipped"),
                        duration / 1000 if isinstance(duration, (int, float)) else None,
                        "\n".join(_strings(case.get("failureMessages"))))
        return run


JEST = JsonReport("jest", ("jest",), ("--json", "--outputFile={report}"))
VITEST = JsonReport("vitest", ("vitest",), ("--reporter=default", "--reporter=json", "--outputFile={report}"))
