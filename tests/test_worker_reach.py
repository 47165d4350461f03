"""What a command worker may read beyond its worktree: the folder its own script lives in (a helper
module, a data file beside it), read-only, unless that folder is HOME or holds the repository or
the tracker; folders named in ``worker_read_only``; never more. A worker that cannot start in its
sandbox ends the run as a configuration mistake (exit 2, the task left open)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sandbox.bwrap import require_bwrap
from orchestrator.sandbox.worker_sandbox import worker_launcher
from tests.runkit import MESH, TASK, make_workspace

ROOT = Path(__file__).resolve().parents[1]
RUN = """import os, sys
import helper  # beside this script
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "answers.txt")) as handle:
    assert handle.read() == "ready"
sys.argv = [sys.argv[0]]
import minimal_worker
minimal_worker.main()
"""


def agent_folder(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.py").write_text(RUN)
    (folder / "helper.py").write_text("X = 1\n")
    (folder / "answers.txt").write_text("ready")
    shutil.copy(ROOT / "examples" / "minimal_worker.py", folder / "minimal_worker.py")
    return folder


def run(ws, worker_cmd: str, home: Path, config: Path | None = None) -> tuple[int, dict | None, str]:
    done = subprocess.run(
        [*MESH, "--actor", "t", "run", "--label", "plan:demo", "--backend", "command", "--worker-cmd", worker_cmd,
         "--repo", str(ws.repo), "--config", str(config or ws.repo / "mesh.toml"), "--json"],
        env={"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300, cwd=ws.repo)
    report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    return done.returncode, report, done.stderr


def test_a_worker_script_reads_the_folder_it_lives_in(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    home = tmp_path / "home"
    home.mkdir()
    agent = agent_folder(tmp_path / "tools" / "agent")
    code, report, err = run(ws, f"{shlex.quote(sys.executable)} {agent / 'run.py'}", home)
    assert (code, report and report["outcome"]) == (0, "closed"), err


def test_a_folder_holding_the_repository_or_home_is_never_shown(tmp_path):
    bwrap = require_bwrap()
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "secret.txt").write_text("beside the repository")
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("in HOME")
    # The paths come in the environment: an absolute path among a command's arguments is shown.
    probe = "import os\nfor p in os.environ['PROBE'].split(':'):\n    try:\n        print(open(p).read())\n" \
            "    except OSError:\n        print('unreadable')\n"
    for folder in (tmp_path, home):
        script = folder / "probe.py"
        script.write_text(probe)
        launch = worker_launcher(bwrap, private_root=tmp_path / "homes", shielded=[repo])
        made = launch([sys.executable, str(script)], {"PATH": "/usr/bin:/bin", "HOME": str(home),
                                                      "PROBE": f"{tmp_path / 'secret.txt'}:{home / 'secret.txt'}"},
                      None)
        made.begin()
        try:
            done = subprocess.run(made.argv, env=made.env, preexec_fn=made.prepare, capture_output=True, text=True,
                                  timeout=120)
        finally:
            made.finish()
        assert done.stdout.split() == ["unreadable", "unreadable"], (folder, done.stdout, done.stderr)
    with pytest.raises(ValueError, match="holds the repository"):
        worker_launcher(bwrap, private_root=tmp_path / "homes", shielded=[repo], read_only=[tmp_path])


def test_worker_read_only_names_a_folder_a_worker_may_read(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    home = tmp_path / "home"
    home.mkdir()
    agent = agent_folder(tmp_path / "tools" / "agent")
    data = tmp_path / "models"
    data.mkdir()
    (data / "weights.txt").write_text("ready")
    run_py = agent / "run.py"
    run_py.write_text(RUN.replace('os.path.join(os.path.dirname(os.path.abspath(__file__)), "answers.txt")',
                                  repr(str(data / "weights.txt"))))
    code, report, err = run(ws, f"{shlex.quote(sys.executable)} {run_py}", home)
    assert code == 3 and report["block_reason"] == "no_response"  # the folder is not shown: every call fails
    config = tmp_path / "mesh-read.toml"
    config.write_text(f"worker_read_only = [{json.dumps(str(data))}]\n" + (ws.repo / "mesh.toml").read_text())
    with ws.tracker() as tracker:
        tracker.update(TASK, status="open", assignee="")
    code, report, err = run(ws, f"{shlex.quote(sys.executable)} {run_py}", home, config)
    assert (code, report and report["outcome"]) == (0, "closed"), err


def test_a_worker_that_cannot_start_in_its_sandbox_is_a_configuration_mistake(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    home = tmp_path / "home"
    home.mkdir()
    # A script whose interpreter is nowhere: the program exists and is executable, yet cannot start.
    script = tmp_path / "bin" / "agent"
    script.parent.mkdir()
    script.write_text("#!/opt/no-such-interpreter/python\nprint('never')\n")
    script.chmod(0o755)
    code, report, err = run(ws, str(script), home)
    assert code == 2 and report["outcome"] == "config_mistake", err
    assert "cannot start in its sandbox" in report["block_detail"]
    with ws.tracker() as tracker:
        assert tracker.get(TASK)["status"] == "open"
