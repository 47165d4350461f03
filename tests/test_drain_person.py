"""A drain whose task waits for a person keeps starting other ready tasks (with ``--jobs 1``
too), and a second drain of the scope says once that the task is held elsewhere and once that it
was released, instead of starting it every second. Real drain processes (the scripted command
worker), a real tracker, real git, and the review given by ``mesh review`` from another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.drainkit import ROOT, DrainWorkspace, make_drain_workspace

KEY = "drain-person-test-key"


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}, "MESH_SIGNING_KEY": KEY}


def _drain(ws: DrainWorkspace, out=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from orchestrator.cli.main import main; main()",
                             *ws.drain_args(jobs=1)], cwd=ROOT, env=_env(), stdout=out,
                            stderr=subprocess.DEVNULL if out is not subprocess.PIPE else subprocess.PIPE, text=True)


def _until(what, proc: subprocess.Popen, why: str) -> None:
    deadline = time.monotonic() + 180
    while not what():
        if proc.poll() is not None:
            raise AssertionError(f"the drain ended before {why} (exit {proc.returncode})")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {why}")
        time.sleep(0.2)


def _events_until(proc: subprocess.Popen, kind: str) -> list[dict]:
    """The drain's ``--json`` events up to the first of ``kind`` (or its end)."""
    events = []
    for line in proc.stdout:
        if line.startswith("{"):
            events.append(json.loads(line))
            if events[-1]["event"] == kind:
                break
    return events


def test_a_task_waiting_for_a_person_holds_no_slot_and_another_drain_says_held_once(tmp_path):
    ws = make_drain_workspace(tmp_path)
    person = ws.task("P", priority=1, files={"p.txt": "p\n"})
    other = ws.task("Q", priority=2, files={"q.txt": "q\n"})
    with ws.tracker() as t:
        t.add_label(person, "review:human")
    log = (tmp_path / "first.ndjson").open("w")
    first = _drain(ws, log)
    second = None
    try:
        # --jobs 1: P waits for a person, and Q starts, lands and closes meanwhile.
        _until(lambda: ws.status("Q") == "closed" and any(cp.kind == "review-request" for cp in ws.checkpoints("P")),
               first, "review request of P with Q closed")
        second = _drain(ws)
        held = _events_until(second, "task_held")
        assert held[-1] == {**held[-1], "event": "task_held", "task": person}
        review = subprocess.run([sys.executable, "-c", "from orchestrator.cli.main import main; main()",
                                 "--db", str(ws.db), "--actor", "tester", "review", person, "--approve", "--as", "Ada",
                                 "--repo", str(ws.repo), "--config", str(ws.config)],
                                cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
        assert review.returncode == 0, review.stderr
        assert first.wait(timeout=180) == 0
        rest = _events_until(second, "summary")
        second.wait(timeout=60)
        assert second.returncode == 0, second.stderr.read()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    log.close()
    first_events = [json.loads(line) for line in (tmp_path / "first.ndjson").read_text().splitlines()
                    if line.startswith("{")]
    assert [e["task"] for e in first_events if e["event"] == "task_started"] == [person, other]
    assert ws.status("P") == "closed"
    seen = held + rest
    assert [e["event"] for e in seen if e.get("task") == person
            and e["event"] in ("task_held", "task_released", "task_started")] == ["task_held", "task_released"]
    released = next(e for e in seen if e["event"] == "task_released")
    assert released["status"] == "closed"
