"""Issue 44, item 1: Django's runner read. A small Django app (Django and pytest-django from PyPI,
``make django`` installs them beside the venv; the app's ``.venv`` points at them), its tests run
by ``manage.py test``, ``django-admin test``, ``python -m django test``, a ``runtests.py`` calling
``execute_from_command_line`` and pytest-django: each test by id, status, duration and message;
``mesh init`` writes the check; a flaky test run again with Django's own ``-k``; a forged runner
caught by the twins; and through ``mesh run`` a breaking, a skipping and a deleting patch blocked,
an honest one landed, the landed branch passing the app's tests in a clean clone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sandbox.bwrap import require_bwrap
from orchestrator.sandbox.project_env import find_environment
from orchestrator.sandbox.validation import run_validation
from orchestrator.testruns.django_reader import unittest_args
from tests.runkit import MESH, TASK, make_workspace
from tests.test_attack_test_counts import run_patch
from tests.toolchainkit import REQUIRED, commit_all, init_repo, own_cache  # noqa: F401 (a fixture)

SITE = Path(__file__).resolve().parents[1] / ".venv" / "django-site"

SETTINGS = """SECRET_KEY = "test-only"
INSTALLED_APPS = ["django.contrib.contenttypes", "shop"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
"""
MANAGE = """#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_conf.settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
"""
RUNTESTS = """#!/usr/bin/env python
import os
import sys

from django.core.management import execute_from_command_line


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_conf.settings")
    execute_from_command_line(sys.argv[:1] + ["test"] + sys.argv[1:])
"""
MODELS = """from django.db import models


class Item(models.Model):
    name = models.CharField(max_length=50)
    price_cents = models.IntegerField()


def total(items):
    return sum(item.price_cents for item in items)
"""
PRICING = "def with_tax(cents, rate_percent):\n    return cents + cents * rate_percent // 100\n"
TESTS = """from django.test import SimpleTestCase, TestCase

from shop.models import Item, total
from shop.pricing import with_tax


class PricingTests(SimpleTestCase):
    def test_with_tax(self):
        self.assertEqual(with_tax(1000, 20), 1200)

    def test_zero_rate(self):
        self.assertEqual(with_tax(999, 0), 999)


class ItemTests(TestCase):
    def test_total(self):
        Item.objects.create(name="a", price_cents=150)
        Item.objects.create(name="b", price_cents=250)
        self.assertEqual(total(Item.objects.all()), 400)
"""
IDS = {"shop.tests.PricingTests.test_with_tax", "shop.tests.PricingTests.test_zero_rate",
       "shop.tests.ItemTests.test_total"}
MANAGE_TEST = "python manage.py test"


@pytest.fixture(scope="module")
def django_site():
    if not (SITE / "django").is_dir() or not (SITE / "pytest_django").is_dir():
        if REQUIRED:
            pytest.fail("Django is not installed beside the venv; make test installs it (make django)")
        pytest.skip("Django is not installed beside the venv (make django)")
    require_bwrap()
    return SITE


def _venv(root: Path) -> None:
    """The app's own .venv: a plain venv whose site-packages points at the Django install."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")], check=True)
    site = subprocess.run([str(root / ".venv" / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "django-site.pth").write_text(f"{SITE}\n")
    # The console script pip would write for Django.
    admin = root / ".venv" / "bin" / "django-admin"
    admin.write_text(f"#!{root / '.venv' / 'bin' / 'python'}\nimport sys\n"
                     "from django.core.management import execute_from_command_line\n"
                     "sys.exit(execute_from_command_line())\n")
    admin.chmod(0o755)


def write_app(root: Path, *, manage: bool = True, runtests: bool = False, pytest_ini: bool = False) -> None:
    files = {"site_conf/__init__.py": "", "site_conf/settings.py": SETTINGS, "shop/__init__.py": "",
             "shop/models.py": MODELS, "shop/pricing.py": PRICING, "shop/tests.py": TESTS,
             "pyproject.toml": '[project]\nname = "shop"\nversion = "1.0"\ndependencies = ["django>=5.2"]\n',
             ".gitignore": ".venv/\n__pycache__/\n"}
    if manage:
        files["manage.py"] = MANAGE
    if runtests:
        files["runtests.py"] = RUNTESTS
    if pytest_ini:
        files["pytest.ini"] = "[pytest]\nDJANGO_SETTINGS_MODULE = site_conf.settings\npython_files = tests.py test_*.py\n"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def app(root: Path, **layout) -> Path:
    init_repo(root)
    write_app(root, **layout)
    _venv(root)
    commit_all(root)
    return root


def validate(root: Path, command: str, **extra):
    [result] = run_validation([command], cwd=root, allow=[command], timeout_s=180,
                              environment=find_environment(root), **extra)
    return result


COMMANDS = {
    "manage.py test": ({}, MANAGE_TEST),
    "runtests.py": ({"manage": False, "runtests": True}, "python runtests.py"),
    "python -m django test": ({"manage": False}, "python -m django test --settings=site_conf.settings"),
    "django-admin test": ({"manage": False}, "django-admin test --settings=site_conf.settings --pythonpath=."),
    "pytest-django": ({"pytest_ini": True}, "python -m pytest -p no:cacheprovider"),
}


@pytest.mark.parametrize("how", list(COMMANDS))
def test_each_test_is_read_by_id_status_duration_and_message(tmp_path, django_site, how):
    layout, command = COMMANDS[how]
    root = app(tmp_path / "app", **layout)
    (root / "shop" / "pricing.py").write_text(PRICING.replace("// 100", "// 10"))
    commit_all(root, "break with_tax")
    result = validate(root, command)
    assert not result.passed and result.tests is not None, result.stderr_tail
    assert (result.tests.ran, result.tests.passed, result.tests.failed) == (3, 2, 1), result.tests
    cases = {case.id: case for case in result.run.cases}
    if how == "pytest-django":
        assert set(cases) == {"shop.tests.PricingTests::test_with_tax", "shop.tests.PricingTests::test_zero_rate",
                              "shop.tests.ItemTests::test_total"}, set(cases)
        failed = cases["shop.tests.PricingTests::test_with_tax"]
    else:
        assert result.tests.runner == "django" and set(cases) == IDS, set(cases)
        failed = cases["shop.tests.PricingTests.test_with_tax"]
    assert failed.status == "failed" and "3000 != 1200" in failed.message, failed
    assert all(case.duration_s is not None for case in cases.values())
    # mesh's control tests and twins ran and are not shown: the output reads as the app's own.
    shown = result.stdout_tail + result.stderr_tail
    if how != "pytest-django":
        assert "Found 3 test(s)." in shown and "Ran 3 tests in" in shown and "FAILED (failures=1)" in shown, shown
        # The progress marks are the app's three tests' only (mesh's are taken out by their places).
        marks = [line for line in shown.splitlines() if line and set(line) <= set(".FEsxu")]
        assert len(marks) == 1 and sorted(marks[0]) == sorted("F.."), marks


def test_the_tests_a_django_command_runs_in_unittest_terms(tmp_path):
    root = tmp_path
    write_app(root, runtests=True)
    assert unittest_args(["python", "manage.py", "test"], root) == ["discover", "-s", ".", "-p", "test*.py"]
    assert unittest_args(["python", "manage.py", "test", "shop"], root) == ["discover", "-s", "shop", "-p", "test*.py"]
    assert unittest_args(["python", "manage.py", "test", "shop.tests.PricingTests", "--parallel", "2", "-v", "2"],
                         root) == ["shop.tests.PricingTests"]
    assert unittest_args(["python", "runtests.py", "-k", "tax", "--failfast"], root) == [
        "discover", "-s", ".", "-p", "test*.py", "-k", "--failfast"]
    assert unittest_args(["python", "-m", "django", "test", "--pattern=tests.py"], root) == [
        "discover", "-s", ".", "-p", "tests.py"]
    assert unittest_args(["python", "other.py"], root) is None  # not a script that runs Django
    assert unittest_args(["python", "-m", "unittest"], root) is None


def test_a_parallel_run_is_read_from_its_workers(tmp_path, django_site):
    root = app(tmp_path / "app")
    command = f"{MANAGE_TEST} --parallel 2"
    result = validate(root, command)
    assert result.passed and result.tests.ran == 3 and {case.id for case in result.run.cases} == IDS, result.stderr_tail
    # A failure in a worker (no tblib here: Django alone would crash sending its traceback).
    (root / "shop" / "pricing.py").write_text(PRICING.replace("// 100", "// 10"))
    commit_all(root, "break with_tax")
    result = validate(root, command)
    failed = [case for case in result.run.cases if case.status == "failed"]
    assert not result.passed and [case.id for case in failed] == ["shop.tests.PricingTests.test_with_tax"], result.stderr_tail
    message = failed[0].message
    assert "3000 != 1200" in message and 'shop/tests.py", line 9, in test_with_tax' in message, message
    assert "unittest/case.py" not in message, message  # unittest's own frames left out, as unittest does


def test_a_flaky_test_is_run_again_alone_with_djangos_own_selection(tmp_path, django_site):
    root = app(tmp_path / "app")
    result = validate(root, MANAGE_TEST, select={MANAGE_TEST: "shop.tests.PricingTests.test_zero_rate"})
    assert result.passed and [case.id for case in result.run.cases] == ["shop.tests.PricingTests.test_zero_rate"]


def test_a_skipped_test_is_read_as_skipped(tmp_path, django_site):
    root = app(tmp_path / "app")
    (root / "shop" / "tests.py").write_text(TESTS.replace("    def test_with_tax", "    @skip('later')\n    def test_with_tax")
                                            .replace("from django.test import", "from unittest import skip\n"
                                                     "from django.test import"))
    commit_all(root, "skip")
    result = validate(root, MANAGE_TEST)
    assert result.passed and (result.tests.ran, result.tests.skipped) == (2, 1), result.tests


# Assertions that do nothing when the calling test uses a name of the module, and work otherwise
# (the fourth attack review's forger, against Django's runner).
FORGER = ("\nimport sys as _sys\nimport unittest as _unittest\n\n\n"
          "def _quiet(real):\n    def check(self, *args, **kwargs):\n"
          "        if {'with_tax'} & set(_sys._getframe(1).f_code.co_names):\n            return None\n"
          "        return real(self, *args, **kwargs)\n    return check\n\n\n"
          "_unittest.TestCase.assertEqual = _quiet(_unittest.TestCase.assertEqual)\n")


def test_a_runner_forged_for_the_modules_tests_is_caught(tmp_path, django_site):
    root = app(tmp_path / "app")
    (root / "shop" / "pricing.py").write_text(PRICING.replace("// 100", "// 10") + FORGER)
    commit_all(root, "forge")
    result = validate(root, MANAGE_TEST)
    assert not result.passed and result.reason == "runner_forged", (result.reason, result.stderr_tail)


def test_mesh_init_writes_a_check_that_runs_the_apps_tests(tmp_path, django_site):
    layouts = {"manage": ({}, MANAGE_TEST), "runtests": ({"manage": False, "runtests": True}, "python runtests.py"),
               "pytest": ({"pytest_ini": True}, "python -m pytest")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for name, (layout, check) in layouts.items():
        root = app(tmp_path / name, **layout)
        done = subprocess.run([*MESH, "init"], cwd=root, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        assert "Django (" in done.stdout, done.stdout
        assert f'check = ["{check}"]' in (root / "mesh.toml").read_text()
        # The check it wrote runs the app's tests (the sandbox, the app's .venv).
        assert validate(root, check).passed


def _django_workspace(tmp_path):
    """The demo workspace with the demo project replaced by the Django app (its check
    ``python manage.py test``)."""
    ws = make_workspace(tmp_path)
    ws.git("rm", "-rq", "temperature.py", "tests")
    ignored = (ws.repo / ".gitignore").read_text() if (ws.repo / ".gitignore").exists() else ""
    write_app(ws.repo)
    (ws.repo / ".gitignore").write_text(ignored + ".venv/\n__pycache__/\n")
    _venv(ws.repo)
    config = (ws.repo / "mesh.toml").read_text()
    start = config.index("[validation]")
    end = config.find("\n[", start + 1)
    (ws.repo / "mesh.toml").write_text(config[:start] + f'[validation]\nallow = ["{MANAGE_TEST}", '
                                       f'"{MANAGE_TEST} {{args...}}"]\ncheck = ["{MANAGE_TEST}"]\ntimeout_s = 120\n'
                                       + (config[end:] if end != -1 else ""))
    commit_all(ws.repo, "the shop app")
    return ws


def _patch(path: str, old: str, new: str) -> str:
    old_lines, new_lines = old.splitlines(), new.splitlines()
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,{len(old_lines)} +1,{len(new_lines)} @@\n"
            + "".join(f"-{line}\n" for line in old_lines) + "".join(f"+{line}\n" for line in new_lines))


BREAK = _patch("shop/pricing.py", PRICING, PRICING.replace("// 100", "// 10"))
SKIP = BREAK + _patch("shop/tests.py", TESTS, TESTS.replace("from django.test import", "from unittest import skip\n"
                                                                                       "from django.test import")
                      .replace("    def test_with_tax", "    @skip('flaky')\n    def test_with_tax"))
DELETE = BREAK + _patch("shop/tests.py", TESTS, TESTS.replace(
    "    def test_with_tax(self):\n        self.assertEqual(with_tax(1000, 20), 1200)\n\n", ""))
HONEST = _patch("shop/pricing.py", PRICING, PRICING.replace("return cents", "return round(cents)").replace(
    "def with_tax", '"""Prices with tax."""\n\n\ndef with_tax'))


@pytest.mark.parametrize("patch, lost", [(BREAK, None), (SKIP, "skipped"), (DELETE, "lost")],
                         ids=["breaking", "skipping", "deleting"])
def test_a_patch_that_breaks_skips_or_deletes_a_test_is_blocked(tmp_path, django_site, patch, lost, own_cache):
    ws = _django_workspace(tmp_path)
    code, report, res = run_patch(ws, patch, [MANAGE_TEST])
    assert code == 3 and report["outcome"] == "blocked", res.output
    assert report["block_reason"] == "validation_failed", report
    assert "with_tax" in report["block_detail"] or "test_with_tax" in report["block_detail"], report["block_detail"]
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "blocked"


def test_an_honest_patch_lands_and_the_landed_branch_passes_in_a_clean_clone(tmp_path, django_site, own_cache):
    ws = _django_workspace(tmp_path)
    code, report, res = run_patch(ws, HONEST, [MANAGE_TEST], "--onto", "mesh/land/shop")
    assert code == 0 and report["outcome"] == "closed", res.output
    clone = tmp_path / "clone"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "clone", "-q", "-b", "mesh/land/shop", str(ws.repo), str(clone)], check=True, env=env)
    assert '"""Prices with tax."""' in (clone / "shop" / "pricing.py").read_text()
    _venv(clone)
    done = subprocess.run([str(clone / ".venv" / "bin" / "python"), "manage.py", "test"], cwd=clone,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "Ran 3 tests" in done.stderr, done.stderr
