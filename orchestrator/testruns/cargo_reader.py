"""cargo test (libtest): its own plain output on standard output, read as printed. mesh adds
``--no-fail-fast`` after ``test`` so every test binary runs (the first failing one would hide
the others' tests). A test is its libtest name (``tests::adds``; a doc test
``src/lib.rs - add (line 5)``); a name that two binaries share is told apart by `` #2``. A
failure's message is its ``---- name stdout ----`` section: the panic with its values. The
terse forms (``-q``, ``--quiet``, ``--format terse``) print no names: not counted.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from orchestrator.testruns.commands import program
from orchestrator.testruns.model import MAX_MESSAGE_CHARS, Run

__all__ = ["READER"]

_LINE = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored(?:, .*)?)$")
_SECTION = re.compile(r"^---- (.+?) (stdout|stderr) ----$")
_KEEP_CHARS = 4 * MAX_MESSAGE_CHARS
_TERSE = ("-q", "--quiet", "terse", "--format=terse", "json", "--format=json")


class CargoTest:
    name = "cargo test"
    source = "stdout"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        return program(argv) == "cargo" and argv[1:2] == ["test"] and not any(arg in _TERSE for arg in argv[2:])

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        before = list(argv[2:argv.index("--")] if "--" in argv else argv[2:])
        if "--no-fail-fast" in before:
            return list(argv)
        return [argv[0], "test", "--no-fail-fast", *argv[2:]]

    def select(self, argv: Sequence[str], test_id: str) -> list[str] | None:
        """The test's exact name after ``--`` (``--exact``)."""
        name = re.sub(r" #\d+$", "", test_id)
        if not re.fullmatch(r"[\w:]+", name):
            return None  # a doc test, or a name libtest's filter cannot give exactly
        return [*argv, *([] if "--" in argv else ["--"]), "--exact", name]

    def read(self, data: bytes, root: str = "") -> Run:
        run = Run(self.name)
        text = data.decode("utf-8", errors="replace")
        # Each binary prints its results, then its failures' sections: read one binary at a time.
        blocks = re.split(r"(?m)^running \d+ tests?$", text)[1:]
        run.reported = bool(blocks)
        for block in blocks:
            results: list[tuple[str, str]] = []
            sections: dict[str, list[str]] = {}
            current: str | None = None
            for line in block.splitlines():
                found = _LINE.match(line)
                header = _SECTION.match(line)
                if found and current is None:
                    status = {"ok": "passed", "FAILED": "failed"}.get(found.group(2), "skipped")
                    results.append((found.group(1), status))
                elif header:
                    current = header.group(1)
                    sections.setdefault(current, [])
                elif current is not None and (line == "failures:" or line.startswith("test result:")):
                    current = None
                elif current is not None:
                    parts = sections[current]
                    if sum(len(p) for p in parts) < _KEEP_CHARS:
                        parts.append(line)
            for name, status in results:
                run.add(name, status, None, "\n".join(sections.get(name, [])) if status == "failed" else "")
        return run


READER = CargoTest()
