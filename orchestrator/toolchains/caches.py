"""Build caches: per project, per toolchain, outside every tree, written by the base check alone.

A cache makes the second validation of a project fast (Go's ``GOCACHE``, cargo's target
folder, the ``node_modules/.cache`` and ``.vite`` folders tools write). A toolchain names each
one it needs (``cache_mount``: ``<toolchain>/<name>`` and where the sandbox shows it); they live
in ``<cache>/mesh-build/<repo name>-<12 hex of the repository's path>/``: never shared between
projects, never inside a tree (so nothing in them can be committed or land), and never shown to a
worker (a worker's sandbox shows its own private HOME and the task's worktree, not the user's
cache folder).

A validation command runs code the patch under test controls, and what it writes into a cache
would be read by the next validation of another tree (cargo runs a test binary its fingerprints
call fresh). So only the base check writes a project's caches, per commit, and every other
validation works on a copy of its own of the caches of the nearest commit its tree descends
from, removed afterwards: ``orchestrator.sandbox.cache_layers``.

Bounded: ``prune`` (called when a run starts) removes the caches of the oldest commits, each
commit's whole, until the rest hold at most the configured size; the next base check of such a
commit rebuilds them. Removing them whole, not file by file, keeps a cache from being left half
consistent (cargo's fingerprints, Go's index). Caches an earlier mesh shared between all the
validations of a project (``<toolchain>/`` folders) are removed.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from orchestrator.sandbox.cache_layers import LAYERS, TRUSTED, remove, remove_stale, trusted_commits
from orchestrator.sandbox.project_view import Mount
from orchestrator.worktree.gitops import cache_dir

__all__ = ["DEFAULT_CACHE_MB", "cache_mount", "cache_size", "project_cache_root", "prune"]

DEFAULT_CACHE_MB = 4096
_KEPT = (TRUSTED, LAYERS, "base-checks", "base-tests")


def project_cache_root(repo: Path) -> Path:
    """The folder of ``repo``'s build caches (see the module docstring)."""
    real = os.path.realpath(repo)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(real)).lstrip(".")[:48] or "repo"
    return cache_dir() / "mesh-build" / f"{name}-{hashlib.sha256(os.fsencode(real)).hexdigest()[:12]}"


def cache_mount(toolchain: str, name: str, target: str, *, in_tree: bool = False) -> Mount:
    """The build cache ``name`` of ``toolchain``, shown writable at ``target`` (a path of the tree
    copy with ``in_tree``) in a folder of each validation's own."""
    return Mount(f"{toolchain}/{name}", target, writable=True, in_tree=in_tree, cache=True)


def cache_size(folder: Path) -> int:
    """Bytes the files under ``folder`` take (links not followed)."""
    total = 0
    for base, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_blocks * 512
            except OSError:
                continue
    return total


def prune(root: Path, limit_mb: int) -> list[str]:
    """Bound the build caches under ``root`` (see the module docstring); returns one line per
    removal, for preflight."""
    removed: list[str] = []
    if not root.is_dir():
        return removed
    remove_stale(root)
    for folder in sorted(root.iterdir()):
        if folder.name not in _KEPT and folder.is_dir() and not folder.is_symlink():
            remove(folder)
            removed.append(f"build cache {folder.name}: shared by every validation (an earlier mesh), removed; the"
                           " base check rebuilds it")
    commits = trusted_commits(root)
    sizes = [cache_size(folder) for folder in commits]
    total = sum(sizes)
    while commits and total > limit_mb << 20:
        folder, size = commits.pop(), sizes.pop()
        remove(folder)
        total -= size
        removed.append(f"build caches of {folder.name[:12]}: {size >> 20} MB removed (the caches held"
                       f" {(total + size) >> 20} MB > {limit_mb} MB; rebuilt by its next base check)")
    return removed
