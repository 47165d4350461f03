"""A failing validation as a review finding: what the revision cycle must fix.

The profile closes a task only on vote consensus, a passing validation, an approving review
and no open MUST_FIX finding. A reviewer may approve a change whose tests fail (it read the
diff, not the output); rather than block right there, mesh adds a deterministic ``MUST_FIX``
finding to that cycle's review (``finding_id`` ``VALIDATION``, stable across cycles, so it is
one sub-issue that is closed once validation passes), whose evidence is the failing
commands' output tail. The revision cycle (plan, critique and vote, revision, validation,
review) then works on it like on any finding, within ``review_max_cycles``. The finding
comes from the stored proof, so a resumed run adds exactly the same one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from roles.parsing import ParseError, ParsedResponse

from redact import scrub
from redact.controls import strip_terminal

__all__ = ["NOT_ALLOWED", "VALIDATION_FINDING", "allowed_commands_check", "validation_finding",
           "with_validation_finding"]

VALIDATION_FINDING = "VALIDATION"
NOT_ALLOWED = "none of the validation_commands is admitted by the project's validation.allow"
_TAIL_CHARS = 1500
# Where a failure points: a traceback frame (``File "x.py", line 3``) or pytest's ``x.py:3:``.
_FRAME = re.compile(r'File "(?:/mesh/tree/|/mesh/source/)?([^"<>\n]+\.py)", line (\d+)')
_PYTEST_LINE = re.compile(r"^([\w./-]+\.py):(\d+):", re.M)


def _tail(result: Mapping[str, Any]) -> str:
    text = "\n".join(part for part in (result.get("stdout_tail"), result.get("stderr_tail")) if part)
    text = scrub(strip_terminal(text)).strip()
    return text[-_TAIL_CHARS:] if text else "(no output)"


def _location(output: str) -> str:
    found = [(path, line) for path, line in _PYTEST_LINE.findall(output)]
    found += [(path, line) for path, line in _FRAME.findall(output)
              if not path.startswith("/") and "site-packages" not in path]
    if found:
        path, line = found[-1]
        if int(line) > 0:
            return f"{path}:{line}"
    return "validation:1"


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
    evidence = "\n\n".join(f"$ {r.get('command')}  ({r.get('reason') or 'exit ' + str(r.get('exit_code'))})\n{_tail(r)}"
                           for r in failed)
    return {"finding_id": VALIDATION_FINDING, "location": _location(evidence), "severity": "High",
            "label": "MUST_FIX", "issue": f"validation failed: `{first.get('command')}` ({why})",
            "evidence": evidence[-4 * _TAIL_CHARS:],
            "minimal_fix": "change the code (or the tests, if they are wrong) so that every validation command passes",
            "code_context": evidence.splitlines()[-1] if evidence.strip() else "(no output)"}


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
