"""``mesh ci-close``: close approved tasks from CI, on the evidence of their checkpoints.

A task is looked at when it is ``in_progress`` in scope and either waits on an
open gate of await type ``ci`` or its latest run's latest review approves. Its
evidence is read from the ``[orch:*]`` payloads of that run (comments alone,
so it works on a tracker imported from JSONL in a CI checkout):

- vote consensus: the latest vote round reached its threshold;
- validation pass: the latest ``[orch:proof]`` passed (and, with
  ``--revalidate``, the allowed commands pass again in this checkout);
- review approve: the latest ``[orch:review]`` approves;
- no open MUST_FIX findings: none in that review, and no open finding issue
  labelled ``label:MUST_FIX``.

With ``--require-signed`` every checkpoint used as evidence must carry a valid
HMAC signature under ``MESH_SIGNING_KEY``; a hand-written approval does not
close anything. The gate is resolved and the task closed in one transaction,
with a compare-and-set on ``in_progress``, so racing closers close it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracker.errors import ConflictError
from tracker.store import Tracker

from .checkpoint import Checkpoint, signing_key, verify_payload
from .config import MeshConfig
from .engine import CLOSE_REASON, load_checkpoints
from .scope import Scope

__all__ = ["CloseCheck", "ci_close", "check_task"]


@dataclass
class CloseCheck:
    """What ci-close found and did for one task."""

    task_id: str
    title: str
    run_id: str | None
    checks: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    result: str = "refused"  # closed | already_closed | refused
    gate: str | None = None
    validation: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result in ("closed", "already_closed")

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "title": self.title, "run_id": self.run_id, "result": self.result,
                "checks": self.checks, "problems": self.problems, "gate": self.gate, "validation": self.validation}


def _ci_gates(tracker: Tracker, task_id: str) -> list[dict]:
    return [b for b in tracker.blockers(task_id) if b.get("issue_type") == "gate" and b.get("await_type") == "ci"]


def _latest_run(checkpoints: Sequence[Checkpoint], gate: dict | None) -> str | None:
    if gate and gate.get("await_id"):
        return gate["await_id"]
    runs = [cp.run_id for cp in checkpoints if cp.run_id]
    return runs[-1] if runs else None


def check_task(tracker: Tracker, task: dict, *, require_signed: bool, key: bytes | None) -> CloseCheck:
    """The evidence check of one task (no mutation)."""
    gates = _ci_gates(tracker, task["id"])
    gate = gates[0] if gates else None
    checkpoints = load_checkpoints(tracker, task["id"])
    run_id = _latest_run(checkpoints, gate)
    check = CloseCheck(task_id=task["id"], title=task["title"], run_id=run_id, gate=gate["id"] if gate else None)
    # Comments that look like checkpoints but belong to no run (hand-written) are evidence too,
    # so that a forged approval is seen and refused rather than silently skipped.
    mine = [cp for cp in checkpoints if cp.run_id == run_id or cp.run_id is None]

    def latest(kind: str) -> Checkpoint | None:
        found = [cp for cp in mine if cp.kind == kind]
        return found[-1] if found else None

    def trusted(cp: Checkpoint | None, what: str) -> bool:
        if cp is None:
            check.problems.append(f"no {what} checkpoint")
            return False
        if cp.payload.get("task_id") not in (None, task["id"]):
            check.problems.append(f"{what} checkpoint belongs to {cp.payload.get('task_id')}")
            return False
        if require_signed:
            if key is None:
                check.problems.append("--require-signed needs MESH_SIGNING_KEY")
                return False
            if "sig" not in cp.payload:
                check.problems.append(f"{what} checkpoint is unsigned")
                return False
            if not verify_payload(cp.payload, key):
                check.problems.append(f"{what} checkpoint has a wrong signature")
                return False
        if not cp.payload.get("artifact"):
            check.problems.append(f"{what} checkpoint carries no artifact payload")
            return False
        return True

    review, proof = latest("review"), latest("proof")
    votes = [cp for cp in mine if cp.kind == "vote"]
    last_vote = votes[-1] if votes else None
    vote_ok = trusted(last_vote, "vote")
    if vote_ok:
        # Every vote of the latest vote round must be trusted, not only the last one.
        phase = last_vote.payload.get("step", [None, None, None])[2]
        round_votes = [cp for cp in votes if cp.payload.get("step", [None, None, None])[2] == phase]
        vote_ok = all(trusted(cp, "vote") for cp in round_votes)
        tally = last_vote.payload.get("tally") or {}
        needed = last_vote.payload.get("needed")
        agree = sum(1 for cp in round_votes if (cp.payload.get("artifact") or {}).get("vote") == "agree")
        vote_ok = vote_ok and needed is not None and agree >= needed and tally.get("agree") == agree
    check.checks["vote_consensus"] = bool(vote_ok)
    proof_ok = trusted(proof, "proof") and bool(proof.payload["artifact"].get("passed"))
    check.checks["validation_pass"] = proof_ok
    review_ok = trusted(review, "review") and review.payload["artifact"].get("decision") == "approve"
    check.checks["review_decision"] = "approve" if review_ok else (
        (review.payload.get("artifact") or {}).get("decision") if review else None)
    must_fix = 0
    if review is not None:
        must_fix = sum(1 for f in (review.payload.get("artifact") or {}).get("findings", [])
                       if f.get("label") == "MUST_FIX")
    open_finding_issues = [
        i["id"] for i in tracker.list(labels=["label:MUST_FIX"], include_closed=False)
        if (i.get("metadata") or {}).get("task_id") == task["id"]
    ]
    must_fix += len(open_finding_issues)
    check.checks["open_must_fix_findings"] = must_fix
    if not vote_ok:
        check.problems.append("no vote consensus in the latest vote round")
    if not proof_ok and proof is not None:
        check.problems.append("latest validation did not pass")
    if review is not None and not review_ok:
        check.problems.append(f"latest review is not an approval ({check.checks['review_decision']})")
    if must_fix:
        check.problems.append(f"{must_fix} open MUST_FIX finding(s)")
    return check


def _revalidate(check: CloseCheck, tracker: Tracker, config: MeshConfig, repo: Path) -> bool:
    from .validation import run_validation

    checkpoints = [cp for cp in load_checkpoints(tracker, check.task_id) if cp.run_id == check.run_id]
    source = [cp for cp in checkpoints if cp.kind in ("synthesis", "revision")]
    commands = list((source[-1].payload.get("artifact") or {}).get("validation_commands", [])) if source else []
    cfg = config.validation
    results = run_validation(commands, cwd=repo, allow=cfg.allow, timeout_s=cfg.timeout_s,
                             max_output_bytes=cfg.max_output_bytes)
    check.validation = [{k: r.to_dict()[k] for k in ("command", "exit_code", "passed", "rejected")} for r in results]
    ran = [r for r in results if not r.rejected]
    ok = bool(ran) and all(r.passed for r in ran)
    check.checks["revalidation_pass"] = ok
    if not ok:
        check.problems.append("revalidation in this checkout failed" if ran else "no allowed command to revalidate")
    return ok


def candidates(tracker: Tracker, scope: Scope) -> list[dict]:
    """In-progress scoped tasks waiting on a CI gate or holding an approval."""
    labels = [scope.plan_label] if scope.plan_label else []
    found = []
    for task in tracker.list(status="in_progress", labels=labels, issue_type="task", parent=scope.parent_epic,
                             descendants=True):
        if _ci_gates(tracker, task["id"]):
            found.append(task)
            continue
        reviews = [cp for cp in load_checkpoints(tracker, task["id"]) if cp.kind == "review"]
        if reviews and (reviews[-1].payload.get("artifact") or {}).get("decision") == "approve":
            found.append(task)
    return found


def ci_close(tracker: Tracker, config: MeshConfig, scope: Scope, *, repo: Path, revalidate: bool = False,
             require_signed: bool = False) -> list[CloseCheck]:
    """Check and close every eligible task in scope; returns what happened to each."""
    key = signing_key()
    out = []
    for task in candidates(tracker, scope):
        check = check_task(tracker, task, require_signed=require_signed, key=key)
        evidence = (check.checks["vote_consensus"] and check.checks["validation_pass"]
                    and check.checks["review_decision"] == "approve" and check.checks["open_must_fix_findings"] == 0
                    and not check.problems)
        if evidence and revalidate:
            evidence = _revalidate(check, tracker, config, repo)
        if evidence:
            try:
                with tracker.transaction():
                    if check.gate:
                        tracker.gate_resolve(check.gate, reason="ci-close: evidence verified")
                    tracker.close_issue(task["id"], reason=CLOSE_REASON, expect_status=("in_progress",))
                check.result = "closed"
            except ConflictError as exc:
                if tracker.get(task["id"])["status"] == "closed":
                    check.result = "already_closed"
                else:
                    check.problems.append(str(exc))
        out.append(check)
    return out
