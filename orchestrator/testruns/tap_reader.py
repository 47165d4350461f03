"""tape: the TAP stream it prints on standard output, read as printed. tape's ``ok``/``not ok``
lines are assertions, grouped under the ``# name`` comment of the test that made them: a test
is that name, failed when one of its assertions failed, its message each failed assertion's
line and YAML block (operator, expected, actual, at). Run directly, through ``npx`` or a
coverage wrapper (``nyc tape ...``), or as the plain package.json script ``npm test`` runs (and
the ``npm run`` scripts it calls); a pipe into a TAP formatter (``| tap-spec``) is a shell script
mesh does not read: not counted.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from orchestrator.testruns.commands import node_tool
from orchestrator.testruns.model import MAX_MESSAGE_CHARS, Run

__all__ = ["READER"]

_ASSERT = re.compile(r"^(not ok|ok) \d+(?: -)? ?(.*?)(?: # (SKIP|TODO)\b.*)?$", re.I)
_KEEP_CHARS = 4 * MAX_MESSAGE_CHARS
_TOOLS = ("tape",)


class Tape:
    name = "tape"
    source = "stdout"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        return node_tool(argv, tree, _TOOLS, follow=True) is not None

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        return list(argv)

    def read(self, data: bytes, root: str = "") -> Run:
        run = Run(self.name)
        run.reported = False
        order: list[str] = []
        tests: dict[str, list] = {}  # name -> [assertions, failed, skipped, message parts]
        current = ""
        in_yaml = False
        for line in data.decode("utf-8", errors="replace").splitlines():
            if line.startswith("TAP version"):
                run.reported = True
                continue
            if in_yaml:
                if line.strip() == "...":
                    in_yaml = False
                elif current in tests and sum(len(p) for p in tests[current][3]) < _KEEP_CHARS:
                    tests[current][3].append(line)
                continue
            if line.startswith("# ") and not re.match(r"^# (tests|pass|fail|ok|todo|skip)\b", line):
                current = line[2:].strip()
                continue
            found = _ASSERT.match(line)
            if found is None:
                if line.strip() == "---" and current in tests and tests[current][1]:
                    in_yaml = True
                continue
            run.reported = True
            entry = tests.setdefault(current, [0, 0, 0, []])
            if current not in order:
                order.append(current)
            entry[0] += 1
            directive = (found.group(3) or "").upper()
            if directive:
                entry[2] += 1
            elif found.group(1).lower() == "not ok":
                entry[1] += 1
                entry[3].append(line)
        for name in order:
            assertions, failed, skipped, message = tests[name]
            status = "failed" if failed else "skipped" if skipped == assertions else "passed"
            run.add(name or "(assertions outside a test)", status, None, "\n".join(message))
        return run


READER = Tape()
