"""Git integration: the task's worktree on branch ``mesh/<task-id>``.

The worktree lives under the repository's common git directory
(``<git-common-dir>/mesh-worktrees/<task-id>``), so the user's checkout, HEAD and
index are never touched. Patches are applied there and committed with the
trailers ``Mesh-Task:`` and ``Mesh-Run:``. Nothing is ever pushed or merged, and
nothing is committed on a protected branch. Hooks never run: a patch can change
the files a hook framework reads, so running them would execute model output.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["GitError", "Worktree", "repo_root", "is_protected", "ALWAYS_PROTECTED"]

ALWAYS_PROTECTED = ("main", "master")
_IDENTITY = {"GIT_AUTHOR_NAME": "mesh", "GIT_AUTHOR_EMAIL": "mesh@localhost",
             "GIT_COMMITTER_NAME": "mesh", "GIT_COMMITTER_EMAIL": "mesh@localhost"}


class GitError(Exception):
    """A git operation failed or was refused; ``reason`` is a short code."""

    def __init__(self, reason: str, message: str = ""):
        super().__init__(message or reason)
        self.reason = reason


def _git(cwd: Path, *args: str, input: str | None = None, check: bool = True,
         env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        full_env.pop(var, None)
    proc = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *args], cwd=cwd, input=input,
                          capture_output=True, text=True, env=full_env)
    if check and proc.returncode != 0:
        raise GitError("git_failed", f"git {' '.join(args[:2])}: {proc.stderr.strip()[:500]}")
    return proc


def repo_root(path: Path) -> Path:
    """The top folder of the git repository holding ``path``; ``GitError('not_a_repo')`` otherwise."""
    if not Path(path).is_dir():
        raise GitError("not_a_repo", f"{path} is not a directory")
    proc = _git(Path(path), "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise GitError("not_a_repo", f"{path} is not inside a git repository")
    return Path(proc.stdout.strip())


def is_protected(branch: str, patterns: Sequence[str]) -> bool:
    """True when ``branch`` is main, master, or matches a configured (fnmatch) pattern."""
    return any(fnmatch.fnmatchcase(branch, p) for p in (*ALWAYS_PROTECTED, *patterns))


class Worktree:
    """The worktree of one task on its own branch."""

    def __init__(self, path: Path, branch: str, repo_root: Path, base: str, protected: Sequence[str]):
        self.path = path
        self.branch = branch
        self.repo_root = repo_root
        self.base = base
        self.protected = tuple(protected)

    @classmethod
    def prepare(cls, repo: Path, task_id: str, *, protected: Sequence[str] = ALWAYS_PROTECTED,
                base: str = "HEAD") -> "Worktree":
        """Create (or reuse, for a resumed run) the worktree of ``task_id`` on ``mesh/<task_id>``."""
        root = repo_root(repo)
        branch = f"mesh/{task_id}"
        if is_protected(branch, protected):
            raise GitError("protected_branch", f"{branch} matches a protected branch pattern")
        if _git(root, "check-ref-format", f"refs/heads/{branch}", check=False).returncode != 0:
            raise GitError("bad_branch", f"{branch!r} is not a valid branch name")
        common = Path(_git(root, "rev-parse", "--git-common-dir").stdout.strip())
        if not common.is_absolute():
            common = (root / common).resolve()
        path = common / "mesh-worktrees" / task_id
        base_sha = _git(root, "rev-parse", "--verify", f"{base}^{{commit}}").stdout.strip()
        has_branch = _git(root, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False).returncode == 0
        registered = str(path) in _git(root, "worktree", "list", "--porcelain").stdout
        if path.exists() and registered:
            current = _git(path, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
            if current != branch:
                raise GitError("worktree_mismatch", f"{path} is on {current}, not {branch}")
        else:
            _git(root, "worktree", "prune")
            path.parent.mkdir(parents=True, exist_ok=True)
            if has_branch:
                _git(root, "worktree", "add", "-q", str(path), branch)
            else:
                _git(root, "worktree", "add", "-q", "-b", branch, str(path), base_sha)
        fork = _git(root, "merge-base", branch, base_sha, check=False).stdout.strip() or base_sha
        return cls(path=path, branch=branch, repo_root=root, base=fork, protected=protected)

    # ------------------------------------------------------------------ patches

    def apply(self, patch: str) -> None:
        """Apply ``patch`` to the worktree and index; on failure nothing changes."""
        check = _git(self.path, "apply", "--check", "--whitespace=nowarn", "-", input=patch, check=False)
        if check.returncode != 0:
            raise GitError("does_not_apply", check.stderr.strip()[:500] or "git apply --check failed")
        done = _git(self.path, "apply", "--index", "--whitespace=nowarn", "-", input=patch, check=False)
        if done.returncode != 0:
            _git(self.path, "reset", "-q", "--hard", "HEAD")
            raise GitError("does_not_apply", done.stderr.strip()[:500])

    def is_applied(self, patch: str) -> bool:
        """True when ``patch`` is already in the worktree (its reverse applies cleanly)."""
        return _git(self.path, "apply", "--reverse", "--check", "-", input=patch, check=False).returncode == 0

    def commit(self, message: str, *, task_id: str, run_id: str, extra_trailers: Mapping[str, str] = {}) -> str:
        """Commit what is staged, with the mesh trailers; refused on a protected branch."""
        current = _git(self.path, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
        if current != self.branch or is_protected(current, self.protected):
            raise GitError("protected_branch", f"refusing to commit on {current}")
        _git(self.path, "add", "-A")
        trailers = {"Mesh-Task": task_id, "Mesh-Run": run_id, **extra_trailers}
        body = message.rstrip() + "\n\n" + "\n".join(f"{k}: {v}" for k, v in trailers.items()) + "\n"
        identity = {} if _git(self.path, "config", "user.email", check=False).stdout.strip() else _IDENTITY
        _git(self.path, "commit", "-q", "--no-verify", "--allow-empty", "-F", "-", input=body, env=identity)
        return self.head()

    # ------------------------------------------------------------------ history

    def _commits(self) -> list[tuple[str, dict[str, str]]]:
        out = _git(self.path, "log", "--format=%H%x00%(trailers:unfold,only)%x1e", f"{self.base}..{self.branch}").stdout
        commits = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            sha, _, trailer_text = record.partition("\x00")
            trailers = {}
            for line in trailer_text.splitlines():
                key, sep, value = line.partition(":")
                if sep:
                    trailers[key.strip()] = value.strip()
            commits.append((sha.strip(), trailers))
        return commits

    def commits_for_run(self, run_id: str) -> list[str]:
        """Shas on the task branch (since its base) carrying ``Mesh-Run: run_id``."""
        return [sha for sha, t in self._commits() if t.get("Mesh-Run") == run_id]

    def find_commit(self, *, run_id: str, trailer: str, value: str) -> str | None:
        """The commit of ``run_id`` whose ``trailer`` holds ``value`` (a step already committed)."""
        for sha, t in self._commits():
            if t.get("Mesh-Run") == run_id and t.get(trailer) == value:
                return sha
        return None

    def diff_from_base(self) -> str:
        """The cumulative diff of the task branch against where it forked."""
        return _git(self.path, "diff", f"{self.base}..{self.branch}").stdout

    def head(self) -> str:
        return _git(self.path, "rev-parse", "HEAD").stdout.strip()

    def location_exists(self, location: str) -> bool:
        """True when ``path:line`` (or ``path:N-M``) names real lines of a file in the worktree."""
        path_text, sep, line_text = location.strip().strip("`").rpartition(":")
        if not sep or not path_text:
            return False
        first = line_text.split("-", 1)[0]
        last = line_text.split("-", 1)[-1]
        if not first.isdigit() or not last.isdigit() or int(first) < 1:
            return False
        root = os.path.realpath(self.path)
        target = os.path.realpath(os.path.join(root, path_text))
        if not target.startswith(root + os.sep) or not os.path.isfile(target):
            return False
        if os.sep + ".git" + os.sep in target[len(root):] + os.sep:
            return False
        with open(target, "rb") as fh:
            count = sum(1 for _ in fh)
        return int(last) <= count

    def remove(self) -> None:
        """Remove the worktree folder; the branch stays."""
        _git(self.repo_root, "worktree", "remove", "--force", str(self.path), check=False)
        _git(self.repo_root, "worktree", "prune", check=False)
