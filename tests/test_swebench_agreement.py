"""Issue 46, item 4: mesh grades a SWE-bench instance as SWE-bench's own functions grade it.

A real library's SWE-bench instance, made as SWE-bench makes one: its FAIL_TO_PASS and
PASS_TO_PASS are read by SWE-bench's own log parser (``parse_log_pytest``, swebench 5.0.2 from
PyPI, ``make eval-wheels``) from ``pytest -rA`` logs of the base and of the gold patch, so they hold
the ids SWE-bench's records hold: parametrized ids cut at their first space
(``test_clamp[low``), one cut id standing for two tests. ``mesh eval suite --from-swebench``
imports it; then each candidate patch (the gold one, one that fixes half, one that breaks a
PASS_TO_PASS test, one that fixes every test but one of the two behind a cut id, the gold one
with a PASS_TO_PASS or a FAIL_TO_PASS test skipped, none) is graded by mesh (``grade_run``) and by SWE-bench
(``get_eval_tests_report`` and ``get_resolution_status`` on the ``pytest -rA`` log of the same
tree): the same verdict for every patch.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.evalkit import git, mesh

WHEELS = Path(sys.prefix) / "swebench-wheels"
pytestmark = pytest.mark.skipif(not (WHEELS / ".done").exists(), reason="no SWE-bench wheel (make eval-wheels)")

BASE = '''"""Small helpers."""


def evaluate(expr):
    return eval(expr, {"__builtins__": {}})


def clamp(value, low, high):
    return value
'''
GOLD = BASE.replace("    return value\n", "    return max(low, min(value, high))\n")
TESTS = '''import pytest

import helpers


@pytest.mark.parametrize("expr, want", [("1 + 1", 2), ("2 * 3", 6)])
def test_evaluate(expr, want):
    assert helpers.evaluate(expr) == want


def test_plain():
    assert helpers.clamp(5, 0, 10) == 5


@pytest.mark.parametrize("value, want", [(-5, 0), (15, 10)], ids=["low bound", "high bound"])
def test_clamp(value, want):
    assert helpers.clamp(value, 0, 10) == want


@pytest.mark.parametrize("value, want", [(-1, 0), (-2, 0)], ids=["low one", "low two"])
def test_under(value, want):
    assert helpers.clamp(value, 0, 10) == want
'''
# Candidates: (name, helpers.py as the patch leaves it).
CANDIDATES = [
    ("gold", GOLD),
    ("low only", BASE.replace("    return value\n", "    return max(low, value)\n")),
    ("high only", BASE.replace("    return value\n", "    return min(value, high)\n")),
    ("gold, evaluate broken for products", GOLD.replace('    return eval(expr, {"__builtins__": {}})\n',
                                                         '    return 0 if "*" in expr else eval(expr, {"__builtins__": {}})\n')),
    ("one of two behind a cut id", GOLD.replace("    return max(low, min(value, high))\n",
                                                "    return value if value == -2 else max(low, min(value, high))\n")),
    ("gold, a PASS_TO_PASS test skipped", GOLD.replace('    return eval(expr, {"__builtins__": {}})\n',
                                                        '    if "*" in expr:\n        __import__("pytest").skip("later")\n'
                                                        '    return eval(expr, {"__builtins__": {}})\n')),
    ("gold, a FAIL_TO_PASS test skipped", GOLD.replace("    return max(low, min(value, high))\n",
                                                       "    if value == 15:\n        __import__('pytest').skip('later')\n"
                                                       "    return max(low, min(value, high))\n")),
    ("unchanged", BASE),
]


def _tree(repo: Path, commit: str, into: Path) -> Path:
    into.mkdir(parents=True)
    data = subprocess.run(["git", "-C", str(repo), "archive", commit], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(into, filter="data")
    return into


def _log(folder: Path, test_patch: str) -> str:
    """SWE-bench's run of an instance: the test patch applied, ``pytest -rA`` on its files."""
    subprocess.run(["git", "apply", "-"], cwd=folder, input=test_patch, text=True, check=True)
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_helpers.py"],
                          cwd=folder, capture_output=True, text=True)
    return done.stdout


def _swebench(jobs: list[dict]) -> list[dict]:
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("swebench_grade.py")), str(WHEELS)],
                          input="".join(json.dumps(job) + "\n" for job in jobs), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture(scope="module")
def instance(tmp_path_factory):
    root = tmp_path_factory.mktemp("agreement")
    repo = root / "helpers"
    (repo / "tests").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "helpers.py").write_text(BASE)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_helpers.py").write_text(TESTS.split("\n\n@pytest.mark.parametrize(\"value")[0] + "\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    (repo / "mesh.toml").write_text(f'[validation]\nallow = ["{sys.executable} -m pytest"]\ntimeout_s = 60\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "Start")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "helpers.py").write_text(GOLD)
    (repo / "tests" / "test_helpers.py").write_text(TESTS)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "clamp clamps")
    fix = git(repo, "rev-parse", "HEAD").strip()
    test_patch = git(repo, "diff", base, fix, "--", "tests")
    gold_patch = git(repo, "diff", base, fix, "--", ".", ":(exclude)tests")
    # FAIL_TO_PASS and PASS_TO_PASS as SWE-bench makes them: its parser on the base's and the gold's logs.
    logs = []
    for name, text in (("base", BASE), ("gold", GOLD)):
        folder = _tree(repo, base, root / name)
        (folder / "helpers.py").write_text(text)
        logs.append({"log": _log(folder, test_patch), "FAIL_TO_PASS": [], "PASS_TO_PASS": []})
    before, after = _swebench(logs)
    fail_to_pass = sorted(t for t, s in after["status"].items() if s == "PASSED" and before["status"].get(t) != "PASSED")
    pass_to_pass = sorted(t for t, s in after["status"].items() if s == "PASSED" and before["status"].get(t) == "PASSED")
    assert "tests/test_helpers.py::test_clamp[low" in fail_to_pass and "tests/test_helpers.py::test_under[low" in \
        fail_to_pass and "tests/test_helpers.py::test_evaluate[1" in pass_to_pass, (fail_to_pass, pass_to_pass)
    record = {"instance_id": "ada__helpers-1", "repo": "ada/helpers", "base_commit": base,
              "problem_statement": "clamp does not clamp", "patch": gold_patch, "test_patch": test_patch,
              "hints_text": "", "created_at": "2024-01-01T00:00:00Z", "version": "1.0",
              "environment_setup_commit": base, "FAIL_TO_PASS": json.dumps(fail_to_pass),
              "PASS_TO_PASS": json.dumps(pass_to_pass)}
    (root / "instances.jsonl").write_text(json.dumps(record) + "\n")
    built = mesh("eval", "suite", "--from-swebench", str(root / "instances.jsonl"), "--command",
                 f"{sys.executable} -m pytest {{tests}}", "--runs", "1", "-o", str(root / "suite.jsonl"), "--json",
                 cwd=repo)
    assert built.returncode == 0, built.stderr
    from orchestrator.evals.suite import read_suite

    [case] = read_suite(root / "suite.jsonl")
    return root, repo, case, record


def test_mesh_and_swebench_grade_every_candidate_alike(instance):
    from orchestrator.config import load_config
    from orchestrator.evals.cases import grade_run
    from orchestrator.evals.suite import patched_commit
    from orchestrator.toolchains.view import inspect

    root, repo, case, record = instance
    config = load_config(repo, None)
    grading = {"settings": config.validation, "view": inspect(repo, config.validation).view, "checks": [],
               "base_passes": False}
    ours, jobs = {}, []
    for index, (name, text) in enumerate(CANDIDATES):
        folder = _tree(repo, case.base, root / f"c{index}")
        (folder / "helpers.py").write_text(text)
        patch = subprocess.run(["git", "diff", "--no-index", "--", str(folder.parent / "base" / "helpers.py"),
                                str(folder / "helpers.py")], capture_output=True, text=True).stdout
        patch = patch.replace(f"a{folder.parent / 'base' / 'helpers.py'}", "a/helpers.py").replace(
            f"b{folder / 'helpers.py'}", "b/helpers.py")
        head = patched_commit(repo, case.base, patch) if patch else None
        ours[name] = grade_run(repo, repo, case, head, **grading)
        jobs.append({"log": _log(folder, record["test_patch"]), "FAIL_TO_PASS": json.loads(record["FAIL_TO_PASS"]),
                     "PASS_TO_PASS": json.loads(record["PASS_TO_PASS"])})
    theirs = dict(zip([name for name, _ in CANDIDATES], _swebench(jobs)))
    verdicts = {name: (ours[name].resolved, theirs[name]["resolution"]) for name in ours}
    assert verdicts == {"gold": (True, "RESOLVED_FULL"), "low only": (False, "RESOLVED_PARTIAL"),
                        "high only": (False, "RESOLVED_PARTIAL"),
                        "gold, evaluate broken for products": (False, "RESOLVED_NO"),
                        "one of two behind a cut id": (False, "RESOLVED_PARTIAL"),
                        "gold, a PASS_TO_PASS test skipped": (False, "RESOLVED_NO"),  # -rA prints no id for it
                        "gold, a FAIL_TO_PASS test skipped": (False, "RESOLVED_PARTIAL"),
                        "unchanged": (False, "RESOLVED_NO")}, (verdicts, {n: ours[n].detail for n in ours})
    assert "test_under" in ours["one of two behind a cut id"].detail, ours["one of two behind a cut id"].detail
