"""Git integration: the task's worktree on branch ``mesh/<task-id>``.

The worktree lives in the user's cache directory, outside the repository's ``.git``
(``$XDG_CACHE_HOME/mesh/worktrees/<repo>-<hash>/<task-id>``, ``~/.cache`` by default), so the
user's checkout, HEAD and index are never touched, ``git status`` there never shows it, and
nothing run in it sits next to the repository's hooks and config. A worktree of an older mesh
(``<git-common-dir>/mesh-worktrees/<task-id>``) is still found and reused. Patches are applied
there with ``git apply --index`` after ``--check`` and a look at the worktree itself: no path
component a patch writes through may be a symlink, and no file it changes may be a hard link,
FIFO, socket or device (a worker may have planted one). Only what a patch staged is committed, with
the trailers ``Mesh-Task:`` and ``Mesh-Run:``. Nothing is ever pushed, merged or checked
out in the user's working tree, and nothing is committed on a protected branch.

Two things a patch could otherwise turn into code execution are shut off: hooks, for
every git call (``core.hooksPath`` points nowhere, so a patched ``.husky/pre-commit`` never
runs), and external diff or textconv drivers, for the diff shown to the reviewer (a patched
``.gitattributes`` could select one). Git is run as a subprocess rather than through GitPython because the child's
environment must lose ``GIT_DIR``, ``GIT_INDEX_FILE`` and their kin (set when mesh runs
from a git hook, say): inherited, they would point these commands at the user's own
repository and index, and GitPython can add variables to a child's environment but not
remove them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.worktree.patchcheck import PatchRefused, check_patch
from orchestrator.worktree.policy import PatchPolicy, PolicyViolation

__all__ = ["ALWAYS_PROTECTED", "GitError", "Worktree", "cache_dir", "changed_texts", "head_commit", "is_protected", "repo_root", "run_base",
           "worktree_home"]

ALWAYS_PROTECTED: tuple[str, ...] = ("main", "master")

_MESH_IDENTITY = {
    "GIT_AUTHOR_NAME": "mesh", "GIT_AUTHOR_EMAIL": "mesh@localhost",
    "GIT_COMMITTER_NAME": "mesh", "GIT_COMMITTER_EMAIL": "mesh@localhost",
}
# Variables that relocate the repository, its index or its objects for a child git.
_RELOCATING_ENV = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)
_SAFETY_CONFIG = (
    "-c", f"core.hooksPath={os.devnull}",
    "-c", "core.fsmonitor=false",
)
_TASK_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_TRAILER_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
# A line of a worker-written message that would pose as one of mesh's own trailers.
_FAKE_TRAILER_RE = re.compile(r"^\s*mesh-[\w-]*\s*:", re.IGNORECASE)
_LOCATION_RE = re.compile(r"(?P<path>.+?):(?P<first>\d+)(?:-(?P<last>\d+)|:\d+)?")
_GIT_TIMEOUT_S = 300.0
_WORKTREE_TRIES = 5
_WORKTREES = threading.Lock()


class GitError(Exception):
    """A git operation failed or was refused.

    ``reason`` is a short code: ``not_a_repo``, ``bad_task_id``, ``bad_base``,
    ``protected_branch``, ``wrong_branch``, ``detached_head``, ``branch_in_use``,
    ``worktree_conflict``, ``patch_refused``, ``policy_violation``, ``does_not_apply``, ``bad_trailer``,
    ``git_timeout`` or ``git_failed``.
    """

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


def _summary(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return " | ".join(lines)[:500]


def _env(extra: Mapping[str, str] | None = None, *, without_secrets: bool = False) -> dict[str, str]:
    from redact.known import secret_env_name

    env = {name: value for name, value in os.environ.items()
           if name not in _RELOCATING_ENV and not (without_secrets and secret_env_name(name))}
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"})
    env.update(extra or {})
    return env


def _git(
    cwd: Path,
    *args: str,
    input: str | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    without_secrets: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run one git command in ``cwd`` with hooks and external drivers off; ``without_secrets``
    leaves every secret-named variable (``MESH_SIGNING_KEY``, ``*_TOKEN``...) out of its
    environment, so not even a program the machine's git config runs (a pager, a helper) sees one."""
    try:
        proc = subprocess.run(
            ["git", *_SAFETY_CONFIG, *args],
            cwd=cwd, input=input, capture_output=True, env=_env(env, without_secrets=without_secrets),
            encoding="utf-8", errors="replace", timeout=_GIT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise GitError("git_timeout", f"git {args[0]} took longer than {_GIT_TIMEOUT_S:.0f}s") from None
    except FileNotFoundError:
        raise GitError("git_failed", "git is not installed") from None
    if check and proc.returncode != 0:
        raise GitError("git_failed", f"git {' '.join(args[:2])}: {_summary(proc.stderr)}")
    return proc


def repo_root(path: Path) -> Path:
    """The top folder of the work tree holding ``path``; GitError("not_a_repo") otherwise."""
    path = Path(path)
    if not path.is_dir():
        raise GitError("not_a_repo", f"{path} is not a directory")
    proc = _git(path, "rev-parse", "--show-toplevel", check=False)
    top = proc.stdout.strip()
    if proc.returncode != 0 or not top:
        raise GitError("not_a_repo", f"{path} is not inside a git work tree")
    return Path(top).resolve()


def head_commit(repo: Path) -> str:
    """The full id of the commit ``repo``'s HEAD is at; GitError when there is none."""
    return _git(repo, "rev-parse", "--verify", "HEAD^{commit}").stdout.strip()


def is_protected(branch: str, patterns: Sequence[str]) -> bool:
    """True when ``branch`` is main, master, or matches one of the fnmatch ``patterns``.

    Matching ignores case: on a case-insensitive file system ``Main`` and ``main`` are the
    same loose ref.
    """
    name = branch.removeprefix("refs/heads/").lower()
    return any(fnmatch.fnmatchcase(name, pattern.lower()) for pattern in (*ALWAYS_PROTECTED, *patterns))


def run_base(repo: Path, commit: str, run_id: str, *, depth: int = 500) -> str | None:
    """Where run ``run_id`` started below ``commit``: the first commit of ``commit``'s first-parent
    history that does not carry ``Mesh-Run: run_id`` (``commit`` itself when it is not the
    run's). None when the run's commits fill the ``depth`` newest commits or reach the root.

    The trailer, not a merge-base, says which commits are the run's: once they landed by
    fast-forward, the integration branch holds them too."""
    log = _git(repo, "log", "--first-parent", "-n", str(depth),
               "--format=%H%x00%(trailers:key=Mesh-Run,valueonly,unfold)%x1e", commit, "--", check=False)
    for record in log.stdout.split("\x1e"):
        record = record.strip("\n")
        if not record:
            continue
        sha, _, value = record.partition("\x00")
        if value.strip() != run_id:
            return sha.strip()
    return None


def _worktree(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``git worktree ARGS`` in ``root``, one at a time in this process, and again (a few times)
    when it failed on another process's half-written entry.

    Adding or removing a worktree writes its entry under .git/worktrees in steps, and any other
    worktree command reading the entries meanwhile fails ("failed to read .../commondir"): the
    threads of a drain preparing task worktrees and a landing's scratch worktree would otherwise
    fail each other's tasks."""
    with _WORKTREES:
        for attempt in range(_WORKTREE_TRIES):
            proc = _git(root, "worktree", *args, check=False)
            if proc.returncode == 0 or "failed to read" not in proc.stderr:
                break
            time.sleep(0.05 * (attempt + 1))
    if check and proc.returncode != 0:
        raise GitError("git_failed", f"git worktree {args[0]}: {_summary(proc.stderr)}")
    return proc


def _worktree_entries(root: Path) -> list[dict[str, str]]:
    listed = _worktree(root, "list", "--porcelain")
    entries: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        if not line:
            if current:
                entries.append(current)
            current = {}
            continue
        key, _, value = line.partition(" ")
        current[key] = value
    if current:
        entries.append(current)
    return entries


def _same_path(a: str | Path, b: str | Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def cache_dir() -> Path:
    """The user's cache directory: ``$XDG_CACHE_HOME`` when it is an absolute path, else ``~/.cache``."""
    configured = os.environ.get("XDG_CACHE_HOME", "")
    if configured and os.path.isabs(configured):
        return Path(configured)
    return Path.home() / ".cache"


def worktree_home(common_dir: Path) -> Path:
    """The folder holding the task worktrees of the repository whose common git directory is
    ``common_dir``: ``<cache>/mesh/worktrees/<repo name>-<12 hex of the directory's path>``."""
    common = Path(os.path.realpath(common_dir))
    name = common.parent.name if common.name == ".git" else common.name.removesuffix(".git")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")[:48] or "repo"
    digest = hashlib.sha256(os.fsencode(common)).hexdigest()[:12]
    return cache_dir() / "mesh" / "worktrees" / f"{name}-{digest}"



def changed_texts(repo: Path, base: str, head: str, limit: int = 1 << 20) -> list[tuple[str, str | None, str | None]]:
    """(path, text at ``base``, text at ``head``) of each file (at most 500) ``head`` changes
    against ``base`` in ``repo``; None for a side where the file is absent, binary or larger
    than ``limit`` bytes."""
    names = _git(repo, "diff", "--no-renames", "--name-only", "-z", base, head).stdout
    return [(name, _text_at(repo, base, name, limit), _text_at(repo, head, name, limit))
            for name in [n for n in names.split("\0") if n][:500]]


def _text_at(repo: Path, rev: str, path: str, limit: int) -> str | None:
    size = _git(repo, "cat-file", "-s", f"{rev}:{path}", check=False)
    if size.returncode != 0 or not size.stdout.strip().isdigit() or int(size.stdout) > limit:
        return None
    shown = _git(repo, "cat-file", "blob", f"{rev}:{path}", check=False)
    return shown.stdout if shown.returncode == 0 and "\0" not in shown.stdout else None

class Worktree:
    """The worktree of one task, on its own branch ``mesh/<task-id>``.

    ``base`` is the commit the branch forked from (its merge-base with the ``base`` given
    to ``prepare``): the start of "this task's commits".
    """

    def __init__(
        self,
        path: Path,
        branch: str,
        repo_root: Path,
        base: str,
        protected: Sequence[str] = ALWAYS_PROTECTED,
    ) -> None:
        self.path = Path(path)
        self.branch = branch
        self.repo_root = Path(repo_root)
        self.base = base
        self.protected = tuple(protected)

    def __repr__(self) -> str:
        return f"Worktree(path={str(self.path)!r}, branch={self.branch!r}, base={self.base[:12]!r})"

    @classmethod
    def prepare(
        cls,
        repo: Path,
        task_id: str,
        *,
        protected: Sequence[str] = ALWAYS_PROTECTED,
        base: str = "HEAD",
        run_id: str | None = None,
    ) -> "Worktree":
        """Create, or reuse for a resumed run, the worktree of ``task_id``.

        The branch ``mesh/<task_id>`` is created from ``base`` when it does not exist. Its fork
        is its merge-base with ``base``, or, when ``base`` already holds the whole branch (run
        ``run_id`` was killed after its commits landed by fast-forward), the commit below that
        run's commits: they stay this task's commits, so a resumed run does not apply them again.
        Refused when the branch name matches a protected pattern, when the branch is
        checked out elsewhere (the user's own checkout, say), or when something that is not
        this task's worktree occupies its folder.
        """
        if not _TASK_ID_RE.fullmatch(task_id) or ".." in task_id or task_id.endswith((".lock", ".")):
            raise GitError("bad_task_id", f"{task_id!r} cannot name a branch and a folder")
        root = repo_root(repo)
        branch = f"mesh/{task_id}"
        if is_protected(branch, protected):
            raise GitError("protected_branch", f"{branch} matches a protected branch pattern")
        if _git(root, "check-ref-format", "--branch", branch, check=False).returncode != 0:
            raise GitError("bad_task_id", f"{branch!r} is not a valid branch name")
        common = Path(_git(root, "rev-parse", "--git-common-dir").stdout.strip())
        if not common.is_absolute():
            common = root / common
        common = common.resolve()
        path = worktree_home(common) / task_id
        legacy = common / "mesh-worktrees" / task_id
        resolved = _git(root, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", check=False)
        if resolved.returncode != 0:
            raise GitError("bad_base", f"{base!r} does not name a commit in {root}")
        base_sha = resolved.stdout.strip()

        ref = f"refs/heads/{branch}"
        entries = _worktree_entries(root)
        mine = next((e for e in entries if _same_path(e.get("worktree", ""), path)), None)
        if mine is None and legacy.is_dir():
            # A run started by an older mesh left its worktree inside .git: resume it there.
            old = next((e for e in entries if _same_path(e.get("worktree", ""), legacy)), None)
            if old is not None and old.get("branch") == ref:
                path, mine = legacy, old
        if mine is not None and not path.is_dir():
            # Registered but its folder is gone (removed by hand): forget it and start over.
            _worktree(root, "prune")
            entries = _worktree_entries(root)
            mine = None
        if mine is not None:
            if mine.get("branch") != ref:
                raise GitError(
                    "worktree_conflict",
                    f"{path} is on {mine.get('branch', 'a detached HEAD')}, not {ref}",
                )
        else:
            elsewhere = next((e for e in entries if e.get("branch") == ref), None)
            if elsewhere is not None:
                raise GitError("branch_in_use", f"{branch} is checked out at {elsewhere.get('worktree')}")
            if path.exists() and (not path.is_dir() or any(path.iterdir())):
                raise GitError("worktree_conflict", f"{path} exists and is not the worktree of {branch}")
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            has_branch = _git(root, "show-ref", "--verify", "--quiet", ref, check=False).returncode == 0
            if has_branch:
                added = _worktree(root, "add", "--quiet", str(path), branch, check=False)
            else:
                added = _worktree(root, "add", "--quiet", "--no-track", "-b", branch, str(path), base_sha,
                                  check=False)
            if added.returncode != 0:
                raise GitError("git_failed", f"git worktree add: {_summary(added.stderr)}")
        fork = _git(root, "merge-base", base_sha, ref, check=False).stdout.strip() or base_sha
        if run_id and fork == _git(root, "rev-parse", "--verify", f"{ref}^{{commit}}").stdout.strip():
            fork = run_base(root, fork, run_id) or fork
        return cls(path=path, branch=branch, repo_root=root, base=fork, protected=protected)

    # ------------------------------------------------------------------ patches

    @staticmethod
    def _patch_text(patch: str) -> str:
        # git apply needs every line, the last one included, to end with a newline.
        return patch if patch.endswith("\n") else patch + "\n"

    def _check(self, patch: str, policy: PatchPolicy | None) -> None:
        """``check_patch``'s rules, the worktree's targets of every path, then ``policy``."""
        try:
            summary = check_patch(patch, max_bytes=max(len(patch) * 4, 1), max_files=1 << 30)
        except PatchRefused as exc:
            raise GitError("patch_refused", str(exc)) from None
        for name in summary.files:
            problem = _unsafe_target(self.path, name)
            if problem:
                raise GitError("patch_refused", problem)
        try:
            (policy or PatchPolicy()).check(summary, root=self.path)
        except PolicyViolation as exc:
            raise GitError("policy_violation", exc.detail) from None

    def apply(self, patch: str, *, policy: PatchPolicy | None = None) -> None:
        """Apply ``patch`` to the worktree and its index.

        The patch is checked (``check_patch``'s path and content rules, without size caps),
        every path it touches is looked at in the worktree (``patch_refused`` with a detail
        starting ``symlink:`` or ``special_file:`` when a component is a symlink or the target
        a hard link, FIFO, socket or device), then judged by ``policy`` (the default
        ``PatchPolicy()`` when None: GitError("policy_violation") naming the paths), and it
        is dry-run with ``git apply --check``, so a patch that fails leaves the worktree
        exactly as it was: GitError("patch_refused", "policy_violation" or "does_not_apply").
        """
        self._check(patch, policy)
        text = self._patch_text(patch)
        options = ("apply", "--index", "--whitespace=nowarn")
        dry_run = _git(self.path, *options, "--check", "-", input=text, check=False)
        if dry_run.returncode != 0:
            raise GitError("does_not_apply", _summary(dry_run.stderr) or "git apply --check failed")
        done = _git(self.path, *options, "-", input=text, check=False)
        if done.returncode != 0:
            raise GitError("does_not_apply", _summary(done.stderr) or "git apply failed")

    def commit_aside(self, patch: str, message: str, *, policy: PatchPolicy | None = None) -> str:
        """A commit of ``patch`` on top of HEAD that no branch points at, built in a private
        index: the worktree, its index and its branch are left as they are (the candidates
        profile validates each candidate this way). The same checks as ``apply`` come first;
        GitError("patch_refused", "policy_violation" or "does_not_apply") as there."""
        self._check(patch, policy)
        head = self.head()
        with tempfile.TemporaryDirectory(prefix="mesh-aside-") as scratch:
            env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            _git(self.path, "read-tree", head, env=env)
            done = _git(self.path, "apply", "--cached", "--whitespace=nowarn", "-", input=self._patch_text(patch),
                        check=False, env=env)
            if done.returncode != 0:
                raise GitError("does_not_apply", _summary(done.stderr) or "git apply failed")
            tree = _git(self.path, "write-tree", env=env).stdout.strip()
        has_user = all(_git(self.path, "config", "--get", key, check=False).stdout.strip()
                       for key in ("user.name", "user.email"))
        return _git(self.path, "commit-tree", tree, "-p", head, "-F", "-", input=self._clean_message(message, "mesh")
                    + "\n", env=None if has_user else _MESH_IDENTITY).stdout.strip()

    def is_applied(self, patch: str) -> bool:
        """True when ``patch`` is already in the worktree: its reverse applies cleanly."""
        try:
            summary = check_patch(patch, max_bytes=max(len(patch) * 4, 1), max_files=1 << 30)
        except PatchRefused:
            return False
        # git would read the targets: a planted FIFO would hang it, a symlink lead it outside.
        if any(_unsafe_target(self.path, name) for name in summary.files):
            return False
        proc = _git(
            self.path, "apply", "--reverse", "--check", "--whitespace=nowarn", "-",
            input=self._patch_text(patch), check=False,
        )
        return proc.returncode == 0

    # ------------------------------------------------------------------ commits

    def _current_branch(self) -> str:
        proc = _git(self.path, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        if proc.returncode != 0:
            raise GitError("detached_head", f"{self.path} is not on a branch")
        return proc.stdout.strip()

    @staticmethod
    def _clean_message(message: str, task_id: str) -> str:
        kept = []
        for line in message.replace("\r\n", "\n").split("\n"):
            if _FAKE_TRAILER_RE.match(line):
                continue  # only mesh writes Mesh-* trailers
            kept.append("".join(ch for ch in line if ch == "\t" or ord(ch) >= 32))
        text = "\n".join(kept).strip()
        return text or f"mesh: {task_id}"

    def commit(
        self,
        message: str,
        *,
        task_id: str,
        run_id: str,
        extra_trailers: Mapping[str, str] = {},
    ) -> str:
        """Commit what is staged (the applied patches, nothing else) and return the sha.

        The message ends with the trailers ``Mesh-Task``, ``Mesh-Run`` and any
        ``extra_trailers``. Refused on a protected branch, a detached HEAD, or any branch
        but this worktree's. The author is the git config's user, or ``mesh
        <mesh@localhost>`` when it has none. Files the validation commands left behind are
        never committed. A step whose patch is already committed makes an empty commit, so
        its trailers still record the step.
        """
        current = self._current_branch()
        if is_protected(current, self.protected):
            raise GitError("protected_branch", f"refusing to commit on protected branch {current}")
        if current != self.branch:
            raise GitError("wrong_branch", f"{self.path} is on {current}, not {self.branch}")
        trailers = {"Mesh-Task": task_id, "Mesh-Run": run_id, **dict(extra_trailers)}
        for key, value in trailers.items():
            if not _TRAILER_KEY_RE.fullmatch(key):
                raise GitError("bad_trailer", f"trailer key {key!r}")
            if not value or value != value.strip() or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
                raise GitError("bad_trailer", f"trailer {key} value {value!r}")
        body = (
            self._clean_message(message, task_id)
            + "\n\n"
            + "\n".join(f"{key}: {value}" for key, value in trailers.items())
            + "\n"
        )
        has_user = all(
            _git(self.path, "config", "--get", key, check=False).stdout.strip()
            for key in ("user.name", "user.email")
        )
        _git(
            self.path, "commit", "--quiet", "--no-verify", "--allow-empty", "--cleanup=whitespace",
            "-F", "-", input=body, env=None if has_user else _MESH_IDENTITY,
        )
        return self.head()

    # ------------------------------------------------------------------ history

    def _commits(self) -> list[tuple[str, dict[str, str]]]:
        """(sha, trailers) of each commit on the branch since ``base``, newest first.

        Trailer keys are lower-cased: git matches trailer keys without regard to case.
        """
        out = _git(
            self.path, "log", "--format=%H%x00%(trailers:only,unfold)%x1e", f"{self.base}..{self.branch}",
        ).stdout
        commits = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            sha, _, trailer_text = record.partition("\x00")
            trailers: dict[str, str] = {}
            for line in trailer_text.splitlines():
                key, sep, value = line.partition(":")
                if sep:
                    trailers.setdefault(key.strip().lower(), value.strip())
            commits.append((sha.strip(), trailers))
        return commits

    def commits_for_run(self, run_id: str) -> list[str]:
        """Shas on the task branch (since ``base``) carrying ``Mesh-Run: run_id``, newest first."""
        return [sha for sha, trailers in self._commits() if trailers.get("mesh-run") == run_id]

    def find_commit(self, *, run_id: str, trailer: str, value: str) -> str | None:
        """The newest commit of ``run_id`` whose ``trailer`` holds ``value``, or None."""
        key = trailer.lower()
        for sha, trailers in self._commits():
            if trailers.get("mesh-run") == run_id and trailers.get(key) == value:
                return sha
        return None

    def diff_from_base(self) -> str:
        """The cumulative diff of the task branch's commits against ``base``."""
        return _git(
            self.path, "diff", "--no-color", "--no-ext-diff", "--no-textconv", self.base, self.branch,
        ).stdout

    def changed_texts(self, limit: int = 1 << 20) -> list[tuple[str, str | None, str | None]]:
        """(path, text at ``base``, text on the task branch) of each file the branch changes; None
        for a side where the file is absent, binary or larger than ``limit`` bytes."""
        return changed_texts(self.path, self.base, self.branch, limit)

    def holds_nothing_new(self) -> bool:
        """True when the worktree and its index hold nothing HEAD does not, and the branch no
        commit past its base: a patch that applies as nothing is then already in the base."""
        staged = _git(self.path, "diff", "--quiet", "--cached", "HEAD", "--", check=False).returncode
        unstaged = _git(self.path, "diff", "--quiet", "--", check=False).returncode
        return staged == 0 and unstaged == 0 and self.head() == self.base

    def last_commit_touching(self, paths: list[str]) -> str | None:
        """The newest commit of the base's history that changed one of ``paths``."""
        if not paths:
            return None
        found = _git(self.path, "log", "-1", "--format=%H", self.base, "--", *paths[:50], check=False).stdout.strip()
        return found or None

    def head(self) -> str:
        """The sha of the worktree's HEAD."""
        return _git(self.path, "rev-parse", "HEAD").stdout.strip()

    # ------------------------------------------------------------------ review support

    def location_exists(self, location: str) -> bool:
        """True when ``path:line`` (or ``path:N-M``, ``path:line:col``) names real lines.

        The file must be a regular file inside the worktree (a symlink leading out of it,
        or into its ``.git``, does not count) with at least that many lines.
        """
        match = _LOCATION_RE.fullmatch(location.strip().strip("`").strip())
        if not match:
            return False
        rel = match.group("path")
        first = int(match.group("first"))
        last = int(match.group("last") or first)
        if first < 1 or last < first:
            return False
        if rel.startswith("/") or "\\" in rel or "\x00" in rel or any(ord(ch) < 32 for ch in rel):
            return False
        root = os.path.realpath(self.path)
        target = os.path.realpath(os.path.join(root, rel))
        if not target.startswith(root + os.sep):
            return False
        if ".git" in [part.lower() for part in Path(target[len(root) + 1 :]).parts]:
            return False
        if not os.path.isfile(target):
            return False
        return _count_lines(target, stop_at=last) >= last

    def runs(self) -> list[str]:
        """The ``Mesh-Run`` ids of the commits on the task branch, oldest first, once each."""
        seen: dict[str, None] = {}
        for _, trailers in reversed(self._commits()):
            if trailers.get("mesh-run"):
                seen.setdefault(trailers["mesh-run"], None)
        return list(seen)

    def start_from(self, base: str) -> str | None:
        """Fast-forward a branch that holds no commits of its own (all of them are on ``base``) to
        ``base``, its worktree with it: a new run starts from where tasks start now, not from
        where an earlier run that committed nothing left the branch (one stopped by a
        configuration mistake). Returns the tip it left, or None when the branch is there already
        or holds work of its own (that stays: the branch is not moved)."""
        target = _git(self.repo_root, "rev-parse", "--verify", f"{base}^{{commit}}").stdout.strip()
        tip = self.head()
        if tip == target or _git(self.repo_root, "merge-base", "--is-ancestor", tip, target,
                                 check=False).returncode != 0:
            return None
        moved = _git(self.path, "merge", "--ff-only", "--quiet", target, check=False)
        if moved.returncode != 0:
            raise GitError("git_failed", f"git merge --ff-only in {self.path}: {_summary(moved.stderr)}")
        self.base = target
        return tip

    def set_aside(self, new_branch: str) -> None:
        """Keep this branch's commits under ``new_branch`` and free ``mesh/<task>``: the
        worktree folder goes, the branch is renamed (nothing is deleted)."""
        if is_protected(new_branch, self.protected):
            raise GitError("protected_branch", f"{new_branch} matches a protected branch pattern")
        self.remove()
        proc = _git(self.repo_root, "branch", "-m", self.branch, new_branch, check=False)
        if proc.returncode != 0:
            raise GitError("git_failed", f"git branch -m: {_summary(proc.stderr)}")

    def remove(self) -> None:
        """Remove the worktree folder (``git worktree remove --force``) and prune; keep the branch."""
        registered = any(_same_path(e.get("worktree", ""), self.path) for e in _worktree_entries(self.repo_root))
        if registered:
            proc = _worktree(self.repo_root, "remove", "--force", str(self.path), check=False)
            if proc.returncode != 0:
                raise GitError("git_failed", f"git worktree remove: {_summary(proc.stderr)}")
        _worktree(self.repo_root, "prune")


def _unsafe_target(root: Path, name: str) -> str | None:
    """Why writing ``name`` (a path git will touch) in the worktree ``root`` is unsafe, or None.

    Each component is looked at with ``lstat`` as it is on disk, not as the patch spells it:
    a symlink anywhere on the way would carry the write out of the worktree (into its
    ``.git``, say), and an existing hard link, FIFO, socket or device at the target would
    make git write into, or block on, something that is not a file of this tree.
    """
    current = str(root)
    parts = [part for part in name.split("/") if part]
    for index, part in enumerate(parts):
        current = os.path.join(current, part)
        shown = "/".join(parts[: index + 1])
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return None  # nothing there yet: git creates the rest as plain folders and a file
        except OSError as exc:
            return f"special_file: {shown} cannot be inspected ({exc.strerror})"
        if stat.S_ISLNK(info.st_mode):
            return f"symlink: {shown} is a symlink in the worktree"
        last = index == len(parts) - 1
        if not last:
            if not stat.S_ISDIR(info.st_mode):
                return None  # a file where a folder should be: git apply refuses the patch
            continue
        if stat.S_ISDIR(info.st_mode):
            return None
        if not stat.S_ISREG(info.st_mode):
            return f"special_file: {shown} is not a regular file (FIFO, socket or device)"
        if info.st_nlink > 1:
            return f"special_file: {shown} is a hard link ({info.st_nlink} names)"
    return None


def _count_lines(path: str, *, stop_at: int) -> int:
    """Lines in the file at ``path`` (a last line without a newline counts), up to ``stop_at``."""
    count = 0
    last_byte = b""
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 16):
            count += chunk.count(b"\n")
            last_byte = chunk[-1:]
            if count >= stop_at:
                return count
    if last_byte and last_byte != b"\n":
        count += 1
    return count
