"""The JSONL-in-git CI close in one installed command: import the committed tracker, close what
holds, export it back and commit it, with no script of the checkout run on the way.

A CI job that closes tasks holds ``MESH_SIGNING_KEY``. Whatever the job runs from the branch it
checked out is code a task's patch may have written, so the documented sequence is one call,
``mesh ci-close --jsonl .beads/issues.jsonl --commit``, and this module is what that call does
besides the close itself (orchestrator.landing.ci_close):

- the tracker file is read from the checkout as a plain regular file, through no symbolic link
  (a branch could point ``.beads/issues.jsonl`` or ``.beads`` at a file of the runner's), and
  imported into a throwaway SQLite database in a temporary folder outside the checkout;
- after the close the export is written beside the file and renamed over it, the same checks
  made again first;
- the commit is made by gitops' git (hooks and fsmonitor off) in an environment without any
  secret (``without_secrets``: the signing key and every secret-named variable are dropped), so even a git the runner configured to run a
  program (a credential helper, a pager) never sees them. Nothing is pushed: the workflow pushes,
  in a step that holds no key.

May import the tracker, gitops and redact; nothing of the CLI.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.worktree import gitops
from tracker.store import Tracker

__all__ = ["CiJsonlError", "JsonlRound", "commit_export", "jsonl_tracker", "tracker_file"]

_MESSAGE = ("mesh ci-close: tracker update", "Closed by mesh ci-close after re-validation.")


class CiJsonlError(Exception):
    """The tracker file cannot be read or written safely, or the commit failed (exit 2)."""


@dataclass
class JsonlRound:
    """What the round trip did: issues imported and exported, and the commit made (or None)."""

    path: str
    imported: int = 0
    exported: int = 0
    changed: bool = False
    commit: str | None = None


def tracker_file(checkout: Path, rel: str, *, must_exist: bool = True) -> Path:
    """``rel`` inside ``checkout``, checked: relative, no ``..``, no symbolic link in any of its
    components, and a regular file (or, with ``must_exist`` False, absent). CiJsonlError else."""
    parts = [part for part in Path(rel).parts if part not in ("", ".")]
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise CiJsonlError(f"--jsonl {rel}: give a path inside the checkout, such as .beads/issues.jsonl")
    current = checkout
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            if index == len(parts) - 1 and not must_exist:
                return current
            raise CiJsonlError(f"--jsonl {rel}: no such file in the checkout {checkout}") from None
        if stat.S_ISLNK(info.st_mode):
            raise CiJsonlError(f"--jsonl {rel}: {'/'.join(parts[:index + 1])} is a symbolic link in the checkout;"
                               " ci-close reads and writes the tracker file only as a plain file of the checkout")
        last = index == len(parts) - 1
        if last and not stat.S_ISREG(info.st_mode):
            raise CiJsonlError(f"--jsonl {rel}: not a regular file")
        if not last and not stat.S_ISDIR(info.st_mode):
            raise CiJsonlError(f"--jsonl {rel}: {'/'.join(parts[:index + 1])} is not a folder")
    return current


@contextmanager
def jsonl_tracker(checkout: Path, rel: str, *, actor: str | None) -> Iterator[tuple[Tracker, JsonlRound]]:
    """A throwaway tracker holding ``rel``'s issues; on a clean exit the export is written back.

    The database lives in a temporary folder outside the checkout, removed afterwards."""
    from tracker.jsonl import export_jsonl, import_jsonl

    source = tracker_file(checkout, rel)
    folder = Path(tempfile.mkdtemp(prefix="mesh-ci-close-"))
    done = JsonlRound(path=rel)
    try:
        tracker = Tracker.init(checkout, actor=actor, db_path=folder / "mesh.db")
        with tracker:
            before = _read(source)
            report = import_jsonl(tracker, io.StringIO(before.decode("utf-8", errors="replace")))
            done.imported = report.created + report.updated + report.unchanged
            yield tracker, done
            target = tracker_file(checkout, rel)
            partial = folder / "export.jsonl"
            with open(partial, "w", encoding="utf-8", newline="\n") as handle:
                done.exported = export_jsonl(tracker, handle)
            after = partial.read_bytes()
            done.changed = after != before
            if done.changed:
                _replace(target, after)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CiJsonlError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)


def _replace(target: Path, data: bytes) -> None:
    """Write ``data`` beside ``target`` under a fresh name, then rename it over ``target``."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def _git(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One git command in the checkout: gitops' (hooks and fsmonitor off, nothing relocating it),
    with no secret in its environment and nothing signed."""
    try:
        return gitops._git(checkout, "-c", "commit.gpgSign=false", *args, check=False, without_secrets=True)
    except gitops.GitError as exc:
        raise CiJsonlError(str(exc)) from None


def commit_export(checkout: Path, rel: str, actor: str) -> str | None:
    """Commit ``rel`` alone (when it changed) on the checked-out HEAD; the new commit's id, or
    None when there was nothing to commit. The checkout's own identity is used, else ``actor``."""
    tracker_file(checkout, rel)
    added = _git(checkout, "add", "--", rel)
    if added.returncode != 0:
        raise CiJsonlError(f"git add {rel}: {added.stderr.strip()[:300]}")
    if _git(checkout, "diff", "--cached", "--quiet", "--", rel).returncode == 0:
        return None
    identity: list[str] = []
    for key, fallback in (("user.name", actor), ("user.email", f"{actor}@localhost")):
        if _git(checkout, "config", key).returncode != 0:
            identity += ["-c", f"{key}={fallback}"]
    made = _git(checkout, *identity, "commit", "-q", "--no-verify", "-m", _MESSAGE[0], "-m", _MESSAGE[1], "--", rel)
    if made.returncode != 0:
        raise CiJsonlError(f"git commit: {made.stderr.strip()[:300]}")
    return _git(checkout, "rev-parse", "HEAD").stdout.strip() or None
