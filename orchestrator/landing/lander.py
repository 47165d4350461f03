"""Landing: approved work goes onto an integration branch through a one-at-a-time queue.

Under ``mesh run`` (unless ``--no-land``) and ``mesh drain`` each task's worktree is cut from
the tip of the scope's integration branch (``--onto``, else ``catch_up.scope_branch``) when
the task starts (after the branch followed its base: ``follow``), and after approval the task
lands as one commit (``records.task_commit_message``: the task's title, its run, review cycles
and findings fixed, with the ``Mesh-Task``/``Mesh-Run``/``Mesh-Land``/``Mesh-Source`` trailers):

1. its tree is the task's final tree when nothing landed since the task started (``squash``);
   otherwise the task's commits are re-created one by one on top of the integration tip (a
   rebase, done in a private index with three-way ``git apply``: no checkout is touched) and
   the result's tree is taken (``rebase``); when that conflicts, the task's head is merged
   into the tip instead (``git merge-tree``, ``merge``), and when that conflicts too the
   landing fails with ``conflict``. The intermediate commits stay on the task's branch;
2. the task's validation commands run on the resulting commit, in the sandbox every
   validation uses (``validation.sandbox``);
3. only when they pass is the integration branch fast-forwarded to it, with a
   compare-and-set on its old tip (``git update-ref``): it only ever moves forward (merges
   of its base aside, one commit per task).

One landing runs at a time, in the order tasks reached the queue (their approval order),
and across processes and machines too: each landing holds the tracker's named lock
``land:<remote or repo>:<branch>`` (``locks.named_lock``), so runners sharing a tracker take
turns. The integration branch is never a protected branch and never the branch checked out
in any worktree (the user's among them), so the user's checkout is never touched.

Nothing is pushed unless a ``remote`` is given (``--remote``, ``drain.remote``). Then task
worktrees are cut from the remote's integration branch (fetched first), each approved task
branch is pushed as ``mesh/<task>``, and a landing moves the remote branch with a push that
carries ``--force-with-lease=<branch>:<tip it started from>``: when another runner landed
first the push is refused, and the landing starts over on the new tip (fetch, rebase,
re-validate). The local integration branch follows the remote's.

A result whose tree is exactly the tree the task's own validation passed on (nothing landed
since the task started) is not validated twice. Every landing is recorded as an
``[orch:land]`` checkpoint, written before the lock is released and at most once per run.
A landing killed half way is redone from the start (the branch had not moved; a scratch
worktree of an unsandboxed validation is removed). One killed after the branch moved (the
remote's or the local one) but before its checkpoint is recognised by the ``Mesh-Run``
trailer of the task's commits on the branch and not repeated; the resumed run's worktree
keeps those commits as its own (``Worktree.prepare``), so nothing is applied twice. A failed
landing sends the task back once (``SendBack``: a new run on the current tip, told what went
wrong); a second failure blocks it with ``merge_conflict`` or ``integration_validation_failed``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.landing.locks import named_lock
from orchestrator.protocol.proof import brief
from orchestrator.protocol.outcomes import Blocked, SendBack
from orchestrator.protocol.checkpoint import load_checkpoints
from orchestrator.protocol.faults import crash_point
from orchestrator.worktree.gitops import (_GIT_TIMEOUT_S, _MESH_IDENTITY, _SAFETY_CONFIG, GitError, _env, _git, _summary, _worktree,
                     _worktree_entries, is_protected, repo_root)
from orchestrator.landing.records import (LandResult, fixed_findings, land_checkpoints, landed_commits,
                                          task_commit_message)

if TYPE_CHECKING:  # the model only types the lander: read-only views import this module without pydantic
    from orchestrator.config import MeshConfig

__all__ = ["Lander", "SCRATCH_PREFIX", "failure_detail", "landing_phase"]

SCRATCH_PREFIX = "mesh-land-"


def _has_user(root: Path) -> bool:
    return all(_git(root, "config", "--get", key, check=False).stdout.strip() for key in ("user.name", "user.email"))


_MOVED_RETRIES = 5


class _BranchMoved(Exception):
    """The integration branch moved between reading its tip and fast-forwarding it."""


class _Fifo:
    """A lock granted in arrival order (``threading.Lock`` promises no order)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next = 0
        self._serving = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        with self._cond:
            ticket = self._next
            self._next += 1
            while self._serving != ticket:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._serving += 1
                self._cond.notify_all()


class Lander:
    """The integration branch of one ``mesh run`` or ``mesh drain`` and its merge queue.

    ``emit(event, fields)`` is told about queue and landing events (the live view).
    """

    def __init__(self, repo: Path, branch: str, config: MeshConfig, *,
                 emit: Callable[[str, Mapping[str, Any]], None] | None = None, remote: str | None = None) -> None:
        self.repo = repo_root(repo)
        self.branch = branch
        self.ref = f"refs/heads/{branch}"
        self.config = config
        self.remote = remote
        # The project's Python environment landing validation runs in (set by the caller).
        self.environment = None
        where = self._remote_url() if remote else str(self.repo)
        self.lock_name = f"land:{where}:{branch}"
        self.emit = emit or (lambda event, fields: None)
        self.queue: list[str] = []
        self._queue_lock = threading.Lock()
        self._fifo = _Fifo()
        # One fetch at a time: a task starting (cut_base) and a landing fetching together would
        # race for the remote-tracking ref ("cannot lock ref") and fail one of them.
        self._sync_lock = threading.Lock()
        self._ensure_branch()

    # ------------------------------------------------------------------ the branch

    def _ensure_branch(self) -> None:
        """Refuse a protected or checked-out branch; create it from HEAD when missing."""
        if is_protected(self.branch, self.config.protected_branches):
            raise GitError("protected_branch", f"{self.branch} is a protected branch; choose another --onto")
        if _git(self.repo, "check-ref-format", "--branch", self.branch, check=False).returncode != 0:
            raise GitError("bad_base", f"{self.branch!r} is not a valid branch name")
        for entry in _worktree_entries(self.repo):
            if entry.get("branch") == self.ref:
                raise GitError("branch_in_use", f"{self.branch} is checked out at {entry.get('worktree')}; mesh"
                               " never moves a checked-out branch")
        if self.remote:
            self.sync()
        if _git(self.repo, "show-ref", "--verify", "--quiet", self.ref, check=False).returncode != 0:
            head = _git(self.repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False).stdout.strip()
            if not head:
                raise GitError("bad_base", f"{self.repo} has no commit to start {self.branch} from")
            # A compare-and-set on "no such ref": two drains starting together create it once.
            _git(self.repo, "update-ref", self.ref, head, "0" * 40, check=False)
        if self.remote and not self._remote_tip():
            # The first runner publishes the branch; "must not exist yet" is the lease.
            self._push(self.tip(), self.branch, expect="")
            self.sync()
        self.drop_scratch()

    # ------------------------------------------------------------------ the shared remote

    def _remote_url(self) -> str:
        got = _git(self.repo, "remote", "get-url", "--", self.remote, check=False)
        if got.returncode != 0:
            raise GitError("bad_remote", f"no git remote named {self.remote!r} in {self.repo}")
        return got.stdout.strip()

    def _remote_tip(self) -> str:
        """The sha of the integration branch on the remote ('' when it has none)."""
        got = _git(self.repo, "ls-remote", "--heads", "--", self.remote, self.ref, check=False)
        if got.returncode != 0:
            raise GitError("remote_unavailable", f"git ls-remote {self.remote}: {_summary(got.stderr)}")
        return got.stdout.split()[0] if got.stdout.strip() else ""

    def sync(self) -> str:
        """Fetch the remote's integration branch and move the local one to it (unless the local
        one already holds it); returns the local tip. Without a remote, just the tip."""
        if not self.remote:
            return self.tip()
        with self._sync_lock:
            return self._sync()

    def _sync(self) -> str:
        remote_tip = self._remote_tip()
        if not remote_tip and not self._local_tip():
            return ""  # neither side has it yet: _ensure_branch creates and publishes it
        if remote_tip:
            fetched = _git(self.repo, "fetch", "--quiet", "--no-tags", "--", self.remote,
                           f"+{self.ref}:refs/remotes/{self.remote}/{self.branch}", check=False)
            if fetched.returncode != 0:
                raise GitError("remote_unavailable", f"git fetch {self.remote}: {_summary(fetched.stderr)}")
            local = self._local_tip()
            if not local or _git(self.repo, "merge-base", "--is-ancestor", remote_tip, local,
                                 check=False).returncode != 0:
                _git(self.repo, "update-ref", self.ref, remote_tip)
                crash_point("land-sync")
        return self.tip()

    def _local_tip(self) -> str:
        return _git(self.repo, "rev-parse", "--verify", "--quiet", f"{self.ref}^{{commit}}", check=False).stdout.strip()

    def cut_base(self) -> str:
        """Where a task's worktree starts: the integration branch's tip (the remote's, fetched)."""
        return self.sync()

    def _push(self, sha: str, branch: str, *, expect: str | None) -> bool:
        """Push ``sha`` to the remote's ``branch``. ``expect`` is the lease: the sha the remote branch
        must still hold ('' = must not exist); None force-pushes (mesh's own task branches).
        False when the remote refused because the branch moved."""
        if is_protected(branch, self.config.protected_branches):
            raise GitError("protected_branch", f"mesh never pushes the protected branch {branch}")
        ref = f"refs/heads/{branch}"
        lease = [] if expect is None else [f"--force-with-lease={ref}:{expect}"]
        spec = f"+{sha}:{ref}" if expect is None else f"{sha}:{ref}"
        pushed = _git(self.repo, "push", "--quiet", "--no-verify", "--porcelain", *lease, "--", self.remote, spec,
                      check=False)
        if pushed.returncode == 0:
            return True
        if "stale info" in pushed.stdout + pushed.stderr or "rejected" in pushed.stdout + pushed.stderr:
            return False
        raise GitError("remote_unavailable", f"git push {self.remote} {branch}: {_summary(pushed.stderr)}")

    def move(self, new: str, old: str, *, pushed: str = "follow-push") -> bool:
        """Move the branch from ``old`` to ``new`` (the remote's first, with ``old`` as the lease,
        then the local one, a compare-and-set); False when another landing moved it meanwhile.
        ``pushed`` names the crash point between the two moves."""
        if self.remote:
            if not self._push(new, self.branch, expect=old):
                return False
            crash_point(pushed)
        moved = _git(self.repo, "update-ref", self.ref, new, old, check=False)
        if moved.returncode != 0:
            if self.tip() != old:
                return False
            raise GitError("git_failed", f"git update-ref {self.branch}: {_summary(moved.stderr)}")
        return True

    def tip(self) -> str:
        """The sha the integration branch points at now."""
        return _git(self.repo, "rev-parse", "--verify", f"{self.ref}^{{commit}}").stdout.strip()

    def drop_scratch(self) -> None:
        """Remove scratch worktrees a killed landing left behind."""
        for entry in _worktree_entries(self.repo):
            path = entry.get("worktree", "")
            if Path(path).name.startswith(SCRATCH_PREFIX) and "detached" in entry:
                _worktree(self.repo, "remove", "--force", path, check=False)
        _worktree(self.repo, "prune", check=False)

    @contextmanager
    def turn(self, tracker: Any, task_id: str, run_id: str) -> Iterator[None]:
        """This process's turn in the queue (arrival order), then the tracker's lock of the branch."""
        with self._fifo.turn(), named_lock(
                tracker, self.lock_name, holder=f"{tracker.actor}:{run_id}",
                on_wait=lambda holder: self.emit("land_waiting", {"task": task_id, "holder": holder})):
            yield

    # ------------------------------------------------------------------ engine side

    def attach(self, engine: Any) -> None:
        """Make ``engine`` cut from and land onto this branch; a task sent back earlier gets
        what went wrong in its notes, so every role of the new attempt sees it."""
        engine.lander = self
        forge = getattr(engine.config, "forge", None)
        if forge is not None and not os.environ.get(forge.token_name()):
            # Said before any worker is paid: the work would land, but no pull request would follow.
            engine.notes.append(f"warning: [forge] {forge.provider} {forge.repository}: {forge.token_name()} is not"
                                " set, so landed work will not become a pull request; export it")
        failed = [cp for cp in land_checkpoints(load_checkpoints(engine.tracker, engine.task["id"]))
                  if cp.run_id != engine.run_id and (cp.payload.get("artifact") or {}).get("result") != "landed"]
        if not failed:
            return
        last = failed[-1].payload["artifact"]
        meta = dict(engine.bus.task_meta)
        note = (f"An earlier attempt (run {failed[-1].run_id}) was approved but could not land on {self.branch}:"
                f" {last.get('result')}: {last.get('detail') or ''}".strip()
                + f"\nThis attempt starts from the current tip of {self.branch}; make the change fit it.")
        meta["notes"] = f"{meta.get('notes') or ''}\n\n{note}".strip()
        engine.bus.set_task_meta(meta)

    def land(self, engine: Any) -> str:
        """Land ``engine``'s approved work (once, even on resume) and return the landed sha.

        The steps, each a crash point: take the lock, push the task branch (with a remote),
        make the commits, push the integration branch (with a remote), move the local branch,
        record ``[orch:land]``, release the lock. Killed anywhere, the same run resumed lands
        once: its commits already on the branch are found by their ``Mesh-Run`` trailer and
        only the steps after the move are done. Raises ``SendBack`` on a first failure of the
        task, ``Blocked`` on a second.
        """
        task_id = engine.task["id"]
        phase = landing_phase(engine)
        stored = engine._stored("land", None, phase)
        if stored is None:
            commands = list((engine.bus.synthesis or {}).get("validation_commands") or [])
            self.emit("land_queued", {"task": task_id})
            with self._queue_lock:
                self.queue.append(task_id)
            try:
                with self.turn(engine.tracker, task_id, engine.run_id):
                    crash_point("land-locked")
                    self.emit("land_started", {"task": task_id})
                    validated = engine.worktree.head() if engine.validation_pass else None
                    if self.remote:
                        self._push(engine.worktree.head(), engine.worktree.branch, expect=None)
                        crash_point("land-push-task")
                    message = task_commit_message(engine.task, engine.run_id, review_cycles=engine.bus.review_cycle,
                                                  findings=fixed_findings(engine.bus.reviews))
                    # A later landing of the run (the forge asked for changes) lands what the
                    # task did since the one before.
                    earlier = None if phase == "land" else engine.memo[("land", "", "land")].payload
                    fork = _source_of(self.repo, earlier["artifact"]["sha"]) if earlier else engine.worktree.base
                    outcome = self.land_commits(task_id=task_id, run_id=engine.run_id, fork=fork,
                                                head=engine.worktree.branch, commands=commands, validated=validated,
                                                message=message, again=earlier is not None)
                    # Recorded under the lock: the next landing finds the branch and its record agreeing.
                    stored = self._record(engine, outcome, phase)
                    crash_point("land-checkpoint")
                crash_point("land-unlocked")
            finally:
                with self._queue_lock:
                    self.queue.remove(task_id)
        artifact = stored["artifact"]
        if artifact["result"] == "landed":
            return artifact["sha"]
        reason = "merge_conflict" if artifact["result"] == "conflict" else "integration_validation_failed"
        if artifact.get("action") == "send_back":
            raise SendBack(f"{reason}: {artifact.get('detail')}")
        raise Blocked(reason, artifact.get("detail") or "")

    def publish(self, engine: Any, sha: str) -> dict | None:
        """Open or update the pull request of the landed work ([forge], ``pull_requests``); its
        ``[orch:pull-request]`` artifact. A forge or push that fails leaves the task landed and
        says so (None): the next landing of the scope (or the same run resumed) publishes again."""
        from orchestrator.forges.model import ForgeError
        from orchestrator.landing.pull_requests import publish

        try:
            return publish(engine, sha, phase=landing_phase(engine))
        except (ForgeError, GitError) as exc:
            message = f"pull request not published: {exc}"
            engine.bus.note("forge_failed", message)
            engine.mutations.append(f"{engine.task['id']}: {message}")
            engine.echo(f"warning: {message} (the scope's next landing publishes again)")
            return None

    def forge_verdict(self, engine: Any, published: dict | None) -> str:
        """The forge's verdict on the pushed head (``forge_verdict``): its state; ``ForgeChanges``
        when it asks for changes. A forge that cannot answer is said, as a failed publication is."""
        from orchestrator.forges.model import ForgeError
        from orchestrator.landing.forge_verdict import verdict_of

        if published is None:
            return "unpublished"
        try:
            return verdict_of(engine, published, phase=landing_phase(engine))
        except ForgeError as exc:
            message = f"the {published.get('provider')} checks could not be read: {exc}"
            engine.bus.note("forge_failed", message)
            engine.mutations.append(f"{engine.task['id']}: {message}")
            engine.echo(f"warning: {message}")
            return "unknown"

    def _record(self, engine: Any, outcome: LandResult, phase: str = "land") -> dict:
        """Write the landing's ``[orch:land]`` checkpoint (once per run: its dedupe key names the
        run) and return its payload."""
        task_id = engine.task["id"]
        earlier = [cp for cp in land_checkpoints(load_checkpoints(engine.tracker, task_id))
                   if cp.run_id != engine.run_id and (cp.payload.get("artifact") or {}).get("result") != "landed"]
        artifact = outcome.to_dict()
        artifact["attempt"] = len(earlier) + 1
        artifact["action"] = ("none" if outcome.result == "landed" else "send_back" if not earlier else "block")
        summary = (f"{outcome.result} on {self.branch}" + (f" at {outcome.sha[:12]} ({outcome.method})"
                                                            if outcome.sha else "")
                   + ("; its tree had passed these commands before, not run again" if outcome.reused else "")
                   + (f"; {artifact['action'].replace('_', ' ')}" if artifact["action"] != "none" else ""))
        stored = engine._checkpoint("land", None, phase, summary, artifact, details=outcome.detail)
        engine.mutations.append(f"land {task_id}: {summary}")
        self.emit("land_done", {"task": task_id, **{k: artifact[k] for k in ("result", "sha", "method",
                                                                            "duration_s", "validation_s")}})
        return stored

    # ------------------------------------------------------------------ git side

    def land_commits(self, *, task_id: str, run_id: str, fork: str, head: str, commands: list[str],
                     validated: str | None = None, message: str | None = None, again: bool = False) -> LandResult:
        """Land as ``_land_once`` does; when another process moved the branch during the landing
        (its compare-and-set failed), land again on the new tip."""
        for _ in range(_MOVED_RETRIES):
            try:
                return self._land_once(task_id=task_id, run_id=run_id, fork=fork, head=head, commands=commands,
                                       validated=validated, message=message, again=again)
            except _BranchMoved:
                continue
        raise GitError("git_failed", f"{self.branch} kept moving during the landing of {task_id}")

    def _land_once(self, *, task_id: str, run_id: str, fork: str, head: str, commands: list[str],
                   validated: str | None = None, message: str | None = None, again: bool = False) -> LandResult:
        """Land ``fork..head`` on the tip as one commit, validate it, fast-forward the branch.

        The commit's tree is the task's final tree when nothing landed since the task started,
        else its commits replayed onto the tip (or, when that conflicts, ``head`` merged into
        it); its message is ``message`` (``records.task_commit_message``) with the trailers.
        ``validated`` is a commit whose tree already passed these commands (the task's last
        proof): a result with exactly that tree (nothing landed since the task started) is not
        validated again. Idempotent: commits of ``run_id`` already on the branch are reported
        as landed (``again``, a later landing of the run: its commit of this very ``head``).
        """
        started = time.monotonic()
        onto = self.sync()
        done = landed_commits(self.repo, self.branch, run_id=run_id).get(run_id)
        if done and again:
            source = _git(self.repo, "rev-parse", "--verify", f"{head}^{{commit}}").stdout.strip()
            done = [sha for sha in done if _source_of(self.repo, sha) == source]
        if done:
            return LandResult("landed", self.branch, onto=onto, sha=done[-1], method="already",
                              duration_s=time.monotonic() - started)
        commits = _git(self.repo, "rev-list", "--reverse", f"{fork}..{head}").stdout.split()
        if not commits:
            return LandResult("landed", self.branch, onto=onto, sha=onto, method="empty",
                              duration_s=time.monotonic() - started)
        identity = None if _has_user(self.repo) else _MESH_IDENTITY
        if onto == _git(self.repo, "rev-parse", "--verify", f"{fork}^{{commit}}").stdout.strip() or (
                again and _tree(self.repo, onto) == _tree(self.repo, fork)):
            # Nothing landed since the task started: the task's own final tree, the very tree
            # that was validated and reviewed (what a signed run head names).
            method, merged = "squash", commits[-1]
        else:
            method, merged = "rebase", self._replay(commits, onto, identity)
        if merged is None:
            method = "merge"
            merged, conflict = self._squash(onto, head, identity)
            if merged is None:
                return LandResult("conflict", self.branch, onto=onto, method=method, detail=conflict,
                                  duration_s=time.monotonic() - started)
        # One commit per task: its tree is the merged tree, its message the task's (the
        # intermediate commits stay on the task branch, named by its Mesh-Source trailer).
        text = (message or f"mesh: {task_id}").rstrip() + (
            f"\n\nMesh-Task: {task_id}\nMesh-Run: {run_id}\nMesh-Land: {method}\nMesh-Source: {commits[-1]}\n")
        name, email, date = _git(self.repo, "log", "-1", "--format=%an%x00%ae%x00%aI", commits[-1]).stdout.strip().split("\x00")
        author = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
        new = _git(self.repo, "commit-tree", _tree(self.repo, merged), "-p", onto, "-F", "-", input=text,
                   env={**(identity or {}), **author}).stdout.strip()
        crash_point("land-commit")
        checked = time.monotonic()
        revalidated = not (validated and _tree(self.repo, new) == _tree(self.repo, validated))
        results, passed = self.validate(new, commands) if revalidated else ([], True)
        reused = bool(results) and all(r.get("reused") for r in results)
        validation_s = time.monotonic() - checked
        if not passed:
            detail = failure_detail(results)
            return LandResult("validation_failed", self.branch, onto=onto, sha=new, method=method,
                              detail=detail, validation=_brief(results), revalidated=True,
                              duration_s=time.monotonic() - started, validation_s=validation_s)
        if not self.move(new, onto, pushed="land-push"):
            raise _BranchMoved()  # another runner landed first: fetch, rebase, re-validate
        crash_point("land-ref")
        return LandResult("landed", self.branch, onto=onto, sha=new, method=method,
                          validation=_brief(results), revalidated=revalidated and not reused,
                          duration_s=time.monotonic() - started, validation_s=validation_s, reused=reused)

    def _replay(self, commits: list[str], onto: str, identity: Mapping[str, str] | None) -> str | None:
        """Re-create each commit on top of ``onto`` (a rebase without a checkout: each commit's
        diff is applied three-way to a private index); the new tip, or None on a conflict.
        Messages (trailers included), authors and dates are kept."""
        with tempfile.TemporaryDirectory(prefix="mesh-land-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **(identity or {})}
            current = onto
            for commit in commits:
                _git(self.repo, "read-tree", current, env=env)
                patch = _git_bytes(self.repo, "diff-tree", "-p", "--binary", "--no-color", "--no-ext-diff",
                                   "--no-textconv", f"{commit}^", commit)
                if patch.stdout.strip():
                    applied = _git_bytes(self.repo, "apply", "--cached", "--3way", "--whitespace=nowarn", "-",
                                         input=patch.stdout, env=env)
                    if applied.returncode != 0:
                        return None
                tree = _git(self.repo, "write-tree", env=env).stdout.strip()
                name, email, date, message = _git(self.repo, "log", "-1", "--format=%an%x00%ae%x00%aI%x00%B",
                                                  commit).stdout.split("\x00", 3)
                author = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
                current = _git(self.repo, "commit-tree", tree, "-p", current, "-F", "-", input=message,
                               env={**(identity or {}), **author}).stdout.strip()
            return current

    def _squash(self, onto: str, head: str, identity: Mapping[str, str] | None) -> tuple[str | None, str]:
        """Merge ``head`` into ``onto`` without a checkout (``git merge-tree``): (a commit holding
        the merged tree, "") or (None, the conflict naming its files)."""
        merged = _git(self.repo, "merge-tree", "--write-tree", "--name-only", "--no-messages", onto, head,
                      check=False)
        lines = merged.stdout.split()
        if merged.returncode != 0 or not lines:
            what = ", ".join(dict.fromkeys(lines[1:])) or _summary(merged.stderr)
            return None, f"the task's change conflicts with {self.branch} in: {what}"
        sha = _git(self.repo, "commit-tree", lines[0], "-p", onto, "-m", "merged tree", env=identity).stdout.strip()
        return sha, ""

    def validate(self, commit: str, commands: list[str]) -> tuple[list[dict], bool]:
        """Run ``commands`` on ``commit``'s tree: bwrap materialises it from git objects; without
        a sandbox it is checked out in a scratch worktree first."""
        from orchestrator.sandbox.validation import run_configured
        from orchestrator.toolchains.base_check import BaseCheck, passed_before, record_passed

        cfg = self.config.validation
        before = passed_before(self.repo, commit, commands, self.environment)
        if before is not None:  # this very tree passed these commands already: its results stand
            return before, True
        scratch = None
        if cfg.sandbox == "none" and commands:
            scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
            added = _worktree(self.repo, "add", "--quiet", "--detach", str(scratch), commit, check=False)
            if added.returncode != 0:
                shutil.rmtree(scratch, ignore_errors=True)
                raise GitError("git_failed", f"git worktree add: {_summary(added.stderr)}")
        try:
            results = run_configured(commands, cfg, cwd=scratch or self.repo, commit=commit,
                                     environment=self.environment)
        finally:
            if scratch is not None:
                _worktree(self.repo, "remove", "--force", str(scratch), check=False)
                shutil.rmtree(scratch, ignore_errors=True)
        dicts = [r.to_dict() for r in results]
        ran = [r for r in dicts if not r["rejected"]]
        passed = bool(ran) and all(r["passed"] for r in ran) if (commands or cfg.required) else True
        if passed and results:
            from orchestrator.toolchains.base_check import note_validated

            # The merged tree passed its check commands: the task cut from it pays no base check;
            # and these commands: a landing of the same tree (a retry, another runner) runs nothing.
            note_validated(self.repo, commit, results, self.environment, cfg)
            record_passed(self.repo, BaseCheck(commit, list(commands), dicts), self.environment)
        return dicts, passed


def failure_detail(results: list[dict]) -> str:
    """What failed of a validation's ``results``: each failing command, its exit and stderr's tail."""
    return "; ".join(f"`{r['command']}` " + ("rejected" if r["rejected"] else f"exit {r['exit_code']}")
                     + (f": {r['stderr_tail'][-300:]}" if r.get("stderr_tail") else "")
                     for r in results if not r["passed"]) or "no validation command ran"


def _git_bytes(cwd: Path, *args: str, input: bytes | None = None,
               env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``gitops._git`` for bytes: a diff is carried from one git to another undecoded."""
    return subprocess.run(["git", *_SAFETY_CONFIG, *args], cwd=cwd, input=input, capture_output=True,
                          env=_env(env), timeout=_GIT_TIMEOUT_S)


def landing_phase(engine: Any) -> str:
    """The checkpoint phase of the run's landing now: ``land`` for its first (and that one
    resumed), ``land-rN`` for one after the forge asked for changes (review cycle N)."""
    first = engine.memo.get(("land", "", "land"))
    if first is None or first.payload.get("review_cycle") == engine.bus.review_cycle:
        return "land"
    return f"land-r{engine.bus.review_cycle}"


def _source_of(repo: Path, sha: str) -> str:
    """The task commit a landing commit was made from (its ``Mesh-Source`` trailer), '' if none."""
    return _git(repo, "log", "-1", "--format=%(trailers:key=Mesh-Source,valueonly,unfold)", sha,
                check=False).stdout.strip()


def _tree(repo: Path, commit: str) -> str:
    return _git(repo, "rev-parse", f"{commit}^{{tree}}").stdout.strip()


def _brief(results: list[dict]) -> list[dict]:
    return [brief(r) for r in results]
