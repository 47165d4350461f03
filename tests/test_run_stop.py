"""``mesh run`` asked to stop (SIGTERM, or the first Ctrl-C) stops after its next checkpoint,
resumable: a real ``mesh run`` process with the scripted command worker, signalled once its
first round is written, then ``mesh resume``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from orchestrator.ledger.calls import calls_for
from orchestrator.protocol.lease import lease_is_live
from tests.drainkit import ROOT, make_drain_workspace


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_run_stops_after_a_checkpoint_and_resumes(tmp_path, sig):
    ws = make_drain_workspace(tmp_path)
    task = ws.task("slow", files={"slow.txt": "s\n"}, sleep_s=0.3)
    args = ws.drain_args()
    mesh = [sys.executable, "-m", "orchestrator.cli.main", *args[:args.index("drain")], "run",
            *[a for a in args[args.index("drain") + 1:] if a not in ("--jobs", "1")]]
    process = subprocess.Popen(mesh, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not any(cp.kind == "proposal" for cp in ws.checkpoints("slow")):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(sig)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    stopped = json.loads(err.strip().splitlines()[-1])
    assert stopped["code"] == 130 and f"continue with: mesh resume {task}" in stopped["error"]
    kinds = [cp.kind for cp in ws.checkpoints("slow")]
    assert "outcome" not in kinds and ws.status("slow") == "in_progress"
    with ws.tracker() as t:
        assert not lease_is_live(t, task)  # released on the way out, not left to expire
    resumed = subprocess.run([*mesh[:mesh.index("run")], "resume", task, *mesh[mesh.index("run") + 1:]], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["outcome"] == "closed"
    checkpoints = ws.checkpoints("slow")
    assert len({cp.run_id for cp in checkpoints}) == 1
    steps = [tuple(cp.payload["step"]) for cp in checkpoints]
    assert len(steps) == len(set(steps))
    with ws.tracker() as t:
        assert len(calls_for(t, task_id=task)) == 11
