"""A copy of exactly one committed tree, read from git's objects.

Validation runs on this copy, never on a worktree: files a worker left uncommitted are not
there, nor is ``.git``. ``git archive`` is not used, because its ``export-ignore`` attribute
would let a committed ``.gitattributes`` hide files from the copy.

May import what ``orchestrator.sandbox`` may.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path
from typing import IO, Sequence

__all__ = ["changed_lines", "materialize_tree"]


def _git(repo: Path, *args: str) -> bytes:
    # git's location overrides in mesh's own environment must not redirect these reads.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ValueError(f"git {args[0]} in {repo}: {detail[-1] if detail else 'failed'}")
    return done.stdout


def _safe_tree_path(path: bytes) -> bool:
    parts = path.split(b"/")
    return not path.startswith(b"/") and all(part not in (b"", b".", b"..", b".git") for part in parts)


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise ValueError("git cat-file ended early")
        data += chunk
    return bytes(data)


def _blobs(repo: Path, object_ids: Sequence[bytes]):
    """Yield the contents of ``object_ids`` in order, read through one ``git cat-file --batch``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.Popen(["git", "-C", str(repo), "cat-file", "--batch"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None and proc.stdout is not None

    def feed() -> None:
        try:
            for object_id in object_ids:
                proc.stdin.write(object_id + b"\n")
        except BrokenPipeError:
            pass
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        for object_id in object_ids:
            header = proc.stdout.readline().split()
            if len(header) != 3 or header[0] != object_id or header[1] != b"blob":
                raise ValueError(f"git cat-file: object {object_id.decode()} is not a readable blob")
            yield _read_exact(proc.stdout, int(header[2]))
            _read_exact(proc.stdout, 1)
    finally:
        proc.kill()
        proc.wait()
        writer.join()


def changed_lines(repo: Path, commit: str, limit: int = 2000) -> dict[str, tuple[tuple[int, int], ...]]:
    """What ``commit`` changed against its first parent (everything, for a root commit): each
    path with the line ranges (first line, count) its hunks cover in the new file; {} past
    ``limit`` paths or 4 MiB of diff. The change under validation: its tests get mesh's twins
    first."""
    try:
        out = _git(repo, "diff-tree", "-r", "-p", "-U0", "--no-renames", "--no-color", "--no-ext-diff",
                   "--no-textconv", "--no-commit-id", "--root", "--end-of-options", f"{commit}^{{commit}}")
    except ValueError:
        return {}
    if len(out) > 4 << 20:
        return {}
    found: dict[str, list[tuple[int, int]]] = {}
    path = None
    for line in out.split(b"\n"):
        if line.startswith(b"diff --git "):
            path = None
        elif line.startswith(b"+++ "):
            name = line[4:].decode("utf-8", "replace")
            path = name[2:] if name.startswith("b/") else None
            if path is not None:
                found.setdefault(path, [])
        elif line.startswith(b"@@ ") and path is not None:
            hunk = re.match(rb"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
            if hunk is not None:
                found[path].append((int(hunk.group(1)), int(hunk.group(2) or 1)))
        if len(found) > limit:
            return {}
    return {name: tuple(ranges) for name, ranges in found.items()}


def changed_paths(repo: Path, since: str, commit: str, limit: int = 20000) -> tuple[str, ...] | None:
    """The paths that differ between the commits ``since`` and ``commit`` (both sides of a
    rename); None when git cannot say or past ``limit`` paths."""
    try:
        out = _git(repo, "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv",
                   "--end-of-options", f"{since}^{{commit}}", f"{commit}^{{commit}}")
    except ValueError:
        return None
    paths = [name.decode("utf-8", "replace") for name in out.split(b"\0") if name]
    return tuple(paths) if len(paths) <= limit else None


def materialize_tree(repo: Path, commit: str, dest: Path) -> str:
    """Write exactly the committed tree of ``commit`` (in checkout ``repo``) into new directory ``dest``.

    Read from git's objects (``ls-tree`` and ``cat-file``), not with ``git archive``, whose
    ``export-ignore`` attribute would let a committed ``.gitattributes`` hide files from the
    copy. Executable bits and symlinks are kept; submodule entries (gitlinks) are skipped.
    Returns the full commit id; ValueError when ``repo`` is no git checkout, ``commit`` no
    commit, or the tree holds a path that could leave ``dest``.
    """
    full = _git(repo, "rev-parse", "--verify", "--end-of-options", f"{commit}^{{commit}}").decode().strip()
    files: list[tuple[bytes, bytes, bytes]] = []
    for record in _git(repo, "ls-tree", "-r", "-z", "--full-tree", full).split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, kind, object_id = meta.split(b" ")
        if kind == b"commit":
            continue
        if not _safe_tree_path(path):
            raise ValueError(f"commit {full[:12]} holds an unsafe path {path.decode('utf-8', 'replace')!r}")
        files.append((mode, object_id, path))
    root = os.fsencode(dest)
    os.mkdir(root, 0o755)
    links: list[tuple[bytes, bytes]] = []
    for (mode, _object_id, path), content in zip(files, _blobs(repo, [f[1] for f in files])):
        target = os.path.join(root, path)
        if mode == b"120000":
            links.append((content, target))
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # O_NOFOLLOW|O_EXCL: no link exists yet (they are made last), and none is written through.
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o755 if mode == b"100755" else 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
    for link_target, path in links:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(link_target, path)
    return full
