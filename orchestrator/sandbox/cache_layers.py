"""Build caches as one validation sees them: the base check's, never another validation's.

A validation command runs code the patch under test controls, and a build cache it could write
would carry that code into the verdict of another tree: cargo runs a compiled test binary its
fingerprints call fresh (one replaced by ``/usr/bin/true``, its times moved 50 years ahead), Go
links the archive its cache index names (checked by size only), an incremental compiler keeps an
output whose source did not change. So a project's build caches (the ``Mount.cache`` mounts of
its ``ProjectView``, under ``view.cache_root``) are kept per commit, and written by one kind of
validation only:

- ``trusted/<commit>/`` holds what the base check wrote while it checked ``<commit>`` (the tree a
  task starts from: the user's commit, or the tip of an integration branch), seeded from the
  caches of the nearest commit ``<commit>`` descends from. The ``KEEP`` last used are kept;
- every other validation (a candidate, landing validation, ``ci-close --revalidate``) gets a
  folder of its own under ``layers/``: a copy (``cp --reflink=auto``: free where the file
  system shares blocks) of the caches of the nearest commit its tree descends from, or empty
  folders when there is none; the tree's commands share it, and it is removed after the last.

What a validation writes thus reaches only its own tree's later commands; what the base check
writes reaches only trees descending from the commit it checked. The base check is told apart
by ``view.writes_caches`` (set by ``orchestrator.toolchains.base_check`` alone); the commit
whose caches it writes is the one it validates.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from orchestrator.sandbox.bwrap import sandbox_user
from orchestrator.sandbox.cgroups import alive
from orchestrator.sandbox.project_view import Mount, ProjectView

__all__ = ["KEEP", "LAYERS", "TRUSTED", "remove", "remove_stale", "shown", "trusted_commits", "warm", "writing"]

TRUSTED = "trusted"
LAYERS = "layers"
KEEP = 4
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
# Folders of a process: a layer (``<pid>-<hex>``), a trusted cache being written or replaced.
_OWNED = re.compile(r"(?:\.staging-|\.old-)?(\d+)-[0-9a-f]+")


def writing(view: ProjectView | None) -> ProjectView | None:
    """``view`` for the base check: its validation writes the caches of the commit it checks."""
    return replace(view, writes_caches=True) if view is not None else None


def _caches(view: ProjectView | None) -> list[Mount]:
    if view is None or not view.cache_root:
        return []
    return [m for m in view.mounts if m.cache and not os.path.isabs(m.source) and ".." not in Path(m.source).parts]


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=60)


def _resolve(repo: Path, commit: str | None) -> str | None:
    if commit and _SHA.fullmatch(commit):
        return commit  # a commit that is not there fails the validation itself (materialize_tree)
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{commit or 'HEAD'}^{{commit}}")
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and _SHA.fullmatch(sha) else None


def trusted_commits(root: Path) -> list[Path]:
    """The folders of trusted caches under ``root`` (a project's cache folder), newest first."""
    folder = root / TRUSTED
    found = []
    for path in folder.iterdir() if folder.is_dir() else ():
        try:
            if _SHA.fullmatch(path.name) and not path.is_symlink() and path.is_dir():
                found.append((path.stat().st_mtime, path))
        except OSError:  # removed meanwhile by another mesh
            continue
    return [path for _, path in sorted(found, reverse=True)]


def _nearest(root: Path, repo: Path, sha: str) -> Path | None:
    """The trusted caches of the nearest commit ``sha`` descends from (``sha`` itself first)."""
    if (root / TRUSTED / sha).is_dir():
        return root / TRUSTED / sha
    best: tuple[int, Path] | None = None
    for folder in trusted_commits(root):
        # "<commits only the trusted one has>\t<commits only sha has>": an ancestor has none of its own.
        counted = _git(repo, "rev-list", "--count", "--left-right", f"{folder.name}...{sha}").stdout.split()
        if len(counted) == 2 and counted[0] == "0" and counted[1].isdigit() and (
                best is None or int(counted[1]) < best[0]):
            best = (int(counted[1]), folder)
    return best[1] if best else None


def warm(view: ProjectView | None, repo: Path, commit: str) -> bool:
    """True when ``view`` has no build cache, or the base check's caches of ``commit`` are kept."""
    if not _caches(view):
        return True
    sha = _resolve(repo, commit)
    return sha is not None and (Path(view.cache_root) / TRUSTED / sha).is_dir()


def _folder(path: Path, mode: int = 0o711) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    return path


def _fill(folder: Path, seed: Path | None, caches: list[Mount]) -> None:
    """``folder``: a copy of ``seed``, a commit's trusted caches, when there is one (in one ``cp``:
    links copied as links, times, modes and, for root, owners kept), then an empty folder for
    each cache it lacks, writable by the sandbox's user only."""
    if seed is not None:
        done = subprocess.run(["cp", "-a", "--reflink=auto", "--", str(seed), str(folder)], capture_output=True,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            remove(folder)  # the trusted caches removed meanwhile: start empty rather than half copied
    _folder(folder)
    uid = sandbox_user()
    for mount in caches:
        target = folder / mount.source
        if os.path.lexists(target):
            continue
        _folder(target.parent)
        target.mkdir()
        if uid is not None:
            os.chown(target, uid, uid)
        os.chmod(target, 0o700)


def _install(root: Path, staged: Path, sha: str) -> None:
    """Put the base check's caches in place as the trusted caches of ``sha`` (replacing older ones
    of the same commit), then keep only the ``KEEP`` commits last used."""
    final = root / TRUSTED / sha
    old = final.with_name(f".old-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        final.rename(old)
    except OSError:
        old = None
    try:
        os.utime(staged)  # the newest (``cp -a`` kept its seed's time)
        staged.rename(final)
    except OSError:
        remove(staged)  # another base check of the same commit installed its caches meanwhile
    remove(old)
    for stale in trusted_commits(root)[KEEP:]:
        remove(stale)


@contextmanager
def shown(view: ProjectView | None, repo: Path, commit: str | None, sandbox: str) -> Iterator[ProjectView | None]:
    """``view`` with each build cache at a folder of this validation's own (see the module
    docstring), for the validation of ``commit`` (default HEAD) of the checkout ``repo``; the
    folder is removed, or installed as trusted caches for the base check, on exit. ``view``
    itself when it has no build cache or validation runs without the sandbox."""
    caches = _caches(view)
    if not caches or sandbox != "bwrap":
        yield view
        return
    root = Path(view.cache_root)
    sha = _resolve(repo, commit)
    seed = _nearest(root, repo, sha) if sha else None
    if seed is not None:
        try:
            os.utime(seed)  # used: the last to go when older commits are dropped
        except OSError:
            seed = None
    writer = view.writes_caches and sha is not None
    token = f"{os.getpid()}-{secrets.token_hex(6)}"
    folder = root / TRUSTED / f".staging-{token}" if writer else root / LAYERS / token
    _folder(root)
    _folder(folder.parent)
    installed = False
    try:
        _fill(folder, seed, caches)
        yield replace(view, mounts=tuple(replace(m, source=str(folder / m.source), cache=False) if m in caches else m
                                         for m in view.mounts))
        if writer:
            _install(root, folder, sha)
            installed = True
    finally:
        if not installed:
            remove(folder)


def remove(folder: Path | None) -> None:
    """Remove ``folder`` whole, also where a validation made parts of it unreadable to its owner."""
    if folder is None or not os.path.lexists(folder):
        return

    def reopen(_function, path: str, _error) -> None:
        try:
            os.chmod(os.path.dirname(path), 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass

    if os.path.isdir(folder) and not os.path.islink(folder):
        shutil.rmtree(folder, onerror=reopen)
    else:
        os.unlink(folder)


def remove_stale(root: Path) -> None:
    """Remove the layers and unfinished trusted caches of processes that are gone (killed mid-run)."""
    for folder in (root / LAYERS, root / TRUSTED):
        for path in folder.iterdir() if folder.is_dir() else ():
            owned = _OWNED.fullmatch(path.name)
            if owned and (path.name.startswith(".") or folder.name == LAYERS) and not alive(int(owned.group(1))):
                remove(path)
