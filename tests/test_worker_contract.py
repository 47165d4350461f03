"""The worker contract (docs/workers.md) is the code's, ``mesh schema`` prints it, and the
minimal worker that follows it passes the demo with a real ``mesh run`` (real bwrap, real git)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from roles.contract import (ROUNDS_MARKER, answer_schema, example_answer, main, render_markdown, render_rounds,
                            replace_generated)
from roles.definitions import ALL_ROLES, ROUNDS, round_roles
from roles.parsing import parse_response
from tests.runkit import TASK, make_workspace
from tests.test_attack_sandbox import MESH, mesh_env

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "workers.md"
ROUNDS_DOC = ROOT / "docs" / "rounds.md"
WORKER = ROOT / "examples" / "minimal_worker.py"


def test_docs_workers_md_is_the_generated_contract():
    current = DOC.read_text(encoding="utf-8")
    assert replace_generated(current, render_markdown()) == current, \
        "docs/workers.md is out of date: run python -m roles.contract --write docs/workers.md"


def test_docs_rounds_md_is_the_generated_rounds():
    current = ROUNDS_DOC.read_text(encoding="utf-8")
    assert replace_generated(current, render_rounds(), ROUNDS_MARKER) == current, \
        "docs/rounds.md is out of date: run python -m roles.contract --write docs/rounds.md"


def test_a_stale_copy_fails_the_check_and_write_repairs_it(tmp_path, capsys):
    stale = tmp_path / "workers.md"
    stale.write_text(ROUNDS_DOC.read_text(encoding="utf-8").replace('"minItems": 1', '"minItems": 2', 1), encoding="utf-8")
    assert main(["--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--write", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == ROUNDS_DOC.read_text(encoding="utf-8")


def test_every_round_and_call_variable_is_documented():
    text = render_markdown() + render_rounds()
    for round_name in ROUNDS:
        assert f"### {round_name}\n" in text and f"(`mesh schema {round_name}`)" in text
    for variable in ("MESH_ROLE", "MESH_ROUND", "MESH_TASK_ID", "MESH_RUN_ID", "MESH_ATTEMPT", "MESH_WORKER"):
        assert f"| `{variable}` |" in text


@pytest.mark.parametrize("round_name", ROUNDS)
@pytest.mark.parametrize("strict", [False, True])
def test_each_example_is_an_answer_mesh_accepts(round_name, strict):
    for role in round_roles(round_name):
        answer = example_answer(round_name, strict=strict)
        if strict:
            answer["role"] = role
        parsed = parse_response(json.dumps(answer), round_name, role=role, task_id="demo-7kq.1", strict=strict)
        assert parsed.artifact.model_dump()


def _mesh(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("round_name", ROUNDS)
def test_mesh_schema_prints_the_schema_and_an_example(round_name):
    res = _mesh("schema", round_name)
    assert res.exit_code == 0 and json.loads(res.stdout) == answer_schema(round_name)
    res = _mesh("schema", round_name, "--example")
    assert res.exit_code == 0 and json.loads(res.stdout) == example_answer(round_name)
    res = _mesh("schema", round_name.replace("-", "_"), "--strict")
    assert res.exit_code == 0
    assert set(json.loads(res.stdout)["required"]) == {"role", "task_id", "artifact"}


def test_mesh_schema_lists_rounds_and_turns_a_role_into_its_rounds():
    res = _mesh("schema")
    assert res.exit_code == 0 and [line.split()[0] for line in res.stdout.splitlines()] == list(ROUNDS)
    for role in ALL_ROLES:
        res = _mesh("schema", role)
        assert res.exit_code == 2
        assert all(name in res.stderr for name in ROUNDS if role in round_roles(name))
    res = _mesh("schema", "votes")
    assert res.exit_code == 2 and "unknown round 'votes'" in res.stderr


def test_mesh_help_stays_light():
    code = ("import sys\nfrom orchestrator.cli.main import cli\n"
            "try:\n    cli(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'jinja2')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "HEAVY []" in done.stdout, done.stdout + done.stderr


def test_the_minimal_worker_passes_the_demo(tmp_path):
    ws = make_workspace(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [MESH, "--actor", "t", "run", "--label", "plan:demo", "--backend", "command",
         "--worker-cmd", f"{shlex.quote(sys.executable)} {shlex.quote(str(WORKER))}", "--repo", str(ws.repo),
         "--config", str(ws.repo / "mesh.toml"), "--json"],
        env=mesh_env(home), capture_output=True, text=True, timeout=300, cwd=ws.repo)
    report = json.loads(done.stdout)
    assert (report["outcome"], done.returncode) == ("closed", 0), done.stderr
    with ws.tracker() as tracker:
        assert tracker.get(TASK)["status"] == "closed"
    branch = ws.git("log", "--format=%s", "-1", f"mesh/{TASK}")
    assert branch.strip()
    files = ws.git("show", "--name-only", "--format=", f"mesh/{TASK}").split()
    assert {"temperature.py", "tests/test_fahrenheit.py"} <= set(files)
