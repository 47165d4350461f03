"""``bd doctor`` exits as bd does (0 for warnings) and always says why it fails; ``bd init``
takes the flags clients pass and writes bd's workspace files. Real SQLite workspaces, the
tracker's CLI as bd clients run it, and the failing case made by a real database fault."""

from __future__ import annotations

import json
import sqlite3

from click.testing import CliRunner

from tracker.cli import tracker_group
from tracker.store import Tracker


def _bd(db: str | None, *args: str, cwd=None):
    obj = {"db": db, "actor": "doc"} if db else {"actor": "doc"}
    return CliRunner().invoke(tracker_group, list(args), obj=obj)


def test_a_realistic_workspace_validates_and_a_flagged_issue_is_a_named_warning(tmp_path):
    t = Tracker.init(tmp_path, prefix="shop", actor="doc")
    # A backlog imported from a tracker with sequential ids, filed in one busy minute: bd's
    # heuristic takes these ordinary bugs for test leftovers.
    for n in range(1, 13):
        t.create(f"Standalone bug #{n}: 500 on /cart", issue_type="bug", issue_id=f"shop-{n}")
    db = str(t.path)
    t.close()
    res = _bd(db, "doctor", "--check=validate", "--json")
    assert res.exit_code == 0, (res.output, res.stderr)
    report = json.loads(res.stdout)
    assert report["overall_ok"] is True
    [check] = [c for c in report["checks"] if c["name"] == "Test Pollution"]
    assert check["status"] == "warning" and "look like test leftovers" in check["message"] and "shop-" in check["message"]
    text = _bd(db, "doctor", "--check=validate")
    assert text.exit_code == 0 and "warning Test Pollution:" in text.stdout


def test_a_failing_check_says_why_on_stderr_in_every_output_mode(tmp_path):
    t = Tracker.init(tmp_path, prefix="shop", actor="doc")
    t.create("A")
    db = str(t.path)
    t.close()
    with sqlite3.connect(db) as raw:  # a label row whose issue is gone: a foreign-key violation
        raw.execute("PRAGMA foreign_keys=OFF")
        raw.execute("INSERT INTO labels(issue_id, label) VALUES ('shop-gone', 'x')")
    for args in (("doctor", "--check=validate", "--json"), ("doctor", "--json"), ("doctor",)):
        res = _bd(db, *args)
        assert res.exit_code == 1, args
        assert res.stderr.startswith("doctor: foreign_keys: 1 violation(s)"), (args, res.stderr)


def test_init_takes_clients_flags_writes_bd_s_files_and_prints_bd_s_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = _bd(None, "init", "--prefix", "acme", "--non-interactive", "--skip-agents", "--skip-hooks")
    assert res.exit_code == 0, (res.output, res.stderr)
    assert "\u2713 bd initialized successfully!" in res.stdout and "Issue prefix: acme" in res.stdout
    beads = tmp_path / ".beads"
    assert 'issue-prefix: "acme"' in (beads / "config.yaml").read_text()
    assert json.loads((beads / "metadata.json").read_text()) == {"database": "mesh.db", "backend": "sqlite"}
    # The prefix read back from config.yaml by a second workspace made from it.
    (beads / "mesh.db").unlink()
    res = _bd(None, "init", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["prefix"] == "acme"
    assert json.loads(res.stdout)["written"] == []  # both files were there: kept as they are
