"""Attacks on the task worktree itself: files a worker plants there before a patch is applied
(issue 9, attack 4), and the worktree's place outside the repository's ``.git``.

A ``command`` worker runs with the worktree as its working directory, so it can leave a
symlink, a hard link or a FIFO where the synthesizer's patch will write next. The patch text
is harmless by itself (its paths pass every textual check); only a look at the file system
shows where the write would land. Real git repositories, real ``mesh run`` with the replay
backend for the end-to-end checks.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.worktree.gitops import GitError, Worktree, worktree_home
from tests.runkit import TASK, happy_script, make_workspace, r, synthesis

HOOK_PATCH = (
    "diff --git a/tools/post-commit b/tools/post-commit\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tools/post-commit\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+touch /tmp/pwned\n"
)


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, check=True).stdout


def tree_digest(folder: Path) -> str:
    """A digest of every name, type and content below ``folder`` (symlinks by target)."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            digest.update(str(path.relative_to(folder)).encode())
            if path.is_symlink():
                digest.update(b"L" + os.readlink(path).encode())
            elif path.is_file():
                digest.update(b"F" + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "dev@example.com")
    git(path, "config", "user.name", "Dev")
    (path / "app.py").write_text("def greet():\n    return 'hi'\n")
    (path / "notes.txt").write_text("notes\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


# ---------------------------------------------------------------- planted by a worker


def test_a_planted_symlink_is_not_written_through_into_git_hooks(repo):
    wt = Worktree.prepare(repo, TASK)
    hooks = repo / ".git" / "hooks"
    (wt.path / "tools").symlink_to(hooks)  # the worker's doing: untracked, never reviewed
    before = tree_digest(repo / ".git")
    with pytest.raises(GitError) as info:
        wt.apply(HOOK_PATCH)
    assert info.value.reason == "patch_refused" and "symlink: tools" in str(info.value)
    assert not (hooks / "post-commit").exists()
    assert tree_digest(repo / ".git") == before
    assert not wt.is_applied(HOOK_PATCH)


def test_a_planted_symlink_deeper_in_the_path_is_found(repo):
    wt = Worktree.prepare(repo, TASK)
    (wt.path / "tools").mkdir()
    outside = repo.parent / "outside"
    outside.mkdir()
    (wt.path / "tools" / "bin").symlink_to(outside)
    patch = HOOK_PATCH.replace("tools/post-commit", "tools/bin/post-commit")
    with pytest.raises(GitError) as info:
        wt.apply(patch)
    assert "symlink: tools/bin" in str(info.value)
    assert list(outside.iterdir()) == []


def test_a_planted_symlink_replacing_a_tracked_file_is_refused(repo, tmp_path):
    wt = Worktree.prepare(repo, TASK)
    target = tmp_path / "victim.txt"
    target.write_text("notes\n")
    (wt.path / "notes.txt").unlink()
    (wt.path / "notes.txt").symlink_to(target)
    patch = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-notes\n+owned\n"
    with pytest.raises(GitError) as info:
        wt.apply(patch)
    assert "symlink: notes.txt" in str(info.value)
    assert target.read_text() == "notes\n"


def test_a_hard_link_to_an_outside_file_is_refused(repo, tmp_path):
    wt = Worktree.prepare(repo, TASK)
    victim = tmp_path / "victim.txt"
    victim.write_text("notes\n")
    (wt.path / "notes.txt").unlink()
    os.link(victim, wt.path / "notes.txt")
    patch = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-notes\n+owned\n"
    with pytest.raises(GitError) as info:
        wt.apply(patch)
    assert info.value.reason == "patch_refused" and "hard link" in str(info.value)
    assert victim.read_text() == "notes\n"


def test_a_fifo_at_the_target_is_refused_without_blocking(repo):
    wt = Worktree.prepare(repo, TASK)
    (wt.path / "notes.txt").unlink()
    os.mkfifo(wt.path / "notes.txt")
    patch = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-notes\n+owned\n"
    # Opening a FIFO for reading blocks until a writer comes: git must never get that far.
    assert not wt.is_applied(patch)
    with pytest.raises(GitError) as info:
        wt.apply(patch)
    assert "special_file: notes.txt" in str(info.value)


def test_a_plain_patch_still_applies(repo):
    wt = Worktree.prepare(repo, TASK)
    (wt.path / "tools").mkdir()
    wt.apply(HOOK_PATCH)
    assert (wt.path / "tools" / "post-commit").read_text() == "#!/bin/sh\ntouch /tmp/pwned\n"
    assert wt.is_applied(HOOK_PATCH)


def test_a_planted_symlink_blocks_the_run_and_changes_nothing_outside_the_task_branch(tmp_path):
    ws = make_workspace(tmp_path)
    # The worktree a worker of this task works in, with what the worker left behind.
    wt = Worktree.prepare(ws.repo, TASK)
    hooks = ws.repo / ".git" / "hooks"
    (wt.path / "tools").symlink_to(hooks)
    git_before = tree_digest(ws.repo / ".git" / "hooks"), (ws.repo / ".git" / "config").read_bytes()
    refs_before = ws.git("for-each-ref", "--format=%(refname) %(objectname)")
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(HOOK_PATCH))
    code, report, res = ws.run(script)
    assert code == 3, res.output
    assert report["block_reason"] == "patch_refused" and "symlink" in report["block_detail"]
    assert not (hooks / "post-commit").exists()
    assert (tree_digest(hooks), (ws.repo / ".git" / "config").read_bytes()) == git_before
    assert ws.git("for-each-ref", "--format=%(refname) %(objectname)") == refs_before
    with ws.tracker() as t:
        assert t.get(TASK)["status"] != "closed"


# ---------------------------------------------------------------- where worktrees live


def test_worktrees_live_in_the_cache_directory_outside_git(repo, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    wt = Worktree.prepare(repo, TASK)
    assert wt.path.parent.parent == cache / "mesh" / "worktrees"
    assert wt.path.parent.name.startswith("repo-") and wt.path.name == TASK
    assert not (repo / ".git" / "mesh-worktrees").exists()
    # Two repositories with the same folder name get folders of their own.
    other = tmp_path / "elsewhere" / "repo"
    other.parent.mkdir()
    git(tmp_path / "elsewhere", "clone", "-q", str(repo), "repo")
    assert worktree_home(other / ".git") != wt.path.parent


def test_without_xdg_cache_home_the_cache_is_under_home(repo, tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    wt = Worktree.prepare(repo, TASK)
    assert str(wt.path).startswith(str(tmp_path / "home" / ".cache" / "mesh" / "worktrees") + os.sep)


def test_a_worktree_from_the_old_location_is_reused(repo):
    legacy = repo / ".git" / "mesh-worktrees" / TASK
    git(repo, "worktree", "add", "-q", "-b", f"mesh/{TASK}", str(legacy))
    (legacy / "app.py").write_text("def greet():\n    return 'hello'\n")
    git(legacy, "commit", "-q", "-am", "step one")
    head = git(legacy, "rev-parse", "HEAD").strip()
    wt = Worktree.prepare(repo, TASK)
    assert wt.path == legacy.resolve() and wt.head() == head
    assert not (worktree_home(repo / ".git") / TASK).exists()


def test_the_demo_leaves_no_worktree_in_the_cache(tmp_path, monkeypatch):
    from orchestrator.demo import run_demo

    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert run_demo(echo=lambda line: None) == 0
    homes = cache / "mesh" / "worktrees"
    assert not homes.exists() or list(homes.iterdir()) == []

