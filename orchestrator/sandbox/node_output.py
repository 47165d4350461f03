"""Jest's, Vitest's and node --test's output without mesh's own tests (the twins of the project's).

A failing test is a block in these reporters' output: Jest's ``  ● suite › title`` and what
follows up to the next block or file line, Vitest's `` FAIL  file > title`` up to its
``⎯⎯⎯[i/n]⎯`` rule (and its ``× title`` line, with the ``→ message`` under it), node's ``✖ title (1ms)`` and the lines indented
under it (with the ``test at file:line`` line before it in the closing list of failures). The
blocks of mesh's tests are taken out, a file or suite that failed only by them reads as
passed, and the closing counts (Jest's ``Tests:`` and ``Test Suites:``, node's ``ℹ tests``,
``ℹ pass``, ``ℹ fail``) are put back to the project's own.

May import the standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["clean_jest", "clean_node_test", "clean_tap", "clean_vitest"]

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


_VITEST_RULE = re.compile(r"^⎯+\[(\d+)/(\d+)\]⎯+$")
_VITEST_HEADER = re.compile(r"^(⎯+ Failed Tests )(\d+)( ⎯+)$")
_VITEST_FILE = re.compile(r"^(\s*)[❯✓×] (\S.*?) \((\d+) tests?(?: \| (\d+) failed)?(?: \| (\d+) skipped)?\)(.*)$")
_VITEST_TESTS = re.compile(r"^(\s+Tests\s+)(.*?)\s*\((\d+)\)$")
_VITEST_FILES = re.compile(r"^(\s*Test Files\s+)(.*?)\s*\((\d+)\)$")


def _vitest_terms(text: str) -> dict[str, int]:
    return {word: int(number) for number, word in re.findall(r"(\d+) (failed|passed|skipped|todo)", text)}


def _vitest_line(head: str, terms: Mapping[str, int]) -> str:
    total = sum(terms.values())
    shown = " | ".join(f"{terms[word]} {word}" for word in ("failed", "passed", "skipped", "todo") if terms.get(word))
    return f"{head}{shown or '0 passed'} ({total})"


def clean_vitest(text: str, mine: re.Pattern[str], counts: Mapping[str, int]) -> str:
    """Vitest's default reporter ``text`` without mesh's tests (``mine``): their ``×``/``✓`` lines
    and the messages under them, their blocks in "Failed Tests" (the rest renumbered), and the
    file lines and closing counts put back to the project's own (``counts``: how many of mesh's
    failed and passed)."""
    lines = text.split("\n")
    # The "Failed Tests" section: blocks ended by their [i/n] rule.
    out: list[str] = []
    block: list[str] = []
    kept_blocks: list[list[str]] = []
    header_at = None
    for line in lines:
        if _VITEST_HEADER.match(line):
            header_at = len(out)
            out.append(line)
            continue
        if header_at is None:
            out.append(line)
            continue
        block.append(line)
        if _VITEST_RULE.match(line):
            if not any(mine.search(row) for row in block if row.lstrip().startswith("FAIL")):
                kept_blocks.append(block)
            block = []
    if header_at is not None:
        tail = block
        total = len(kept_blocks)
        for index, kept in enumerate(kept_blocks, 1):
            kept[-1] = re.sub(r"\[\d+/\d+\]", f"[{index}/{total}]", kept[-1])
        if total:
            out[header_at] = _VITEST_HEADER.sub(lambda m: f"{m.group(1)}{total}{m.group(3)}", out[header_at])
            out += [row for kept in kept_blocks for row in kept]
        else:
            del out[header_at]
        out += tail
    # The per-file lists and the counts.
    cleaned: list[str] = []
    dropping_under: int | None = None
    # Of each file line (by its place in ``cleaned``): mesh's tests taken from under it.
    removed: dict[int, dict[str, int]] = {}
    file_at: int | None = None
    for line in out:
        if dropping_under is not None:
            if line.strip() and _indent(line) > dropping_under:
                continue
            dropping_under = None
        if _VITEST_FILE.match(line):
            file_at = len(cleaned)
        mark = re.match(r"^\s*([×✓↓]) ", line)
        if mine.search(line) and mark:
            dropping_under = _indent(line)
            if file_at is not None:
                kind = {"×": "failed", "✓": "passed", "↓": "skipped"}[mark.group(1)]
                removed.setdefault(file_at, {}).setdefault(kind, 0)
                removed[file_at][kind] += 1
            continue
        cleaned.append(line)
    result: list[str] = []
    files = {"failed": 0, "passed": 0}
    passed_under: int | None = None
    for index, line in enumerate(cleaned):
        if passed_under is not None:
            if line.strip() and _indent(line) > passed_under and re.match(r"^\s*[✓↓] ", line):
                continue  # a file that passes lists no tests (as Vitest prints it)
            passed_under = None
        found = _VITEST_FILE.match(line)
        if found is not None:
            tests, failed = int(found.group(3)), int(found.group(4) or 0)
            skipped = found.group(5)
            taken = removed.get(index, {})
            failed_now = max(0, failed - taken.get("failed", 0))
            tests_now = max(0, tests - sum(taken.values()))
            mark = "❯" if failed_now else "✓"
            parts = [f"{tests_now} test{'s' if tests_now != 1 else ''}"] + \
                ([f"{failed_now} failed"] if failed_now else []) + ([f"{skipped} skipped"] if skipped else [])
            files["failed" if failed_now else "passed"] += 1
            passed_under = None if failed_now or not failed else _indent(line)
            line = f"{found.group(1)}{mark} {found.group(2)} ({' | '.join(parts)}){found.group(6)}"
        elif (match := _VITEST_TESTS.match(line)) is not None:
            terms = _vitest_terms(match.group(2))
            terms["failed"] = max(0, terms.get("failed", 0) - counts.get("failed", 0))
            terms["passed"] = max(0, terms.get("passed", 0) - counts.get("passed", 0))
            line = _vitest_line(match.group(1), terms)
        elif (match := _VITEST_FILES.match(line)) is not None and sum(files.values()):
            line = _vitest_line(match.group(1), {**_vitest_terms(match.group(2)), **files})
        result.append(line)
    return "\n".join(result)
