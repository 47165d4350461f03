"""The task worktree: real temporary repositories, and the user's checkout never touched."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.worktree.gitops import GitError, Worktree, is_protected, repo_root, worktree_home
from orchestrator.worktree.policy import PatchPolicy

TASK = "bd-a1b.2"

PATCH = """\
diff --git a/app.py b/app.py
--- a/app.py
+++ b/app.py
@@ -1,3 +1,3 @@
 def greet():
-    return "hi"
+    return "hello"
 
"""

PATCH_TWO_FILES_SECOND_BAD = PATCH + """\
diff --git a/notes.txt b/notes.txt
--- a/notes.txt
+++ b/notes.txt
@@ -1 +1 @@
-this line is not in the file
+new
"""

NEW_FILE = """\
diff --git a/docs/guide.md b/docs/guide.md
new file mode 100644
--- /dev/null
+++ b/docs/guide.md
@@ -0,0 +1,2 @@
+# Guide
+text
"""


def git(cwd: Path, *args: str, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {args}: {proc.stderr}")
    return proc.stdout


def make_repo(path: Path, *, branch: str = "main", user: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    if user:
        git(path, "config", "user.email", "dev@example.com")
        git(path, "config", "user.name", "Dev")
    (path / "app.py").write_text('def greet():\n    return "hi"\n\n')
    (path / "notes.txt").write_text("notes\n")
    git(path, "add", ".")
    git(path, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-q", "-m", "init")
    return path


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "repo")


def snapshot(repo: Path) -> dict:
    """Everything about the user's checkout that mesh must leave alone."""
    index = repo / ".git" / "index"
    files = {
        str(p.relative_to(repo)): p.read_bytes()
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "HEAD"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "index": hashlib.sha256(index.read_bytes()).hexdigest(),
        "files": files,
    }


def worktree_state(wt: Worktree) -> dict:
    files = {
        str(p.relative_to(wt.path)): p.read_bytes()
        for p in wt.path.rglob("*")
        if p.is_file() and p.name != ".git"
    }
    return {"status": git(wt.path, "status", "--porcelain", "--untracked-files=all"),
            "head": git(wt.path, "rev-parse", "HEAD"), "files": files}


# ---------------------------------------------------------------- repo_root and protection


def test_repo_root_from_a_subfolder(repo):
    (repo / "pkg" / "deep").mkdir(parents=True)
    assert repo_root(repo / "pkg" / "deep") == repo.resolve()


@pytest.mark.parametrize("kind", ["plain", "missing", "bare", "file"])
def test_repo_root_refuses_what_is_not_a_work_tree(tmp_path, kind):
    target = tmp_path / "x"
    if kind == "plain":
        target.mkdir()
    elif kind == "bare":
        git(tmp_path, "init", "-q", "--bare", "x")
    elif kind == "file":
        target.write_text("x")
    with pytest.raises(GitError) as info:
        repo_root(target)
    assert info.value.reason == "not_a_repo"


def test_is_protected():
    assert is_protected("main", []) and is_protected("master", [])
    assert is_protected("refs/heads/main", [])
    assert is_protected("Main", [])  # same loose ref on a case-insensitive file system
    assert is_protected("release/1.2", ["release/*"])
    assert is_protected("RELEASE/1.2", ["release/*"])
    assert not is_protected("mesh/bd-1", ["release/*"])
    assert not is_protected("mainline", [])


# ---------------------------------------------------------------- prepare


def test_prepare_makes_a_hidden_worktree_on_the_task_branch(repo):
    before = snapshot(repo)
    wt = Worktree.prepare(repo, TASK)
    assert wt.branch == f"mesh/{TASK}"
    assert wt.path == worktree_home(repo / ".git") / TASK
    assert ".git" not in wt.path.parts
    assert wt.repo_root == repo.resolve()
    assert wt.base == before["head"].strip() == wt.head()
    assert git(wt.path, "symbolic-ref", "--short", "HEAD").strip() == wt.branch
    assert (wt.path / "app.py").read_text() == (repo / "app.py").read_text()
    assert snapshot(repo) == before  # the user's checkout, HEAD and index are untouched


def test_prepare_reuses_the_worktree_of_a_resumed_run(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    sha = wt.commit("step one", task_id=TASK, run_id="run-1")
    again = Worktree.prepare(repo, TASK)
    assert (again.path, again.branch, again.base) == (wt.path, wt.branch, wt.base)
    assert again.head() == sha
    assert again.commits_for_run("run-1") == [sha]


def test_prepare_reuses_an_existing_branch_after_the_worktree_was_removed(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    sha = wt.commit("step", task_id=TASK, run_id="r")
    wt.remove()
    assert not wt.path.exists()
    again = Worktree.prepare(repo, TASK)
    assert again.head() == sha and again.base == wt.base


def test_prepare_recreates_a_worktree_whose_folder_was_deleted(repo):
    import shutil

    wt = Worktree.prepare(repo, TASK)
    shutil.rmtree(wt.path)
    again = Worktree.prepare(repo, TASK)
    assert (again.path / "app.py").is_file()


def test_prepare_from_a_subfolder_or_from_inside_the_worktree(repo):
    (repo / "sub").mkdir()
    wt = Worktree.prepare(repo / "sub", TASK)
    assert Worktree.prepare(wt.path, TASK).path == wt.path
    other = Worktree.prepare(wt.path, "bd-other")
    assert other.path == worktree_home(repo / ".git") / "bd-other"


def test_prepare_from_another_base(repo):
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "notes.txt").write_text("second\n")
    git(repo, "commit", "-q", "-am", "second")
    wt = Worktree.prepare(repo, TASK, base=first)
    assert wt.base == first and (wt.path / "notes.txt").read_text() == "notes\n"


@pytest.mark.parametrize("task_id", ["", "../escape", "a/b", "a b", "x.lock", "-rf", ".hidden", "a..b", "t\n",
                                     "x" * 200, "a~b", "a:b", "trailing."])
def test_prepare_refuses_task_ids_that_cannot_be_a_branch_and_folder(repo, task_id):
    with pytest.raises(GitError) as info:
        Worktree.prepare(repo, task_id)
    assert info.value.reason == "bad_task_id"
    assert not worktree_home(repo / ".git").exists()


def test_prepare_refuses_a_protected_task_branch(repo):
    with pytest.raises(GitError) as info:
        Worktree.prepare(repo, TASK, protected=["mesh/*"])
    assert info.value.reason == "protected_branch"


def test_prepare_refuses_a_bad_base_and_an_empty_repository(repo, tmp_path):
    with pytest.raises(GitError) as info:
        Worktree.prepare(repo, TASK, base="no-such-ref")
    assert info.value.reason == "bad_base"
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(GitError) as info:
        Worktree.prepare(empty, TASK)
    assert info.value.reason == "bad_base"


def test_prepare_refuses_a_branch_checked_out_by_the_user(repo):
    git(repo, "checkout", "-q", "-b", f"mesh/{TASK}")
    before = snapshot(repo)
    with pytest.raises(GitError) as info:
        Worktree.prepare(repo, TASK)
    assert info.value.reason == "branch_in_use"
    assert snapshot(repo) == before


def test_prepare_refuses_a_foreign_folder_in_its_place(repo):
    squatter = worktree_home(repo / ".git") / TASK
    squatter.mkdir(parents=True)
    (squatter / "precious.txt").write_text("keep me")
    with pytest.raises(GitError) as info:
        Worktree.prepare(repo, TASK)
    assert info.value.reason == "worktree_conflict"
    assert (squatter / "precious.txt").read_text() == "keep me"


def test_prepare_refuses_its_worktree_switched_to_another_branch(repo):
    wt = Worktree.prepare(repo, TASK)
    git(wt.path, "switch", "-q", "-c", "elsewhere")
    with pytest.raises(GitError) as info:
        Worktree.prepare(repo, TASK)
    assert info.value.reason == "worktree_conflict"


def test_git_location_variables_cannot_redirect_mesh_to_the_users_index(repo, monkeypatch):
    before = snapshot(repo)
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(repo))
    monkeypatch.setenv("GIT_INDEX_FILE", str(repo / ".git" / "index"))
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    wt.commit("step", task_id=TASK, run_id="r")
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert snapshot(repo) == before
    assert 'return "hello"' in git(repo, "show", f"mesh/{TASK}:app.py")


# ---------------------------------------------------------------- apply


def test_apply_stages_the_patch(repo):
    wt = Worktree.prepare(repo, TASK)
    assert not wt.is_applied(PATCH)
    wt.apply(PATCH + NEW_FILE)
    assert wt.is_applied(PATCH + NEW_FILE)
    assert git(wt.path, "diff", "--cached", "--name-only").split() == ["app.py", "docs/guide.md"]
    assert git(wt.path, "diff", "--name-only") == ""  # worktree and index agree


def test_apply_adds_the_final_newline_git_needs(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH.rstrip("\n"))
    assert 'return "hello"' in (wt.path / "app.py").read_text()


@pytest.mark.parametrize("patch", [PATCH_TWO_FILES_SECOND_BAD, PATCH.replace('"hi"', '"bye"')])
def test_a_patch_that_does_not_apply_changes_nothing(repo, patch):
    wt = Worktree.prepare(repo, TASK)
    (wt.path / "scratch.txt").write_text("left by validation")
    before = worktree_state(wt)
    index_before = git(wt.path, "ls-files", "--stage")
    with pytest.raises(GitError) as info:
        wt.apply(patch)
    assert info.value.reason == "does_not_apply"
    assert "\n" not in str(info.value)
    assert worktree_state(wt) == before
    assert git(wt.path, "ls-files", "--stage") == index_before


@pytest.mark.parametrize(
    "patch",
    [
        "--- a/.git/hooks/pre-commit\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+evil\n",
        "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc/passwd\n",
        "--- a/../outside\n+++ b/../outside\n@@ -1 +1 @@\n-a\n+b\n",
        "not a patch",
    ],
)
def test_apply_refuses_unsafe_patches_itself(repo, patch):
    wt = Worktree.prepare(repo, TASK)
    before = worktree_state(wt)
    with pytest.raises(GitError) as info:
        wt.apply(patch)
    assert info.value.reason == "patch_refused"
    assert worktree_state(wt) == before
    assert not wt.is_applied(patch)


# ---------------------------------------------------------------- commit


def test_commit_carries_the_trailers(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    sha = wt.commit("Say hello\n\nBody text.", task_id=TASK, run_id="run-7", extra_trailers={"Mesh-Cycle": "1"})
    assert sha == wt.head() == git(repo, "rev-parse", f"mesh/{TASK}").strip()
    message = git(wt.path, "log", "-1", "--format=%B")
    assert message.startswith("Say hello\n\nBody text.\n\n")
    trailers = git(wt.path, "log", "-1", "--format=%(trailers:only,unfold)").split("\n")
    assert trailers[:3] == [f"Mesh-Task: {TASK}", "Mesh-Run: run-7", "Mesh-Cycle: 1"]
    assert git(wt.path, "log", "-1", "--format=%an <%ae>").strip() == "Dev <dev@example.com>"


def test_commit_uses_the_mesh_identity_without_a_configured_user(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-global"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = make_repo(tmp_path / "anon", user=False)
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    wt.commit("x", task_id=TASK, run_id="r")
    assert git(wt.path, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip() == (
        "mesh <mesh@localhost>|mesh <mesh@localhost>"
    )


def test_a_worker_message_cannot_forge_mesh_trailers(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    forged = "Fix\n\nMesh-Run: someone-else\nmesh-task: other\nMESH-CYCLE: 9\nSigned-off-by: x <x@y>"
    sha = wt.commit(forged, task_id=TASK, run_id="mine")
    assert wt.commits_for_run("someone-else") == []
    assert wt.commits_for_run("mine") == [sha]
    assert wt.find_commit(run_id="mine", trailer="Mesh-Cycle", value="9") is None
    body = git(wt.path, "log", "-1", "--format=%B")
    assert "someone-else" not in body and "Signed-off-by: x <x@y>" in body


def test_an_empty_or_control_character_message_still_commits(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    wt.commit("\x00\x1b\r\n\n", task_id=TASK, run_id="r")
    assert git(wt.path, "log", "-1", "--format=%s").strip() == f"mesh: {TASK}"
    wt.commit("\x1b[31mred\x00", task_id=TASK, run_id="r")
    assert git(wt.path, "log", "-1", "--format=%s").strip() == "[31mred"


@pytest.mark.parametrize(
    "trailers",
    [{"Mesh-Cycle": "1\nMesh-Run: forged"}, {"Bad Key": "1"}, {"Mesh-Cycle": ""}, {"Mesh:Cycle": "1"},
     {"Mesh-Cycle": " 1"}],
)
def test_bad_trailers_are_refused(repo, trailers):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    with pytest.raises(GitError) as info:
        wt.commit("x", task_id=TASK, run_id="r", extra_trailers=trailers)
    assert info.value.reason == "bad_trailer"
    with pytest.raises(GitError):
        wt.commit("x", task_id=TASK, run_id="r\nMesh-Run: forged")


def test_only_what_the_patch_staged_is_committed(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    # What validation leaves behind: new files, a modified tracked file, even CI config.
    (wt.path / "__pycache__").mkdir()
    (wt.path / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (wt.path / ".github" / "workflows").mkdir(parents=True)
    (wt.path / ".github" / "workflows" / "evil.yml").write_text("on: push")
    (wt.path / "notes.txt").write_text("rewritten by a test\n")
    sha = wt.commit("step", task_id=TASK, run_id="r")
    assert git(wt.path, "show", "--name-only", "--format=", sha).split() == ["app.py"]


def test_a_step_already_committed_records_an_empty_commit(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    first = wt.commit("one", task_id=TASK, run_id="r", extra_trailers={"Mesh-Step": "a"})
    second = wt.commit("two", task_id=TASK, run_id="r", extra_trailers={"Mesh-Step": "b"})
    assert first != second
    assert git(wt.path, "diff", first, second) == ""


def test_commit_refuses_a_protected_branch(tmp_path):
    repo = make_repo(tmp_path / "r", branch="dev")
    git(repo, "branch", "main")
    wt = Worktree.prepare(repo, TASK)
    git(wt.path, "switch", "-q", "main")
    wt.apply(PATCH)
    with pytest.raises(GitError) as info:
        wt.commit("x", task_id=TASK, run_id="r")
    assert info.value.reason == "protected_branch"
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", "dev")


def test_commit_refuses_a_configured_protected_pattern_and_other_branches(repo):
    wt = Worktree.prepare(repo, TASK, protected=["release/*"])
    git(wt.path, "switch", "-q", "-c", "release/9")
    with pytest.raises(GitError) as info:
        wt.commit("x", task_id=TASK, run_id="r")
    assert info.value.reason == "protected_branch"
    git(wt.path, "switch", "-q", "-c", "feature")
    with pytest.raises(GitError) as info:
        wt.commit("x", task_id=TASK, run_id="r")
    assert info.value.reason == "wrong_branch"
    git(wt.path, "switch", "-q", "--detach")
    with pytest.raises(GitError) as info:
        wt.commit("x", task_id=TASK, run_id="r")
    assert info.value.reason == "detached_head"


@pytest.mark.parametrize("hooks_path", [None, ".husky"])
def test_hooks_never_run(repo, tmp_path, hooks_path):
    # A hook framework reads hooks from the work tree, where a patch could rewrite them.
    (repo / ".husky").mkdir()
    git(repo, "commit", "-q", "--allow-empty", "-m", "before any hook exists")
    hook_dir = repo / ".git" / "hooks" if hooks_path is None else repo / hooks_path
    markers = []
    for name in ("pre-commit", "commit-msg", "prepare-commit-msg", "post-commit", "post-checkout",
                 "reference-transaction", "post-index-change"):
        marker = tmp_path / f"ran-{name}"
        markers.append(marker)
        (hook_dir / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hook_dir / name).chmod(0o755)
    if hooks_path is not None:
        git(repo, "config", "core.hooksPath", hooks_path)
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    wt.commit("x", task_id=TASK, run_id="r")
    wt.remove()
    assert [m.name for m in markers if m.exists()] == []
    git(repo, "commit", "-q", "--allow-empty", "-m", "the hooks themselves work")
    assert (tmp_path / "ran-post-commit").exists()


# ---------------------------------------------------------------- history


def test_commits_for_run_and_find_commit(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    a = wt.commit("a", task_id=TASK, run_id="run-1", extra_trailers={"Mesh-Cycle": "0"})
    wt.apply(NEW_FILE)
    b = wt.commit("b", task_id=TASK, run_id="run-2", extra_trailers={"Mesh-Cycle": "1"})
    c = wt.commit("c", task_id=TASK, run_id="run-1", extra_trailers={"Mesh-Cycle": "1"})
    assert wt.commits_for_run("run-1") == [c, a]  # newest first
    assert wt.commits_for_run("run-2") == [b]
    assert wt.commits_for_run("run-3") == []
    assert wt.find_commit(run_id="run-1", trailer="Mesh-Cycle", value="0") == a
    assert wt.find_commit(run_id="run-1", trailer="mesh-cycle", value="1") == c
    assert wt.find_commit(run_id="run-2", trailer="Mesh-Cycle", value="0") is None
    assert wt.find_commit(run_id="run-1", trailer="Mesh-Step", value="0") is None


def test_history_before_the_fork_is_not_the_tasks(repo):
    git(repo, "commit", "-q", "--allow-empty", "-m", "old\n\nMesh-Run: run-1")
    wt = Worktree.prepare(repo, TASK)
    assert wt.commits_for_run("run-1") == []
    assert wt.diff_from_base() == ""


def test_diff_from_base_is_cumulative_and_ignores_external_drivers(repo):
    marker = repo / "ext-diff-ran"
    driver = repo.parent / "driver.sh"
    driver.write_text(f"#!/bin/sh\ntouch {marker}\n")
    driver.chmod(0o755)
    git(repo, "config", "diff.external", str(driver))
    git(repo, "config", "diff.evil.textconv", str(driver))
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    wt.commit("a", task_id=TASK, run_id="r")
    # .gitattributes is protected by default; a project that permits it still gets no driver run.
    wt.apply("diff --git a/.gitattributes b/.gitattributes\nnew file mode 100644\n--- /dev/null\n"
             "+++ b/.gitattributes\n@@ -0,0 +1 @@\n+*.md diff=evil\n" + NEW_FILE,
             policy=PatchPolicy(allow=(".gitattributes",)))
    wt.commit("b", task_id=TASK, run_id="r")
    (repo / "notes.txt").write_text("user's own later edit\n")
    diff = wt.diff_from_base()
    assert '+    return "hello"' in diff and "+# Guide" in diff
    assert "user's own later edit" not in diff
    assert not marker.exists()


# ---------------------------------------------------------------- location_exists


def test_location_exists(repo, tmp_path):
    wt = Worktree.prepare(repo, TASK)
    (wt.path / "nonl.txt").write_text("one\ntwo")  # last line without a newline
    outside = tmp_path / "outside.txt"
    outside.write_text("a\n" * 50)
    (wt.path / "escape.txt").symlink_to(outside)
    (wt.path / "inside-link.txt").symlink_to(wt.path / "app.py")
    yes = ["app.py:1", "app.py:3", "`app.py:2`", " app.py:2 ", "app.py:1-3", "app.py:2:5", "nonl.txt:2",
           "inside-link.txt:1", "./app.py:1"]
    no = ["app.py:4", "app.py:0", "app.py:3-2", "app.py:2-9", "app.py", "app.py:x", "missing.py:1",
          "escape.txt:1", f"{outside}:1", "../outside.txt:1", ".git:1", "docs:1", "", ":1",
          "app.py\x00:1", "app.py:-1"]
    assert [loc for loc in yes if not wt.location_exists(loc)] == []
    assert [loc for loc in no if wt.location_exists(loc)] == []


def test_location_inside_the_git_directory_does_not_count(repo):
    wt = Worktree.prepare(repo, TASK)
    (wt.path / "gitlink").symlink_to(repo / ".git" / "config")
    assert not wt.location_exists("gitlink:1")


# ---------------------------------------------------------------- remove and never push


def test_remove_keeps_the_branch_and_is_idempotent(repo):
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    sha = wt.commit("a", task_id=TASK, run_id="r")
    (wt.path / "untracked.txt").write_text("x")
    wt.remove()
    wt.remove()
    assert not wt.path.exists()
    assert git(repo, "rev-parse", f"mesh/{TASK}").strip() == sha
    assert str(wt.path) not in git(repo, "worktree", "list")


def test_nothing_is_ever_pushed_or_merged(repo, tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "main")
    remote_before = git(remote, "show-ref")
    user_before = snapshot(repo)
    wt = Worktree.prepare(repo, TASK)
    wt.apply(PATCH)
    wt.commit("a", task_id=TASK, run_id="r")
    wt.remove()
    assert git(remote, "show-ref") == remote_before
    assert snapshot(repo) == user_before
    assert git(repo, "rev-parse", "main") != git(repo, "rev-parse", f"mesh/{TASK}")


def test_runs_and_set_aside_keep_an_earlier_attempt(tmp_path):
    """runs() lists the Mesh-Run ids on the branch; set_aside() renames the branch, deletes nothing."""
    import subprocess

    from orchestrator.worktree.gitops import Worktree

    repo = tmp_path / "r"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=repo, check=True)
    wt = Worktree.prepare(repo, "t-1")
    wt.apply("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+two\n")
    sha = wt.commit("attempt", task_id="t-1", run_id="run-a")
    assert wt.runs() == ["run-a"]
    wt.set_aside("mesh/t-1-run-a")
    branches = subprocess.run(["git", "branch", "--format=%(refname:short)"], cwd=repo, capture_output=True,
                              text=True, check=True).stdout.split()
    assert "mesh/t-1-run-a" in branches and "mesh/t-1" not in branches
    assert subprocess.run(["git", "rev-parse", "mesh/t-1-run-a"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip() == sha
    fresh = Worktree.prepare(repo, "t-1")
    assert fresh.runs() == [] and (fresh.path / "a.txt").read_text() == "one\n"
