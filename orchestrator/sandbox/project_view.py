"""What validation shows of a project beyond its committed tree.

A project's tests need more than the files git holds: the dependencies its package manager
installed (``node_modules/``, Go's module cache, cargo's registry), the toolchain that runs
them (a Node from a version manager, a rustup toolchain), a build cache that makes the second
run fast (Go's ``GOCACHE``, cargo's target folder), and files generated at install time and
git-ignored (a hatch-vcs ``_version.py``, compiled gettext catalogues). The toolchains
(``orchestrator.toolchains``) find these; a ``ProjectView`` is what they found, as plain data
the validation sandbox (``orchestrator.sandbox.validation``) applies:

- ``mounts``: folders or files shown read-only (dependencies, toolchains) or writable (build
  caches, which live outside every tree), at an absolute path or at a path of the tree copy; a
  build cache (``Mount.cache``) is named, not located: each validation is shown a folder of its
  own for it (``cache_layers``: the base check's caches, copied), under ``cache_root``;
- ``path`` and ``env``: program folders put first on PATH, variables every command gets;
- ``carried``: untracked files copied from the checkout into the tree copy, only where the
  commit under test has no file of that path (a patch cannot replace one, and nothing carried
  is ever committed: what lands is the worktree's commit);
- ``setup``: commands run in the sandbox on the tree copy before each validation command
  (the user's own, from ``mesh.toml``, allowlisted like validation commands);
- ``tree_at``: where the tree shows, when not at the project's own path: an eval's case
  repository stands in for the user's checkout, whose editable install names the checkout's path.

May import what ``orchestrator.sandbox`` may.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.sandbox.project_env import ProjectEnv

__all__ = ["CARRY_MAX_BYTES", "Mount", "ProjectView", "carry_into"]

# A carried file is a version stamp or a compiled catalogue, not a payload.
CARRY_MAX_BYTES = 8 << 20


@dataclass(frozen=True)
class Mount:
    """``source`` (a host path) shown at ``target``: an absolute path, or with ``in_tree`` a path
    relative to the tree copy's root. Read-only unless ``writable`` (build caches only). With
    ``cache``, ``source`` names a build cache (``<toolchain>/<name>``) that ``cache_layers``
    locates for each validation."""

    source: str
    target: str
    writable: bool = False
    in_tree: bool = False
    cache: bool = False


@dataclass(frozen=True)
class ProjectView:
    """Everything validation adds to the committed tree for one project (see the module
    docstring). ``python`` is the project's Python environment, if it has one; ``notes`` are
    preflight's lines about what was found."""

    project_root: str
    python: ProjectEnv | None = None
    mounts: tuple[Mount, ...] = ()
    path: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    carried: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    # The detected toolchains' check commands (the base check's, unless configured).
    checks: tuple[str, ...] = ()
    # The path the tree shows at instead of ``project_root`` (see the module docstring).
    tree_at: str | None = None
    # The project's folder of build caches (``cache_layers``), and whether this validation is the
    # base check, the one writer of the caches of the commit it runs on.
    cache_root: str | None = None
    writes_caches: bool = False
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def at_repo_path(self) -> bool:
        """Show the tree at the repository's own path (an editable install, a ``node_modules``
        with absolute links and most build caches expect the paths of the checkout)."""
        return self.python is not None or bool(self.mounts or self.carried or self.tree_at)

    @property
    def tree_path(self) -> str:
        """The path the tree shows at in the sandbox when ``at_repo_path``."""
        return self.tree_at or self.project_root

    def describe(self) -> str:
        """One line for preflight (the first of ``notes``, or the Python environment's)."""
        if self.notes:
            return self.notes[0]
        return self.python.describe() if self.python else "validation environment: the committed tree only"


def carry_into(view: ProjectView, tree: Path) -> list[str]:
    """Copy ``view.carried`` from the checkout into ``tree`` (a fresh copy of a commit); returns
    the paths copied. A path the commit already holds is left as committed; a source that is not
    a regular file inside the checkout (a link, a folder, a device) or larger than
    ``CARRY_MAX_BYTES`` is skipped: the checkout is the user's, but the tree copy must hold
    nothing a link could point elsewhere."""
    copied = []
    root = os.path.realpath(view.project_root)
    for relative in view.carried:
        parts = Path(relative).parts
        if not parts or Path(relative).is_absolute() or ".." in parts or ".git" in parts:
            continue
        target = tree.joinpath(*parts)
        if os.path.lexists(target):
            continue
        source = os.path.join(root, *parts)
        # No link anywhere on the way: the file must be exactly where its name says.
        if os.path.realpath(source) != source:
            continue
        try:
            fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > CARRY_MAX_BYTES:
                continue
            content = handle.read(CARRY_MAX_BYTES + 1)
        # The commit's own links must not lead the copy out of the tree either.
        folder = os.path.realpath(target.parent)
        if folder != os.path.realpath(tree) and not folder.startswith(os.path.realpath(tree) + os.sep):
            continue
        os.makedirs(folder, exist_ok=True)
        target = Path(folder) / target.name
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(out, "wb") as handle:
            handle.write(content)
        copied.append(relative)
    return copied
