"""The project's own Python environment, which validation runs in.

A project's tests import its dependencies, which live in the environment its developers
keep, not in mesh's. mesh finds that environment the way they keep it, in this order:

1. ``[validation] python = "..."`` (an interpreter) or ``env_dir = "..."`` (a virtualenv),
   relative paths taken from the repository root;
2. an active ``VIRTUAL_ENV`` (unless it is mesh's own);
3. ``.venv/`` or ``venv/`` in the repository (uv's and most tools' default place);
4. a uv project's ``UV_PROJECT_ENVIRONMENT``; a Poetry project's environment in Poetry's
   cache (``virtualenvs.path``, named as Poetry names it) or found by ``poetry env info -p``;
   a Hatch project's default environment found by ``hatch env find``.

None found, a project that declares dependencies is refused before any worker is called,
with the command that creates its environment; a project without any keeps mesh's own
Python. Validation shows the environment read-only inside the sandbox, first on PATH, and
the tree under test at the repository's own path, so an editable install of the project in
that environment imports the tree under test (see ``orchestrator.sandbox.validation``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["EnvironmentMissing", "ProjectEnv", "find_environment"]

_TOOL_TIMEOUT_S = 20.0


class EnvironmentMissing(Exception):
    """The project needs an environment that is not there (or the configured one is unusable)."""


@dataclass(frozen=True)
class ProjectEnv:
    """A Python environment for validation: ``prefix`` (a virtualenv, or an interpreter's
    installation), its ``python``, how it was found, the repository it serves."""

    prefix: str
    python: str
    how: str
    project_root: str
    binds: tuple[str, ...] = field(default=())

    @property
    def bin_dir(self) -> str:
        return os.path.dirname(self.python)

    def describe(self) -> str:
        """One line for preflight."""
        return f"validation environment: {self.prefix} ({self.how})"


def _python_in(prefix: Path) -> Path | None:
    for name in ("bin/python", "bin/python3"):
        if (prefix / name).exists():
            return prefix / name
    return None


def _pyproject(root: Path) -> dict:
    try:
        return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _declares_dependencies(root: Path, project: dict) -> bool:
    if project.get("project", {}).get("dependencies") or project.get("project", {}).get("optional-dependencies"):
        return True
    poetry = project.get("tool", {}).get("poetry", {})
    if any(name != "python" for name in poetry.get("dependencies", {})) or poetry.get("group"):
        return True
    if project.get("dependency-groups"):
        return True
    if list(root.glob("requirements*.txt")):
        return True
    setup = root / "setup.py"
    try:
        return "install_requires" in setup.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _how_to_create(root: Path, project: dict) -> str:
    tool = project.get("tool", {})
    if (root / "uv.lock").exists() or "uv" in tool:
        return "uv sync"
    if "poetry" in tool:
        return "poetry install"
    if "hatch" in tool:
        return "hatch env create"
    extras = project.get("project", {}).get("optional-dependencies", {})
    target = ".[test]" if "test" in extras else ".[tests]" if "tests" in extras else "."
    if (root / "pyproject.toml").exists() or (root / "setup.py").exists():
        return f"python3 -m venv .venv && .venv/bin/pip install -e '{target}'"
    requirements = sorted(root.glob("requirements*.txt"))
    return ("python3 -m venv .venv && .venv/bin/pip install " + " ".join(f"-r {r.name}" for r in requirements))


def _run(argv: list[str], cwd: Path) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.strip().splitlines()
    return out[-1] if done.returncode == 0 and out else None


def _poetry_env(root: Path, project: dict) -> Path | None:
    """Poetry's environment of ``root``: asked of poetry when it is installed, else looked up
    in its cache under the name Poetry gives it (``<name>-<8 of sha256(path)>-py<X.Y>``)."""
    found = _run(["poetry", "env", "info", "-p"], root)
    if found:
        return Path(found)
    name = project.get("tool", {}).get("poetry", {}).get("name") or project.get("project", {}).get("name")
    if not name:
        return None
    sanitized = re.sub(r'[ $`!*@"\\\r\n\t]', "_", str(name).lower())[:42]
    digest = base64.urlsafe_b64encode(hashlib.sha256(os.path.normcase(os.path.realpath(root)).encode()).digest())
    stem = f"{sanitized}-{digest.decode()[:8]}-py"
    cache = Path(os.environ.get("POETRY_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or
                                                              Path.home() / ".cache") / "pypoetry")
    candidates = sorted((cache / "virtualenvs").glob(stem + "*"))
    return candidates[-1] if candidates else None


def _candidates(root: Path, project: dict) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    active = os.environ.get("VIRTUAL_ENV")
    if active and os.path.realpath(active) != os.path.realpath(sys.prefix):
        found.append((Path(active), "the active VIRTUAL_ENV"))
    uv_env = os.environ.get("UV_PROJECT_ENVIRONMENT")
    if uv_env:
        found.append((root / uv_env, "UV_PROJECT_ENVIRONMENT"))
    found += [(root / ".venv", "the repository's .venv"), (root / "venv", "the repository's venv")]
    tool = project.get("tool", {})
    if "poetry" in tool:
        poetry = _poetry_env(root, project)
        if poetry is not None:
            found.append((poetry, "Poetry's environment"))
    if "hatch" in tool:
        hatch = _run(["hatch", "env", "find", "default"], root)
        if hatch:
            found.append((Path(hatch), "Hatch's default environment"))
    return found


def _env_from_python(python: Path, how: str, root: Path) -> ProjectEnv:
    if not python.exists() or not os.access(python, os.X_OK):
        raise EnvironmentMissing(f"validation.python {python} is not an executable interpreter")
    prefix = next((parent for parent in python.absolute().parents if (parent / "pyvenv.cfg").is_file()), None)
    if prefix is None:
        prefix = python.absolute().parent.parent if python.absolute().parent.name == "bin" else python.absolute().parent
    return ProjectEnv(prefix=str(prefix.absolute()), python=str(python.absolute()), how=how, project_root=str(root))


def find_environment(repo: Path, python: str | None = None, env_dir: str | None = None) -> ProjectEnv | None:
    """The environment validation of ``repo`` runs in, None for mesh's own Python (a project
    that declares no dependency), or EnvironmentMissing saying how to create it."""
    root = Path(repo).absolute()
    if python:
        return _env_from_python(root / python if not os.path.isabs(python) else Path(python),
                                "validation.python", root)
    if env_dir:
        prefix = root / env_dir if not os.path.isabs(env_dir) else Path(env_dir)
        interpreter = _python_in(prefix)
        if interpreter is None:
            raise EnvironmentMissing(f"validation.env_dir {prefix} holds no bin/python; create it or fix the path")
        return ProjectEnv(prefix=str(prefix), python=str(interpreter), how="validation.env_dir", project_root=str(root))
    project = _pyproject(root)
    for prefix, how in _candidates(root, project):
        interpreter = _python_in(prefix)
        if interpreter is not None and (prefix / "pyvenv.cfg").is_file():
            return ProjectEnv(prefix=str(prefix.absolute()), python=str(interpreter), how=how, project_root=str(root))
    if _declares_dependencies(root, project):
        raise EnvironmentMissing(
            f"{root} declares dependencies but has no environment to validate in (looked for VIRTUAL_ENV, .venv/, "
            f"venv/, uv, Poetry and Hatch environments); create it with: {_how_to_create(root, project)}; or name "
            "one with [validation] python = \"...\" or env_dir = \"...\" in mesh.toml")
    return None
