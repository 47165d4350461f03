"""A failing validation as a review finding: what the revision cycle must fix.

The profile closes a task only on vote consensus, a passing validation, an approving review
and no open MUST_FIX finding. A reviewer may approve a change whose tests fail (it read the
diff, not the output); rather than block right there, mesh adds a deterministic ``MUST_FIX``
finding to that cycle's review (``finding_id`` ``VALIDATION``, stable across cycles, so it is
one sub-issue that is closed once validation passes), whose evidence is each failing
command's failing tests with their own messages (assertion, panic, expected/received), then
its output's tail (``roles.validation_text``); its location is where the first failure points. The revision cycle (plan, critique and vote, revision, validation,
review) then works on it like on any finding, within ``review_max_cycles``. The finding
comes from the stored proof, so a resumed run adds exactly the same one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from roles.parsing import ParseError, ParsedResponse

from roles.validation_text import failing_tests, failure_text, lost_tests

__all__ = ["NOT_ALLOWED", "VALIDATION_FINDING", "allowed_commands_check", "failure_location", "validation_finding",
           "with_validation_finding"]

VALIDATION_FINDING = "VALIDATION"
NOT_ALLOWED = "none of the validation_commands is admitted by the project's validation.allow"
_TAIL_CHARS = 1500
_EVIDENCE_CHARS = 6000
# Where a failure points: a traceback frame (``File "x.py", line 3``) or pytest's ``x.py:3:``.
_FRAME = re.compile(r'File "(?:/mesh/tree/|/mesh/source/)?([^"<>\n]+\.py)", line (\d+)')
_PYTEST_LINE = re.compile(r"^([\w./-]+\.py):(\d+):", re.M)
# Other runners' ``path:line``: a Rust panic (``src/lib.rs:9:22``), Go (``x_test.go:12:``), a
# JavaScript stack frame (``(test/add.test.js:4:38)``), relative to the tree (or under /mesh/tree/).
_SOURCE_LINE = re.compile(r"(?:^|[\s(])(?:/mesh/tree/)?((?:[\w.-]+/)*[\w.-]+\.(?:rs|go|js|mjs|cjs|ts|tsx|jsx|py)):(\d+)",
                          re.M)


def _location(output: str, *, first: bool = False) -> str | None:
    """The ``path:line`` a failure's text points at: a test's message points first (``first``),
    raw output last (a traceback's deepest frame)."""
    found = [(path, line) for path, line in _PYTEST_LINE.findall(output)]
    found += [(path, line) for path, line in _FRAME.findall(output)
              if not path.startswith("/") and "site-packages" not in path]
    if not found:
        found = [(path, line) for path, line in _SOURCE_LINE.findall(output)
                 if "node_modules/" not in path and not path.startswith(("node:", "internal/"))]
    found = [(path, line) for path, line in found if int(line) > 0]
    if found:
        path, line = found[0] if first and not _FRAME.search(output) else found[-1]
        return f"{path}:{line}"
    return None


def failure_location(output: str) -> str | None:
    """The ``path:line`` a failure's output points at (a traceback's deepest frame, a runner's
    ``path:line``), None when it names none."""
    return _location(output)


def _named(ids: list[str], limit: int = 3) -> str:
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _context(message: str) -> str:
    """The line of a failing test's message that says what failed: a Python traceback's last
    line, else the first line naming an assertion, an error or an expectation."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].startswith("Traceback"):
        return lines[-1]
    return next((line for line in lines if re.search(r"assert|error|expect|panicked|want|!==|==", line, re.I)
                 and not line.startswith("at ")), lines[0])


def validation_finding(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The MUST_FIX finding for the failing commands of ``results`` (a proof's results)."""
    failed = [r for r in results if not r.get("passed") and not r.get("rejected")]
    if not failed:
        return {"finding_id": VALIDATION_FINDING, "location": "validation:1", "severity": "High",
                "label": "MUST_FIX", "issue": "no validation command ran",
                "evidence": "none of the validation commands was allowed or run",
                "minimal_fix": "give validation_commands in the forms validation.allow admits",
                "code_context": "(none)"}
    first = failed[0]
    why = first.get("reason") or (f"limit {first['limit']}" if first.get("limit") else f"exit {first.get('exit_code')}")
    share = max(_TAIL_CHARS, _EVIDENCE_CHARS // len(failed))
    evidence = "\n\n".join(f"$ {r.get('command')}  ({r.get('reason') or 'exit ' + str(r.get('exit_code'))})\n"
                           + (failure_text(r, max_chars=share) or "(no output)") for r in failed)
    tests = [test for r in failed for test in [*lost_tests(r), *failing_tests(r)]]
    names = "; ".join(f"{label}: {_named([t['id'] for t in group])}" for label, group in (
        ("lost against the base", [t for r in failed for t in lost_tests(r)]),
        ("failing", [t for r in failed for t in failing_tests(r)])) if group)
    location = (next((found for test in tests if (found := _location(test["message"], first=True))), None)
                or _location(evidence) or "validation:1")
    context = next((line for test in tests if (line := _context(test["message"]))), "") \
        or (evidence.splitlines()[-1] if evidence.strip() else "(no output)")
    return {"finding_id": VALIDATION_FINDING, "location": location, "severity": "High",
            "label": "MUST_FIX",
            "issue": f"validation failed: `{first.get('command')}` ({why})" + (f"; {names}" if names else ""),
            "evidence": evidence[:_EVIDENCE_CHARS],
            "minimal_fix": "change the code (or the tests, if they are wrong) so that every validation command passes",
            "code_context": context}


def with_validation_finding(review: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``review`` with the validation finding added (replacing one of the same id), whatever
    its decision said: changes are requested."""
    findings = [f for f in review.get("findings") or [] if f.get("finding_id") != VALIDATION_FINDING]
    return {**review, "decision": "request_changes", "findings": [*findings, validation_finding(results)]}


def allowed_commands_check(allow: Sequence[str], required: bool):
    """A check of a synthesis or revision: when the project requires validation, at least one
    of its validation commands must be of a form ``allow`` admits. A miss is a parse error,
    so the synthesizer gets the profile's one strict follow-up naming the admitted forms
    (instead of paid rounds ending in ``missing_validation_requirements``)."""
    from orchestrator.sandbox.allowlist import explain, is_allowed

    def check(parsed: ParsedResponse) -> None:
        commands = list(getattr(parsed.artifact, "validation_commands", None) or [])
        patch = str(getattr(parsed.artifact, "patch", "") or "")
        if not required or not allow or not commands or patch.startswith("NO_DIFF:"):
            return
        if not any(is_allowed(command, allow) for command in commands):
            forms = "; ".join(f"`{entry}`" for entry in allow)
            why = "; ".join(f"`{command}`: {explain(command, allow)}" for command in commands[:3])
            raise ParseError("invalid_shape", f"{NOT_ALLOWED} ({why}); write them in one of these forms: {forms}")

    return check
