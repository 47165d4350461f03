"""Python: the project's own environment, and the files its build generates at install time.

The environment is found as ``orchestrator.sandbox.project_env`` finds it (a configured one, the
active virtualenv, ``.venv/``, uv, Poetry, Hatch). Generated files are the ones a project's build
writes into the checkout and git ignores, without which the tree under test does not import:

- the version file of setuptools-scm (``[tool.setuptools_scm] version_file`` / ``write_to``),
  hatch-vcs (``[tool.hatch.build.hooks.vcs] version-file``, also under a target's hooks),
  pdm-backend (``[tool.pdm.version] write_to``, relative to the source folder) and versioneer
  (``versionfile_source`` in ``setup.cfg``'s ``[versioneer]`` or ``[tool.versioneer]``);
- compiled gettext catalogues: an ignored ``.mo`` beside a tracked ``.po`` of the same name.

They are carried from the checkout into the tree copy (``ProjectView.carried``), only where the
commit has no file of that path.

The check runs the project's tests with pytest when pytest is configured, Django's runner or
pytest-django for a Django project (``toolchains.django``), else unittest.
"""

from __future__ import annotations

import configparser
import tomllib
from pathlib import Path

from orchestrator.sandbox.project_env import EnvironmentMissing, find_environment
from orchestrator.toolchains.base import DependenciesMissing, Found, Project
from orchestrator.toolchains.django import django_check

__all__ = ["TOOLCHAIN", "generated_files"]

_MANIFESTS = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt")


def _pyproject(root: Path) -> dict:
    try:
        return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _version_files(root: Path, project: dict) -> list[str]:
    tool = project.get("tool", {})
    found = []
    scm = tool.get("setuptools_scm", {})
    found += [scm.get("version_file"), scm.get("write_to")]
    hatch = tool.get("hatch", {}).get("build", {})
    found.append(hatch.get("hooks", {}).get("vcs", {}).get("version-file"))
    for target in hatch.get("targets", {}).values():
        if isinstance(target, dict):
            found.append(target.get("hooks", {}).get("vcs", {}).get("version-file"))
    pdm = tool.get("pdm", {})
    write_to = pdm.get("version", {}).get("write_to")
    if write_to:
        package_dir = pdm.get("build", {}).get("package-dir", "src" if (root / "src").is_dir() else "")
        found.append(f"{package_dir}/{write_to}".lstrip("/"))
    found.append(tool.get("versioneer", {}).get("versionfile_source"))
    setup_cfg = configparser.ConfigParser()
    try:
        setup_cfg.read(root / "setup.cfg", encoding="utf-8")
        found.append(setup_cfg.get("versioneer", "versionfile_source", fallback=None))
    except configparser.Error:
        pass
    return [path for path in dict.fromkeys(found) if isinstance(path, str) and path]


def generated_files(project: Project) -> list[str]:
    """The generated, untracked files of ``project`` that exist in its checkout (see the module
    docstring)."""
    root = project.root
    found = [path for path in _version_files(root, _pyproject(root)) if project.ignored_present(path)]
    for po in (path for path in project.tracked if path.endswith(".po")):
        mo = po[:-3] + ".mo"
        if project.ignored_present(mo):
            found.append(mo)
    return found


class Python:
    """The Python toolchain (see the module docstring)."""

    name = "python"

    def detect(self, project: Project) -> list[Found]:
        """The project's environment and generated files, when it has a Python manifest."""
        manifests = [name for name in _MANIFESTS if project.has(name)]
        try:
            environment = find_environment(project.root, project.python, project.env_dir)
        except EnvironmentMissing as exc:
            if project.check_installed:
                raise DependenciesMissing(str(exc)) from None
            environment = None
        if not manifests and environment is None and not any(path.endswith(".py") for path in project.tracked):
            return []
        manager = next((name for lock, name in _LOCKS if project.has(lock)), None)
        found = Found("python", f"python ({manager})" if manager else "python", python=environment,
                      carried=generated_files(project), gitignore=[".venv/"])
        found.sees.append((environment.describe() if environment else no_environment_note())
                          .removeprefix("validation environment: "))
        if found.carried:
            found.sees.append("generated files carried from the checkout: " + ", ".join(found.carried))
        uses_pytest = _uses_pytest(project)
        python = "python" if environment is not None else _sandbox_python()
        django = django_check(project, python, uses_pytest)
        if django is not None:
            found.label += f", Django ({django.how})"
            found.sees.append(f"a Django project: its tests run by {django.how}")
            found.check, found.allow = django.check, list(django.allow)
            return [found]
        runner = "pytest" if uses_pytest else "unittest"
        found.check = f"{python} -m {runner}"
        found.allow = [found.check, f"{python} -m {runner} {{args...}}"]
        return [found]


# A lock file says which tool made the project's environment (mesh init names it).
_LOCKS = (("uv.lock", "uv"), ("poetry.lock", "poetry"), ("pdm.lock", "pdm"), ("Pipfile.lock", "pipenv"))


def _sandbox_python() -> str:
    """The name a project without an environment of its own calls Python by in the sandbox:
    ``python`` where the sandbox's PATH shows one, else ``python3`` (a machine whose ``python``
    is a pyenv shim or a user's own link, under a HOME the sandbox hides)."""
    return "python3" if _on_sandbox_path("python") is None and _on_sandbox_path("python3") else "python"


def _on_sandbox_path(name: str) -> str | None:
    import os
    import shutil

    from orchestrator.sandbox.bwrap import sandbox_path

    return shutil.which(name, path=sandbox_path(os.environ.get("PATH")))


def no_environment_note() -> str:
    """What validation runs Python with when the project declares no dependency and has no
    environment: the interpreter the sandbox's PATH shows (not mesh's own, unless that is it)."""
    found = _on_sandbox_path(_sandbox_python())
    where = found or "none: no python nor python3 on the sandbox's PATH"
    return f"validation environment: the Python on the sandbox's PATH, {where} (the project declares no dependency)"


def _uses_pytest(project: Project) -> bool:
    """The project configures pytest (its own ini file, a ``conftest.py``, a ``[tool.pytest]``
    table, or pytest among its test dependencies); else its tests are taken for unittest's."""
    if any(project.tracked_named(name) for name in ("pytest.ini", "conftest.py")):
        return True
    tool = _pyproject(project.root).get("tool", {})
    if "pytest" in tool:
        return True
    for name in ("setup.cfg", "tox.ini", "pyproject.toml"):
        try:
            text = (project.root / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "[tool:pytest]" in text or "[pytest]" in text or '"pytest' in text or "'pytest" in text:
            return True
    return False


TOOLCHAIN = Python()
