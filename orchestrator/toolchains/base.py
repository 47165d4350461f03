"""The protocol every toolchain module follows, and the facts about a project they share.

A toolchain module exposes one object with ``name`` and ``detect(project) -> list[Found]``
(empty when the project does not use it). ``Project`` holds what they all read: the repository
root, its tracked files, its ignored untracked paths (as ``git ls-files --directory`` lists them:
a wholly ignored folder once, with a trailing slash), where its build caches go, and the
environment mesh was started with (the user's PATH, HOME, tool variables).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Mapping, Protocol

from orchestrator.sandbox.bwrap import covered, visible_roots
from orchestrator.sandbox.project_env import ProjectEnv
from orchestrator.sandbox.project_view import Mount

__all__ = ["DependenciesMissing", "Found", "Project", "Toolchain", "ToolchainMissing", "run_tool", "shown_program"]

_TOOL_TIMEOUT_S = 120.0


class DependenciesMissing(Exception):
    """The project declares dependencies that are not installed; the message names the command."""


class ToolchainMissing(Exception):
    """The project needs a toolchain (a program) that is not on PATH; the message says which."""


@dataclass
class Found:
    """What one toolchain found in one folder of the project (``folder``: '' for the root).

    ``label`` is how preflight names it ("node (npm)"); ``check`` the command that runs the
    project's tests from the repository root, ``allow`` the allowlist entries ``mesh init``
    writes for it; ``gitignore`` lines it wants ignored (``mesh init``); ``sees`` says what
    validation will see, for preflight.
    """

    toolchain: str
    label: str
    folder: str = ""
    mounts: list[Mount] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    carried: list[str] = field(default_factory=list)
    check: str | None = None
    allow: list[str] = field(default_factory=list)
    gitignore: list[str] = field(default_factory=list)
    sees: list[str] = field(default_factory=list)
    python: ProjectEnv | None = None

    def describe(self) -> str:
        """One preflight line: the toolchain, its folder, and what validation sees of it."""
        where = f" in {self.folder}/" if self.folder else ""
        return f"toolchain {self.label}{where}: " + ("; ".join(self.sees) or "the committed tree")


@dataclass
class Project:
    """The facts every toolchain reads (see the module docstring)."""

    root: Path
    tracked: list[str]
    ignored: list[str]
    cache_root: Path
    environ: Mapping[str, str]
    python: str | None = None  # [validation] python / env_dir, for the Python toolchain
    env_dir: str | None = None
    # False (``mesh init``): describe the project as it is meant to be, installed or not.
    check_installed: bool = True
    # The checkout this repository stands for (an eval's case repository: ``view.validate_at``).
    stands_for: str | None = None

    def has(self, relative: str) -> bool:
        """True when ``relative`` is a tracked file."""
        return relative in self._tracked_set

    @cached_property
    def _tracked_set(self) -> set[str]:
        return set(self.tracked)

    def tracked_named(self, name: str) -> list[str]:
        """Tracked files called ``name`` (at any depth, never inside a ``node_modules``)."""
        return [path for path in self.tracked if path.rsplit("/", 1)[-1] == name and "node_modules/" not in path]

    def ignored_present(self, relative: str) -> bool:
        """True when ``relative`` exists in the checkout and git does not track it."""
        return not self.has(relative) and os.path.lexists(self.root / relative)

    def which(self, program: str) -> str | None:
        """``program`` found on the user's PATH (the one mesh was started with)."""
        return shutil.which(program, path=self.environ.get("PATH") or os.defpath)


class Toolchain(Protocol):
    """One ecosystem: its name, and what it finds in a project."""

    name: str

    def detect(self, project: Project) -> list[Found]:
        """What validation needs for this toolchain in ``project`` (empty: not used); raises
        ``DependenciesMissing`` or ``ToolchainMissing``."""
        ...


def run_tool(argv: list[str], cwd: Path, environ: Mapping[str, str], extra: Mapping[str, str] | None = None,
             timeout_s: float = _TOOL_TIMEOUT_S) -> tuple[int, str]:
    """Run one of the project's own tools on the host (to ask where its caches are, or whether its
    dependencies resolve offline): (exit status, stdout and stderr). Never given a shell or
    stdin; ``GIT_*`` is stripped; a missing program or a timeout is status 127 or 124."""
    env = {k: v for k, v in environ.items() if not k.startswith("GIT_")}
    env.update(extra or {})
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except OSError as exc:
        return 127, f"cannot run {argv[0]}: {exc.strerror or exc}"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not answer within {timeout_s:g}s"
    return done.returncode, (done.stdout + done.stderr).strip()


def shown_program(program: str) -> tuple[list[Mount], list[str]]:
    """What shows ``program`` (as found on PATH) in the sandbox: read-only mounts of the
    installation its real file belongs to (its ``bin`` folder's parent: a version manager's
    Node, a rustup toolchain, a Go under HOME) and of the folder the name on PATH sits in (a
    link farm such as ``~/.npm-global/bin``), and the folder for PATH; nothing for a program the
    sandbox shows anyway (the system's). HOME itself and ``/`` are never mounted."""
    shown = visible_roots()
    home = os.path.realpath(os.path.expanduser("~"))
    mounts: list[Mount] = []
    path: list[str] = []
    real = os.path.realpath(program)
    named = os.path.dirname(os.path.abspath(program))
    if not covered(real, shown):
        bin_dir = os.path.dirname(real)
        prefix = os.path.dirname(bin_dir) if os.path.basename(bin_dir) == "bin" else bin_dir
        if prefix not in ("/", home):
            mounts.append(Mount(prefix, prefix))
            path.append(bin_dir)
    if not covered(named, shown) and named not in ("/", home):
        if not any(covered(named, [m.target]) for m in mounts):
            mounts.append(Mount(named, named))
        path.insert(0, named)
    return mounts, list(dict.fromkeys(path))
