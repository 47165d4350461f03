"""What a person or a worker reads of a failed validation command: its failing tests first,
each with its own message, then the last lines of its raw output.

A result is a stored dict (``ValidationResult.to_dict``: tracker text, so re-stripped of
terminal sequences and re-scrubbed here): ``failures`` lists the failing tests the runner
reported (id, status, message), ``stdout_tail``/``stderr_tail`` the ends of its output. The
failing tests are where a test runner wrote them (stdout or stderr, a report file), so they
come first; the output's tail follows, for what happened outside any test.

May import the standard library and ``redact`` only (``roles`` is below the orchestrator).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from redact import scrub
from redact.controls import strip_terminal

__all__ = ["failing_tests", "failure_lines", "failure_text", "lost_tests", "output_lines", "verdict_notes"]

# Lines of a failing test's message shown (its head: what failed, with its values).
_MESSAGE_LINES = 16
_LINE_CHARS = 300
# mesh's own verdict lines (``mesh: ...``) are kept longer: they name the tests that were lost.
_NOTE_CHARS = 1500
_LOST = (("broken", "passed on the base, fails now"), ("gone", "passed on the base, gone now"),
         ("skipped", "passed on the base, skipped now"), ("new_failures", "new, fails"))


def _clean(text: str) -> str:
    return scrub(strip_terminal(text))


def failing_tests(result: Mapping[str, Any]) -> list[dict[str, str]]:
    """The failing tests a stored result names: ``{"id", "status", "message"}`` each, cleaned."""
    kept = result.get("failures")
    out = []
    for entry in kept if isinstance(kept, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
            message = entry.get("message") if isinstance(entry.get("message"), str) else ""
            out.append({"id": _clean(entry["id"])[:_LINE_CHARS], "status": str(entry.get("status") or "failed"),
                        "message": _clean(message)})
    return out


def verdict_notes(result: Mapping[str, Any]) -> list[str]:
    """mesh's own lines about a result (``mesh: ...``: why it failed or passed as it did: a
    test lost against the base, a flaky test, a failure the base shares), cleaned."""
    text = result.get("stderr_tail") if isinstance(result.get("stderr_tail"), str) else ""
    return [line.rstrip()[:_NOTE_CHARS] for line in _clean(text).splitlines() if line.startswith("mesh: ")]


def lost_tests(result: Mapping[str, Any]) -> list[dict[str, str]]:
    """The tests a stored result lost against its base (``lost``), as ``{"id", "status"}``."""
    lost = result.get("lost") if isinstance(result.get("lost"), Mapping) else {}
    out = []
    for kind, status in _LOST:
        ids = lost.get(kind)
        for test in ids if isinstance(ids, list) else ():
            if isinstance(test, str):
                out.append({"id": _clean(test)[:_LINE_CHARS], "status": status, "message": ""})
    return out


# Lines that say a test failed, in the output of a runner mesh does not read (TAP's ``not ok``,
# ``FAIL``/``FAILED``, an assertion or error, a panic, a cross mark), each with what it indents.
_FAILURE_LINE = re.compile(r"^\s*(not ok\b|FAIL(ED)?\b|--- FAIL|✖|✗|×)|AssertionError|Error:|panicked at|assert")
_FAILURE_LINES = 40


def failure_lines(result: Mapping[str, Any]) -> list[str]:
    """For a failed result whose runner mesh does not read (no ``tests``): the lines of its output
    that look like a test failing, each with the lines it indents (up to ``_FAILURE_LINES`` in all,
    the first ones: where a runner reports its first failure), so a model sees what failed even
    where the output ends in a summary or a coverage table."""
    if result.get("tests") or result.get("passed"):
        return []
    text = "\n".join(part for part in (result.get("stdout_tail"), result.get("stderr_tail"))
                     if isinstance(part, str) and part)
    lines = [line.rstrip() for line in _clean(text).splitlines()]
    out: list[str] = []
    index = 0
    while index < len(lines) and len(out) < _FAILURE_LINES:
        line = lines[index]
        if line.strip() and not line.startswith("mesh: ") and _FAILURE_LINE.search(line):
            depth = len(line) - len(line.lstrip())
            out.append(line[:_LINE_CHARS])
            index += 1
            while index < len(lines) and len(out) < _FAILURE_LINES and lines[index].strip() and \
                    len(lines[index]) - len(lines[index].lstrip()) > depth:
                out.append(lines[index][:_LINE_CHARS])
                index += 1
            continue
        index += 1
    return out


def output_lines(result: Mapping[str, Any], lines: int) -> list[str]:
    """The last ``lines`` non-blank lines of a result's output (stdout, then stderr), cleaned;
    mesh's own verdict lines left out (``verdict_notes`` shows them first)."""
    text = "\n".join(part for part in (result.get("stdout_tail"), result.get("stderr_tail"))
                     if isinstance(part, str) and part)
    kept = [line.rstrip() for line in _clean(text).splitlines() if line.strip() and not line.startswith("mesh: ")]
    return [line[:_LINE_CHARS] for line in kept[-lines:]]


def _counts_phrase(result: Mapping[str, Any], shown: int) -> str:
    tests = result.get("tests")
    failing = (tests.get("failed", 0) or 0) + (tests.get("errors", 0) or 0) if isinstance(tests, Mapping) else shown
    more = f" (the first {shown} of {failing})" if isinstance(failing, int) and failing > shown else ""
    return f"Failing tests{more}:"


def failure_text(result: Mapping[str, Any], *, tail_lines: int = 20, max_chars: int = 6000) -> str:
    """mesh's verdict on ``result`` (its ``mesh:`` lines), the tests it lost against the base, its
    failing tests with their messages, then the last ``tail_lines`` lines of its output, within
    ``max_chars`` (the verdict and the tests first: the output is what gives way)."""
    tests = failing_tests(result)
    parts: list[str] = list(verdict_notes(result))
    lost = [test for test in lost_tests(result) if test["id"] not in {t["id"] for t in tests}]
    if lost:
        parts.append("Tests lost against the base:")
        parts += [f"- {test['id']}: {test['status']}" for test in lost]
    found = failure_lines(result)
    if found:
        parts.append("Lines that look like failures (mesh does not read this command's test runner):")
        parts += found
    if tests:
        parts.append(_counts_phrase(result, len(tests)))
        for test in tests:
            lines = [line[:_LINE_CHARS] for line in test["message"].splitlines()[:_MESSAGE_LINES]]
            parts.append(f"- {test['id']}: {test['status']}")
            parts += [f"    {line}" for line in lines]
    tail = output_lines(result, tail_lines)
    budget = max_chars - sum(len(p) + 1 for p in parts)
    if tail and budget > 200:
        header = "Last lines of output:" if parts else ""
        kept: list[str] = []
        for line in reversed(tail):
            if budget - len(line) - 1 < len(header) + 1:
                break
            kept.insert(0, line)
            budget -= len(line) + 1
        parts += [*([header] if header else []), *kept]
    text = "\n".join(parts)
    return text[:max_chars] if len(text) > max_chars else text
