"""What every toolchain found, put together into one ``ProjectView`` for validation.

``inspect`` reads the repository once (its tracked files, its ignored untracked paths), asks each
toolchain of ``table.TOOLCHAINS`` what it finds, prunes the project's build caches to their bound,
and adds the user's own means from ``[validation]``: ``carry`` (untracked files of the checkout,
as globs, copied into the tree copy where the commit has no such file) and ``setup`` (commands run
in the sandbox before each validation command).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from orchestrator.sandbox.project_view import Mount, ProjectView
from orchestrator.toolchains.base import DependenciesMissing, Found, Project, ToolchainMissing
from orchestrator.toolchains.caches import DEFAULT_CACHE_MB, project_cache_root, prune
from orchestrator.toolchains.python import no_environment_note
from orchestrator.toolchains.table import TOOLCHAINS

__all__ = ["VALIDATE_AT_KEY", "DependenciesMissing", "Inspection", "ToolchainMissing", "inspect", "load_project",
           "validate_at"]


def _git_paths(root: Path, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", "-C", str(root), "ls-files", "-z", *args], capture_output=True, env=env,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return []
    return [os.fsdecode(path) for path in done.stdout.split(b"\0") if path]


# A repository that stands in for another checkout (an eval's case repository) names it here:
# validation shows its trees at that checkout's path, where an editable install looks for them.
VALIDATE_AT_KEY = "mesh.validateAt"


def validate_at(root: Path) -> str | None:
    """The absolute path ``root``'s own git config (``VALIDATE_AT_KEY``) says validation shows its
    trees at, if any (only the repository's local config: a worker cannot write it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", "-C", str(root), "config", "--local", "--get", VALIDATE_AT_KEY],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    value = done.stdout.strip() if done.returncode == 0 else ""
    return value if os.path.isabs(value) and ".." not in Path(value).parts and value != "/" else None


def load_project(repo: Path, settings: Any = None, environ: Mapping[str, str] | None = None,
                 check_installed: bool = True) -> Project:
    """The facts of the repository ``repo`` the toolchains read (``settings``: a ``[validation]``
    table, for its ``python`` and ``env_dir``)."""
    root = Path(repo).absolute()
    stands_for = validate_at(root)
    python, env_dir = getattr(settings, "python", None), getattr(settings, "env_dir", None)
    if stands_for:  # a relative path of the config names a place in the checkout this one stands for
        python, env_dir = (os.path.join(stands_for, p) if p and not os.path.isabs(p) else p for p in (python, env_dir))
    return Project(root=root, tracked=_git_paths(root), ignored=_git_paths(
        root, "--others", "--ignored", "--exclude-standard", "--directory"),
        cache_root=project_cache_root(root), environ=dict(os.environ if environ is None else environ),
        python=python, env_dir=env_dir, check_installed=check_installed, stands_for=stands_for)


@dataclass
class Inspection:
    """What ``inspect`` found: each toolchain's findings, the view validation applies, and the
    lines preflight prints."""

    found: list[Found]
    view: ProjectView
    notes: list[str]

    def check_commands(self) -> list[str]:
        """The check commands of the detected toolchains, in table order."""
        return list(self.view.checks)


def _carried(project: Project, patterns: list[str]) -> list[str]:
    out = []
    for pattern in patterns:
        for path in sorted(project.root.glob(pattern)):
            relative = path.relative_to(project.root).as_posix()
            if path.is_file() and not path.is_symlink() and not project.has(relative):
                out.append(relative)
    return out


def _few(paths: list[str], shown: int = 3) -> str:
    """``a, b, c and 40 more (.mo)``: a long list of files named by its first few and its kinds."""
    if len(paths) <= shown + 1:
        return ", ".join(paths)
    kinds = sorted({os.path.splitext(path)[1] or os.path.basename(path) for path in paths[shown:]})
    return f"{', '.join(paths[:shown])} and {len(paths) - shown} more ({', '.join(kinds)})"


def inspect(repo: Path, settings: Any = None, environ: Mapping[str, str] | None = None, *,
            check_installed: bool = True) -> Inspection:
    """Detect the toolchains of ``repo`` and build the validation view; raises
    ``DependenciesMissing`` (unless not ``check_installed``) or ``ToolchainMissing`` (both:
    before any worker call, exit 2)."""
    project = load_project(repo, settings, environ, check_installed)
    limit = getattr(settings, "build_cache_mb", DEFAULT_CACHE_MB)
    pruned = prune(project.cache_root, limit)
    found = [item for toolchain in TOOLCHAINS.values() for item in toolchain.detect(project)]
    python = next((f.python for f in found if f.python is not None), None)
    mounts: list[Mount] = []
    path: list[str] = []
    env: dict[str, str] = {}
    carried: list[str] = []
    for item in found:
        mounts += [m for m in item.mounts if m not in mounts]
        path += [p for p in item.path if p not in path]
        env.update(item.env)
        carried += [c for c in item.carried if c not in carried]
    carried += [c for c in _carried(project, list(getattr(settings, "carry", []) or [])) if c not in carried]
    setup = tuple(getattr(settings, "setup", []) or [])
    # The Python environment's line only where Python is a toolchain of the project (not a
    # Node or Go project's preflight).
    notes = [python.describe() if python else no_environment_note()] \
        if python is not None or any(item.toolchain == "python" for item in found) or not found else []
    notes += [item.describe() for item in found if item.toolchain != "python"]
    notes += [f"generated files carried from the checkout: {_few(carried)}"] if carried else []
    notes += [f"setup before each validation command: {'; '.join(setup)}"] if setup else []
    notes += pruned
    tree_at = project.stands_for
    notes += [f"validation shows the tree at {tree_at} (the checkout this repository stands for)"] if tree_at else []
    view = ProjectView(project_root=str(project.root), python=python, mounts=tuple(mounts), path=tuple(path),
                       env=tuple(sorted(env.items())), carried=tuple(carried), setup=setup,
                       checks=tuple(f.check for f in found if f.check), tree_at=tree_at, notes=tuple(notes),
                       cache_root=str(project.cache_root))
    return Inspection(found=found, view=view, notes=notes)
