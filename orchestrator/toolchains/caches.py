"""Build caches: per project, per toolchain, outside every tree, bounded.

A cache makes the second validation of a project fast (Go's ``GOCACHE``, cargo's target
folder, the ``node_modules/.cache`` and ``.vite`` folders tools write). Each lives in
``<cache>/mesh-build/<repo name>-<12 hex of the repository's path>/<toolchain>/<name>``: never
shared between projects, never inside a tree (so nothing in it can be committed or land), and
never shown to a worker (a worker's sandbox shows its own private HOME and the task's worktree,
not the user's cache folder). Validation binds it writable; when mesh runs as root the folder
belongs to the sandbox's user, who alone writes it.

Bounded: ``prune`` (called when a run starts) removes a toolchain's cache whole when it holds more
than the configured size; the next validation rebuilds it. Removing it whole, not file by file,
keeps a cache from being left half consistent (cargo's fingerprints, Go's index).

A validation command runs code the patch under test controls, and can write into the cache of its
project. What it writes can only mislead a later validation of the same project (which a patch
can already do by editing its tests), never reach another project, a worker, or a commit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from orchestrator.sandbox.bwrap import sandbox_user
from orchestrator.worktree.gitops import cache_dir

__all__ = ["DEFAULT_CACHE_MB", "cache_folder", "cache_size", "project_cache_root", "prune"]

DEFAULT_CACHE_MB = 4096


def project_cache_root(repo: Path) -> Path:
    """The folder of ``repo``'s build caches (see the module docstring)."""
    real = os.path.realpath(repo)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(real)).lstrip(".")[:48] or "repo"
    return cache_dir() / "mesh-build" / f"{name}-{hashlib.sha256(os.fsencode(real)).hexdigest()[:12]}"


def cache_folder(root: Path, toolchain: str, name: str) -> Path:
    """The cache ``name`` of ``toolchain`` under ``root``, made when missing and writable by the
    sandbox's user (only it: mode 0700)."""
    folder = root / toolchain / name
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o711)
    os.chmod(root / toolchain, 0o711)
    uid = sandbox_user()
    if uid is not None and folder.stat().st_uid != uid:
        os.chown(folder, uid, uid)
    os.chmod(folder, 0o700)
    return folder


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
    """Remove each toolchain cache under ``root`` that holds more than ``limit_mb``; returns one
    line per removed cache, for preflight."""
    removed = []
    if not root.is_dir():
        return removed
    for toolchain in sorted(root.iterdir()):
        if not toolchain.is_dir() or toolchain.is_symlink():
            continue
        size = cache_size(toolchain)
        if size > limit_mb << 20:
            shutil.rmtree(toolchain, ignore_errors=True)
            removed.append(f"build cache {toolchain.name}: {size >> 20} MB > {limit_mb} MB, removed (rebuilt on use)")
    return removed
