"""The round engine does not care which backend answers; critics and votes run at the same time;
`mesh run` resumes an unfinished run by itself."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.ledger.calls import calls_for
from tests.runkit import TASK, happy_script, make_workspace


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def worker_home(ws) -> Path:
    """The HOME the command workers of these tests run with (bwrap binds it writable)."""
    home = ws.root / "worker-home"
    home.mkdir(exist_ok=True)
    return home


def write_worker(ws, script: dict, log_name: str = "calls.log") -> str:
    """A command-backend worker: answers from a per-role script and logs start/end times.

    Its files live in ``worker_home(ws)``: a sandboxed worker can write only its HOME, which is
    the real one only with ``worker_home = "real"`` (set here in the repository's config).
    """
    home = worker_home(ws)
    config = ws.repo / "mesh.toml"
    if "worker_home" not in config.read_text():
        config.write_text('worker_home = "real"\n' + config.read_text())
    answers = home / "answers.json"
    answers.write_text(json.dumps(script))
    log = home / log_name
    worker = ws.root / "worker.py"
    worker.write_text(textwrap.dedent(f"""
        import fcntl, json, os, sys, time
        prompt = sys.stdin.read()
        role, rnd = os.environ["MESH_ROLE"], os.environ["MESH_ROUND"]
        state = {str(home / "state.json")!r}
        with open(state, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            used = json.loads(fh.read() or "{{}}")
            index = used.get(role, 0)
            used[role] = index + 1
            fh.seek(0); fh.truncate(); fh.write(json.dumps(used))
        entry = json.load(open({str(answers)!r}))[role][index]
        assert entry["round"] == rnd, (role, rnd, entry["round"])
        start = time.time()
        met = None
        if entry.get("barrier"):
            # Wait (a minute at most) until every call of this round has started: a call that
            # is retried (a slow sandbox start) only makes the others wait longer.
            open(os.path.join({str(home)!r}, f"arrived-{{rnd}}-{{role}}"), "w").close()
            deadline = time.time() + 60
            while time.time() < deadline:
                if sum(n.startswith(f"arrived-{{rnd}}-") for n in os.listdir({str(home)!r})) >= entry["barrier"]:
                    met = True
                    break
                time.sleep(0.02)
            else:
                met = False
        time.sleep(entry.get("delay_s", 0))
        with open({str(log)!r}, "a") as fh:
            fh.write(json.dumps({{"role": role, "round": rnd, "start": start, "end": time.time(), "met": met,
                                 "task": os.environ["MESH_TASK_ID"], "run": os.environ["MESH_RUN_ID"],
                                 "attempt": os.environ["MESH_ATTEMPT"]}}) + "\\n")
        sys.stdout.write(entry["text"])
    """))
    return f"{sys.executable} {worker}"


def test_command_backend_runs_the_task_to_close(ws):
    cmd = write_worker(ws, happy_script())
    res = ws.mesh("run", "--label", "plan:demo", "--backend", "command", "--worker-cmd", cmd, "--repo",
                  str(ws.repo), "--json", env={"HOME": str(worker_home(ws))})
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["outcome"] == "closed"
    log = [json.loads(line) for line in (worker_home(ws) / "calls.log").read_text().splitlines()]
    assert {e["task"] for e in log} == {TASK}
    assert {e["run"] for e in log} == {report["orch_run_id"]}
    assert {e["attempt"] for e in log} == {"1"}


def _overlap(entries: list[dict]) -> bool:
    """True when every pair of calls overlaps in time (all were in flight together)."""
    return all(a["start"] < b["end"] and b["start"] < a["end"] for a in entries for b in entries if a is not b)


def test_critiques_and_votes_of_a_round_run_at_the_same_time(ws):
    # Each critique and vote waits until all calls of its round have started: asked one after
    # another, the first would wait its minute out and log met=False.
    script = happy_script()
    for role in ("critic_a", "critic_b", "skeptic"):
        script[role][0]["barrier"] = 3
    for role in script:
        for entry in script[role]:
            if entry["round"] == "vote":
                entry["barrier"] = 5
    cmd = write_worker(ws, script)
    res = ws.mesh("run", "--label", "plan:demo", "--backend", "command", "--worker-cmd", cmd, "--repo",
                  str(ws.repo), "--json", env={"HOME": str(worker_home(ws))})
    assert res.exit_code == 0, res.output
    log = [json.loads(line) for line in (worker_home(ws) / "calls.log").read_text().splitlines()]
    critiques = [e for e in log if e["round"] == "critique"]
    votes = [e for e in log if e["round"] == "vote"]
    assert len(critiques) == 3 and len(votes) == 5
    assert all(e["met"] for e in critiques + votes)
    assert _overlap(critiques)
    assert _overlap(votes)
    # The proposal ends before any critique starts: round N consumes round N-1.
    proposal = [e for e in log if e["round"] == "proposal"][0]
    assert all(proposal["end"] <= c["start"] for c in critiques)


def test_mesh_run_resumes_an_unfinished_run_of_its_in_progress_task(ws):
    # A first run dies (no answers left) after the proposal: its checkpoints stay behind.
    script = happy_script()
    partial = {"proposer": script["proposer"][:1]}
    code, report, _ = ws.run(partial)
    assert report["outcome"] == "blocked"  # no critic answered: no_response
    with ws.tracker() as t:
        t.update(TASK, status="in_progress")  # pretend the process died instead of blocking
        outcome = [c for c in t.comments(TASK) if c["text"].startswith("[orch:outcome]")]
        t.db.conn.execute("DELETE FROM comments WHERE id = ?", (outcome[0]["id"],))
        calls_before = len(calls_for(t, task_id=TASK))
    rest = dict(script)
    rest["proposer"] = script["proposer"][1:]
    code, report2, res = ws.run(rest)
    assert code == 0, res.output
    assert report2["orch_run_id"] == report["orch_run_id"], "the unfinished run is continued, not restarted"
    with ws.tracker() as t:
        proposals = [c for c in calls_for(t, task_id=TASK) if c["round"] == "proposal"]
        assert len(proposals) == 1, "the completed proposal round is not asked again"
        assert len(calls_for(t, task_id=TASK)) > calls_before
    assert ws.kinds().count("proposal") == 1
