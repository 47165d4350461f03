"""Attack 10: a worker leaves special files in the worktree for the Anthropic read-only tools
to trip over. A FIFO must not hang a read or a search, a hard link or a symlink must not
reach a file outside the repository, and a worktree's ``.git`` file (which names the real
repository) must never be listed, read or searched."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import threading

import pytest

from roles.backends.tools import RepoTools

OUTSIDE_TEXT = "outside-canary-7c1e"


@pytest.fixture
def layout(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "pkg" / "deep" / "more.py").write_text("VALUE = 'add here too'\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{OUTSIDE_TEXT}\n")
    return root, outside


def run(root, name, **arguments):
    return RepoTools(root).run(name, arguments)


def run_bounded(root, name, **arguments):
    """Run a tool in a thread: a FIFO opened for reading with no writer blocks forever, and
    the test must then fail rather than hang the suite."""
    box = {}
    worker = threading.Thread(target=lambda: box.setdefault("result", run(root, name, **arguments)), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), f"{name} blocked on a special file"
    return box["result"]


def listing(root, path="."):
    return run(root, "list_dir", path=path).content.splitlines()[1:]


# ---------------------------------------------------------------- FIFOs


def test_a_fifo_is_refused_by_read_and_skipped_by_grep_and_list(layout):
    root, _ = layout
    os.mkfifo(root / "pkg" / "pipe")
    os.symlink("pkg/pipe", root / "pipe-link")
    for path in ("pkg/pipe", "pipe-link"):
        result = run_bounded(root, "read_file", path=path)
        assert result.is_error and "not a regular file" in result.content
    # A search through the folder holding the FIFO still answers, with the other files' matches.
    found = run_bounded(root, "grep", pattern="add")
    assert not found.is_error, found.content
    assert found.content.splitlines() == ["pkg/mod.py:1:def add(a, b):", "pkg/deep/more.py:1:VALUE = 'add here too'"]
    named = run_bounded(root, "grep", pattern="add", path="pkg/pipe")
    assert named.is_error and "not a regular file" in named.content
    assert "pipe" not in listing(root, "pkg") and "pipe-link@" not in listing(root)


# ---------------------------------------------------------------- hard links, devices, sockets


def test_a_hard_link_to_a_file_outside_is_never_read(layout):
    root, outside = layout
    os.link(outside / "secret.txt", root / "pkg" / "notes.txt")
    result = run(root, "read_file", path="pkg/notes.txt")
    assert result.is_error and "hard links" in result.content
    assert OUTSIDE_TEXT not in result.content
    assert "no match" in run(root, "grep", pattern=OUTSIDE_TEXT).content
    assert run(root, "grep", pattern=OUTSIDE_TEXT, path="pkg/notes.txt").is_error
    assert "notes.txt" not in listing(root, "pkg")


def test_a_socket_and_a_device_are_refused(layout):
    root, _ = layout
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(root / "sock"))
        specials = ["sock"]
        try:
            os.mknod(root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            specials.append("null")
        except PermissionError:
            pass  # no CAP_MKNOD here: the socket alone stands for special files
        for name in specials:
            result = run_bounded(root, "read_file", path=name)
            assert result.is_error and "not a regular file" in result.content
            assert name not in listing(root)
        assert not run_bounded(root, "grep", pattern="add").is_error
    finally:
        server.close()


# ---------------------------------------------------------------- symlinks leaving the repository


def test_symlinks_leaving_the_repository_at_any_depth_are_refused_and_unlisted(layout):
    root, outside = layout
    os.symlink(outside / "secret.txt", root / "pkg" / "deep" / "leak.txt")
    os.symlink(outside, root / "pkg" / "out")
    os.symlink("../../../outside/secret.txt", root / "pkg" / "deep" / "relative.txt")
    for path in ("pkg/deep/leak.txt", "pkg/out/secret.txt", "pkg/deep/relative.txt"):
        result = run(root, "read_file", path=path)
        assert result.is_error and OUTSIDE_TEXT not in result.content
    assert run(root, "grep", pattern=OUTSIDE_TEXT, path="pkg/out").is_error
    assert "no match" in run(root, "grep", pattern=OUTSIDE_TEXT).content
    assert not {"leak.txt@", "relative.txt@"} & set(listing(root, "pkg/deep"))
    assert "out@" not in listing(root, "pkg")


def test_a_symlink_into_git_is_refused(layout):
    root, _ = layout
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[remote]\nurl = https://user:hunter2@example.com/x.git\n")
    os.symlink(".git/config", root / "cfg")
    os.symlink(".git", root / "gitdir")
    assert run(root, "read_file", path="cfg").is_error
    assert run(root, "read_file", path="gitdir/config").is_error
    assert run(root, "list_dir", path="gitdir").is_error
    assert "no match" in run(root, "grep", pattern="hunter2").content
    assert not {"cfg@", "gitdir@"} & set(listing(root))


# ---------------------------------------------------------------- a worktree's .git file


@pytest.fixture
def worktree(tmp_path):
    main = tmp_path / "main-repo"
    main.mkdir()

    def git(*args, cwd=main):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    (main / "app.py").write_text("print('gitdir is a word here')\n")
    (main / "sub").mkdir()
    (main / "sub" / "lib.py").write_text("X = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "init")
    tree = tmp_path / "wt"
    git("worktree", "add", "-q", str(tree), "-b", "task")
    # A nested repository's .git file deeper down, as a submodule checkout has.
    (tree / "sub" / ".git").write_text(f"gitdir: {main}/.git/modules/sub\n")
    (tree / ".GIT").mkdir()
    (tree / ".GIT" / "HEAD").write_text("ref: refs/heads/main\n")
    return tree, main


def test_a_worktree_git_file_is_never_listed_read_or_searched(worktree):
    tree, main = worktree
    assert (tree / ".git").is_file()
    names = listing(tree)
    assert "app.py" in names and not any(name.lower().startswith(".git") for name in names)
    assert not any(name.startswith(".git") for name in listing(tree, "sub"))
    for path in (".git", "sub/.git", ".GIT/HEAD", "./sub/../.git"):
        result = run(tree, "read_file", path=path)
        assert result.is_error and str(main) not in result.content
    found = run(tree, "grep", pattern="gitdir")
    assert found.content.splitlines() == ["app.py:1:print('gitdir is a word here')"]
    assert "no match" in run(tree, "grep", pattern=str(main.name)).content
    assert "no match" in run(tree, "grep", pattern="gitdir", path="sub").content
    assert "no match" in run(tree, "grep", pattern="refs/heads").content
