"""A worker and a validation command go for the tracker itself, named by ``[tracker] url`` in
mesh.toml (not ``--db`` or ``MESH_DB``), as a plain path and as a ``sqlite:////`` URL: close an
unrelated task, forge an ``[orch:outcome]`` comment, read the database. Performed with a real
``mesh run`` (real bwrap, real git); the tracker must come out untouched and unread."""

from __future__ import annotations

import json
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runkit import make_workspace
from tests.test_attack_sandbox import MESH, mesh_env

ATTACK = r'''
import json, os, sqlite3, sys
sys.stdin.read()
out = {}
for path in json.loads(os.environ.get("TARGETS", "[]")) or TARGETS:
    try:
        con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=1)
        con.execute("UPDATE issues SET status = 'closed' WHERE id = 'demo-7kq.4'")
        con.execute("INSERT INTO comments (issue_id, author, text, created_at) VALUES "
                    "('demo-7kq.4', 'mesh', '[orch:outcome] forged', '2026-01-01T00:00:00Z')")
        con.commit()
        out[path] = "WRITTEN"
    except Exception as exc:
        out[path] = "refused: " + type(exc).__name__
    try:
        out[path + " read"] = open(path, "rb").read(16).hex()
    except OSError as exc:
        out[path + " read"] = "refused"
os.makedirs(os.path.join(os.environ["HOME"]), exist_ok=True)
with open(os.path.join(os.environ["HOME"], "tracker-loot.json"), "a") as handle:
    handle.write(json.dumps(out) + "\n")
print("not an artifact")
'''


def _state(db: Path) -> tuple[str, list[str]]:
    con = sqlite3.connect(db)
    try:
        status = con.execute("SELECT status FROM issues WHERE id = 'demo-7kq.4'").fetchone()[0]
        texts = [row[0] for row in con.execute("SELECT text FROM comments WHERE issue_id = 'demo-7kq.4'")]
    finally:
        con.close()
    return status, texts


@pytest.mark.parametrize("spelling", ["path", "sqlite-url"])
def test_a_worker_cannot_reach_the_tracker_named_in_mesh_toml(tmp_path, spelling):
    ws = make_workspace(tmp_path)
    elsewhere = tmp_path / "trackers" / "team.db"
    elsewhere.parent.mkdir()
    shutil.move(str(ws.db), elsewhere)
    shutil.rmtree(ws.repo / ".beads")  # no workspace to find by walking up: only tracker.url names it
    url = str(elsewhere) if spelling == "path" else f"sqlite:///{elsewhere}"  # sqlite:////abs/path
    home = tmp_path / "home"
    home.mkdir()
    worker = tmp_path / "attack.py"
    worker.write_text(f"TARGETS = {json.dumps([str(elsewhere)])}\n{ATTACK}")
    config = tmp_path / "mesh.toml"
    config.write_text(f'consensus_retries = 0\n[tracker]\nurl = "{url}"\n[validation]\n'
                      f'allow = ["python3 -m unittest discover -s tests -t ."]\n')
    done = subprocess.run(
        [MESH, "--actor", "t", "run", "--label", "plan:demo", "--backend", "command",
         "--worker-cmd", f"{shlex.quote(sys.executable)} {shlex.quote(str(worker))}", "--repo", str(ws.repo),
         "--config", str(config), "--json"],
        env=mesh_env(home), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    # The run found its tracker through tracker.url (sqlite://// included) and blocked on the junk answers.
    assert json.loads(done.stdout)["outcome"] == "blocked", done.stderr
    loot = [json.loads(line) for path in (home / ".cache" / "mesh-worker-homes").glob("*/*/*/*/tracker-loot.json")
            for line in path.read_text().splitlines()]
    assert loot, done.stderr  # the worker ran and tried
    assert all(value.startswith("refused") for entry in loot for value in entry.values()), loot
    status, texts = _state(elsewhere)
    assert status != "closed" and not any("forged" in text for text in texts)


def test_validation_cannot_reach_the_tracker_either(tmp_path):
    from orchestrator.sandbox.bwrap import tracker_paths
    from orchestrator.sandbox.validation import run_validation
    from tracker.store import Tracker

    ws = make_workspace(tmp_path)
    probe = ws.repo / "probe.py"
    probe.write_text(f"TARGETS = {json.dumps([str(ws.db)])}\n{ATTACK}")
    subprocess.run(["git", "-C", str(ws.repo), "add", "probe.py"], check=True)
    subprocess.run(["git", "-C", str(ws.repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "p"],
                   check=True)
    with Tracker.open(ws.db) as tracker:
        hidden = tracker_paths(tracker)
    # The program is the repository's own script run by a Python in the repository's folder tree,
    # which would bring that folder (and the tracker in it) along if nothing covered it.
    command = f"{sys.executable} probe.py"
    [result] = run_validation([command], cwd=ws.repo, allow=[command], timeout_s=60, hidden=hidden)
    assert "WRITTEN" not in result.stdout_tail + result.stderr_tail
    status, texts = _state(ws.db)
    assert status != "closed" and not any("forged" in text for text in texts)
