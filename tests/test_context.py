"""The repository context pack: what it shows, in what order, within what budget."""

from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.protocol import context as context_module
from orchestrator.protocol.context import build_repo_context, code_names, named_paths, patch_paths

PATCH = """\
diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,2 +1,3 @@
 def add(a, b):
+    # patched
     return a + b
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-gone
"""

TASK = {
    "id": "t-1",
    "title": "Fix add in pkg/mod.py",
    "description": "The helper `clamp_value` misbehaves; see docs/guide.md:3.",
    "design": "",
    "acceptance_criteria": "README.md still renders.",
    "notes": None,
}


def git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "pkg" / "mod.py").write_text("def add(a, b):\n    # patched\n    return a + b\n")
    (root / "pkg" / "util.py").write_text("def clamp_value(x):\n    return max(0, x)\n")
    (root / "docs" / "guide.md").write_text("# Guide\n\nline three\n")
    (root / "README.md").write_text("# Project\n")
    (root / "data.bin").write_bytes(b"\x00" * 32)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "init")
    return root


def test_pack_shows_patch_files_then_named_files_then_definitions_then_tree(repo):
    text = build_repo_context(repo, task=TASK, patch=PATCH, budget_tokens=5000)
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == [
        "## Files the current patch touches (current content)",
        "## Files the task names",
        "## Files defining names the task mentions",
        "## File tree (5 files)",
    ]
    patch_part = text.split("## Files the task names")[0]
    assert "### pkg/mod.py\n```python\ndef add(a, b):\n    # patched\n" in patch_part
    assert "### old.txt (not in the worktree" in patch_part
    named = text.split("## Files the task names")[1].split("## Files defining")[0]
    # In order of first mention, each once (pkg/mod.py already shown with the patch).
    assert [line for line in named.splitlines() if line.startswith("### ")] == ["### docs/guide.md", "### README.md"]
    assert "### pkg/util.py" in text.split("## Files defining names the task mentions")[1]
    assert text.endswith("## File tree (5 files)\nREADME.md\ndata.bin\ndocs/guide.md\npkg/mod.py\npkg/util.py")


def test_pack_is_deterministic_and_identical_across_calls(repo):
    first = build_repo_context(repo, task=TASK, patch=PATCH, budget_tokens=300)
    context_module._render.cache_clear()
    context_module._git_files.cache_clear()
    again = build_repo_context(repo, task=dict(TASK), patch=PATCH, budget_tokens=300)
    assert first == again


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(min_value=1, max_value=400))
def test_pack_never_exceeds_its_budget(repo, budget):
    text = build_repo_context(repo, task=TASK, patch=PATCH, budget_tokens=budget)
    assert len(text) <= budget * context_module.CHARS_PER_TOKEN


def test_truncation_cuts_whole_lines_and_says_where_to_read_on(repo):
    (repo / "pkg" / "mod.py").write_text("".join(f"line {n}\n" for n in range(1, 400)))
    text = build_repo_context(repo, task=TASK, patch=PATCH, budget_tokens=200)
    assert "[pkg/mod.py: cut after line " in text
    shown = [line for line in text.splitlines() if line.startswith("line ") and line[5:].isdigit()]
    assert shown == [f"line {n}" for n in range(1, len(shown) + 1)]
    cut_at = int(text.split("[pkg/mod.py: cut after line ")[1].split(" ")[0])
    assert cut_at == len(shown) and f"start_line={cut_at + 1}" in text


def test_one_big_file_does_not_crowd_out_the_others(repo):
    (repo / "docs" / "guide.md").write_text("big\n" * 20_000)
    text = build_repo_context(repo, task=TASK, patch=None, budget_tokens=1000)
    assert "### README.md\n```markdown\n# Project\n```" in text
    assert "### pkg/util.py" in text


def test_cache_follows_file_content_and_index(repo):
    before = build_repo_context(repo, task=TASK, patch=PATCH, budget_tokens=2000)
    assert before == build_repo_context(repo, task=TASK, patch=PATCH, budget_tokens=2000)
    (repo / "README.md").write_text("# Project, edited\n")
    os.utime(repo / "README.md", ns=(1, 1))
    edited = build_repo_context(repo, task=TASK, patch=PATCH, budget_tokens=2000)
    assert "# Project, edited" in edited
    (repo / "new.txt").write_text("new\n")
    git(repo, "add", "new.txt")
    assert "new.txt" in build_repo_context(repo, task=TASK, patch=PATCH, budget_tokens=2000)


def test_nothing_outside_the_root_is_read(repo, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("top secret\n")
    os.symlink(outside, repo / "link.txt")
    git(repo, "add", "link.txt")
    task = {"id": "t", "title": "see link.txt and ../secret.txt and /etc/passwd"}
    evil_patch = "--- a/../secret.txt\n+++ b/../secret.txt\n@@ -1 +1 @@\n-a\n+b\n"
    text = build_repo_context(repo, task=task, patch=evil_patch, budget_tokens=2000)
    assert "top secret" not in text and "root:" not in text
    assert "### link.txt (symlink out of the repository; not shown)" in text


def test_binary_files_and_secrets(repo):
    (repo / "settings.py").write_text('PASSWORD = "correct horse battery staple"\n')
    git(repo, "add", "settings.py")
    task = {"id": "t", "title": "touch data.bin and settings.py"}
    text = build_repo_context(repo, task=task, patch=None, budget_tokens=2000)
    assert "### data.bin (binary, 32 bytes; not shown)" in text
    assert "correct horse" not in text and "[REDACTED]" in text


def test_outside_git_the_tree_is_walked(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("X_VALUE = 1\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "h.txt").write_text("h\n")
    text = build_repo_context(tmp_path, task={"id": "t", "title": "change X_VALUE"}, patch=None,
                              budget_tokens=500)
    assert "### a/x.py" in text and text.endswith("## File tree (1 files)\na/x.py")


def test_zero_budget_or_missing_root_gives_nothing(repo, tmp_path):
    assert build_repo_context(repo, task=TASK, patch=None, budget_tokens=0) == ""
    assert build_repo_context(tmp_path / "missing", task=TASK, patch=None, budget_tokens=100) == ""


def test_helpers_read_paths_names_and_patches():
    files = ["src/app.py", "src/util/app.py", "README.md", "docs/a.md"]
    task = {"title": "Edit README.md.", "description": "and src/util/app.py:12, app.py, ../x.py, /etc/passwd"}
    assert named_paths(task, files) == ["README.md", "src/util/app.py", "src/app.py"]
    assert code_names({"title": "Make parseThing call do_work; the Reviewer said so"}) == ["parseThing", "do_work"]
    assert patch_paths(PATCH) == ["pkg/mod.py", "old.txt"]
    assert patch_paths("diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n") == ["x", "y"]
    assert patch_paths("NO_DIFF: nothing to do") == []
