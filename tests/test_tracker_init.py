"""``init`` on a live workspace (issue 16, item 6): refused as bd v0.50.3 refuses it, unless
``--force``.

The attack: ``mesh tracker init --prefix bb`` (or ``bd init``, which beads-mcp's ``context
init`` runs with the ``BEADS_DB`` of the workspace set before) on an initialised, populated
workspace silently rewrote its issue prefix, and the next creates landed there. Each test
runs it for real (CliRunner, the ``bd`` console script as a subprocess, on SQLite and
PostgreSQL) and checks that nothing in the database changed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tracker.errors import AlreadyInitializedError
from tracker.jsonl import export_jsonl
from tracker.store import Tracker

BD = Path(sys.executable).with_name("bd")


def snapshot(target: Path | str) -> tuple[str, str, list]:
    """What a re-init could change: the prefix, every issue as exported, every config row."""
    import io

    with Tracker(target) as t:
        out = io.StringIO()
        export_jsonl(t, out)
        return t.prefix, out.getvalue(), [tuple(r) for r in t.db.read("SELECT key, value FROM config ORDER BY key")]


@pytest.fixture
def live(tmp_path, monkeypatch, db_target):
    """An initialised workspace (prefix ``aa``) holding issues and a comment; the CLI runs in it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESH_DB", raising=False)
    with Tracker.init(tmp_path, prefix="aa", actor="owner", db_path=db_target) as t:
        first = t.create("first")["id"]
        t.add_comment(first, "a comment")
        t.create("second")
    return db_target or tmp_path / ".beads" / "mesh.db"


def test_the_library_refuses_a_live_workspace_unless_forced(tmp_path, live):
    before = snapshot(live)
    with pytest.raises(AlreadyInitializedError) as caught:
        Tracker.init(tmp_path, prefix="bb", db_path=live if isinstance(live, str) else None)
    assert caught.value.code == "already_initialized"
    assert snapshot(live) == before
    with Tracker.init(tmp_path, prefix="bb", db_path=live if isinstance(live, str) else None, force=True) as t:
        assert t.prefix == "bb" and len(t.list()) == 2


def test_mesh_tracker_init_refuses_with_bds_message_and_changes_nothing(live):
    before = snapshot(live)
    args = ["--db", str(live), "tracker", "init", "--prefix", "bb"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    for line in ("This workspace is already initialized.", "Just run bd commands normally (e.g., bd list)",
                 "bd init --force --prefix bb", "Aborting."):
        assert line in result.stderr
    assert snapshot(live) == before

    as_json = CliRunner().invoke(cli, [*args, "--json"])
    assert as_json.exit_code == 1 and json.loads(as_json.stderr)["code"] == "already_initialized"
    # Without --prefix too: bd refuses any init on an initialised workspace.
    assert CliRunner().invoke(cli, ["--db", str(live), "tracker", "init"]).exit_code == 1
    assert snapshot(live) == before


def test_init_force_keeps_todays_behaviour(live):
    result = CliRunner().invoke(cli, ["--db", str(live), "tracker", "init", "--prefix", "bb", "--force"])
    assert result.exit_code == 0, result.output
    with Tracker(live) as t:
        assert t.prefix == "bb" and len(t.list()) == 2
        assert t.create("third")["id"].startswith("bb-")


def test_init_on_a_fresh_or_empty_database_still_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESH_DB", raising=False)
    empty = tmp_path / "empty.db"
    empty.touch()  # a file, but no tracker in it yet
    for target in (tmp_path / "new" / "t.db", empty):
        result = CliRunner().invoke(cli, ["--db", str(target), "tracker", "init", "--prefix", "cc"])
        assert result.exit_code == 0, result.output
        with Tracker(target) as t:
            assert t.prefix == "cc"


def test_bd_init_with_an_inherited_beads_db_refuses_as_a_real_process(tmp_path):
    """What beads-mcp's ``context init`` does: ``bd init --prefix bb`` in another folder with the
    environment still naming the live workspace's database."""
    if not BD.exists():  # pragma: no cover - depends on the environment
        pytest.skip(f"the bd entry point is not installed beside {sys.executable}")
    proj, other = tmp_path / "proj", tmp_path / "other"
    other.mkdir()
    with Tracker.init(proj, prefix="aa") as t:
        t.create("live work")
    db = proj / ".beads" / "mesh.db"
    before = snapshot(db)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "BEADS_DB": str(db)}
    done = subprocess.run([str(BD), "init", "--prefix", "bb"], cwd=other, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done
    assert "This workspace is already initialized." in done.stderr and "Aborting." in done.stderr
    assert done.stdout == "" and snapshot(db) == before
    assert not (other / ".beads").exists()
    forced = subprocess.run([str(BD), "init", "--prefix", "bb", "--force"], cwd=other, env=env,
                            capture_output=True, text=True, timeout=120)
    assert forced.returncode == 0, forced
    assert snapshot(db)[0] == "bb"
