"""Lines of a patch that reach into the test machinery, as the review's MUST_FIX findings.

``orchestrator.worktree.tamper`` finds them (its table of rules); the review gate adds one
MUST_FIX finding per flagged line to each cycle's review when a worker reviews, whatever the
reviewer decided, so a worker can never approve the run while the lines are there: the
revision cycle must take them out, else the run ends ``review_not_approved`` naming them. The
ids are stable across cycles (rule, path, line text), so a finding is one sub-issue, closed
once the line is gone. A person's review (``mesh review``) is shown the same lines in the
review request and decides: only a person can approve such a patch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.worktree.tamper import Tamper

__all__ = ["TAMPER_PREFIX", "tamper_finding", "with_tamper_findings"]

TAMPER_PREFIX = "TAMPER-"


def tamper_finding(found: Tamper) -> dict[str, Any]:
    """The MUST_FIX finding of one flagged line."""
    digest = hashlib.sha256(f"{found.rule}\0{found.path}\0{found.text}".encode()).hexdigest()[:8]
    return {"finding_id": f"{TAMPER_PREFIX}{found.rule}-{digest}", "location": found.location, "severity": "High",
            "label": "MUST_FIX", "issue": f"suspected forgery of the test verdict ({found.rule}): the patch {found.what}",
            "evidence": f"{found.location}: {found.text}\n{found.why}",
            "minimal_fix": "take it out: code under test may not reach into the test machinery (only a person's review,"
                           " mesh review, can approve such a change)",
            "code_context": found.text or "(empty line)"}


def with_tamper_findings(review: Mapping[str, Any], found: Sequence[Tamper]) -> dict[str, Any]:
    """``review`` with a MUST_FIX finding per flagged line (replacing earlier ones of the same
    ids): changes are requested."""
    findings = [tamper_finding(item) for item in found]
    ids = {f["finding_id"] for f in findings}
    kept = [f for f in review.get("findings") or [] if f.get("finding_id") not in ids]
    return {**review, "decision": "request_changes", "findings": [*kept, *findings]}
