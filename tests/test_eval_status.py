"""Where an eval stands while it runs (issue 37, item 4): ``mesh eval status``, the progress lines of
``mesh eval run``, and ``mesh serve``'s Evals page, which follows a running eval by itself.

A real eval whose scripted worker waits at a gate (a loopback port the test answers): while it waits, the
status says running with its run under way; once the gate opens the eval ends, and the page
(real headless Chromium) shows it finished without being reloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from types import SimpleNamespace

import pytest

from tests.evalkit import GATE, MESH, Gate, library_suite, mesh, write_worker
from tests.servekit import Server, needs_chromium, open_browser

pytestmark = pytest.mark.slow


@needs_chromium
def test_status_and_the_evals_page_follow_a_running_eval(tmp_path):
    repo, suite, cases = _small_suite(tmp_path)
    command = write_worker(tmp_path, repo, cases, {"single": [c.id for c in cases]})
    gate = Gate()
    (tmp_path / "worker" / "gate.py").write_text(GATE)
    gated = f"python3 {tmp_path / 'worker' / 'gate.py'} {gate.port} {command}"
    folder = repo / ".mesh" / "evals" / "small"
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    proc = subprocess.Popen([*MESH, "eval", "run", str(suite), "--profile", "single", "--worker-cmd", gated,
                             "--yes"], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server, browser = None, None
    try:
        deadline = time.monotonic() + 300
        while not _running(folder):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        status = json.loads(mesh("eval", "status", str(folder), "--json", cwd=repo).stdout)
        assert (status["state"], status["total"], status["done"], len(status["running"])) == ("running", 2, 0, 1)
        [slot] = status["running"]
        assert slot == f"{cases[0].id} single"
        text = mesh("eval", "status", cwd=repo).stdout
        assert "running" in text and "[0/2 done, 1 running; $0.00 spent" in text and f"running {slot}" in text
        server = Server(SimpleNamespace(db=folder / "tracker.db", repo=repo))
        browser = open_browser(tmp_path)
        browser.goto(f"{server.base}/evals")
        row = "document.querySelector('#evals-table tbody tr').innerText"
        assert browser.wait_for(f"{row}.includes('running')")
        assert "0/2 done, 1 running" in browser.js(row)
        browser.js("window.notReloaded = true")
        gate.open()  # the worker answers; the eval ends
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert "[1/2 done, " in err and "[2/2 done, 0 running; $0.00 spent]" in err
        # The page follows the eval by itself: finished, without a reload.
        assert browser.wait_for(f"{row}.includes('finished')", timeout=60)
        assert browser.js("window.notReloaded") is True and "single 2/2" in browser.js(row)
        assert browser.problems() == []
    finally:
        gate.open()
        if proc.poll() is None:
            proc.kill()
        if browser is not None:
            browser.close()
        if server is not None:
            server.stop()
    final = json.loads(mesh("eval", "status", str(folder), "--json", cwd=repo).stdout)
    assert (final["state"], final["done"], final["running"], final["eta_s"]) == ("finished", 2, {}, None)


def _small_suite(tmp_path):
    """The kit's library and a suite of its two newest cases."""
    return library_suite(tmp_path, 2, "small.jsonl")


def _running(folder) -> bool:
    try:
        return bool(json.loads((folder / "progress.json").read_text())["running"])
    except (OSError, ValueError, KeyError):
        return False


def test_a_stopped_eval_says_so(tmp_path):
    """An eval whose process ended before its last run (a kill, a budget) is stopped, not running."""
    from orchestrator.evals.progress import status_data, status_lines

    repo, suite, cases = _small_suite(tmp_path)
    command = write_worker(tmp_path, repo, cases, {"single": []})
    done = mesh("eval", "run", str(suite), "--profile", "single", "--profile", "lite", "--worker-cmd", command,
                "--max-usd", "0", "--yes", cwd=repo)
    assert done.returncode == 0, done.stderr
    data = status_data(repo / ".mesh" / "evals" / "small")
    assert (data["state"], data["total"], data["done"], data["running"]) == ("stopped", 4, 0, {})
    assert status_lines(data)[0].endswith("stopped before its end (mesh eval run continues it)")
