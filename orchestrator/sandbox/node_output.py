"""Jest's, Vitest's and node --test's output without mesh's own tests (the twins of the project's).

A failing test is a block in these reporters' output: Jest's ``  ● suite › title`` and what
follows up to the next block or file line, node's ``✖ title (1ms)`` and the lines indented
under it (with the ``test at file:line`` line before it in the closing list of failures). The
blocks of mesh's tests are taken out, a file or suite that failed only by them reads as
passed, and the closing counts (Jest's ``Tests:`` and ``Test Suites:``, node's ``ℹ tests``,
``ℹ pass``, ``ℹ fail``) are put back to the project's own.

May import the standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["clean_jest", "clean_node_test", "clean_tap"]

_JEST_BLOCK = re.compile(r"^\s+● ")
_JEST_FILE = re.compile(r"^(FAIL|PASS)(\s+)(\S.*)$")
_JEST_COUNTS = re.compile(r"^(Tests|Test Suites):(\s+)(.*)$")
_NODE_FAIL = re.compile(r"^(\s*)✖ (.*?)(?: \([\d.]+m?s\))?$")
_NODE_COUNT = re.compile(r"^ℹ (tests|pass|fail|suites) (\d+)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def clean_jest(text: str, mine: re.Pattern[str], counts: Mapping[str, int], project_failed: bool) -> str:
    """Jest's (or Vitest's) ``text`` without the failure blocks of the tests ``mine`` matches;
    ``counts``: how many of mesh's tests failed and passed; ``project_failed``: whether any test
    of the project's own failed (else a ``FAIL`` file line reads ``PASS``)."""
    out: list[str] = []
    dropping = False
    flipped = 0
    for line in text.split("\n"):
        if _JEST_BLOCK.match(line):
            dropping = bool(mine.search(line))
        elif line and not line[0].isspace():
            dropping = False
        if dropping or mine.search(line):
            continue  # a block of mesh's test, or its line in a verbose list
        found = _JEST_FILE.match(line)
        if found and found.group(1) == "FAIL" and not project_failed:
            line, flipped = f"PASS{found.group(2)}{found.group(3)}", flipped + 1
        out.append(line)
    failed = counts.get("failed", 0) + counts.get("errors", 0)
    mesh_total = failed + counts.get("passed", 0)
    result = []
    for line in out:
        found = _JEST_COUNTS.match(line)
        if found:
            parts = dict((word, int(number)) for number, word in re.findall(r"(\d+) (\w+)", found.group(3)))
            if found.group(1) == "Tests":
                parts["failed"] = parts.get("failed", 0) - failed
                parts["passed"] = parts.get("passed", 0) - counts.get("passed", 0)
                parts["total"] = parts.get("total", 0) - mesh_total
            else:
                parts["failed"] = parts.get("failed", 0) - flipped
                parts["passed"] = parts.get("passed", 0) + flipped
            order = ["failed", "skipped", "todo", "passed", "total"]
            words = sorted(parts, key=lambda word: order.index(word) if word in order else len(order))
            line = f"{found.group(1)}:{found.group(2)}" + ", ".join(
                f"{parts[word]} {word}" for word in words if parts[word] > 0 or word == "total")
        result.append(line)
    return "\n".join(result)


def clean_node_test(text: str, mine: re.Pattern[str], counts: Mapping[str, int], project_failed: bool) -> str:
    """node --test's spec output without the blocks of the tests ``mine`` matches; ``counts``
    and ``project_failed`` as for ``clean_jest`` (a suite marked failed reads as passed)."""
    lines = text.split("\n")
    out: list[str] = []
    skip_under: int | None = None
    for index, line in enumerate(lines):
        if skip_under is not None:
            if not line.strip() or _indent(line) > skip_under:
                continue  # the block's lines, blank ones among them
            skip_under = None
        if line.strip() == "✖ failing tests:" and not project_failed:
            continue  # the closing list holds only mesh's tests
        found = _NODE_FAIL.match(line)
        if found and mine.search(found.group(2)):
            skip_under = len(found.group(1))
            if out and out[-1].startswith("test at "):
                out.pop()
            continue
        if found and not project_failed:
            line = f"{found.group(1)}▶ {found.group(2)}" + line[len(found.group(0)):]
        out.append(line)
    failed = counts.get("failed", 0) + counts.get("errors", 0)
    result = []
    for line in out:
        found = _NODE_COUNT.match(line)
        if found:
            value = int(found.group(2)) - {"tests": failed + counts.get("passed", 0), "fail": failed,
                                           "pass": counts.get("passed", 0)}.get(found.group(1), 0)
            line = f"ℹ {found.group(1)} {max(value, 0)}"
        result.append(line)
    return "\n".join(result)


_TAP_COUNT = re.compile(r"^# (tests|pass|fail)(\s+)(\d+)$")


def clean_tap(text: str, mine: re.Pattern[str], counts: Mapping[str, int]) -> str:
    """tape's TAP output without the assertions of the tests ``mine`` matches (from a test's
    ``# title`` line to the next), its closing ``# tests``, ``# pass`` and ``# fail`` counts put
    back to the project's own (``counts``: how many of mesh's tests failed and passed, each an
    assertion here)."""
    out: list[str] = []
    dropping = False
    dropped = {"ok": 0, "not ok": 0}
    for line in text.split("\n"):
        if line.startswith("# ") and not _TAP_COUNT.match(line):
            dropping = bool(mine.search(line))
        elif _TAP_COUNT.match(line):
            dropping = False
        if dropping:
            if line.startswith("not ok "):
                dropped["not ok"] += 1
            elif line.startswith("ok "):
                dropped["ok"] += 1
            continue
        found = _TAP_COUNT.match(line)
        if found:
            take = {"tests": dropped["ok"] + dropped["not ok"], "pass": dropped["ok"], "fail": dropped["not ok"]}
            left = int(found.group(3)) - take[found.group(1)]
            if found.group(1) == "fail" and left <= 0:
                continue
            line = f"# {found.group(1)}{found.group(2)}{max(left, 0)}"
        out.append(line)
    if dropped["not ok"] and not any(line.startswith("not ok ") for line in out) and "# ok" not in out:
        out.append("# ok")
    return "\n".join(out)
