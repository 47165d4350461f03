"""``mesh ci-close``: close approved tasks from CI, on the evidence of their signed run heads.

A task is looked at when it is ``in_progress`` in scope and either waits on an open gate
of await type ``ci`` or holds a run head or an approving review. Its evidence is the
latest ``[orch:run-head]`` of the task (orchestrator.protocol.runhead), chosen by the signed
``(attempt, run_id)`` and never by gate fields (``await_id``), comment order or headers.
The task is closed only when:

- that run head verifies (with ``MESH_SIGNING_KEY`` set, a wrong or missing signature is
  refused whether or not ``--require-signed`` is given; its header kind must equal its
  signed kind), and with a key no other checkpoint of that run, and no checkpoint that
  claims no run, fails to verify;
- no run of the task started after it without ending (a trusted checkpoint of a run
  with no run head, after it);
- its decision is approve, with vote consensus, a passing validation and no open
  MUST_FIX finding (signed findings, and no open ``label:MUST_FIX`` finding issue);
- every checkpoint digest it lists matches a comment of that run present on the task;
- the checkout (``--repo``, default ``.``) holds the approved tree (orchestrator.landing.binding):
  its HEAD tree is the signed tree, or HEAD contains the signed commit and its tree is an
  approved tree (this run's, or that of a later approved landing in scope on top of it) up
  to the tracker export under ``.beads/``, and no later commit changed the run's files;
- with ``--revalidate``, the signed validation commands (and only those) pass again in
  the sandbox on the checkout's HEAD commit.

Its configuration (``validation.*``, ``tracker.url``) comes from CI's own ``--config`` file or
from the protected branch (orchestrator.landing.ci_config), never from the branch under review.

Without a key nothing can be verified: unsigned run heads are accepted, the commit
binding still applies. The gates are resolved and the task closed in one transaction,
with a compare-and-set on ``in_progress``, so racing closers close it once.
"""

from __future__ import annotations

import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracker.errors import ConflictError
from tracker.store import Tracker

from orchestrator.protocol.supersede import close_superseded
from orchestrator.protocol.checkpoint import checkpoint_problem, signing_key
from orchestrator.config import MeshConfig
from orchestrator.protocol.outcomes import CLOSE_REASON
from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.landing.binding import commit_binding
from orchestrator.protocol.runhead import RUN_HEAD, comment_digest, git_checkout_root, headless_runs_after, run_order, trusted_run_heads
from orchestrator.protocol.scope import Scope

__all__ = ["CloseCheck", "CiCloseError", "ci_close", "check_task", "candidates"]


class CiCloseError(Exception):
    """ci-close cannot look at any task (no git checkout to close for)."""


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
    gates: list[str] = field(default_factory=list)
    # Typed refusals a caller can branch on (the binding's code: tree_differs, ...).
    reasons: list[str] = field(default_factory=list)
    artifact: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.result in ("closed", "already_closed")

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "title": self.title, "run_id": self.run_id, "result": self.result,
                "checks": self.checks, "problems": self.problems, "reasons": self.reasons, "gate": self.gate,
                "validation": self.validation}


def _ci_gates(tracker: Tracker, task_id: str) -> list[dict]:
    return [b for b in tracker.blockers(task_id) if b.get("issue_type") == "gate" and b.get("await_type") == "ci"]


def check_task(tracker: Tracker, task: dict, *, require_signed: bool, key: bytes | None,
               repo: Path, vouched: Collection[str] = ()) -> CloseCheck:
    """The evidence check of one task against the checkout ``repo`` (no mutation).

    ``vouched``: the commits other approving run heads of the scope sign (``approved_commits``).
    """
    task_id = task["id"]
    gates = _ci_gates(tracker, task_id)
    check = CloseCheck(task_id=task_id, title=task["title"], run_id=None, gate=gates[0]["id"] if gates else None,
                       gates=[g["id"] for g in gates])
    check.checks = {"vote_consensus": False, "validation_pass": False, "review_decision": None,
                    "open_must_fix_findings": 0, "commit_binding": None}
    if require_signed and key is None:
        check.problems.append("--require-signed needs MESH_SIGNING_KEY")
        return check
    checkpoints = load_checkpoints(tracker, task_id)
    heads, bad_heads = trusted_run_heads(checkpoints, key, task_id)
    check.problems.extend(bad_heads)
    if not heads:
        check.problems.append("no trusted run head")
        return check
    latest = max(heads, key=run_order)
    run_id = latest.run_id
    check.run_id = run_id
    art = check.artifact = latest.payload["artifact"]
    if art.get("run_id") != run_id or art.get("task_id") != task_id:
        check.problems.append(f"comment {latest.comment_id}: run head names another run or task")
        return check
    for later in headless_runs_after(checkpoints, key, task_id, latest):
        check.problems.append(f"run {later} started after {run_id} and has not ended (no run head)")
    if key is not None:
        # A forged comment in the approved run (or claiming no run) is refused, not skipped.
        for cp in checkpoints:
            if cp.kind != RUN_HEAD and cp.run_id in (run_id, None):
                why = checkpoint_problem(cp, key, task_id=task_id)
                if why:
                    check.problems.append(why)
    present = {comment_digest(c["text"]) for c in tracker.comments(task_id)
               if any(cp.comment_id == c["id"] and cp.run_id == run_id for cp in checkpoints)}
    listed = art.get("checkpoints")
    if not isinstance(listed, list) or not listed:
        check.problems.append("the run head lists no checkpoint")
    else:
        missing = [d for d in listed if d not in present]
        if missing:
            check.problems.append(f"{len(missing)} checkpoint(s) listed by the run head are missing or altered")
    conditions = art.get("conditions") if isinstance(art.get("conditions"), dict) else {}
    validation = art.get("validation") if isinstance(art.get("validation"), dict) else {}
    findings = [f for f in art.get("findings") or [] if isinstance(f, dict)]
    check.checks["vote_consensus"] = conditions.get("vote_consensus") is True
    check.checks["validation_pass"] = validation.get("passed") is True
    check.checks["review_decision"] = art.get("decision")
    must_fix = {f.get("issue") for f in findings if f.get("label") == "MUST_FIX" and f.get("status") != "closed"}
    # Tracker state is unsigned: it can only add refusals, never remove one.
    must_fix |= {i["id"] for i in tracker.list(labels=["label:MUST_FIX"], include_closed=False)
                 if (i.get("metadata") or {}).get("task_id") == task_id}
    check.checks["open_must_fix_findings"] = len(must_fix)
    if not check.checks["vote_consensus"]:
        check.problems.append("no vote consensus in the approved run")
    if not check.checks["validation_pass"]:
        check.problems.append("latest validation did not pass")
    if art.get("decision") != "approve":
        check.problems.append(f"latest run is not an approval ({art.get('outcome')}, decision {art.get('decision')})")
    if must_fix:
        check.problems.append(f"{len(must_fix)} open MUST_FIX finding(s)")
    binding = commit_binding(repo, art, vouched)
    check.checks["commit_binding"] = binding.how
    if binding.code:
        check.problems.append(binding.why or binding.code)
        check.reasons.append(binding.code)
    return check


def approved_commits(tracker: Tracker, scope: Scope, key: bytes | None) -> set[str]:
    """The commits (reviewed and landed) that the latest trusted run head of each task in
    scope, in progress or closed, signs as approved: landings a checkout may hold on top
    of the task being closed."""
    labels = [scope.plan_label] if scope.plan_label else []
    found: set[str] = set()
    for task in tracker.list(status=["in_progress", "closed"], labels=labels, issue_type="task",
                             parent=scope.parent_epic, descendants=True):
        checkpoints = load_checkpoints(tracker, task["id"])
        heads, _ = trusted_run_heads(checkpoints, key, task["id"])
        if not heads:
            continue
        head = max(heads, key=run_order)
        art = head.payload["artifact"]
        if art.get("decision") == "approve" and art.get("task_id") == task["id"]:
            landed = (art.get("conditions") or {}).get("on_integration_branch")
            # A task closed before landing is landed later (orchestrator.landing.catch_up), under its run's id.
            later = [(cp.payload.get("artifact") or {}).get("sha") for cp in checkpoints
                     if cp.kind == "land" and cp.run_id == head.run_id
                     and (cp.payload.get("artifact") or {}).get("result") == "landed"
                     and checkpoint_problem(cp, key, task_id=task["id"]) is None]
            found.update(c for c in (art.get("commit"), landed, *later) if isinstance(c, str) and c)
    return found


def _revalidate(check: CloseCheck, config: MeshConfig, repo: Path, trust_config_sandbox: bool = False) -> bool:
    """Run the signed validation commands in the sandbox on the checkout's HEAD commit."""
    from orchestrator.sandbox.bwrap import SandboxUnavailable
    from orchestrator.toolchains.base import DependenciesMissing, ToolchainMissing
    from orchestrator.toolchains.view import inspect
    from orchestrator.sandbox.validation import run_validation

    validation = check.artifact.get("validation") or {}
    commands = [c for c in validation.get("commands") or [] if isinstance(c, str)]
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "HEAD^{commit}"], capture_output=True,
                          text=True, timeout=60).stdout.strip()
    cfg = config.validation
    check.checks["revalidation_pass"] = False
    try:
        results = run_validation(commands, cwd=repo, allow=cfg.allow, timeout_s=cfg.timeout_s,
                                 max_output_bytes=cfg.max_output_bytes, commit=head or None,
                                 sandbox=cfg.sandbox if trust_config_sandbox else "bwrap",
                                 env_names=cfg.env, limits=cfg.limits,
                                 environment=inspect(repo, cfg).view)
    except (SandboxUnavailable, ValueError, DependenciesMissing, ToolchainMissing) as exc:
        check.problems.append("revalidation refused: " + " ".join(str(exc).split()))
        return False
    check.validation = [{k: r.to_dict()[k] for k in ("command", "exit_code", "passed", "rejected")} for r in results]
    ran = [r for r in results if not r.rejected]
    ok = bool(ran) and all(r.passed for r in ran)
    check.checks["revalidation_pass"] = ok
    if not ok:
        check.problems.append("revalidation in this checkout failed" if ran else "no allowed command to revalidate")
    return ok


def candidates(tracker: Tracker, scope: Scope) -> list[dict]:
    """In-progress scoped tasks waiting on a CI gate or holding a run head or an approval
    (what is looked at, not what is trusted: check_task decides)."""
    labels = [scope.plan_label] if scope.plan_label else []
    found = []
    for task in tracker.list(status="in_progress", labels=labels, issue_type="task", parent=scope.parent_epic,
                             descendants=True):
        if _ci_gates(tracker, task["id"]):
            found.append(task)
            continue
        checkpoints = load_checkpoints(tracker, task["id"])
        reviews = [cp for cp in checkpoints if cp.kind == "review"]
        if any(cp.kind == RUN_HEAD for cp in checkpoints) or (
                reviews and (reviews[-1].payload.get("artifact") or {}).get("decision") == "approve"):
            found.append(task)
    return found


def ci_close(tracker: Tracker, config: MeshConfig, scope: Scope, *, repo: Path, revalidate: bool = False,
             require_signed: bool = False, trust_config_sandbox: bool = False) -> list[CloseCheck]:
    """Check and close every eligible task in scope; returns what happened to each.

    Revalidation runs in the bwrap sandbox whatever ``config`` says, unless
    ``trust_config_sandbox`` (CI's own config file): a protected branch's mesh.toml was
    written by the same runs that are closed here, and none of them may switch the sandbox
    off with ``validation.sandbox = "none"``.

    Raises ``CiCloseError`` when ``repo`` is not in a git checkout: the approved commit and
    tree are compared with the checkout's HEAD, so there is nothing to close for without one.
    """
    root = git_checkout_root(repo)
    if root is None:
        raise CiCloseError(f"{repo} is not a git checkout: ci-close compares the approved commit with the checked-out"
                           " one (run it in the checkout, or give --repo)")
    key = signing_key()
    out = []
    vouched = approved_commits(tracker, scope, key)
    for task in candidates(tracker, scope):
        check = check_task(tracker, task, require_signed=require_signed, key=key, repo=root, vouched=vouched)
        evidence = (check.checks["vote_consensus"] and check.checks["validation_pass"]
                    and check.checks["review_decision"] == "approve" and check.checks["open_must_fix_findings"] == 0
                    and bool(check.checks["commit_binding"]) and not check.problems)
        if evidence and revalidate:
            evidence = _revalidate(check, config, root, trust_config_sandbox)
        if evidence:
            close_superseded(tracker, task["id"], f"superseded: run {check.run_id} closed {task['id']} (ci-close)")
            try:
                with tracker.transaction():
                    for gate in check.gates:
                        tracker.gate_resolve(gate, reason=f"ci-close: run head of {check.run_id} verified")
                    tracker.close_issue(task["id"], reason=CLOSE_REASON, expect_status=("in_progress",))
                check.result = "closed"
            except ConflictError as exc:
                if tracker.get(task["id"])["status"] == "closed":
                    check.result = "already_closed"
                else:
                    check.problems.append(str(exc))
        out.append(check)
    return out
