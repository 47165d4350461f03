"""Failures in plain sight: what a run prints while it fails, and what it says afterwards.

Real runs: the demo repo and tracker with the replay backend, and the drain kit's repository
with real command workers (subprocesses that crash, hang or answer). What is checked is what
a user reads: the run's stderr lines, the run summary, ``mesh show``, the JSON report.
"""

from __future__ import annotations

import json
import sys
import threading

from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.views.live import LiveSink, RunProgress
from orchestrator.protocol.proof import output_tail
from orchestrator.safe_text import render
from orchestrator.protocol.watch import RunWatch
from tests.drainkit import LABEL, WORKER, make_drain_workspace
from tests.runkit import TASK, happy_script, make_workspace, r, synthesis
from tests.test_run_e2e import BROKEN, one_review_cycle

TAIL = "AssertionError: 1.0 != 0"
# A worker that crashes or hangs in one role and otherwise answers like the drain tests' worker.
WRAPPER = """\
import os, runpy, sys, time
role, round_name = os.environ["MESH_ROLE"], os.environ["MESH_ROUND"]
if role == {crash!r} and round_name == {round!r}:
    sys.stderr.write('Traceback (most recent call last):\\n  File "agent.py", line 3, in <module>\\n'
                     'RuntimeError: the agent crashed \\x1b[31mred\\x1b[0m\\n')
    sys.exit(1)
if role == {hang!r}:
    time.sleep(600)
sys.argv = [{worker!r}, {plan!r}]
runpy.run_path({worker!r}, run_name="__main__")
"""


def _failing_run(ws, *extra: str):
    """The demo task with a patch whose tests fail, and no review cycle left to fix it."""
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(BROKEN))
    path = ws.write_script(script)
    return ws.mesh("run", "--label", "plan:demo", "--backend", "replay", "--script", str(path), "--repo",
                   str(ws.repo), "--config", one_review_cycle(ws), *extra)


def test_a_failing_validation_shows_its_output_in_the_lines_the_summary_show_and_json(tmp_path):
    ws = make_workspace(tmp_path)
    res = _failing_run(ws)
    assert res.exit_code == 3, res.output
    # The live lines: the proof's line, then the failing command's output tail under it.
    lines = res.stderr.splitlines()
    proof = next(i for i, line in enumerate(lines) if line.startswith("[orch:proof] fail"))
    assert lines[proof + 1].startswith("output of `python3 -m unittest discover -s tests -t .` (mesh's verdict, failing tests,")
    tail = lines[proof + 2:lines.index("  | FAILED (failures=2)") + 1]
    assert all(line.startswith("  | ") for line in tail)
    # Each failing test first, with its own assertion (issue 35 item 3), then the output's last 20 lines.
    assert tail[0] == "  | FAILED tests.test_temperature.FahrenheitToCelsius.test_freezing_point"
    assert tail[tail.index("  | FAILED tests.test_temperature.FahrenheitToCelsius.test_round_trip") - 1] == \
        f"  |     {TAIL}"
    output = tail[next(i for i, line in enumerate(tail) if not line.startswith(("  | FAILED tests.", "  |     "))):]
    assert f"  | {TAIL}" in output and len(output) <= 20
    # The run summary, under the validation line.
    summary = res.stdout.splitlines()
    at = next(i for i, line in enumerate(summary) if line.startswith("  validation: python3 -m unittest"))
    assert "fail (exit 1" in summary[at] and f"              | {TAIL}" in summary[at + 1:at + 21]
    # mesh show, under the proof step.
    shown = ws.mesh("show", TASK).stdout
    assert f"          | {TAIL}" in shown and "          | FAILED (failures=2)" in shown
    # The JSON report keeps the tail of a failed command only.
    with ws.tracker() as t:
        t.update(TASK, status="open")
    report = json.loads(_failing_run(ws, "--json").stdout)
    assert report["validation"][0]["output_tail"][-1] == "FAILED (failures=2)"
    assert TAIL in report["validation"][0]["output_tail"]


def test_a_stored_tail_is_made_safe_again_when_it_is_printed():
    """A checkpoint is tracker text: a forged tail with terminal escapes and a secret prints
    neither, and only its last 20 lines."""
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    forged = {"passed": False, "rejected": False, "stdout_tail": "".join(f"line {i}\n" for i in range(40)),
              "stderr_tail": f"\x1b]52;c;cGF5bG9hZA==\x07boom \x1b[2J{secret}\u202eevil\n"}
    tail = output_tail(forged)
    assert len(tail) == 20 and tail[0] == "line 21"
    assert "\x1b" not in "".join(tail) and secret not in "".join(tail) and "\u202e" not in "".join(tail)
    assert tail[-1].startswith("boom ")


def _command_run(tmp_path, *, crash: str = "", crash_round: str = "", hang: str = "", timeout_s: float = 600):
    """``mesh run`` with a real command worker (``--worker-cmd`` alone: no ``--backend``)."""
    ws = make_drain_workspace(tmp_path)
    ws.config.write_text(f"worker_timeout_s = {timeout_s}\n{ws.config.read_text()}")
    ws.task("A", files={"checks/a.py": "assert 1 + 1 == 2\n"})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(ws.plan))
    wrapper = tmp_path / "agent.py"
    wrapper.write_text(WRAPPER.format(crash=crash, round=crash_round, hang=hang, worker=str(WORKER), plan=str(plan)))
    res = CliRunner().invoke(cli, ["--db", str(ws.db), "--actor", "tester", "run", "--label", LABEL, "--worker-cmd",
                                   f"{sys.executable} {wrapper}", "--repo", str(ws.repo), "--config", str(ws.config)],
                             catch_exceptions=False)
    return res


def test_a_crashing_worker_prints_its_own_error_at_each_call_and_the_fallback_switch(tmp_path):
    res = _command_run(tmp_path, crash="synthesizer", crash_round="synthesis")
    assert res.exit_code == 3, res.output
    lines = res.stderr.splitlines()
    failed = [line for line in lines if line.startswith("call failed: synthesizer (synthesis, ")]
    # Two attempts in full mode, the switch, two more in the fallback (the synthesizer is one of its roles).
    assert len(failed) == 4, res.stderr
    for line in failed:
        assert "no_response: worker exited with status 1: Traceback (most recent call last):" in line
        # The worker's colours are dropped, not sent to the terminal.
        assert "RuntimeError: the agent crashed red; " in line and "\x1b" not in line
    assert failed[0].startswith("call failed: synthesizer (synthesis, attempt 1)") and failed[0].endswith("asking again")
    assert failed[1].startswith("call failed: synthesizer (synthesis, attempt 2)") and failed[1].endswith("no retry left")
    at = [i for i, line in enumerate(lines) if line.startswith("call failed: synthesizer (synthesis, ")]
    switch = lines.index("fallback: switching to the 3-role fallback (proposer, skeptic, synthesizer):"
                         " synthesizer gave no response in synthesis")
    assert at[1] < switch < at[2]
    assert "outcome:    blocked (no_response)" in res.stdout
    assert "\x1b" not in res.stderr + res.stdout


def test_a_hung_worker_is_reported_at_each_timeout_and_the_run_goes_on_in_fallback(tmp_path):
    res = _command_run(tmp_path, hang="critic_a", timeout_s=1)
    assert res.exit_code == 0, res.output
    failed = [line for line in res.stderr.splitlines() if line.startswith("call failed: critic_a (critique, ")]
    assert len(failed) == 2, res.stderr
    assert all("no_response: timeout: the worker ran past 1s (worker_timeout_s) and was killed" in line
               for line in failed)
    assert "fallback: switching to the 3-role fallback (proposer, skeptic, synthesizer): no response from" \
           " critic_a in critique" in res.stderr
    assert "outcome:    closed" in res.stdout


def test_an_outstanding_call_is_reported_while_it_waits_and_shown_in_the_live_table():
    """A real call context on a real thread: the watch prints a line while the call is
    outstanding, and the live table's "waiting on" column names the role until it returns."""
    lines: list[str] = []
    seen = threading.Event()

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("waiting: "):
            seen.set()

    watch = RunWatch(echo, every_s=0.05)
    sink = LiveSink(_quiet_console(), title="mesh run", landing=False)
    progress = RunProgress(sink)
    progress.engine = type("E", (), {"task": {"id": "t-1", "title": "T"}, "watch": watch})()
    sink({"event": "task_started", "t": 0, "task": "t-1", "title": "T"})
    watch.listen(lambda event: progress._emit(event.pop("event"), task="t-1", **event))
    try:
        with watch.call("critic_b", "critique", 2):
            assert seen.wait(60), lines  # a guard against a hang, not a timing assertion
            assert watch.outstanding()[0]["role"] == "critic_b"
            assert "critic_b " in render(sink._render(), width=200)
        assert lines[0].startswith("waiting: critic_b (critique, attempt 2) has not answered for ")
        assert watch.outstanding() == [] and "critic_b" not in render(sink._render(), width=200)
        # A note (a failed call, say) is printed above the table, its task named on a drain's.
        progress.echo("call failed: critic_b (critique, attempt 2): no_response; no retry left")
        drain = LiveSink(_quiet_console(), title="mesh drain")
        drain({"event": "note", "t": 1, "task": "dr-7", "line": "fallback: switching to the 3-role fallback: x"})
        drain.close()
        assert "dr-7: fallback: switching to the 3-role fallback: x" in drain.live.console.file.getvalue()
    finally:
        sink.close()
    assert "call failed: critic_b (critique, attempt 2): no_response; no retry left" in \
        sink.live.console.file.getvalue()


def _quiet_console():
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), force_terminal=False, width=200)


def test_notes_are_plain_lines_of_their_task_and_calls_print_nothing():
    import io

    from orchestrator.views.live import LineSink

    stream = io.StringIO()
    sink = LineSink(stream)
    sink({"event": "note", "t": 1.0, "task": "dr-1", "line": "call failed: critic_a (critique, attempt 1): x"})
    sink({"event": "call_started", "t": 1.0, "task": "dr-1", "call": 1, "role": "critic_a", "round": "critique",
          "attempt": 1})
    assert stream.getvalue().splitlines() == ["[    1.00s] dr-1: call failed: critic_a (critique, attempt 1): x"]
