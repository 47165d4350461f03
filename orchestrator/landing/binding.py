"""Whether a checkout holds exactly the tree a signed run head approved.

``mesh ci-close`` closes a task for the checkout CI runs in. "HEAD contains the approved
commit and no later commit touched the run's files" is not enough: a later commit that adds
``temperature/__init__.py`` beside the approved ``temperature.py`` changes what
``import temperature`` runs without touching a file of the run. So the tree CI closes on must
be an approved tree, whole:

- ``tree``: HEAD's tree is the signed tree;
- ``contains`` / ``landed``: HEAD contains the signed commit (or the commit it landed as on
  the integration branch, also signed) and HEAD's tree is the tree of that commit or of a
  commit another approved run head of the scope signs (its task landed after this one, on
  top of it), and no commit after the approved one changed the run's files.

In both, paths under ``.beads/`` may differ, as regular files only: that is where the CI
sequence commits the tracker's JSONL export, a folder no import, test collector or runner
reads. Anything else that differs, added, removed or changed, is refused with a typed
reason (``BindingRefusal.code``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.worktree.gitops import GitError
from orchestrator.worktree.gitops import _git as gitops_git

__all__ = ["TRACKER_FOLDER", "Binding", "commit_binding"]

TRACKER_FOLDER = ".beads"
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REGULAR = ("100644", "100755")


@dataclass(frozen=True)
class Binding:
    """How the checkout holds the approved tree (``how``), or why it does not (``code``:
    ``no_commit``, ``no_checkout``, ``commit_missing``, ``tree_differs``, ``files_changed``,
    ``git_error``; ``why`` says it in one line)."""

    how: str | None
    code: str | None = None
    why: str | None = None


def _git(repo: Path, *args: str):
    # The checkout is untrusted (CI's branch): hooks and fsmonitor stay off, paths are literal.
    return gitops_git(Path(repo), "--literal-pathspecs", *args, check=False)


def _ancestor(repo: Path, commit: str, of: str = "HEAD") -> bool:
    return _git(repo, "merge-base", "--is-ancestor", commit, of).returncode == 0


def _top_entries(repo: Path, commit: str) -> dict[str, tuple[str, str]] | None:
    """The top-level entries of ``commit``'s tree: name -> (mode, object id)."""
    proc = _git(repo, "ls-tree", "-z", commit)
    if proc.returncode != 0:
        return None
    entries = {}
    for record in proc.stdout.split("\x00"):
        if record:
            meta, _, name = record.partition("\t")
            mode, _, rest = meta.partition(" ")
            entries[name] = (mode, rest.partition(" ")[2])
    return entries


def _tracker_folder_is_data(repo: Path, entry: tuple[str, str] | None) -> bool:
    """Whether HEAD's ``.beads`` entry holds regular files only (or is absent)."""
    if entry is None:
        return True
    if entry[0] != "040000":
        return False
    proc = _git(repo, "ls-tree", "-r", "-z", "--full-tree", "HEAD", "--", TRACKER_FOLDER)
    records = [r for r in proc.stdout.split("\x00") if r]
    return proc.returncode == 0 and all(r.split(" ", 1)[0] in _REGULAR for r in records)


def _differences(repo: Path, base: str) -> list[str]:
    proc = _git(repo, "diff", "--no-renames", "--name-only", "-z", base, "HEAD")
    return sorted(n for n in proc.stdout.split("\x00") if n and n.split("/", 1)[0] != TRACKER_FOLDER)


def commit_binding(repo: Path, artifact: Mapping[str, Any], vouched: Collection[str] = ()) -> Binding:
    """How the checkout at ``repo`` holds the tree the run head ``artifact`` approved.

    ``vouched``: commits other trusted approving run heads of the scope sign (their
    ``commit`` and landed commit); HEAD may hold the tree of one of them when it contains
    this run's approved commit.
    """
    try:
        return _commit_binding(repo, artifact, vouched)
    except GitError as exc:
        return Binding(None, "git_error", f"cannot compare the checkout with the approved commit: {exc}")


def _commit_binding(repo: Path, artifact: Mapping[str, Any], vouched: Collection[str]) -> Binding:
    commit, tree, files = artifact.get("commit"), artifact.get("tree"), artifact.get("files")
    if not isinstance(commit, str) or not isinstance(tree, str) or not commit or not tree:
        return Binding(None, "no_commit", "the approved run integrated no commit")
    head_tree = _git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{tree}")
    if head_tree.returncode != 0:
        return Binding(None, "no_checkout", f"{repo} has no commit checked out")
    if head_tree.stdout.strip() == tree:
        return Binding("tree")
    # A drained task may have landed rebased: the head also signs the landed commit (validated
    # again on the integration branch), and a checkout holding that one is bound the same way.
    landed = (artifact.get("conditions") or {}).get("on_integration_branch")
    how, anchor = "contains", commit
    if not _ancestor(repo, commit):
        if not (isinstance(landed, str) and _SHA.fullmatch(landed) and _ancestor(repo, landed)):
            return Binding(None, "commit_missing", f"the checked-out tree differs from the approved tree {tree[:12]}"
                                                   f" and HEAD does not contain the approved commit {commit[:12]}")
        how, anchor = "landed", landed
    head = _top_entries(repo, "HEAD")
    if head is None:
        return Binding(None, "git_error", "cannot read the checked-out tree")
    head_code = {name: entry for name, entry in head.items() if name != TRACKER_FOLDER}
    approved = [anchor, *(c for c in vouched if isinstance(c, str) and _SHA.fullmatch(c) and c != anchor
                          and _ancestor(repo, anchor, c) and _ancestor(repo, c))]
    same = False
    for candidate in approved:
        entries = _top_entries(repo, candidate)
        if entries is not None and {n: e for n, e in entries.items() if n != TRACKER_FOLDER} == head_code:
            same = _tracker_folder_is_data(repo, head.get(TRACKER_FOLDER)) or (
                head.get(TRACKER_FOLDER) == entries.get(TRACKER_FOLDER))
            if same:
                break
    if not same:
        extra = _differences(repo, anchor)
        shown = ", ".join(extra[:5]) + (f" (and {len(extra) - 5} more)" if len(extra) > 5 else "")
        return Binding(None, "tree_differs", "the checked-out tree is not the approved tree: "
                       + (f"{shown} differ(s) from the approved commit {anchor[:12]}" if extra
                          else f"{TRACKER_FOLDER}/ holds more than regular files"))
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        return Binding(None, "no_commit", "the approved run names no files to compare")
    changed = _git(repo, "diff", "--no-renames", "--name-only", "-z", anchor, "HEAD", "--", *files)
    if changed.returncode != 0:
        return Binding(None, "git_error", "cannot compare the checkout with the approved commit")
    later = sorted(n for n in changed.stdout.split("\x00") if n)
    if later:
        return Binding(None, "files_changed", f"the task's files changed after approval: {', '.join(later[:5])}")
    return Binding(how)
