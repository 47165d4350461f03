"""An environment per case, from its spec: the Python and packages a SWE-bench instance's version
asks (``[[eval.env]]``), built once without Docker.

SWE-bench's harness pins, per repository and version, a Python, packages and a test command, and
grades each instance in a container built from them. mesh reproduces the Python side of that: an
``[[eval.env]]`` entry names a Python (a version found on PATH or under pyenv, or a path) and
pip requirements; ``build`` makes a virtualenv of that Python under mesh's cache folder
(``<cache>/mesh-eval-envs/<name>-<spec hash>/``) and installs them, once per spec (a lock keeps
two builders apart; a build that fails leaves nothing behind and says pip's last lines). A case
records the environment it was kept in (``Case.environment``: its name, Python version and the
packages pip installed), and its base check, gold check, arms' validation and grading all run in
it: it is the validation view's Python (read-only in the sandbox, first on PATH), and an arm's
``mesh run`` gets it as ``VIRTUAL_ENV``.

What this does not reproduce, said per instance at import: system libraries (a container's
``apt-get install``), and a Python that cannot be found on the machine (``python = "3.6"`` with
no such interpreter installed): such an instance is dropped with that reason.

May import what ``orchestrator.evals`` may.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

__all__ = ["CaseEnvironments", "EnvironmentUnusable", "build", "choose", "from_swebench", "swebench_gives_specs",
           "view_in"]

_PIP_TIMEOUT_S = 1800


class EnvironmentUnusable(ValueError):
    """An environment that cannot be built here: the message says what is missing."""


def find_python(wanted: str) -> Path:
    """The interpreter ``wanted`` names: a path, else ``pythonX.Y`` on PATH, else pyenv's newest
    ``X.Y.*`` (``PYENV_ROOT`` or ``~/.pyenv``)."""
    if os.sep in wanted:
        path = Path(wanted).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise EnvironmentUnusable(f"python = {wanted!r}: not an executable interpreter")
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", wanted):
        raise EnvironmentUnusable(f"python = {wanted!r}: a version (3.8) or an interpreter's path")
    short = ".".join(wanted.split(".")[:2])
    found = shutil.which(f"python{short}")
    if found and _version(Path(found)).startswith(wanted):
        return Path(found)
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    for folder in sorted(glob.glob(str(root / "versions" / f"{wanted}*")), key=_numeric, reverse=True):
        candidate = Path(folder) / "bin" / "python"
        if candidate.is_file() and _version(candidate).startswith(wanted):
            return candidate
    raise EnvironmentUnusable(f"Python {wanted} is not installed on this machine (looked for python{short} on PATH"
                              f" and under {root}/versions); install it (pyenv install {wanted}, uv python install"
                              f" {wanted}) or name an interpreter's path")


def _numeric(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", os.path.basename(path)))


def _version(python: Path) -> str:
    try:
        done = subprocess.run([str(python), "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def choose(envs: Sequence[Any], version: str | None, base: str, repo: Path, ranges: Sequence[Any] = ()) -> Any | None:
    """The ``[[eval.env]]`` entry a case takes: the first whose ``versions`` hold its instance's
    ``version``, else the first whose ``before`` (resolved in ``ranges``: ``history.Range``s of
    the entries' ``before``) comes after its ``base``; None when none does."""
    from orchestrator.evals.history import range_for

    if version is not None:
        for env in envs:
            if version in env.versions:
                return env
    for env in envs:
        if env.before:
            matching = [r for r in ranges if r.before == env.before]
            if matching and range_for(repo, base, matching) is not None:
                return env
    return None


def from_swebench(repo: str | None, version: str | None) -> tuple[Any, list[str]] | None:
    """SWE-bench's own spec of ``repo`` at ``version`` as an ``[[eval.env]]`` entry, when the
    ``swebench`` package is installed and has one: (the entry, what of the spec is not
    reproduced); None otherwise. Its Python, ``pip_packages`` and ``test_cmd`` are taken; its
    ``pre_install`` (system packages), conda ``packages`` and ``install`` step are said."""
    if not repo or not version:
        return None
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - not installed, or an incompatible version of it
        return None
    try:
        spec = (MAP_REPO_VERSION_TO_SPECS.get(repo) or {}).get(version)
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("python"), str):
        return None
    from orchestrator.eval_settings import EvalEnv

    test = spec.get("test_cmd")
    test = next((t for t in reversed(test) if isinstance(t, str)), None) if isinstance(test, list) else test
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"swebench-{repo.replace('/', '__')}-{version}")[:40]
    env = EvalEnv(name=name, versions=[version], python=spec["python"],
                  packages=[p for p in spec.get("pip_packages") or [] if isinstance(p, str)],
                  test_command=f"{test} {{tests}}" if isinstance(test, str) and test.strip() else None)
    left = [f"{key} ({_short(spec[key])})" for key in ("pre_install", "packages", "install") if spec.get(key)]
    return env, left


def swebench_gives_specs() -> bool:
    """Whether the installed ``swebench`` (if any) gives a spec per repository and version."""
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - not installed, or an incompatible version of it
        return False
    return isinstance(MAP_REPO_VERSION_TO_SPECS, dict) and bool(MAP_REPO_VERSION_TO_SPECS)


def swebench_without_specs() -> str | None:
    """What to say when ``swebench`` is installed but gives no spec per repository and version
    (swebench 5 keeps an instance's environment in its dataset's records instead, or its harness
    does not import here); None when it is not installed, or gives them."""
    import importlib.util
    import sys

    try:
        if importlib.util.find_spec("swebench") is None:
            return None
        import swebench  # type: ignore[import-not-found]  # (5.x: its own modules load lazily)
    except Exception:  # noqa: BLE001 - not installed, as far as mesh can tell
        return None
    version = getattr(sys.modules.get("swebench"), "__version__", None) or "(version unknown)"
    try:
        import swebench.harness.constants as constants  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001 - its harness's own dependencies missing
        why = f"its harness does not import here ({type(exc).__name__}: {str(exc)[:120]})"
    else:
        if hasattr(constants, "MAP_REPO_VERSION_TO_SPECS"):
            return None
        why = "it holds no spec per repository and version (swebench 5 moved them into its dataset's records)"
    return (f"swebench {version} is installed but {why}, so no SWE-bench spec chose this instance's"
            " environment: give it an [[eval.env]] entry, or install swebench<5 with its dependencies")


def _short(value: Any) -> str:
    text = " ".join(value) if isinstance(value, list) else str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _key(env: Any, version: str) -> str:
    spec = json.dumps([version, sorted(env.packages), list(env.pip_args)])
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def build(env: Any, *, cache: Path | None = None, echo: Any = None) -> dict[str, Any]:
    """The built environment of ``env`` (made now, or found made): ``{"name", "prefix", "python",
    "python_version", "packages"}``. ``EnvironmentUnusable`` when its Python is not here or pip
    fails."""
    from orchestrator.worktree.gitops import cache_dir

    python = find_python(env.python)
    version = _version(python)
    root = (cache or cache_dir() / "mesh-eval-envs")
    root.mkdir(parents=True, exist_ok=True)
    prefix = root / f"{env.name}-{_key(env, version)}"
    record = prefix / "mesh-env.json"
    with open(root / f".{prefix.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per spec; the next finds it made
        if record.is_file():
            return json.loads(record.read_text(encoding="utf-8"))
        partial = prefix.with_name(prefix.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        if echo:
            echo(f"building the environment {env.name}: Python {version}, {', '.join(env.packages) or 'no package'}")
        try:
            # At its final path: a virtualenv's scripts name the path they were made at.
            shutil.rmtree(prefix, ignore_errors=True)
            uv = _uv(getattr(env, "installer", "pip"))
            inside = str(prefix / "bin" / "python")
            if uv is not None:  # uv: the virtualenv (pip seeded in it, for the user's own steps) and the packages
                _run([uv, "venv", "--quiet", "--seed", "--python", str(python), str(prefix)],
                     f"uv venv of Python {version}")
                if env.packages:
                    _run([uv, "pip", "install", "--quiet", "--python", inside, *env.pip_args, *env.packages],
                         f"uv pip install {' '.join(env.packages)}")
                frozen = _run([uv, "pip", "freeze", "--python", inside], "uv pip freeze").split()
            else:
                _run([str(python), "-m", "venv", str(prefix)], f"the virtualenv of Python {version}")
                if env.packages:
                    _run([inside, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          *env.pip_args, *env.packages], f"pip install {' '.join(env.packages)}")
                frozen = _run([inside, "-m", "pip", "freeze", "--disable-pip-version-check"], "pip freeze").split()
        except EnvironmentUnusable:
            shutil.rmtree(prefix, ignore_errors=True)
            raise
        made = {"name": env.name, "prefix": str(prefix), "python": inside, "python_version": version,
                "packages": [p for p in frozen if not p.startswith(("pip==", "setuptools==", "wheel=="))]
                if uv is not None else frozen, "installer": "uv" if uv is not None else "pip"}
        record.write_text(json.dumps(made, indent=1), encoding="utf-8")
        return made


def _uv(installer: str) -> str | None:
    """The uv program to build with (``installer``: auto, uv or pip): on PATH, or beside the Python
    mesh runs on (installed with it); None for pip. ``EnvironmentUnusable`` when uv is asked and
    not found."""
    if installer == "pip" or (installer == "auto" and _pip_configured()):
        return None  # auto: pip's own configuration (a mirror, a proxy) is uv's to ignore, so pip
    beside = Path(sys.executable).parent / "uv"
    found = shutil.which("uv") or (str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None)
    if found is None and installer == "uv":
        raise EnvironmentUnusable("installer = \"uv\" but uv is not found (pip install uv, or installer = \"pip\")")
    return found


# pip's index settings by environment, and uv's names for them (what uv is given when it builds).
_PIP_TO_UV = {"PIP_INDEX_URL": "UV_INDEX_URL", "PIP_EXTRA_INDEX_URL": "UV_EXTRA_INDEX_URL",
              "PIP_NO_INDEX": "UV_NO_INDEX", "PIP_FIND_LINKS": "UV_FIND_LINKS"}


def _pip_configured() -> bool:
    """Whether pip reads a configuration file here (``PIP_CONFIG_FILE``, the user's or the
    system's ``pip.conf``): uv reads none of them."""
    home = Path.home()
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    files = [os.environ.get("PIP_CONFIG_FILE"), home / ".pip" / "pip.conf", config / "pip" / "pip.conf",
             "/etc/pip.conf", "/etc/xdg/pip/pip.conf"]
    return any(path and os.environ.get("PIP_CONFIG_FILE") != os.devnull and Path(path).is_file() for path in files)


def _run(argv: list[str], what: str) -> str:
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
        if os.path.basename(argv[0]) == "uv":  # pip's index settings, as uv names them
            env.update({uv: os.environ[pip] for pip, uv in _PIP_TO_UV.items() if pip in os.environ and uv not in env})
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentUnusable(f"{what}: {exc}") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise EnvironmentUnusable(f"{what} failed: {tail[:400]}")
    return done.stdout


def view_in(view: Any, built: dict[str, Any] | None, repo: Path) -> Any:
    """``view`` (a ``ProjectView``, or None) whose Python is the built environment ``built``."""
    if not built:
        return view
    from orchestrator.sandbox.project_env import ProjectEnv
    from orchestrator.sandbox.project_view import ProjectView

    python = ProjectEnv(prefix=built["prefix"], python=built["python"], how=f"[[eval.env]] {built['name']}",
                        project_root=str(repo))
    return replace(view, python=python) if view is not None else ProjectView(project_root=str(repo), python=python)


class CaseEnvironments:
    """The built environments of an eval's cases, by ``[[eval.env]]`` name, each built (or found
    built) once per process, whichever thread asks first."""

    def __init__(self, envs: Sequence[Any], echo: Any = None) -> None:
        import threading

        self.specs = {env.name: env for env in envs}
        self.echo = echo
        self._built: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def for_case(self, case: Any) -> dict[str, Any] | None:
        """The built environment ``case`` was kept in, None for one kept in the project's own;
        ``EnvironmentUnusable`` when mesh.toml no longer names it or it cannot be built here."""
        name = (case.environment or {}).get("name")
        if not name:
            return None
        spec = self.specs.get(name)
        if spec is None and name.startswith("swebench-"):
            found = from_swebench((case.environment or {}).get("repo"), case.version)
            spec = found[0] if found and found[0].name == name else None
        if spec is None:
            raise EnvironmentUnusable(f"case {case.id} was kept in the environment {name}, which [[eval.env]] of"
                                      " mesh.toml no longer names")
        with self._lock:
            if name not in self._built:
                self._built[name] = build(spec, echo=self.echo)
            return self._built[name]
