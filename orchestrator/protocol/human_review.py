"""A person as the reviewer: a run waits at its review gate for a review given by a person.

With ``reviewer = "human"`` in ``mesh.toml`` (or ``--reviewer human`` on ``mesh run`` and
``mesh drain``), or the label ``review:human`` on a task or its epic, the engine does not ask a
reviewer worker at round E. It writes an ``[orch:review-request]`` checkpoint holding what the
person reviews (the diff of the task branch, the commit, the validation), then waits, its lease
kept alive by the heartbeat, until a person's review for that run and cycle is in the tracker.

A person gives the review through ``mesh review`` (or any front end built on ``submit_review``):
"approve" or "request changes", a 1-5 line summary and comments on lines of the diff, each with
a severity (and a label, MUST_FIX by default for Critical and High). ``submit_review`` turns that
into exactly the artifact a reviewer worker's answer would be, validated by the same schema
(``roles.schemas.ReviewArtifact``), each comment a finding with its ``file:line`` and the code
it points at, and writes it once as a signed ``[orch:human-review]`` comment (keyed by run and
cycle: a second submission for the same wait is refused). The waiting engine takes it, checks
every location against its worktree, and records it as the cycle's ``[orch:review]`` checkpoint;
findings become sub-issues and revision cycles follow as after any review.

A run killed while it waits resumes (``mesh resume``, or a drain) at the same wait: its request
is already written, and a review submitted meanwhile is taken at once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from redact import scrub, scrub_obj
from tracker.errors import NotFoundError
from roles.bounds import oversize
from roles.schemas import ReviewArtifact

from orchestrator.protocol.checkpoint import Checkpoint, checkpoint_problem, load_checkpoints, write_checkpoint

if TYPE_CHECKING:
    from tracker.store import Tracker

__all__ = ["HUMAN_LABEL", "REQUEST", "SUBMISSION", "LineComment", "ReviewRefused", "WaitingReview",
           "wants_human_review", "waiting_reviews", "waiting_review", "submit_review", "find_submission",
           "new_side_lines", "hunk_start", "wait_for_submission"]

HUMAN_LABEL = "review:human"
REQUEST = "review-request"
SUBMISSION = "human-review"
SEVERITIES = ("Critical", "High", "Medium", "Low")
LABELS = ("MUST_FIX", "SHOULD_CONSIDER", "CAN_IGNORE")
_DEFAULT_LABEL = {"Critical": "MUST_FIX", "High": "MUST_FIX", "Medium": "SHOULD_CONSIDER", "Low": "CAN_IGNORE"}
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


class ReviewRefused(Exception):
    """A review that cannot be taken: ``field`` names what is wrong, the message says the fix."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class LineComment:
    """A person's comment on one line (or lines ``line``-``end``) of a file of the diff."""

    path: str
    line: int
    text: str
    severity: str = "Medium"
    label: str | None = None  # default by severity: Critical/High MUST_FIX, Medium SHOULD_CONSIDER, Low CAN_IGNORE
    end: int | None = None
    fix: str | None = None

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}" + (f"-{self.end}" if self.end and self.end != self.line else "")


@dataclass
class WaitingReview:
    """A run waiting for a person's review: what the person is asked to review."""

    task_id: str
    title: str
    run_id: str
    cycle: int
    commit: str | None
    branch: str | None
    diff: str
    validation: list[dict[str, Any]] = field(default_factory=list)
    requested_at: str | None = None
    # Lines of the change that reach into the test machinery (orchestrator.worktree.tamper).
    tampering: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task_id, "title": self.title, "run_id": self.run_id, "cycle": self.cycle,
                "commit": self.commit, "branch": self.branch, "requested_at": self.requested_at,
                "validation": self.validation, "tampering": self.tampering, "diff": self.diff}


def wants_human_review(reviewer: str, tracker: Tracker, task: Mapping[str, Any]) -> bool:
    """True when the task's review gate is a person's: the configured reviewer, or the label
    ``review:human`` on the task or on its epic."""
    if reviewer == "human" or HUMAN_LABEL in (task.get("labels") or []):
        return True
    parent = task.get("parent")
    if parent:
        try:
            return HUMAN_LABEL in (tracker.get(parent).get("labels") or [])
        except NotFoundError:  # a dangling parent id: the task's own labels decided
            return False
    return False


def _trusted(checkpoints: Sequence[Checkpoint], key: bytes | None, task_id: str) -> list[Checkpoint]:
    return [cp for cp in checkpoints if checkpoint_problem(cp, key, task_id=task_id) is None]


def waiting_review(tracker: Tracker, task_id: str, key: bytes | None) -> WaitingReview | None:
    """The wait of the task's latest run for a person's review, or None when it waits for none.

    A run waits from its ``[orch:review-request]`` of a cycle until that cycle's ``[orch:review]``,
    a submission for it, or the run's ``[orch:outcome]``.
    """
    checkpoints = _trusted(load_checkpoints(tracker, task_id), key, task_id)
    requests = [cp for cp in checkpoints if cp.kind == REQUEST]
    if not requests:
        return None
    request = requests[-1]
    run_id, cycle = request.run_id, (request.payload.get("artifact") or {}).get("cycle")
    for cp in checkpoints:
        if cp.run_id != run_id:
            continue
        if cp.kind == "outcome":
            return None
        if cp.kind in ("review", SUBMISSION) and _cycle_of(cp) == cycle:
            return None
    artifact = request.payload.get("artifact") or {}
    task = tracker.get(task_id)
    return WaitingReview(task_id=task_id, title=task.get("title") or "", run_id=str(run_id), cycle=int(cycle),
                         commit=artifact.get("commit"), branch=artifact.get("branch"), diff=artifact.get("diff") or "",
                         validation=list(artifact.get("validation") or []), requested_at=request.created_at,
                         tampering=[t for t in artifact.get("tampering") or [] if isinstance(t, dict)])


def _cycle_of(cp: Checkpoint) -> Any:
    if cp.kind == SUBMISSION:
        return (cp.payload.get("artifact") or {}).get("cycle")
    return cp.payload.get("review_cycle")


def waiting_reviews(tracker: Tracker, task_ids: Sequence[str], key: bytes | None) -> list[WaitingReview]:
    """The runs among ``task_ids`` that wait for a person's review."""
    out = []
    for task_id in task_ids:
        wait = waiting_review(tracker, task_id, key)
        if wait is not None:
            out.append(wait)
    return out


def hunk_start(line: str) -> int | None:
    """The first line number after the change of a hunk header (``@@ -a,b +c,d @@``), else None."""
    match = _HUNK.match(line)
    return int(match.group(1)) if match else None


def new_side_lines(diff: str) -> dict[str, dict[int, str]]:
    """The lines a unified diff shows of each file after the change: path -> line number -> text.

    These are the lines a person can comment on (added and context lines of every hunk).
    """
    out: dict[str, dict[int, str]] = {}
    current: dict[int, str] | None = None
    number = 0
    for line in diff.splitlines():
        if line.startswith("+++ "):
            target = line[4:].strip()
            current = None if target == "/dev/null" else out.setdefault(target[2:] if target.startswith("b/")
                                                                         else target, {})
            continue
        if line.startswith("diff --git") or line.startswith("--- "):
            continue
        start = hunk_start(line)
        if start is not None:
            number = start
            continue
        if current is None or not line or line.startswith("\\"):
            continue
        if line[0] in " +":
            current[number] = line[1:]
            number += 1
    return out


def review_artifact(decision: str, summary: str, comments: Sequence[LineComment],
                    lines: Mapping[str, Mapping[int, str]]) -> dict[str, Any]:
    """The review artifact of a person's review, exactly as a reviewer worker's would be;
    ReviewRefused naming the field when it is not a review the protocol accepts."""
    if decision not in ("approve", "request_changes"):
        raise ReviewRefused("decision", f"decision must be 'approve' or 'request_changes', not {decision!r}")
    if decision == "request_changes" and not comments:
        raise ReviewRefused("comments", "requesting changes needs at least one comment on a line of the diff")
    findings = []
    for index, comment in enumerate(comments):
        where = f"comments[{index}]"
        if comment.severity not in SEVERITIES:
            raise ReviewRefused(f"{where}.severity", f"severity must be one of {', '.join(SEVERITIES)}")
        label = comment.label or _DEFAULT_LABEL[comment.severity]
        if label not in LABELS:
            raise ReviewRefused(f"{where}.label", f"label must be one of {', '.join(LABELS)}")
        if not comment.text.strip():
            raise ReviewRefused(f"{where}.text", "a comment needs text: what is wrong and why")
        shown = lines.get(comment.path)
        last = comment.end or comment.line
        if shown is None:
            raise ReviewRefused(f"{where}.path", f"{comment.path!r} is not a file of the diff; comment on one of:"
                                f" {', '.join(sorted(lines)) or 'nothing (the diff is empty)'}")
        missing = [n for n in range(comment.line, last + 1) if n not in shown]
        if comment.line < 1 or last < comment.line or missing:
            raise ReviewRefused(f"{where}.line", f"{comment.location} is not a line the diff shows of"
                                f" {comment.path}; comment on a line of a hunk")
        context = "\n".join(shown[n] for n in range(comment.line, last + 1))
        findings.append({
            "finding_id": f"human:{comment.location}",
            "location": comment.location,
            "severity": comment.severity,
            "label": label,
            "issue": comment.text.strip(),
            "evidence": f"a person's review comment on {comment.location}",
            "minimal_fix": (comment.fix or comment.text).strip(),
            "code_context": context if context.strip() else "(blank line)",
        })
    if decision == "approve" and any(f["label"] == "MUST_FIX" for f in findings):
        raise ReviewRefused("decision", "an approval cannot carry a MUST_FIX comment: request changes, or"
                            " label the comment SHOULD_CONSIDER or CAN_IGNORE")
    try:
        parsed = ReviewArtifact.model_validate({"decision": decision, "findings": findings, "summary": summary})
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(part) for part in first.get("loc") or ()) or "review"
        raise ReviewRefused(name, f"{name}: {first.get('msg')}") from None
    too_large = oversize(parsed.model_dump())  # carried into the revision prompts like a worker's review
    if too_large:
        raise ReviewRefused("review", too_large)
    return parsed.model_dump(mode="json")


def submit_review(tracker: Tracker, task_id: str, *, decision: str, summary: str,
                  comments: Sequence[LineComment] = (), author: str, key: bytes | None) -> dict[str, Any]:
    """Record a person's review of the run waiting on ``task_id``; returns the review artifact.

    Written once per run and cycle (a second submission is refused), signed with ``key`` like
    every checkpoint. Nothing is written when the review is refused.
    """
    wait = waiting_review(tracker, task_id, key)
    if wait is None:
        raise ReviewRefused("task", _why_not_waiting(tracker, task_id, key))
    artifact = review_artifact(decision, summary, comments, new_side_lines(wait.diff))
    who = " ".join(author.split()) or "someone"
    payload: dict[str, Any] = {"v": 1, "run_id": wait.run_id, "kind": SUBMISSION, "task_id": task_id,
                               "artifact": {"cycle": wait.cycle, "reviewer": who, "review": artifact}}
    summary = f"{who}: {artifact['decision']} findings={len(artifact['findings'])} (review cycle {wait.cycle})"
    _, text, comment = write_checkpoint(tracker, task_id, SUBMISSION, scrub(summary), scrub_obj(payload), key=key,
                                        author=f"person/{who}", details=scrub(artifact["summary"]),
                                        dedupe=f"orch:{wait.run_id}:{SUBMISSION}:{wait.cycle}")
    if comment.get("text") != text:  # the key was taken: someone reviewed this wait first
        raise ReviewRefused("task", f"{task_id}: review cycle {wait.cycle} of {wait.run_id} was already reviewed")
    return artifact


def _why_not_waiting(tracker: Tracker, task_id: str, key: bytes | None) -> str:
    checkpoints = _trusted(load_checkpoints(tracker, task_id), key, task_id)
    requests = [cp for cp in checkpoints if cp.kind == REQUEST]
    if requests:
        run_id, cycle = requests[-1].run_id, (requests[-1].payload.get("artifact") or {}).get("cycle")
        given = find_submission(tracker, task_id, str(run_id), cycle, key)
        if given is not None:
            return (f"{task_id}: review cycle {cycle} of {run_id} was already reviewed by {given[1]}"
                    f" ({given[0].get('decision')}); the run takes that review")
    return f"{task_id} has no run waiting for a person's review"


def find_submission(tracker: Tracker, task_id: str, run_id: str, cycle: int,
                    key: bytes | None) -> tuple[dict[str, Any], str] | None:
    """The person's review (artifact, reviewer) for the run's cycle, when one was submitted."""
    for cp in _trusted(load_checkpoints(tracker, task_id), key, task_id):
        artifact = cp.payload.get("artifact") or {}
        if cp.kind == SUBMISSION and cp.run_id == run_id and artifact.get("cycle") == cycle:
            review = artifact.get("review")
            if isinstance(review, dict):
                return review, str(artifact.get("reviewer") or "someone")
    return None


def wait_for_submission(tracker: Tracker, task_id: str, run_id: str, cycle: int, key: bytes | None, *,
                        poll_s: float, still_mine: Callable[[], None]) -> tuple[dict[str, Any], str]:
    """Block until a person's review for the run's cycle is in the tracker.

    ``still_mine`` is called before every look and raises when the run lost its task (its lease
    taken over): a waiting run never outlives its claim.
    """
    while True:
        still_mine()
        found = find_submission(tracker, task_id, run_id, cycle, key)
        if found is not None:
            return found
        time.sleep(poll_s)
