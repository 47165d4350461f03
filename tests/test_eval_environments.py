"""Issue 46, item 1: an environment per instance, from its spec. Two SWE-bench-format instances of
a small project need different pinned environments: one's tests use nose-style ``setup()``, which
pytest 8 no longer calls (it needs pytest < 8), the other's use ``pytest.RaisesGroup`` (pytest >=
8.4). With an ``[[eval.env]]`` per instance version both are kept with their gold patch, each in
its environment, and an eval grades each arm's run there; without them the first is dropped for
its true cause. The environments are built offline from wheels ``make eval-wheels`` downloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.evalkit import git, mesh, write_worker
from tests.test_eval_suite import commit

WHEELS = Path(sys.prefix) / "eval-wheels"
pytestmark = pytest.mark.skipif(not (WHEELS / ".done").exists(), reason="no pytest wheels (make eval-wheels)")
COMMAND = "python -m pytest -rA {tests}"
PYTHON = "%d.%d" % sys.version_info[:2]

CALC = "def add(a, b):\n    return a - b\n\n\ndef both():\n    raise ValueError('one')\n"
FIXED_ADD = CALC.replace("return a - b", "return a + b")
FIXED_BOTH = CALC.replace("    raise ValueError('one')\n",
                          "    raise ExceptionGroup('both', [ValueError('one'), KeyError('two')])\n")
NOSE = ("import calc\n\n\nclass TestAdd:\n    def setup(self):\n        self.pair = (2, 3)\n\n"
        "    def test_add(self):\n        assert calc.add(*self.pair) == 5\n")
GROUPS = ("import pytest\n\nimport calc\n\n\ndef test_both():\n"
          "    with pytest.RaisesGroup(ValueError, KeyError):\n        calc.both()\n")


def _instance(repo: Path, base: str, commit: str, version: str, f2p: list[str], number: int) -> dict:
    return {"instance_id": f"ada__calc-{number}", "repo": "ada/calc", "base_commit": base, "version": version,
            "environment_setup_commit": base, "problem_statement": git(repo, "log", "-1", "--format=%B", commit),
            "patch": git(repo, "diff", base, commit, "--", "calc.py"),
            "test_patch": git(repo, "diff", base, commit, "--", "tests"), "FAIL_TO_PASS": f2p, "PASS_TO_PASS": []}


def _config(repo: Path, envs: bool) -> None:
    # Without [[eval.env]]: this Python's environment (a recent pytest) is the project's.
    # The scripted worker answers by case and arm: it is given their names.
    text = 'worker_env = ["MESH_EVAL_CASE", "MESH_EVAL_PROFILE", "MESH_EVAL_ARM", "MESH_EVAL_TRIAL"]\n'
    text += f'[validation]\nallow = ["{COMMAND}", "python -m pytest -rA {{path}}"]\ntimeout_s = 120\n' + ("" if envs else f'python = "{sys.executable}"\n')
    if envs:
        # One built by pip, one by uv (installer = "auto" finds it beside this Python): both offline.
        for name, version, pin, installer in (("legacy", "1.0", "pytest<8", "pip"),
                                              ("modern", "2.0", "pytest>=8.4", "auto")):
            text += (f'\n[[eval.env]]\nname = "{name}"\nversions = ["{version}"]\npython = "{PYTHON}"\n'
                     f'packages = ["{pin}"]\npip_args = ["--no-index", "--find-links", "{WHEELS}"]\n'
                     f'installer = "{installer}"\n')
    (repo / "mesh.toml").write_text(text)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("envs")
    repo = root / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    start = commit(repo, "start", {"calc.py": CALC, "tests/__init__.py": "", ".gitignore": "mesh.toml\n.mesh/\n",
                                   "tests/test_calc.py": "import calc\n\n\ndef test_module():\n    assert calc.add\n"})
    fix = commit(repo, "Fix add\n\nadd subtracts.", {"calc.py": FIXED_ADD, "tests/test_nose.py": NOSE})
    git(repo, "checkout", "-q", start)
    group = commit(repo, "Raise both errors\n\nboth() must raise a group of both errors.",
                   {"calc.py": FIXED_BOTH, "tests/test_groups.py": GROUPS})
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-edit", group)  # both commits in main's history
    instances = root / "instances.jsonl"
    found = [_instance(repo, start, fix, "1.0", ["tests/test_nose.py::TestAdd::test_add"], 1),
             _instance(repo, start, group, "2.0", ["tests/test_groups.py::test_both"], 2)]
    instances.write_text("".join(json.dumps(i) + "\n" for i in found))
    return root, repo, instances, found


def test_each_instance_is_kept_and_graded_in_the_environment_its_version_names(project, tmp_path, monkeypatch):
    root, repo, instances, found = project
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no pip.conf: installer = "auto" takes uv
    _config(repo, envs=False)  # the project's own environment only: the nose-style tests cannot run
    plain = mesh("eval", "suite", "--from-swebench", str(instances), "--command", COMMAND, "--runs", "1", "-o",
                 str(tmp_path / "plain.jsonl"), "--json", cwd=repo)
    assert plain.returncode in (0, 1), plain.stderr
    dropped = {d["commit"]: d["why"] for d in json.loads(plain.stdout)["dropped"]}
    assert "nose-style" in dropped.get("ada__calc-1", ""), dropped
    _config(repo, envs=True)
    suite = tmp_path / "suite.jsonl"
    built = mesh("eval", "suite", "--from-swebench", str(instances), "--command", COMMAND, "--runs", "1", "-o",
                 str(suite), "--json", cwd=repo)
    assert built.returncode == 0, built.stderr
    from orchestrator.evals.suite import read_suite

    cases = read_suite(suite)
    assert [c.instance_id for c in cases] == ["ada__calc-1", "ada__calc-2"], built.stdout
    legacy, modern = cases
    assert (legacy.version, legacy.environment["name"], modern.environment["name"]) == ("1.0", "legacy", "modern")
    assert (legacy.environment["installer"], modern.environment["installer"]) == ("pip", "uv")
    assert any(p.startswith("pytest==7.") for p in legacy.environment["packages"])
    assert not any(p.startswith("pytest==7.") for p in modern.environment["packages"])
    assert legacy.environment_setup_commit == found[0]["environment_setup_commit"]
    # An eval's runs are graded in the same environments: the gold patches resolve both.
    command = write_worker(tmp_path, repo, [], {"single": [c.id for c in cases]}, check="python -m pytest -rA tests")
    table = json.loads((tmp_path / "worker" / "table.json").read_text())
    table["patches"] = {case.id: inst["patch"] for case, inst in zip(cases, found)}
    (tmp_path / "worker" / "table.json").write_text(json.dumps(table))
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(suite), "--profile", "single", "--worker-cmd", command, "--out", str(out), "--yes",
                cwd=repo)
    assert done.returncode == 0, done.stderr
    for case, env in zip(cases, ("legacy", "modern")):
        result = json.loads((out / "results" / case.id / "single.json").read_text())
        assert result["state"] == "resolved" and result["environment"] == env, (result["detail"], result.get("outcome"))
    # The export's rows name it too.
    exported = mesh("eval", "export", str(out), cwd=repo)
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in (out / "export" / "results.jsonl").read_text().splitlines()]
    assert sorted(row["environment"] for row in rows) == ["legacy", "modern"], rows


def test_a_python_that_is_not_here_drops_the_instance_saying_so(project, tmp_path):
    root, repo, instances, _ = project
    _config(repo, envs=True)
    text = (repo / "mesh.toml").read_text().replace(f'python = "{PYTHON}"', 'python = "2.1"', 1)
    (repo / "mesh.toml").write_text(text)
    built = mesh("eval", "suite", "--from-swebench", str(instances), "--command", COMMAND, "--runs", "1", "-o",
                 str(tmp_path / "s.jsonl"), "--json", cwd=repo)
    dropped = {d["commit"]: d["why"] for d in json.loads(built.stdout)["dropped"]}
    assert "Python 2.1 is not installed on this machine" in dropped["ada__calc-1"], dropped


def test_with_the_swebench_package_its_own_spec_of_the_version_is_the_environment(project, tmp_path, monkeypatch):
    """Without an [[eval.env]] for the version, SWE-bench's spec (``MAP_REPO_VERSION_TO_SPECS``, as
    ``swebench.harness.constants`` holds it) gives the Python, pip packages and test command; what of
    it is not reproduced (system packages, the install step) is said on the kept line."""
    root, repo, instances, _ = project
    stub = tmp_path / "stub" / "swebench" / "harness"
    stub.mkdir(parents=True)
    for folder in (stub.parent, stub):
        (folder / "__init__.py").write_text("")
    (stub / "constants.py").write_text(
        "MAP_REPO_VERSION_TO_SPECS = {'ada/calc': {\n"
        f"    '1.0': {{'python': '{PYTHON}', 'pip_packages': ['pytest<8'], 'install': 'python -m pip install -e .',\n"
        "            'pre_install': ['apt-get update', 'apt-get install -y locales'], 'test_cmd': 'pytest -rA'},\n"
        f"    '2.0': {{'python': '{PYTHON}', 'pip_packages': ['pytest>=8.4'], 'test_cmd': ['true', 'pytest -rA']}}}}}}\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "stub"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip reads its options from the environment: offline here
    monkeypatch.setenv("PIP_FIND_LINKS", str(WHEELS))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no pip.conf: installer = "auto" takes uv
    text = 'worker_env = ["MESH_EVAL_CASE"]\n[validation]\nallow = ["pytest -rA {path}"]\ntimeout_s = 120\n'
    (repo / "mesh.toml").write_text(text)
    suite = tmp_path / "suite.jsonl"
    built = mesh("eval", "suite", "--from-swebench", str(instances), "--runs", "1", "-o", str(suite), "--json",
                 cwd=repo)
    assert built.returncode == 0, built.stderr
    from orchestrator.evals.suite import read_suite

    legacy, modern = read_suite(suite)
    assert legacy.environment["name"] == "swebench-ada__calc-1.0" and legacy.hidden_command.startswith("pytest -rA ")
    # Built by uv, given pip's offline settings as uv names them (UV_NO_INDEX, UV_FIND_LINKS).
    assert (legacy.environment["installer"], modern.environment["installer"]) == ("uv", "uv")
    assert any(p.startswith("pytest==7.") for p in legacy.environment["packages"])
    assert modern.environment["name"] == "swebench-ada__calc-2.0"
    notes = json.loads(built.stdout)["notes"]
    assert "not reproduced of SWE-bench's spec: pre_install (apt-get update apt-get install -y locales); install" \
        in notes[legacy.instance_id], notes
    # The header names the command the instances' tests ran with: their environment's, not the default.
    assert json.loads(built.stdout)["own_commands"] == {legacy.instance_id: "pytest -rA {tests}",
                                                        modern.instance_id: "pytest -rA {tests}"}
    from orchestrator.evals.builder import BuiltSuite

    header = BuiltSuite(out=suite, kept=[legacy, modern], command="python -m pytest {tests}",
                        own_commands=json.loads(built.stdout)["own_commands"]).header()
    assert header == ("hidden tests run with: python -m pytest {tests} (no case); with their environment's own"
                      " command: pytest -rA {tests} (2)"), header


def test_auto_takes_uv_unless_pip_has_a_configuration_uv_would_not_read(tmp_path, monkeypatch):
    from orchestrator.evals.environments import _uv

    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert _uv("auto") is not None and _uv("pip") is None
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = https://mirror.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    assert _uv("auto") is None  # a mirror uv would not know of: pip builds
    assert _uv("uv") is not None  # asked for by name: uv all the same


def test_a_swebench_that_gives_no_spec_is_said_on_each_instances_line(project, tmp_path, monkeypatch):
    """swebench 5 (the real wheel, here without its harness's dependencies) holds no spec per
    repository and version: an instance no [[eval.env]] matches says so, not silently nothing."""
    import zipfile

    wheels = sorted((Path(__file__).resolve().parent.parent / ".venv" / "swebench-wheels").glob("swebench-5*.whl"))
    if not wheels:
        pytest.skip("make eval-wheels fetches swebench's wheel")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheels[-1]) as wheel:
        wheel.extractall(site)
    root, repo, instances, _ = project
    monkeypatch.setenv("PYTHONPATH", str(site))
    _config(repo, envs=False)  # no [[eval.env]]: the instances' environments are SWE-bench's to give
    built = mesh("eval", "suite", "--from-swebench", str(instances), "--command", COMMAND, "--runs", "1", "-o",
                 str(tmp_path / "s.jsonl"), "--json", cwd=repo)
    assert built.returncode in (0, 1), built.stderr
    answer = json.loads(built.stdout)
    lines = list(answer["notes"].values()) + [d["why"] for d in answer["dropped"]]
    assert lines and all("swebench 5." in line and "is installed but" in line and "swebench<5" in line
                         for line in lines), lines


def test_an_environment_without_the_runner_says_the_package_is_missing(project, tmp_path, monkeypatch):
    """An instance's environment without pytest: the runner never starts and writes no report.
    The drop names the missing package, not a runner mesh does not read."""
    root, repo, instances, _ = project
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    _config(repo, envs=False)
    text = (repo / "mesh.toml").read_text()
    (repo / "mesh.toml").write_text(text + f'\n[[eval.env]]\nname = "bare"\nversions = ["1.0", "2.0"]\n'
                                           f'python = "{PYTHON}"\npackages = []\n'
                                           f'pip_args = ["--no-index", "--find-links", "{WHEELS}"]\n')
    built = mesh("eval", "suite", "--from-swebench", str(instances), "--command", COMMAND, "--runs", "1", "-o",
                 str(tmp_path / "s.jsonl"), "--json", cwd=repo)
    assert built.returncode in (0, 1), built.stderr
    dropped = {d["commit"]: d["why"] for d in json.loads(built.stdout)["dropped"]}
    assert set(dropped) == {"ada__calc-1", "ada__calc-2"}, built.stdout
    for why in dropped.values():
        assert "its tests cannot run on the base tree" in why and "'pytest' is not installed" in why, why
        assert "reads no per-test results" not in why, why


def test_a_checkout_without_its_environment_imports_and_runs_instances_that_bring_theirs(project, tmp_path,
                                                                                           monkeypatch):
    """The checkout declares dependencies and has no environment installed: with no environment
    for the instances the import stops naming the command that makes one, as before; with an
    [[eval.env]] for each instance's version it needs none (each instance runs in its own), and an
    instance of a version none names is dropped with that reason; an eval grades in them."""
    root, repo, instances, found = project
    copy = tmp_path / "calc"
    git(tmp_path, "clone", "-q", str(repo), str(copy))
    commit(copy, "Declare the tests' runner", {"pyproject.toml": '[project]\nname = "calc"\nversion = "1"\n'
                                                                   'dependencies = ["pytest"]\n'})
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)

    def imported(name: str):
        return mesh("eval", "suite", "--from-swebench", str(instances), "--command", COMMAND, "--runs", "1", "-o",
                    str(tmp_path / name), "--json", cwd=copy)

    _config(copy, envs=True)
    text = (copy / "mesh.toml").read_text()
    (copy / "mesh.toml").write_text(text.split("\n[[eval.env]]")[0] + "\n")  # no [[eval.env]], no python
    stopped = imported("none.jsonl")
    assert stopped.returncode == 2 and "has no environment to validate in" in stopped.stderr, stopped.stderr
    legacy_only = text.split('\n[[eval.env]]\nname = "modern"')[0] + "\n"
    (copy / "mesh.toml").write_text(legacy_only)
    partly = imported("partly.jsonl")
    assert partly.returncode == 0, partly.stderr
    answer = json.loads(partly.stdout)
    dropped = {d["commit"]: d["why"] for d in answer["dropped"]}
    assert list(dropped) == ["ada__calc-2"] and "no environment of its own for version 2.0" in dropped[
        "ada__calc-2"] and "has no environment to validate in" in dropped["ada__calc-2"], dropped
    (copy / "mesh.toml").write_text(text)
    built = imported("suite.jsonl")
    assert built.returncode == 0, built.stderr
    from orchestrator.evals.suite import read_suite

    cases = read_suite(tmp_path / "suite.jsonl")
    assert [c.environment["name"] for c in cases] == ["legacy", "modern"], built.stdout
    command = write_worker(tmp_path, copy, [], {"single": [c.id for c in cases]}, check="python -m pytest -rA tests")
    table = json.loads((tmp_path / "worker" / "table.json").read_text())
    table["patches"] = {case.id: inst["patch"] for case, inst in zip(cases, found)}
    (tmp_path / "worker" / "table.json").write_text(json.dumps(table))
    done = mesh("eval", "run", str(tmp_path / "suite.jsonl"), "--profile", "single", "--worker-cmd", command,
                "--out", str(tmp_path / "ev"), "--yes", cwd=copy)
    assert done.returncode == 0, done.stderr
    for case in cases:
        result = json.loads((tmp_path / "ev" / "results" / case.id / "single.json").read_text())
        assert result["state"] == "resolved", (result["detail"], result.get("outcome"))
