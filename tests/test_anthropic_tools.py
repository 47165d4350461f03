"""The read-only repository tools: confinement to the worktree, bounded output, no writes."""

from __future__ import annotations

import os

import pytest

from roles.backends import tools as tools_module
from roles.backends.tools import TOOL_DEFINITIONS, TOOL_NAMES, RepoTools


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    (root / "README.md").write_text("# Demo\nsee pkg/mod.py\n")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[remote]\nurl = https://user:hunter2@example.com/x.git\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    os.symlink(outside / "secret.txt", root / "leak.txt")
    os.symlink(outside, root / "leakdir")
    os.symlink(root / "pkg" / "mod.py", root / "alias.py")  # a symlink that stays inside
    return root


def run(repo, name, **arguments):
    return RepoTools(repo).run(name, arguments)


def test_definitions_name_exactly_the_three_read_only_tools():
    assert [tool["name"] for tool in TOOL_DEFINITIONS] == list(TOOL_NAMES) == ["read_file", "list_dir", "grep"]
    for tool in TOOL_DEFINITIONS:
        assert tool["input_schema"]["type"] == "object" and tool["description"]


def test_read_file_shows_numbered_lines_and_ranges(repo):
    whole = run(repo, "read_file", path="pkg/mod.py")
    assert not whole.is_error
    assert whole.content.splitlines()[0] == "pkg/mod.py (lines 1-6 of 6)"
    assert "1| def add(a, b):" in whole.content and "6|     return a - b" in whole.content
    part = run(repo, "read_file", path="./pkg/mod.py", start_line=5, end_line=6)
    assert "(lines 5-6 of 6)" in part.content and "def add" not in part.content


def test_read_file_caps_lines_and_points_at_the_rest(repo, monkeypatch):
    monkeypatch.setattr(tools_module, "MAX_LINES", 2)
    result = run(repo, "read_file", path="pkg/mod.py")
    assert "(lines 1-2 of 6)" in result.content
    assert result.content.endswith("[more: read_file with start_line=3]")


@pytest.mark.parametrize("path, reason", [
    ("../outside/secret.txt", "'..' is refused"),
    ("pkg/../../outside/secret.txt", "'..' is refused"),
    ("/etc/passwd", "absolute paths are refused"),
    ("~/.ssh/id_rsa", "absolute paths are refused"),
    ("leak.txt", "outside the repository"),
    ("leakdir/secret.txt", "outside the repository"),
    (".git/config", "not readable"),
    ("pkg/../.git/config", "'..' is refused"),
])
def test_paths_leaving_the_worktree_are_refused_as_error_results(repo, path, reason):
    result = run(repo, "read_file", path=path)
    assert result.is_error
    assert reason in result.content
    assert "top secret" not in result.content and "hunter2" not in result.content


def test_a_symlink_inside_the_worktree_is_readable(repo):
    result = run(repo, "read_file", path="alias.py")
    assert not result.is_error and "def add" in result.content


def test_binary_missing_and_directory_are_errors_not_exceptions(repo):
    assert "binary file" in run(repo, "read_file", path="blob.bin").content
    assert "no such file" in run(repo, "read_file", path="nope.py").content
    assert "not a file" in run(repo, "read_file", path="pkg").content
    assert run(repo, "read_file", path=42).is_error
    assert run(repo, "read_file", path="pkg/mod.py", start_line=0).is_error
    assert run(repo, "read_file", path="pkg/mod.py", start_line=99).is_error
    assert RepoTools(repo).run("write_file", {"path": "x", "content": "y"}).is_error
    assert RepoTools(repo).run("read_file", ["not", "an", "object"]).is_error


def test_list_dir_hides_private_folders_and_marks_kinds(repo):
    result = run(repo, "list_dir")
    lines = result.content.splitlines()
    assert lines[0].startswith("./")
    assert ".git/" not in lines and ".git" not in lines
    assert {"pkg/", "README.md", "alias.py@"} <= set(lines)
    # Symlinks leaving the repository are not offered at all.
    assert not {"leak.txt@", "leakdir@"} & set(lines)
    assert "2 entries not shown" in result.content
    assert run(repo, "list_dir", path="leakdir").is_error
    assert run(repo, "list_dir", path="..").is_error


def test_list_dir_bounds_entries(repo, monkeypatch):
    monkeypatch.setattr(tools_module, "MAX_ENTRIES", 2)
    result = run(repo, "list_dir")
    assert "more entries not shown" in result.content


def test_grep_finds_matches_inside_the_worktree_only(repo):
    result = run(repo, "grep", pattern=r"def (add|sub)")
    assert not result.is_error
    assert result.content.splitlines() == ["pkg/mod.py:1:def add(a, b):", "pkg/mod.py:5:def sub(a, b):"]
    # Symlinks found while recursing are not followed, so nothing outside is searched.
    assert "no match" in run(repo, "grep", pattern="top secret").content
    assert "no match" in run(repo, "grep", pattern="hunter2").content
    assert run(repo, "grep", pattern="secret", path="leakdir").is_error
    assert "README.md:2" in run(repo, "grep", pattern="SEE", ignore_case=True).content
    # A pattern starting with '-' is a pattern, not an option.
    assert "no match" in run(repo, "grep", pattern="--version").content


def test_grep_rejects_bad_patterns_with_an_error_result(repo):
    assert run(repo, "grep", pattern="(unclosed").is_error
    assert run(repo, "grep", pattern="").is_error
    assert run(repo, "grep", pattern="a" * 1000).is_error


def test_grep_bounds_matches(repo, monkeypatch):
    (repo / "many.txt").write_text("hit\n" * 30)
    monkeypatch.setattr(tools_module, "MAX_MATCHES", 5)
    result = run(repo, "grep", pattern="hit", path="many.txt")
    assert len(result.content.splitlines()) == 6 and "25 more matches not shown" in result.content


def test_output_is_bounded_and_scrubbed(repo, monkeypatch):
    (repo / "big.txt").write_text("x" * 100 + "\n" + "y" * 50_000 + "\n")
    (repo / "settings.py").write_text('API_KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123"\n')
    big = run(repo, "read_file", path="big.txt")
    assert len(big.content) <= tools_module.MAX_OUTPUT_CHARS + 100
    assert big.content.endswith("characters]")
    secret = run(repo, "read_file", path="settings.py")
    assert "abcdefghijklmnop" not in secret.content and "[REDACTED]" in secret.content


def test_tools_never_write(repo):
    before = sorted((p.relative_to(repo).as_posix(), p.stat().st_mtime_ns) for p in repo.rglob("*")
                    if not p.is_symlink())
    tools = RepoTools(repo)
    for name, arguments in [("read_file", {"path": "pkg/mod.py"}), ("list_dir", {}), ("grep", {"pattern": "a"})]:
        tools.run(name, arguments)
    after = sorted((p.relative_to(repo).as_posix(), p.stat().st_mtime_ns) for p in repo.rglob("*")
                   if not p.is_symlink())
    assert before == after
