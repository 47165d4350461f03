"""What the forge says of a pushed head: its checks and its reviewers' reviews, fed back.

After a landing is pushed and its pull request opened or updated (``pull_requests.publish``),
mesh waits, bounded by ``[forge] checks_timeout_s``, for the checks of the pull request's head:
GitHub's check runs and commit statuses, GitLab's pipeline jobs (the ones named in
``required_checks``, else every one reported). Meanwhile it reads the reviews given on that
head by the logins ``[forge] reviewers`` lists (nobody else's: on a public repository anyone
may comment, and what a stranger writes must not steer the work).

The verdict (``Verdict.state``):

- ``failed``: a required check failed. Each failing check's name, conclusion and the tail of
  its log (a check run's output, a job's trace) make the ``VALIDATION`` finding, which goes to
  the revision like a failing validation's (``review_for``);
- ``changes_requested``: a listed reviewer requested changes or commented on lines: each line
  comment is a ``MUST_FIX`` finding at its ``path:line`` (a review without line comments, one
  finding at the first line the task changed);
- ``passed``: every required check passed (and, where a person's review is asked, a listed
  reviewer approved the head: ``approved_by``);
- ``none``: no check reported on the head within the grace period (a repository without CI);
- ``pending``: the timeout came first.

Forge text (logs, comments) is untrusted input: it reaches the revision prompt as evidence,
is scrubbed of secrets when checkpointed, and is escaped wherever mesh shows it.

May import what ``orchestrator.landing`` may.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.forges.model import Check, Forge, Review

__all__ = ["Verdict", "review_for", "wait_for_verdict"]

_LOG_CHARS = 3000
# How long a head with no check at all is waited on before it counts as having none.
_GRACE_POLLS = 3
_GRACE_MIN_S = 30.0


@dataclass
class Verdict:
    """The forge's word on one pushed head (see the module docstring)."""

    state: str
    sha: str
    checks: list[Check] = field(default_factory=list)
    reviews: list[Review] = field(default_factory=list)
    approved_by: str | None = None
    waited_s: float = 0.0

    @property
    def failing(self) -> list[Check]:
        return [check for check in self.checks if check.state == "failed"]

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "sha": self.sha, "checks": [c.to_dict() for c in self.checks],
                "failing": [{**c.to_dict(), "log": c.log[-_LOG_CHARS:]} for c in self.failing],
                "reviews": [{"id": r.id, "login": r.login, "state": r.state, "body": r.body,
                             "notes": [{"id": n.id, "path": n.path, "line": n.line, "body": n.body} for n in r.notes]}
                            for r in self.reviews],
                "approved_by": self.approved_by, "waited_s": round(self.waited_s, 1)}


def _required(checks: Sequence[Check], names: Sequence[str]) -> list[Check]:
    """The checks that count: those named (one not reported yet is pending), else all."""
    if not names:
        return list(checks)
    by_name = {check.name: check for check in checks}
    return [by_name.get(name) or Check(name, "pending", "not reported yet") for name in names]


def _for_head(reviews: Iterable[Review], sha: str, reviewers: Sequence[str], taken: set[str]) -> list[Review]:
    """The reviews of listed ``reviewers`` on head ``sha`` (given on another commit: on older
    work) that were not taken before."""
    listed = {login.lower() for login in reviewers}
    return [r for r in reviews if r.login.lower() in listed and r.id not in taken and (r.commit in (None, sha))]


def wait_for_verdict(forge: Forge, number: int, sha: str, cfg: Any, *, want_approval: bool = False,
                     taken: set[str] | None = None, still_mine: Callable[[], None] = lambda: None,
                     sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> Verdict:
    """Ask the forge until the head ``sha`` of pull request ``number`` has a verdict.

    Bounded by ``cfg.checks_timeout_s``, except with ``want_approval`` (a person's review is
    asked of this task): then the head is waited on, without bound, for its checks and a listed
    reviewer's approval (or changes) (``still_mine`` raises when the run lost its task, as the
    wait for ``mesh review`` does). ``ForgeError`` when the forge cannot be asked.
    """
    started = clock()
    grace = min(cfg.checks_timeout_s, max(_GRACE_MIN_S, _GRACE_POLLS * cfg.checks_poll_s))
    taken = taken or set()
    while True:
        still_mine()
        waited = clock() - started
        checks = forge.checks(sha)
        required = _required(checks, cfg.required_checks)
        reviews = _for_head(forge.reviews(number), sha, cfg.reviewers, taken) if cfg.reviewers else []
        asked = [r for r in reviews if r.state == "changes_requested" or r.notes]
        approver = next((r.login for r in reviews if r.state == "approved"), None)
        # The checks that count (``required_checks``, else all) are the verdict's.
        checks = required
        if asked:
            return Verdict("changes_requested", sha, checks, asked, None, waited)
        pending = [check for check in required if check.state == "pending"]
        if any(check.state == "failed" for check in required) and not pending:
            return Verdict("failed", sha, checks, [], approver, waited)
        if required and not pending:
            if not want_approval or approver:
                return Verdict("passed", sha, checks, [], approver, waited)
        elif not required and waited >= grace:
            if not want_approval or approver:
                return Verdict("none", sha, checks, [], approver, waited)
        elif waited >= cfg.checks_timeout_s and not want_approval:
            return Verdict("pending", sha, checks, [], approver, waited)
        sleep(cfg.checks_poll_s)


_CI_PATH = re.compile(r"(/[\w.@+-]+(?:/[\w.@+-]+)+\.\w+):(\d+)")


def _in_tree(log: str, root: Any) -> str | None:
    """``path:line`` of the first file of a CI log's absolute paths (a runner's checkout, such as
    ``/home/runner/work/w/w/src/x.py:12``) that the worktree ``root`` holds by its longest suffix."""
    from pathlib import Path

    if root is None:
        return None
    for path, line in _CI_PATH.findall(log):
        parts = path.strip("/").split("/")
        for start in range(1, len(parts)):
            relative = "/".join(parts[start:])
            if (Path(root) / relative).is_file() and "site-packages/" not in path:
                return f"{relative}:{line}"
    return None


def _check_finding(failing: Sequence[Check], noun: str, root: Any = None) -> dict[str, Any]:
    from orchestrator.protocol.validation_findings import VALIDATION_FINDING, failure_location

    evidence = "\n\n".join(f"{check.name} ({check.conclusion})" + (f" {check.url}" if check.url else "")
                           + "\n" + (check.log[-_LOG_CHARS:].strip() or "(no log)") for check in failing)
    last = next((line for check in failing for line in reversed(check.log.splitlines()) if line.strip()), "")
    names = ", ".join(f"`{check.name}` ({check.conclusion})" for check in failing[:3])
    return {"finding_id": VALIDATION_FINDING,
            "location": (found if (found := failure_location(evidence)) and not found.startswith("/") else None)
            or _in_tree(evidence, root) or "validation:1",
            "severity": "High", "label": "MUST_FIX",
            "issue": f"the {noun}'s check(s) failed: {names}"
                     + (f" and {len(failing) - 3} more" if len(failing) > 3 else ""),
            "evidence": evidence[:6000],
            "minimal_fix": "change the code (or the tests, if they are wrong) so that the failing check passes",
            "code_context": last.strip()[:300] or "(no log)"}


def _note_findings(reviews: Sequence[Review], first_line: str,
                   code_at: Callable[[str, int], str] | None = None) -> list[dict[str, Any]]:
    out = []
    for review in reviews:
        notes = review.notes or ()
        for note in notes:
            text = note.body.strip() or "(no text)"
            code = (code_at(note.path, note.line) if code_at else "") or f"{note.path}:{note.line}"
            out.append({"finding_id": f"PR-{note.id}", "location": f"{note.path}:{note.line}", "severity": "High",
                        "label": "MUST_FIX", "issue": f"{review.login}: {text.splitlines()[0][:200]}",
                        "evidence": f"{review.login} commented on {note.path}:{note.line} of the pull request:\n{text[:4000]}",
                        "minimal_fix": "make the change the reviewer's comment asks for", "code_context": code})
        if not notes and review.body.strip():
            text = review.body.strip()
            out.append({"finding_id": f"PR-{review.id}", "location": first_line, "severity": "High",
                        "label": "MUST_FIX", "issue": f"{review.login}: {text.splitlines()[0][:200]}",
                        "evidence": text[:4000], "minimal_fix": text[:2000], "code_context": "(the whole change)"})
    return out


def review_for(verdict: Verdict, noun: str, first_line: str,
               code_at: Callable[[str, int], str] | None = None, root: Any = None) -> dict[str, Any] | None:
    """The review a verdict amounts to (a ``ReviewArtifact``'s shape, checked), or None when it
    asks for nothing: the failing checks' ``VALIDATION`` finding, the reviewers' findings."""
    from roles.schemas import ReviewArtifact

    findings = []
    if verdict.failing:
        findings.append(_check_finding(verdict.failing, noun, root))
    findings += _note_findings(verdict.reviews, first_line, code_at)
    if not findings:
        return None
    who = sorted({r.login for r in verdict.reviews})
    summary = (f"The {noun} at {verdict.sha[:12]}: " + "; ".join(
        part for part in ((f"{len(verdict.failing)} check(s) failed" if verdict.failing else ""),
                          (f"changes requested by {', '.join(who)}" if who else "")) if part))
    return ReviewArtifact.model_validate({"decision": "request_changes", "findings": findings,
                                          "summary": summary}).model_dump(mode="json")


def _first_line(diff: str) -> str:
    """``path:line`` of the first line the task's diff adds (where a comment on the whole change
    points), else ``validation:1``."""
    from orchestrator.protocol.human_review import new_side_lines

    for path, lines in new_side_lines(diff).items():
        if lines:
            return f"{path}:{min(lines)}"
    return "validation:1"


def _code_at(root: Any, path: str, line: int) -> str:
    """The line ``line`` of ``path`` in the worktree (what a reviewer's comment points at), ''
    when there is none (a path outside it, a line past its end)."""
    from pathlib import Path

    base = Path(root).resolve()
    target = (base / path).resolve()
    if not target.is_relative_to(base) or not target.is_file():
        return ""
    try:
        lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return lines[line - 1].rstrip()[:300] if 0 < line <= len(lines) and lines[line - 1].strip() else ""


def _taken(engine: Any) -> set[str]:
    """The ids of reviews this task's earlier verdicts took (each review is fed back once)."""
    from orchestrator.protocol.checkpoint import load_checkpoints

    return {str(review.get("id")) for cp in load_checkpoints(engine.tracker, engine.task["id"])
            if cp.kind == "forge-verdict" for review in (cp.payload.get("artifact") or {}).get("reviews") or ()}


def verdict_of(engine: Any, published: dict, *, phase: str, transport: Any = None) -> str:
    """Wait for the forge's verdict on the head ``published`` pushed (once per landing: it is
    checkpointed as ``[orch:forge-verdict]``, and a resumed run takes it from there); its state,
    or ``ForgeChanges`` carrying the review it amounts to. ``not_waited`` when neither checks
    (``checks_timeout_s``) nor a person's approval are awaited."""
    from orchestrator.forges.table import connect
    from orchestrator.protocol.outcomes import ForgeChanges

    cfg = engine.config.forge
    stored = engine._stored("forge-verdict", None, phase)
    if stored is None:
        want = engine._review_on_forge()
        if cfg.checks_timeout_s <= 0 and not want:
            return "not_waited"
        noun = str(published.get("noun") or "pull request")
        engine.echo(f"waiting for the {noun}'s checks" + (" and a reviewer's approval" if want else "")
                    + f": {published.get('url')}")
        forge = connect(cfg.provider, cfg.repository, cfg.api_url, cfg.token_env, transport=transport)
        try:
            verdict = wait_for_verdict(forge, int(published["number"]), str(published.get("pushed") or published["sha"]),
                                       cfg, want_approval=want, taken=_taken(engine), still_mine=engine._check_lease)
        finally:
            forge.api.close()
        artifact = verdict.to_dict()
        artifact["review"] = review_for(verdict, noun, _first_line(engine.worktree.diff_from_base()),
                                        lambda path, line: _code_at(engine.worktree.path, path, line),
                                        root=engine.worktree.path)
        failing = ", ".join(c.name for c in verdict.failing)
        summary = (f"{noun} #{published['number']} at {verdict.sha[:12]}: {verdict.state}"
                   + (f" ({failing})" if failing else "")
                   + (f", approved by {verdict.approved_by}" if verdict.approved_by else ""))
        stored = engine._checkpoint("forge-verdict", None, phase, summary, artifact)
        engine.mutations.append(f"{engine.task['id']}: {summary}")
    if stored["artifact"].get("review"):
        _tell_other_tasks(engine, published, stored["artifact"])
    artifact = stored["artifact"]
    if artifact.get("review"):
        raise ForgeChanges(artifact["review"])
    if cfg.merge == "auto" and artifact["state"] == "passed":
        _merge(engine, published, artifact["sha"], phase=phase, transport=transport)
    return str(artifact["state"])


def _merge(engine: Any, published: dict, sha: str, *, phase: str, transport: Any = None) -> None:
    """``merge = "auto"``: merge the pull request whose head ``sha`` passed, through the forge's
    own merge (GitLab: auto-merge, once its pipeline succeeds), branch protection deciding; once
    (``[orch:pull-request]`` of phase ``<phase>:merge``). A refusal is said, never forced."""
    from orchestrator.forges.model import ForgeError
    from orchestrator.forges.table import connect

    step = f"{phase}:merge"
    if engine._stored("pull-request", None, step) is not None:
        return
    cfg = engine.config.forge
    number, noun = int(published["number"]), str(published.get("noun") or "pull request")
    forge = connect(cfg.provider, cfg.repository, cfg.api_url, cfg.token_env, transport=transport)
    try:
        try:
            forge.merge(number, sha)
            action = "merged"
        except ForgeError as exc:
            # Merged already (a run killed after the merge, before its checkpoint), or refused.
            if forge.get(number).state != "merged":
                message = f"{noun} #{number} not merged: {exc}"
                engine.bus.note("forge_failed", message)
                engine.mutations.append(f"{engine.task['id']}: {message}")
                return
            action = "merged"
    finally:
        forge.api.close()
    summary = f"{noun} #{number} {action} at {sha[:12]} (merge = auto)"
    engine._checkpoint("pull-request", None, step, summary, {**published, "action": action, "sha": sha})
    engine.mutations.append(f"{engine.task['id']}: {summary}")


def _tell_other_tasks(engine: Any, published: dict, artifact: dict) -> None:
    """A reviewer's line comment on a file another task of the pull request changed (and this
    one did not): that task is told, once, which revision took it up. The revision of the task
    that pushed makes the change (its worktree holds every landed task's files)."""
    from orchestrator.worktree.gitops import _git

    repo, head, base = engine.lander.repo, str(published.get("head") or ""), str(published.get("base") or "")
    wt = engine.worktree
    mine = set(_git(wt.path, "diff", "--name-only", "--no-renames", wt.base, wt.branch, check=False).stdout.split())
    for review in artifact.get("reviews") or []:
        for note in review.get("notes") or []:
            path = str(note.get("path") or "")
            if not path or path in mine or not head or not base:
                continue
            log = _git(repo, "log", "--format=%(trailers:key=Mesh-Task,valueonly,unfold)",
                       f"refs/heads/{base}..refs/heads/{head}", "--", path, check=False).stdout.split()
            for task_id in dict.fromkeys(log):
                if task_id == engine.task["id"]:
                    continue
                engine._check_lease()
                engine.tracker.add_comment(
                    task_id, f"mesh: {review.get('login')} commented on {path}:{note.get('line')} of"
                             f" {published.get('noun') or 'pull request'} #{published.get('number')}, a file this task"
                             f" changed; the revision of {engine.task['id']} (run {engine.run_id}) takes it up",
                    dedupe_key=f"forge-note:{published.get('provider')}:{note.get('id')}:{task_id}")
