"""Validation runs in the project's own environment (a real virtualenv made here), read-only in
the real sandbox: its third-party packages import, the project installed editable in it imports
the tree under test, and ``python -m <pkg>`` works in a subprocess. A project that needs an
environment it does not have is refused before any worker is called."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sandbox.project_env import EnvironmentMissing, find_environment
from orchestrator.sandbox.validation import run_validation
from tests.test_attack_sandbox import MESH

UNITTEST = "python -m unittest discover -s tests -t ."

TEST_CODE = '''
import os, subprocess, sys, tempfile, unittest

import only_in_the_venv
import stationpkg


class T(unittest.TestCase):
    def test_third_party(self):
        self.assertEqual(only_in_the_venv.answer(), 42)

    def test_the_tree_under_test_is_what_imports(self):
        self.assertEqual(stationpkg.VERSION, "from-the-commit")

    def test_python_m_in_a_subprocess_elsewhere(self):
        done = subprocess.run([sys.executable, "-m", "stationpkg"], capture_output=True, text=True,
                              cwd=tempfile.mkdtemp())
        self.assertEqual(done.stdout.strip(), "42 from-the-commit", done.stderr)
'''


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def make_project(root: Path, *, with_env: bool) -> Path:
    """A project declaring a dependency, with tests that need it; with ``with_env`` a real
    ``.venv`` holding the dependency and the project installed editable (a .pth, as pip's
    editable installs write)."""
    repo = root / "station"
    (repo / "stationpkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pyproject.toml").write_text('[project]\nname = "station"\nversion = "1"\ndependencies = ["only-in-the-venv"]\n')
    (repo / "stationpkg" / "__init__.py").write_text('VERSION = "from-the-commit"\n')
    (repo / "stationpkg" / "__main__.py").write_text(
        "import only_in_the_venv, stationpkg\nprint(only_in_the_venv.answer(), stationpkg.VERSION)\n")
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_station.py").write_text(TEST_CODE)
    (repo / ".gitignore").write_text(".venv/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "station")
    # The checkout moves on after the commit: validation must see the commit, not this.
    (repo / "stationpkg" / "__init__.py").write_text('VERSION = "uncommitted"\n')
    if with_env:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
        site = Path(subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c",
                                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
        (site / "only_in_the_venv.py").write_text("def answer():\n    return 42\n")
        (site / "__editable__.station-1.pth").write_text(str(repo) + "\n")
    return repo


def test_validation_uses_the_projects_venv_in_the_sandbox(tmp_path):
    repo = make_project(tmp_path, with_env=True)
    environment = find_environment(repo)
    assert environment is not None and environment.prefix == str(repo / ".venv")
    assert "the repository's .venv" in environment.describe()
    [result] = run_validation([UNITTEST], cwd=repo, allow=[UNITTEST], timeout_s=120, environment=environment)
    assert result.passed, result.stdout_tail + result.stderr_tail
    assert "Ran 3 tests" in result.stderr_tail
    # mesh's own Python cannot run them: the dependency is only in the project's environment.
    own = f"{sys.executable} -m unittest discover -s tests -t ."
    [without] = run_validation([own], cwd=repo, allow=[own], timeout_s=120)
    assert not without.passed and "only_in_the_venv" in without.stderr_tail


def test_a_project_without_its_environment_is_refused_before_any_worker_call(tmp_path):
    repo = make_project(tmp_path, with_env=False)
    with pytest.raises(EnvironmentMissing) as info:
        find_environment(repo)
    assert "python3 -m venv .venv" in str(info.value) and "env_dir" in str(info.value)
    home = tmp_path / "home"
    home.mkdir()
    calls = tmp_path / "calls.log"
    worker = tmp_path / "worker.py"
    worker.write_text(f"import sys\nopen({str(calls)!r}, 'a').write('called\\n')\nprint('{{}}')\n")
    subprocess.run([MESH, "tracker", "init", "--prefix", "st"], cwd=repo, check=True, capture_output=True)
    subprocess.run([MESH, "tracker", "create", "Do it", "--type", "task", "--label", "plan:s"], cwd=repo, check=True,
                   capture_output=True)
    (repo / "mesh.toml").write_text(f'[validation]\nallow = ["{UNITTEST}"]\n')
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    done = subprocess.run([MESH, "run", "--label", "plan:s", "--worker-cmd", f"{sys.executable} {worker}"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "declares dependencies but has no environment" in done.stderr and "python3 -m venv .venv" in done.stderr
    assert not calls.exists()


def test_the_environment_is_found_where_developers_keep_it(tmp_path, monkeypatch):
    repo = make_project(tmp_path, with_env=True)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    (repo / "venv").mkdir()
    assert find_environment(repo).how == "the repository's .venv"
    other = tmp_path / "elsewhere-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    monkeypatch.setenv("VIRTUAL_ENV", str(other))
    assert find_environment(repo).prefix == str(other)
    assert find_environment(repo, env_dir=".venv").how == "validation.env_dir"
    assert find_environment(repo, python=str(other / "bin" / "python")).prefix == str(other)
    with pytest.raises(EnvironmentMissing):
        find_environment(repo, env_dir="nope")


def test_poetrys_environment_is_found_in_its_cache(tmp_path, monkeypatch):
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[tool.poetry]\nname = "My Proj"\n[tool.poetry.dependencies]\n'
                                         'python = "^3.11"\nrequests = "*"\n')
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setenv("POETRY_CACHE_DIR", str(tmp_path / "pcache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no poetry installed: the cache is looked up by name
    with pytest.raises(EnvironmentMissing) as info:
        find_environment(repo)
    assert "poetry install" in str(info.value)
    import base64
    import hashlib
    digest = base64.urlsafe_b64encode(hashlib.sha256(os.path.realpath(repo).encode()).digest()).decode()[:8]
    env = tmp_path / "pcache" / "virtualenvs" / f"my proj-{digest}-py3.11".replace(" ", "_")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    assert find_environment(repo).prefix == str(env)


def test_a_project_without_dependencies_keeps_meshs_python(tmp_path):
    repo = tmp_path / "plain"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[project]\nname = "plain"\nversion = "1"\n')
    assert find_environment(repo) is None
