"""mesh's pytest plugin (``testruns.pytest_reader.PLUGIN``): a test id longer than mesh keeps
reaches the JUnit report already cut, and mesh reads the same ids, with the same outcomes, as
from pytest's own report of the whole ids. Real pytest runs, in a subprocess each."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sandbox import testcounts
from orchestrator.testruns.model import MAX_ID_CHARS
from orchestrator.testruns.pytest_reader import PLUGIN, READER

TESTS = (
    "import pytest\n\n"
    "BIG = 'ab' * 300_000\n"
    "ODD = '\\x01\\x7f\\u00e9' * 2_000\n\n\n"
    "MID = 'mid' * 300\n\n\n"
    "@pytest.mark.parametrize('text', [BIG, BIG + 'c', ODD, 'short', MID], ids=[BIG, BIG + 'c', ODD, 'short', MID])\n"
    "def test_long(text):\n    assert text != BIG + 'c'\n\n\n"
    "class TestNamed:\n    pass\n\n\n"
    "for _data in ('xy' * 200_000, 'xy' * 200_000 + 'z'):\n"
    "    setattr(TestNamed, 'test_' + _data, lambda self: None)\n\n\n"
    "def test_plain():\n    pass\n"
)


def _run(tmp_path: Path, argv: list[str], name: str, *, plugin: bool) -> tuple[list[tuple[str, str]], int]:
    """The (id, status) pairs mesh reads from the report of ``argv`` (instrumented as validation
    does, or with ``--junitxml`` alone), and the report's size."""
    folder = tmp_path / name
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "elsewhere")}
    env.pop("PYTEST_ADDOPTS", None)
    if plugin:
        probe = testcounts.instrument(argv, folder, str(folder), tree=tmp_path)
        testcounts.prepare(probe, owner=None)
        env = probe.environment(env)
        command, report = probe.argv, probe.report
    else:
        report = folder / "junit.xml"
        command = [*argv[:3], f"--junitxml={report}", *argv[3:]]
    done = subprocess.run(command, cwd=tmp_path / "project", env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    run = READER.read(report.read_bytes())
    return [(case.id, case.status) for case in run.cases], report.stat().st_size


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project" / "tests").mkdir(parents=True)
    (tmp_path / "project" / "tests" / "test_ids.py").write_text(TESTS)
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


@pytest.mark.parametrize("options", [[], ["--junit-prefix=suite"], ["-o", "junit_family=xunit1"], ["-n", "2"]])
def test_the_plugin_cuts_long_ids_as_mesh_reads_them(project, options):
    """With xdist (``-n``) the controller cuts the ids: a worker's reports are matched to its
    items by their ids (cut there, xdist stopped with an internal error)."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options]
    whole, whole_size = _run(project, argv, "whole", plugin=False)
    cut, cut_size = _run(project, argv, "cut", plugin=True)
    assert sorted(cut) == sorted(whole) and len(cut) == 8, cut
    assert sum(status == "failed" for _, status in cut) == 1
    assert sum(" more characters, sha256 " in test_id for test_id, _ in cut) == 5
    assert all(len(test_id) <= MAX_ID_CHARS for test_id, _ in cut)
    assert any(test_id.endswith("mid" * 300 + "]") for test_id, _ in cut)  # 900 characters: kept whole
    assert whole_size > 2_000_000 and cut_size < 20_000, (whole_size, cut_size)


def test_the_plugin_goes_after_the_environments_path_and_is_not_given_to_an_interpreter_ignoring_it(project):
    probe = testcounts.instrument([sys.executable, "-m", "pytest"], project / "r", "/mesh/report", tree=project)
    assert probe.argv[3:6] == ["--junitxml=/mesh/report/junit.xml", "-p", PLUGIN]
    assert probe.environment({"PYTHONPATH": "/venv/src"})["PYTHONPATH"] == "/venv/src:/mesh/report"
    for flags in (["-E"], ["-I"], ["-bE"], ["-X", "dev", "-I"]):
        ignoring = testcounts.instrument([sys.executable, *flags, "-m", "pytest"], project / "r", "/r", tree=project)
        assert PLUGIN not in ignoring.argv and not ignoring.files and ignoring.env == {}, flags
    # Such an interpreter's run is read as before, long ids cut by mesh when it reads them.
    argv = [sys.executable, "-E", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    ids, size = _run(project, argv, "ignoring", plugin=True)
    assert len(ids) == 8 and size > 2_000_000


FAILING = (
    "import unittest\n\n\n"
    "def helper(value):\n    assert (\n        value\n        == 3\n    ), 'not three'\n\n\n"
    + "".join(f"def test_fails_{n}():\n    # a comment\n    helper({n})\n\n\n" for n in range(6))
    + "class TestCase(unittest.TestCase):\n"
    + "".join(f"    def test_equal_{n}(self):\n        self.assertEqual(\n            {n},\n            99,\n        )\n\n"
              for n in range(6))
)


def test_failures_read_and_print_the_same_with_the_plugins_kept_parse(tmp_path):
    """The plugin keeps a module's parse for the run where pytest parsed it again per failure:
    every failure's text, in the report and on the terminal, is what pytest prints without it."""
    (tmp_path / "project" / "tests").mkdir(parents=True)
    (tmp_path / "project" / "tests" / "test_many.py").write_text(FAILING)
    outputs = []
    for plugin in (False, True):
        folder = tmp_path / f"report-{plugin}"
        folder.mkdir()
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA"]
        probe = testcounts.instrument(argv, folder, str(folder), tree=tmp_path)
        env = dict(os.environ)
        if plugin:
            testcounts.prepare(probe, owner=None)
            env = probe.environment(env)
            command = probe.argv
        else:
            command = [*argv[:3], f"--junitxml={folder / 'junit.xml'}", *argv[3:]]
        done = subprocess.run(command, cwd=tmp_path / "project", env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stdout[-3000:]
        run = READER.read((folder / "junit.xml").read_bytes())
        printed = [line for line in done.stdout.splitlines()
                   if (" in " not in line or "==" not in line) and "generated xml file" not in line]
        outputs.append(([(case.id, case.status, case.message) for case in run.cases], printed))
    assert outputs[0][0] == outputs[1][0]
    assert outputs[0][1] == outputs[1][1], "\n".join(difflib.unified_diff(outputs[0][1], outputs[1][1], lineterm=""))
    cases, printed = outputs[1]
    assert len(cases) == 12 and sum(status == "failed" for _, status, _ in cases) == 11
    assert "not three" in cases[0][2] and "== 3" in "\n".join(printed)


def test_the_plugin_loads_on_an_interpreter_older_than_its_body():
    """Its body (f-strings) is compiled inside a ``try``: the module itself is a docstring, one
    string and the ``try``, which Python 2.7 and 3.5 parse (tried by hand: Python 2.7 with pytest
    4.6 loads it and runs as without it)."""
    import ast

    from orchestrator.testruns.pytest_reader import plugin_text

    tree = ast.parse(plugin_text())
    kinds = [type(node).__name__ for node in tree.body]
    assert kinds == ["Expr", "Assign", "Try"], kinds
    assert "f'" not in ast.get_source_segment(plugin_text(), tree.body[2])


def test_without_mesh_s_sources_pytest_runs_without_the_plugin(project, monkeypatch):
    """A bytecode-only install has no source to take ``bounded_id`` from: no plugin, no ``-p``."""
    import inspect

    from orchestrator.testruns import pytest_reader

    def no_source(obj):
        raise OSError("could not get source code")

    monkeypatch.setattr(pytest_reader, "_text", [])
    monkeypatch.setattr(inspect, "getsource", no_source)
    probe = testcounts.instrument([sys.executable, "-m", "pytest"], project / "r", "/r", tree=project)
    assert PLUGIN not in probe.argv and probe.files == {} and probe.env == {}
