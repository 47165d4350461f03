"""Pull requests on the configured forge (``[forge]``, ``orchestrator.forges``), opened and kept
current as tasks land.

After a task lands on its scope's integration branch, mesh pushes that branch to
``forge.remote`` and opens the scope's pull request into the branch it follows (the scope's
base), or updates it: one per scope, titled by the scope's epic or plan label, its body a
summary mesh writes of every task landed on the branch (each with its commit, its tests
counted, its review cycles, findings fixed and cost). With ``pull_requests = "task"`` each task gets its own,
from ``mesh/<task>`` into the integration branch.

Exactly once, crash or not: the forge is asked for the open pull request of the branch before
one is opened (GitHub and GitLab hold at most one open per head and base), and the result is
checkpointed on the task as ``[orch:pull-request]`` (its number, URL, head, base): a run killed
between the push and the creation opens it when resumed, one killed between the creation and
the checkpoint finds it and updates it. Text from the tracker (task titles, findings: model
output) is neutralised (``forges.text``): no mention, reference or closing word acts. The token
is read here, from the variable ``forge.token_env`` names, and goes to the forge API alone.

May import what ``orchestrator.landing`` may, and ``orchestrator.forges``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

from orchestrator.forges.model import ForgeError, PullRequest
from orchestrator.forges.table import connect
from orchestrator.forges.text import neutral
from orchestrator.landing.records import base_branch
from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.protocol.faults import crash_point
from orchestrator.worktree.gitops import GitError, _git, _summary

__all__ = ["body_for", "publish", "scope_title"]

_BODY_TASKS = 100


def _push(repo: Path, remote: str, sha: str, branch: str, *, force: bool) -> None:
    spec = f"{'+' if force else ''}{sha}:refs/heads/{branch}"
    pushed = _git(repo, "push", "--quiet", "--no-verify", "--porcelain", "--", remote, spec, check=False)
    if pushed.returncode != 0:
        raise GitError("remote_unavailable", f"git push {remote} {branch}: {_summary(pushed.stderr or pushed.stdout)}")


def scope_title(tracker: Any, task: Mapping[str, Any], branch: str) -> str:
    """A scope's pull request's title: its epic's title, else its plan label, else its branch."""
    parent = task.get("parent")
    if isinstance(parent, str) and parent:
        try:
            epic = tracker.get(parent)
        except Exception:  # noqa: BLE001 - a parent gone from the tracker: the label serves
            epic = None
        if epic and epic.get("issue_type") == "epic" and epic.get("title"):
            return neutral(str(epic["title"]))[:200]
    label = next((label for label in task.get("labels") or () if str(label).startswith("plan:")), None)
    return f"mesh: {neutral(str(label))}" if label else f"mesh: {branch}"


def _tests_line(tracker: Any, task_id: str) -> str:
    """``tests: 12 ran, 12 passed`` from the task's last passing proof, '' without one."""
    for cp in reversed(load_checkpoints(tracker, task_id)):
        if cp.kind != "proof":
            continue
        results = (cp.payload.get("artifact") or {}).get("results") or []
        counted = [r.get("tests") for r in results if isinstance(r, Mapping) and isinstance(r.get("tests"), Mapping)
                   and not r.get("judged_from")]  # a subset judged from another's run: its tests counted once
        if counted:
            ran = sum(int(t.get("ran") or 0) for t in counted)
            passed = sum(int(t.get("passed") or 0) for t in counted)
            return f"tests: {ran} ran, {passed} passed"
    return ""


def _tampering(tracker: Any, task_id: str) -> list[Mapping[str, Any]]:
    """What of the task's change reaches into the test machinery, when its review was left to
    the pull request's reviewers (they must be told: ``tamper``'s lines)."""
    for cp in reversed(load_checkpoints(tracker, task_id)):
        if cp.kind == "review" and cp.payload.get("reviewer") == "deferred/forge":
            return [t for t in cp.payload.get("tampering") or [] if isinstance(t, Mapping)]
    return []


def _cost(tracker: Any, task_id: str, current: Mapping[str, float]) -> str:
    """``$0.42`` spent on the task: its runs' recorded costs (``[orch:outcome]``), the running
    one's from ``current``; '' when nothing was priced."""
    total = 0.0
    for cp in load_checkpoints(tracker, task_id):
        if cp.kind == "outcome" and cp.run_id not in current:
            usage = (cp.payload.get("artifact") or {}).get("usage") or {}
            cost = usage.get("cost_usd") if isinstance(usage, Mapping) else None
            total += float(cost) if isinstance(cost, (int, float)) else 0.0
    total += sum(current.values()) if current else 0.0
    return f"${total:.2f} spent" if total > 0 else ""


def _landed(repo: Path, since: str, head: str) -> dict[str, tuple[list[str], str]]:
    """Task -> (its landing commits on ``head`` since ``since``, oldest first; the last one's
    message), tasks in the order they first landed."""
    log = _git(repo, "log", "--reverse", "--format=%H%x00%B%x1e", f"{since}..refs/heads/{head}", check=False).stdout
    out: dict[str, tuple[list[str], str]] = {}
    for entry in log.split("\x1e"):
        sha, _, message = entry.strip("\n").partition("\x00")
        trailers = dict(line.split(": ", 1) for line in message.splitlines() if line.startswith("Mesh-") and ": " in line)
        task_id = trailers.get("Mesh-Task")
        if sha and task_id:
            out[task_id] = ([*out.get(task_id, ([], ""))[0], sha], message)
    return out


def body_for(tracker: Any, repo: Path, head: str, base: str, *, report_url: str | None = None,
             running: Mapping[str, Mapping[str, float]] | None = None, since: str | None = None,
             merge: bool = False) -> str:
    """The summary of every task landed on ``head`` since ``base`` (``since``: the base as the
    remote has it, so work merged there is not listed again): one line per task with its last
    landing's commit (and how many landings it took), tests counted, review cycles, findings
    fixed (from its commit message) and cost (``running``: the cost so far of a task's run that
    is still going, by task and run), neutralised. ``merge``: mesh merges it (``merge = "auto"``)."""
    landed = _landed(repo, since or f"refs/heads/{base}", head) if base else {}
    lines = [f"Work landed by mesh on `{head}`, for review into `{base}`.", ""]
    for task_id, (shas, message) in list(landed.items())[:_BODY_TASKS]:
        title, _, rest = message.partition("\n\n")
        cycles = next((part for part in rest.splitlines()[0].split(", ") if "review cycle" in part), "") \
            if rest else ""
        fixed = [line[2:] for line in rest.splitlines() if line.startswith("- ")]
        facts = [f"`{shas[-1][:12]}`" + (f", {len(shas)} landings (the pull request's checks or reviewers asked"
                                         " for changes)" if len(shas) > 1 else ""),
                 *([_tests_line(tracker, task_id)] if tracker is not None else []),
                 cycles.rstrip("."), f"{len(fixed)} finding(s) fixed" if fixed else "",
                 _cost(tracker, task_id, (running or {}).get(task_id, {})) if tracker is not None else ""]
        lines.append(f"- **{neutral(task_id)}**: {neutral(title.strip())} ({', '.join(f for f in facts if f)})")
        lines += [f"  - fixed: {neutral(finding)[:200]}" for finding in fixed[:5]]
        if tracker is not None:
            lines += [f"  - **reaches into the test machinery** at `{neutral(t['location'])}`: {neutral(t['what'])}"
                      " (a person's approval is needed)" for t in _tampering(tracker, task_id)[:5]]
        if report_url:
            lines.append(f"  - report: {report_url.rstrip('/')}/task/{quote(task_id, safe='')}")
    if len(landed) > _BODY_TASKS:
        lines.append(f"- and {len(landed) - _BODY_TASKS} more task(s)")
    if not landed:
        lines.append("(no task landed yet)")
    lines += ["", "Opened and updated by mesh; it merges it once its checks pass (merge = auto)." if merge
              else "Opened and updated by mesh; merging it is yours."]
    return "\n".join(lines)


def _remote_base(repo: Path, remote: str, base: str) -> str | None:
    """The base branch as ``remote`` has it now (fetched into ``refs/mesh/forge/``), None when it
    cannot be fetched: what was merged there is no longer this pull request's work."""
    ref = f"refs/mesh/forge/{remote}/{base}"
    fetched = _git(repo, "fetch", "--quiet", "--no-tags", "--", remote, f"+refs/heads/{base}:{ref}", check=False)
    return ref if fetched.returncode == 0 else None


def publish(engine: Any, sha: str, *, phase: str = "land", environ: Mapping[str, str] | None = None,
            transport: Any = None) -> dict:
    """Push the landed work and open or update its pull request (once per landing: ``phase``
    names it); the stored ``[orch:pull-request]`` artifact. ``ForgeError``/``GitError`` when the
    forge or the push fails."""
    stored = engine._stored("pull-request", None, phase)
    if stored is not None:
        return stored["artifact"]
    cfg = engine.config.forge
    lander = engine.lander
    if cfg.pull_requests == "scope":
        head = lander.branch
        base = base_branch(engine.tracker, lander.repo, lander.branch, engine.config.drain.base)
        if not base:
            raise ForgeError(f"{lander.branch} follows no base branch (a detached HEAD?): set drain.base")
        pushed = _git(lander.repo, "rev-parse", "--verify", f"refs/heads/{head}^{{commit}}").stdout.strip()
        # The base is the user's branch: never pushed (the forge refuses a base it does not have).
        _push(lander.repo, cfg.remote, pushed, head, force=False)
    else:
        head, base, pushed = engine.worktree.branch, lander.branch, engine.worktree.head()
        _push(lander.repo, cfg.remote, pushed, head, force=True)
        _push(lander.repo, cfg.remote, sha, base, force=False)
    crash_point("forge-pushed")
    forge = connect(cfg.provider, cfg.repository, cfg.api_url, cfg.token_env, environ, transport=transport)
    try:
        title = scope_title(engine.tracker, engine.task, lander.branch) if cfg.pull_requests == "scope" else \
            f"{neutral(str(engine.task.get('title') or engine.task['id']))[:200]} ({neutral(engine.task['id'])})"
        body = body_for(engine.tracker, lander.repo, head, base, report_url=cfg.report_url,
                        since=_remote_base(lander.repo, cfg.remote, base), merge=cfg.merge == "auto",
                        running={engine.task["id"]: {engine.run_id: float(getattr(engine.usage, "cost_usd", 0.0) or 0.0)}})
        pull: PullRequest | None = forge.find_open(head, base)
        if pull is None:
            pull = forge.open(head, base, title, body)
            action = "opened"
            crash_point("forge-opened")
        else:
            pull = forge.update(pull.number, title, body)
            action = "updated"
    finally:
        forge.api.close()
    artifact = {"provider": cfg.provider, "repository": cfg.repository, **pull.to_dict(), "action": action,
                "sha": sha, "pushed": pushed, "noun": forge.noun}
    summary = f"{forge.noun} #{pull.number} {action}: {pull.url}"
    stored = engine._checkpoint("pull-request", None, phase, summary, artifact)
    engine.mutations.append(f"{engine.task['id']}: {summary}")
    return stored["artifact"]
