"""Django projects: which command runs their tests, for ``mesh init``'s check.

A Django project's tests do not run under ``python -m unittest`` (Django's settings are never
configured: ``ImproperlyConfigured: Requested setting DATABASES``); they run under Django's own
runner or pytest-django. In this order of preference:

- **pytest-django**: pytest is configured (``toolchains.python``) and names the settings
  (``DJANGO_SETTINGS_MODULE`` in its ini section) or pytest-django is among the dependencies:
  ``python -m pytest``;
- **manage.py** at the root: ``python manage.py test``;
- **a test script of the project's own** at the root (``runtests.py``, ``runtests``-like scripts
  that call ``execute_from_command_line`` or ``DiscoverRunner``, as reusable apps ship):
  ``python runtests.py``;
- **the settings named in the project's configuration** (``DJANGO_SETTINGS_MODULE`` in
  ``tox.ini``, ``setup.cfg``, ``pyproject.toml``), Django a dependency: ``python -m django test
  --settings=NAME``.

May import what ``orchestrator.toolchains`` may.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.testruns.django_reader import django_command
from orchestrator.toolchains.base import Project

__all__ = ["DjangoCheck", "django_check"]

_CONFIGS = ("pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini")
_SETTINGS = re.compile(r"DJANGO_SETTINGS_MODULE\s*[=:]\s*['\"]?([A-Za-z_][\w.]*)")
_PYTEST_SECTION = re.compile(r"^\[(pytest|tool:pytest|tool\.pytest\.ini_options)\]\s*$", re.M)
_SCRIPTS = ("runtests.py", "run_tests.py", "runtest.py")


@dataclass(frozen=True)
class DjangoCheck:
    """How a Django project's tests run: ``how`` (what runs them, as ``mesh init`` names it),
    the ``check`` command and the ``allow`` entries it writes."""

    how: str
    check: str
    allow: tuple[str, ...]


def _read(project: Project, name: str) -> str:
    try:
        return (project.root / name).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _pytest_names_settings(project: Project) -> bool:
    for name in _CONFIGS:
        text = _read(project, name)
        section = _PYTEST_SECTION.search(text)
        if section is None:
            continue
        body = text[section.end():]
        following = re.search(r"^\[", body, re.M)
        if _SETTINGS.search(body[:following.start()] if following else body) or \
                re.search(r"^\s*DJANGO_SETTINGS_MODULE\s*=", body, re.M):
            return True
    return False


def _depends_on(project: Project, name: str) -> bool:
    pattern = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])", re.I)
    texts = [_read(project, config) for config in ("pyproject.toml", "setup.cfg", "setup.py")]
    texts += [_read(project, path) for path in project.tracked
              if path.count("/") <= 1 and path.endswith(".txt") and "requirement" in path.lower()]
    return any(pattern.search(text) for text in texts)


def _configured_settings(project: Project) -> str | None:
    for name in ("tox.ini", "setup.cfg", "pyproject.toml", "pytest.ini"):
        found = _SETTINGS.search(_read(project, name))
        if found is not None:
            return found.group(1)
    return None


def django_check(project: Project, python: str, uses_pytest: bool) -> DjangoCheck | None:
    """The check that runs a Django project's tests (``python``: how the sandbox calls Python),
    or None when the project is not one."""
    django = _depends_on(project, "django") or project.has("manage.py")
    if uses_pytest and (_pytest_names_settings(project) or _depends_on(project, "pytest-django")):
        check = f"{python} -m pytest"
        return DjangoCheck("pytest-django", check, (check, f"{check} {{args...}}"))
    if project.has("manage.py"):
        check = f"{python} manage.py test"
        return DjangoCheck("manage.py test", check, (check, f"{check} {{args...}}"))
    for script in _SCRIPTS:
        if project.has(script) and django_command([python, script], project.root) is not None:
            check = f"{python} {script}"
            return DjangoCheck(f"{script}", check, (check, f"{check} {{args...}}"))
    settings = _configured_settings(project)
    if django and settings is not None:
        check = f"{python} -m django test --settings={settings}"
        return DjangoCheck(f"python -m django test, settings {settings}", check,
                           (check, f"{check} {{args...}}"))
    return None
