"""The signed run head: the one checkpoint that binds a run's approval to a commit and a tree.

Every run ends (closed, blocked, awaiting_ci, sent_back) with one ``[orch:run-head]``
checkpoint, written just before its ``[orch:outcome]`` (for an approved run, before the task
is closed or its CI gate created, so a CI closer racing a local close finds it). Its artifact
holds the task id, the run id, the attempt (1 + the highest attempt of the task's earlier
trusted run heads), the sha256 of each checkpoint comment of the run before it, in seq
order, the final decision and outcome, the
commit and tree that were validated and reviewed (null when nothing was integrated), the
files the run's commits touched, the validation commands and results, and the finding
issues with their status. With ``MESH_SIGNING_KEY`` set the payload is signed like every
checkpoint, so ``mesh ci-close`` reads its evidence from here and from nothing unsigned.

A run is ordered among the task's runs by its signed ``(attempt, run_id)``: comment order,
gate fields and headers never decide which run is the latest.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracker.store import Tracker

from orchestrator.protocol.checkpoint import Checkpoint, checkpoint_comments, checkpoint_problem, load_checkpoints
from orchestrator.worktree.gitops import GitError, run_base
from orchestrator.worktree.gitops import _git as gitops_git

__all__ = ["RUN_HEAD", "comment_digest", "run_comment_digests", "trusted_run_heads", "run_order", "next_attempt",
           "run_head_artifact", "validated_commit", "headless_runs_after", "git_checkout_root"]

RUN_HEAD = "run-head"
_CLOSING = ("closed", "awaiting_ci")
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def comment_digest(text: str) -> str:
    """The sha256 (hex) of a checkpoint comment's exact text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_comment_digests(tracker: Tracker, task_id: str, run_id: str, key: bytes | None) -> list[str]:
    """Digests of the run's trusted checkpoint comments (run head excluded), in seq order.

    With a key only comments that verify count, so a comment forged into the run before its
    head is written is not vouched for; a repeated seq counts once (its first comment).
    """
    by_seq: dict[int, str] = {}
    for cp, text in checkpoint_comments(tracker, task_id):
        if cp.run_id != run_id or cp.kind == RUN_HEAD or not isinstance(cp.seq, int):
            continue
        if checkpoint_problem(cp, key, task_id=task_id) is None:
            by_seq.setdefault(cp.seq, comment_digest(text))
    return [by_seq[seq] for seq in sorted(by_seq)]


def run_order(cp: Checkpoint) -> tuple[int, str]:
    """The sort key of a run head among its task's runs: its signed attempt, then run id."""
    artifact = cp.payload.get("artifact") or {}
    attempt = artifact.get("attempt")
    return (attempt if isinstance(attempt, int) else 0, str(cp.payload.get("run_id") or ""))


def trusted_run_heads(checkpoints: Sequence[Checkpoint], key: bytes | None,
                      task_id: str) -> tuple[list[Checkpoint], list[str]]:
    """(run heads that verify, problems of those that do not). A comment is a run head when
    its header or its payload says so, so a relabelled comment is caught either way."""
    good, bad = [], []
    for cp in checkpoints:
        if cp.kind != RUN_HEAD and cp.payload.get("kind") != RUN_HEAD:
            continue
        why = checkpoint_problem(cp, key, task_id=task_id)
        if why is None and not isinstance(cp.payload.get("artifact"), dict):
            why = f"comment {cp.comment_id}: run head carries no artifact"
        if why:
            bad.append(why)
        else:
            good.append(cp)
    return good, bad


def next_attempt(checkpoints: Sequence[Checkpoint], key: bytes | None, task_id: str, run_id: str) -> int:
    """1 + the highest signed attempt among the task's other trusted run heads."""
    heads, _ = trusted_run_heads(checkpoints, key, task_id)
    return 1 + max((run_order(cp)[0] for cp in heads if cp.run_id != run_id), default=0)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    # The checkout is untrusted (CI's branch): hooks and fsmonitor stay off, paths are literal.
    return gitops_git(Path(repo), "--literal-pathspecs", *args, check=False)


def git_checkout_root(repo: Path) -> Path | None:
    """The top of the git checkout ``repo`` is in, or None when it is not in one."""
    if not Path(repo).is_dir():
        return None
    try:
        proc = _git(repo, "rev-parse", "--show-toplevel")
    except GitError:
        return None
    return Path(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def _run_span(repo: Path, commit: str, run_id: str) -> tuple[str | None, list[str]]:
    """(tree of ``commit``, files changed by the run's commits on top of ``commit``'s history).

    The run's commits are the newest consecutive ones carrying ``Mesh-Run: run_id``; their
    base is the first commit below them.
    """
    tree = _git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{tree}}")
    if tree.returncode != 0:
        return None, []
    base = run_base(Path(repo), commit, run_id) or _EMPTY_TREE
    names = _git(repo, "diff", "--no-renames", "--name-only", "-z", base, commit)
    return tree.stdout.strip(), sorted(n for n in names.stdout.split("\x00") if n)


def validated_commit(proofs: Sequence[Checkpoint]) -> str | None:
    """The commit the run's last ``[orch:proof]`` validated, if any."""
    proofs = sorted(proofs, key=lambda cp: cp.seq or 0)
    commit = (proofs[-1].payload.get("artifact") or {}).get("commit") if proofs else None
    return commit if isinstance(commit, str) and commit else None


def run_head_artifact(tracker: Tracker, task_id: str, run_id: str, key: bytes | None, *, repo: Path | None,
                      commit: str | None, outcome_artifact: Mapping[str, Any]) -> tuple[str, dict]:
    """The summary and artifact of a run's ``[orch:run-head]``, from its stored outcome.

    ``commit`` is the commit the run validated (None when nothing was integrated); the tree and
    the files the run's commits touched are read from ``repo``.
    """
    outcome = outcome_artifact.get("outcome")
    review_decision = outcome_artifact.get("review_decision")
    tree, files = _run_span(repo, commit, run_id) if commit and repo else (None, [])
    if tree is None:
        commit = None
    findings = []
    for finding_id, issue_id in sorted((outcome_artifact.get("review_subtasks") or {}).items()):
        issue = tracker.get(issue_id)
        label = next((lab.split(":", 1)[1] for lab in issue.get("labels") or [] if lab.startswith("label:")), None)
        findings.append({"finding_id": finding_id, "issue": issue_id, "status": issue["status"], "label": label})
    validation = list(outcome_artifact.get("validation") or [])
    ran = [v for v in validation if not v.get("rejected")]
    artifact = {
        "task_id": task_id,
        "run_id": run_id,
        "attempt": next_attempt(load_checkpoints(tracker, task_id), key, task_id, run_id),
        "checkpoints": run_comment_digests(tracker, task_id, run_id, key),
        "outcome": outcome,
        "block_reason": outcome_artifact.get("block_reason"),
        "decision": "approve" if outcome in _CLOSING else (review_decision if review_decision != "approve"
                                                            else None) or "none",
        "review_decision": review_decision,
        "conditions": dict(outcome_artifact.get("conditions") or {}),
        "commit": commit,
        "tree": tree,
        "files": files,
        "validation": {
            "commands": [v["command"] for v in validation],
            "results": [_brief(v) for v in validation],
            "passed": bool(ran) and all(v.get("passed") for v in ran),
        },
        "findings": findings,
    }
    summary = (f"{outcome} attempt {artifact['attempt']} decision={artifact['decision']}"
               f" commit={(commit or 'none')[:12]} checkpoints={len(artifact['checkpoints'])}")
    return summary, artifact


def headless_runs_after(checkpoints: Sequence[Checkpoint], key: bytes | None, task_id: str,
                        head: Checkpoint) -> list[str]:
    """Runs with trusted checkpoints after ``head`` (in comment order) but no trusted run head.

    A later run that has not ended (still running, or killed) makes ``head`` stale. Comment
    order here can only add a refusal: it never picks which head is read.
    """
    headed = {cp.run_id for cp in trusted_run_heads(checkpoints, key, task_id)[0]}
    ids = [cp.comment_id for cp in checkpoints]
    after = checkpoints[ids.index(head.comment_id) + 1:] if head.comment_id in ids else []
    found: dict[str, None] = {}
    for cp in after:
        if cp.run_id and cp.run_id not in headed and checkpoint_problem(cp, key, task_id=task_id) is None:
            found.setdefault(cp.run_id, None)
    return list(found)


def _brief(result: Mapping[str, Any]) -> dict:
    """``proof.brief`` of a validation result, imported when a run head is written: readers of
    run heads (``mesh status``) then load neither the proof's scrubber nor its test counts."""
    from orchestrator.protocol.proof import brief

    return brief(result)
