"""The patch check: a model's diff is refused before git sees it whenever it is unsafe."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.worktree.patchcheck import (
    REFUSAL_REASONS,
    PatchRefused,
    PatchSummary,
    check_patch,
    extract_touched_files,
)
from orchestrator.worktree.policy import PatchPolicy, PolicyViolation

GIT_MODIFY = """\
diff --git a/src/app.py b/src/app.py
index 3b18e51..a9c4d2f 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,4 @@
 import os
-print("hi")
+print("hello")
+print("world")
 x = 1
"""

PLAIN_DIFF_U = """\
--- old/lib/util.py\t2024-05-01 10:00:00.000000000 +0200
+++ new/lib/util.py\t2024-05-01 10:05:00.000000000 +0200
@@ -1,2 +1,2 @@
-a = 1
+a = 2
 b = 2
"""

NEW_FILE = """\
diff --git a/docs/new.md b/docs/new.md
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1,2 @@
+# Title
+body
"""

DELETED_FILE = """\
diff --git a/old.txt b/old.txt
deleted file mode 100644
index e69de29..0000000
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-gone
"""

PURE_RENAME = """\
diff --git a/a.txt b/b.txt
similarity index 100%
rename from a.txt
rename to b.txt
"""

MODE_CHANGE = """\
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
"""


def refused(patch: str, **kwargs) -> PatchRefused:
    with pytest.raises(PatchRefused) as info:
        check_patch(patch, **kwargs)
    assert info.value.reason in REFUSAL_REASONS
    return info.value


def git_file_patch(path: str, *, header_path: str | None = None) -> str:
    """A minimal git-style patch creating ``path`` (header names may differ)."""
    name = header_path if header_path is not None else path
    return (
        f"diff --git a/{name} b/{name}\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        f"+++ b/{path}\n"
        "@@ -0,0 +1 @@\n"
        "+x\n"
    )


def plain_patch(old: str, new: str) -> str:
    return f"--- {old}\n+++ {new}\n@@ -1 +1 @@\n-a\n+b\n"


# ---------------------------------------------------------------- accepted shapes


def test_git_style_modification_is_summarised():
    assert check_patch(GIT_MODIFY) == PatchSummary(files=["src/app.py"], added=2, removed=1)


def test_plain_diff_u_with_timestamps_strips_the_first_component():
    assert check_patch(PLAIN_DIFF_U) == PatchSummary(files=["lib/util.py"], added=1, removed=1)


def test_new_and_deleted_files_name_the_real_side():
    assert check_patch(NEW_FILE).files == ["docs/new.md"]
    assert check_patch(DELETED_FILE) == PatchSummary(files=["old.txt"], added=0, removed=1)


def test_pure_rename_and_mode_change_have_no_hunks():
    assert check_patch(PURE_RENAME).files == ["a.txt", "b.txt"]
    assert check_patch(MODE_CHANGE) == PatchSummary(files=["run.sh"], added=0, removed=0)


def test_several_files_keep_their_order_and_counts_add_up():
    summary = check_patch(GIT_MODIFY + NEW_FILE + DELETED_FILE)
    assert summary.files == ["src/app.py", "docs/new.md", "old.txt"]
    assert (summary.added, summary.removed) == (4, 2)


def test_no_newline_marker_inside_and_after_a_hunk():
    patch = (
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        "\\ No newline at end of file\n"
    )
    assert check_patch(patch) == PatchSummary(files=["f"], added=1, removed=1)


def test_empty_context_line_counts_as_context():
    patch = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n"
    assert check_patch(patch).files == ["f"]


def test_preamble_fences_and_crlf_headers_are_tolerated():
    fenced = "Here is the change:\n\n```diff\n" + GIT_MODIFY + "```\n"
    assert check_patch(fenced).files == ["src/app.py"]
    crlf = GIT_MODIFY.replace("\n", "\r\n")
    assert check_patch(crlf).files == ["src/app.py"]


def test_patch_without_final_newline_is_accepted():
    assert check_patch(GIT_MODIFY.rstrip("\n")).added == 2


def test_quoted_unicode_path_is_decoded():
    patch = (
        'diff --git "a/caf\\303\\251.txt" "b/caf\\303\\251.txt"\n'
        '--- "a/caf\\303\\251.txt"\n+++ "b/caf\\303\\251.txt"\n@@ -1 +1 @@\n-a\n+b\n'
    )
    assert check_patch(patch).files == ["café.txt"]


def test_unquoted_path_with_spaces_is_read_from_the_consistent_split():
    patch = "diff --git a/my file.txt b/my file.txt\n--- a/my file.txt\n+++ b/my file.txt\n@@ -1 +1 @@\n-a\n+b\n"
    assert check_patch(patch).files == ["my file.txt"]


def test_format_patch_signature_after_the_last_hunk():
    patch = "From abc Mon Sep 17 00:00:00 2001\nSubject: x\n---\n" + GIT_MODIFY + "-- \n2.39.5\n"
    assert check_patch(patch).files == ["src/app.py"]


def test_lookalike_names_that_are_not_special_pass():
    for path in ("src/.gitignore", "docs/github/workflows.md", "beads/x", "mesh/x.py", "my.git.txt",
                 "src/mesh.toml.example", ".github/CODEOWNERS", "ci/run.sh"):
        assert check_patch(git_file_patch(path)).files == [path], path


# ---------------------------------------------------------------- refusals: shape


@pytest.mark.parametrize("patch", ["", "   \n\t\n"])
def test_empty(patch):
    assert refused(patch).reason == "empty"


@pytest.mark.parametrize(
    "patch",
    [
        "NO_DIFF: nothing to do",
        "just some prose\nwith lines\n",
        "@@ -1 +1 @@\n-a\n+b\n",  # hunk without a file header
        "--- a/f\n+++ b/f\n",  # header without a hunk
        "--- a/f\n+++ b/f\n@@ -1 +1 @\n-a\n+b\n",  # bad hunk header
        "--- a/f\n+++ b/f\n@@ -x +1 @@\n-a\n+b\n",
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n",  # too few lines (ends early)
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n+c\n",  # more lines than the header says
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n a\n",  # context beyond the old count
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n a\n",  # changes nothing
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\nxb\n",  # a line with no marker
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n\\No newline\n+b\n",
        "--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n",
        "diff --git a/f b/f\n@@ -1 +1 @@\n-a\n+b\n",  # git header, hunk without ---/+++
        "diff --git a/f b/f\n--- a/f\n+++ b/f\n",  # ---/+++ with no hunk
        "diff --git a/f b/f\n--- a/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n",
        "diff --git a/f b/f\nnew file mode 10064x\n",
        "diff --git a/f b/f\nindex zz..yy 100644\n",
        "diff --git af\n",  # no split point at all
        'diff --git "a/\\q" "b/x"\n',  # bad escape
        'diff --git "a/x b/x\n',  # unterminated quote
        'diff --git "a/\\377" "b/\\377"\n',  # quoted bytes that are not UTF-8
        "diff --cc f\n@@@ -1,1 -1,1 +1,1 @@@\n",
        "--- a/f\x01\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n",  # control character in a path
        "--- a/f\n+++ b/\x85f\n@@ -1 +1 @@\n-a\n+b\n",  # C1 control character
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n \n+extra\n",  # lines after a complete hunk
    ],
)
def test_malformed(patch):
    assert refused(patch).reason == "malformed"


def test_lone_surrogate_is_malformed_not_a_crash():
    assert refused("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+\ud800\n").reason == "malformed"


def test_too_large_counts_utf8_bytes():
    patch = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+" + "é" * 60 + "\n"
    assert check_patch(patch, max_bytes=200).files == ["f"]
    error = refused(patch, max_bytes=len(patch))  # é is two bytes: over the cap
    assert error.reason == "too_large"


def test_too_many_files():
    patch = "".join(git_file_patch(f"f{i}.txt") for i in range(4))
    assert len(check_patch(patch, max_files=4).files) == 4
    assert refused(patch, max_files=3).reason == "too_many_files"


@pytest.mark.parametrize(
    "patch",
    [
        "diff --git a/x.bin b/x.bin\nindex 1..2 100644\nGIT binary patch\nliteral 4\nabcd\n",
        "diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n",
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\x00c\n",
        GIT_MODIFY + "Binary files a/y and b/y differ\n",
    ],
)
def test_binary(patch):
    assert refused(patch).reason == "binary"


# ---------------------------------------------------------------- refusals: paths


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../outside.txt", "path_outside_worktree"),
        ("src/../../outside.txt", "path_outside_worktree"),
        ("src/..", "path_outside_worktree"),
        ("src\\..\\x", "path_outside_worktree"),
        ("C:/Windows/x", "path_outside_worktree"),
        ("c:x", "path_outside_worktree"),
        ("/etc/passwd", "path_outside_worktree"),
        ("~/.bashrc", "path_outside_worktree"),
        (".git/config", "git_dir"),
        (".git/hooks/pre-commit", "git_dir"),
        (".GIT/hooks/pre-commit", "git_dir"),
        ("sub/.git/config", "git_dir"),
        (".git./config", "git_dir"),
        (".git /config", "git_dir"),
        ("GIT~1/config", "git_dir"),
        (".git::$INDEX_ALLOCATION/config", "git_dir"),
        (".g\u200cit/config", "git_dir"),
        ("\ufeff.git/config", "git_dir"),
        (".beads/issues.jsonl", "beads_dir"),
        ("sub/.Beads/mesh.db", "beads_dir"),
        (".mesh/state", "mesh_dir"),
        ("mesh.toml", "mesh_dir"),
        ("MESH.TOML", "mesh_dir"),
    ],
)
def test_dangerous_paths_are_refused_in_every_header(path, reason):
    # In a git header, a ---/+++ line, a plain diff, and a rename line.
    assert refused(git_file_patch(path)).reason == reason
    assert refused(git_file_patch("ok.txt", header_path=path)).reason == reason
    assert refused(plain_patch(f"a/{path}", f"b/{path}")).reason == reason
    rename = f"diff --git a/ok.txt b/ok2.txt\nrename from ok.txt\nrename to {path}\n"
    assert refused(rename).reason == reason
    copy = f"diff --git a/ok.txt b/ok2.txt\ncopy from {path}\ncopy to ok2.txt\n"
    assert refused(copy).reason == reason


@pytest.mark.parametrize("path", [
    ".github/workflows/ci.yml", ".GitHub/Workflows/ci.yml", ".github/actions/setup/action.yml",
    ".gitlab-ci.yml", ".circleci/config.yml", ".ci/run", "Jenkinsfile", "azure-pipelines.yml", ".gitmodules",
    "sub/conftest.py", ".github./CODEOWNERS", ".v\u200cscode/tasks.json",
])
def test_protected_paths_parse_and_the_policy_refuses_them_in_every_header(path):
    # The parser leaves what a project may permit to the policy, which judges every name
    # a header could mean.
    patches = [
        git_file_patch(path),
        git_file_patch("ok.txt", header_path=path),
        plain_patch(f"a/{path}", f"b/{path}"),
        f"diff --git a/ok.txt b/ok2.txt\nrename from ok.txt\nrename to {path}\n",
        f"diff --git a/ok.txt b/ok2.txt\ncopy from {path}\ncopy to ok2.txt\n",
    ]
    for patch in patches:
        summary = check_patch(patch)
        assert PatchPolicy().violations(summary), patch


def test_legacy_rename_old_new_lines_are_checked():
    patch = "diff --git a/ok b/ok2\nrename old ok\nrename new .git/config\n"
    assert refused(patch).reason == "git_dir"


def test_absolute_plain_paths_and_double_slashes():
    assert refused(plain_patch("/etc/passwd", "/etc/passwd")).reason == "path_outside_worktree"
    # git squashes "a//etc" to "a/etc" and -p1 then yields "/etc": refused outright.
    assert refused(plain_patch("a//etc/passwd", "b//etc/passwd")).reason == "path_outside_worktree"


def test_dev_null_is_only_a_marker_not_a_path():
    assert check_patch(NEW_FILE).files == ["docs/new.md"]
    assert refused(plain_patch("a/dev/null/../../x", "b/x")).reason == "path_outside_worktree"


def test_quoted_octal_cannot_smuggle_dot_git():
    patch = (
        'diff --git "a/\\056git/config" "b/\\056git/config"\n'
        '--- "a/\\056git/config"\n+++ "b/\\056git/config"\n@@ -1 +1 @@\n-a\n+b\n'
    )
    assert refused(patch).reason == "git_dir"


def test_a_space_separated_timestamp_cannot_hide_dot_git():
    # Without a tab, git cuts a trailing timestamp at a space: the name is then ".git/x".
    patch = "--- a/.git/x 2024-01-01 10:00:00\n+++ b/.git/x 2024-01-01 10:00:00\n@@ -1 +1 @@\n-a\n+b\n"
    assert refused(patch).reason == "git_dir"
    sneaky = "--- a/.git 2024-01-01\n+++ b/ok\n@@ -1 +1 @@\n-a\n+b\n"
    assert refused(sneaky).reason == "git_dir"


def test_every_split_of_an_ambiguous_git_header_is_checked():
    # Splits: ("a/x", "b/.git/config b/x ..."), ..., one of which names .git/config.
    patch = "diff --git a/x b/.git/config b/x b/.git/config\nold mode 100644\nnew mode 100755\n"
    assert refused(patch).reason == "git_dir"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("new file mode 120000", "symlink"),
        ("new mode 120000", "symlink"),
        ("old mode 120000", "symlink"),
        ("deleted file mode 120000", "symlink"),
        ("index 1234567..89abcde 120000", "symlink"),
        ("new file mode 120755", "symlink"),
        ("new file mode 160000", "submodule"),
        ("index 1234567..89abcde 160000", "submodule"),
        ("new file mode 040000", "submodule"),  # git turns any odd type into a gitlink
        ("new file mode 644", "submodule"),
        ("new file mode 0", "submodule"),
    ],
)
def test_non_regular_modes(line, reason):
    patch = f"diff --git a/link b/link\n{line}\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+target\n"
    assert refused(patch).reason == reason


def test_refusal_carries_reason_and_detail():
    error = refused(git_file_patch(".beads/x"))
    assert error.reason == "beads_dir" and ".beads/x" in error.detail
    assert str(error).startswith("beads_dir: ")


# ---------------------------------------------------------------- extract_touched_files


def test_extract_touched_files_matches_check_for_good_patches():
    patch = GIT_MODIFY + NEW_FILE + PURE_RENAME
    assert extract_touched_files(patch) == check_patch(patch).files


def test_extract_touched_files_reads_refused_and_broken_patches_without_raising():
    assert extract_touched_files(git_file_patch(".git/config")) == [".git/config"]
    assert extract_touched_files("--- a/f\n+++ b/f\n@@ -1 +1 @\n") == ["f"]
    assert extract_touched_files("no diff here") == []
    assert extract_touched_files('--- "a/\\q"\n+++ b/f\n') == ["f"]


# ---------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list("-+ @\\\n\r\t\"abc/.0123,:diffgt~\x00")), max_size=300))
def test_any_text_is_either_summarised_or_refused(text):
    try:
        summary = check_patch(text)
    except PatchRefused as error:
        assert error.reason in REFUSAL_REASONS
    else:
        assert summary.files
    assert isinstance(extract_touched_files(text), list)


_LINES = st.lists(st.sampled_from(["a", "b", "c", "", "d e", "  x"]), min_size=0, max_size=8)


@settings(max_examples=150, deadline=None)
@given(old=_LINES, new=_LINES)
def test_difflib_patches_pass_with_exact_counts(old, new):
    if old == new:
        return
    lines = list(difflib.unified_diff(
        [line + "\n" for line in old], [line + "\n" for line in new], "a/pkg/mod.py", "b/pkg/mod.py"
    ))
    summary = check_patch("".join(lines))
    assert summary.files == ["pkg/mod.py"]
    added = sum(1 for line in lines[2:] if line.startswith("+"))
    removed = sum(1 for line in lines[2:] if line.startswith("-"))
    assert (summary.added, summary.removed) == (added, removed)


_DANGEROUS = [".git", ".GIT", ".beads", ".mesh", "..", ".circleci", ".ci", "Jenkinsfile", ".gitmodules"]
_SAFE = ["src", "docs", "a", "b.py", "git", "beads", "mesh", "ci", "x.git"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_DANGEROUS + _SAFE), min_size=1, max_size=4))
def test_a_path_is_refused_exactly_when_a_component_is_dangerous(components):
    path = "/".join(components)
    dangerous = any(component in _DANGEROUS for component in components)
    try:
        PatchPolicy().check(check_patch(git_file_patch(path)))
    except (PatchRefused, PolicyViolation) as error:
        assert dangerous, (path, error)
    else:
        assert not dangerous, path


# ---------------------------------------------------------------- git agrees


def _git_numstat(repo: Path, patch: str) -> list[str] | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(
        ["git", "apply", "--numstat", "-z", "-"], cwd=repo, input=patch.encode(), capture_output=True, env=env
    )
    if proc.returncode != 0:
        return None
    fields = proc.stdout.split(b"\0")
    names = []
    index = 0
    while index < len(fields):
        record = fields[index]
        if not record:
            index += 1
            continue
        added_removed_name = record.split(b"\t", 2)
        if len(added_removed_name) == 3 and added_removed_name[2]:
            names.append(added_removed_name[2].decode())
            index += 1
        else:  # a rename: "added\tremoved\t" then the two names
            names.extend([fields[index + 1].decode(), fields[index + 2].decode()])
            index += 3
    return names


@pytest.mark.parametrize(
    "patch",
    [
        GIT_MODIFY,
        PLAIN_DIFF_U,
        NEW_FILE + DELETED_FILE,
        PURE_RENAME,
        "diff --git a/my file.txt b/my file.txt\n--- a/my file.txt\n+++ b/my file.txt\n@@ -1 +1 @@\n-a\n+b\n",
        'diff --git "a/caf\\303\\251.txt" "b/caf\\303\\251.txt"\n'
        '--- "a/caf\\303\\251.txt"\n+++ "b/caf\\303\\251.txt"\n@@ -1 +1 @@\n-a\n+b\n',
        "prose\n" + GIT_MODIFY + "more prose\n" + NEW_FILE,
    ],
)
def test_git_sees_no_file_the_check_did_not(tmp_path, patch):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    touched = _git_numstat(tmp_path, patch)
    assert touched is not None, "git could not read a patch the check accepted"
    assert set(touched) <= set(check_patch(patch).files)


def test_a_dev_null_prefix_is_not_a_free_pass():
    patch = "--- /dev/null/../../etc/passwd\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    assert refused(patch).reason == "path_outside_worktree"
    dated = "--- /dev/null\t2024-01-01 10:00:00\n+++ b/x\t2024-01-01 10:00:00\n@@ -0,0 +1 @@\n+b\n"
    assert check_patch(dated).files == ["x"]


_FUZZ_NAMES = ["x.txt", "d/y.txt", "a b.txt", ".git/config", "../up.txt", ".beads/i.jsonl", "d/.GIT/x",
               ".github/workflows/w.yml", "/etc/x", "sp .git/x", "c:/x", "d//e"]


def _fuzz_section(draw_kind: str, old: str, new: str, garbage: str) -> str:
    if draw_kind == "modify":
        return f"diff --git a/{old} b/{new}\n--- a/{old}\n+++ b/{new}\n@@ -1 +1 @@\n-a\n+b\n{garbage}"
    if draw_kind == "new":
        return f"diff --git a/{new} b/{new}\nnew file mode 100644\n--- /dev/null\n+++ b/{new}\n@@ -0,0 +1 @@\n+b\n{garbage}"
    if draw_kind == "rename":
        return f"diff --git a/{old} b/{new}\nsimilarity index 100%\nrename from {old}\nrename to {new}\n{garbage}"
    return f"{garbage}--- a/{old}\n+++ b/{new}\n@@ -1 +1 @@\n-a\n+b\n"


def _unsafe(name: str) -> bool:
    parts = [p.lower().rstrip(". ") for p in name.split("/")]
    return name.startswith("/") or any(p in (".git", "..", ".beads", ".mesh") for p in parts) or (
        ".github" in parts
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sections=st.lists(
        st.tuples(
            st.sampled_from(["modify", "new", "rename", "plain"]),
            st.sampled_from(_FUZZ_NAMES),
            st.sampled_from(_FUZZ_NAMES),
            st.sampled_from(["", "\n", "prose line\n", "-- \n", "index 1..2 100644\n"]),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_fuzzed_patches_git_reads_never_touch_more_than_the_check_saw(tmp_path_factory, sections):
    repo = tmp_path_factory.mktemp("fuzz")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    patch = "".join(_fuzz_section(*section) for section in sections)
    try:
        summary = check_patch(patch)
        PatchPolicy().check(summary)
    except (PatchRefused, PolicyViolation):
        return
    files = summary.files
    touched = _git_numstat(repo, patch)
    if touched is None:
        return  # git refuses it too
    assert set(touched) <= set(files), (patch, touched, files)
    assert not any(_unsafe(name) for name in touched), (patch, touched)


def test_refusal_details_stay_short():
    error = refused("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\nx" + "y" * 100_000 + "\n")
    assert error.reason == "malformed" and len(error.detail) <= 300
