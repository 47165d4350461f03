"""``mesh run``'s progress: the plain checkpoint lines without a terminal, the rich live table
on one (driven through a real pseudo-terminal), and a ``mesh --help`` that imports no rich.

The runs are real: the demo repo and tracker, the replay backend, a subprocess of mesh."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.runkit import TASK, demo_script, make_workspace

ROOT = Path(__file__).resolve().parents[1]
MESH = [sys.executable, "-c", "from orchestrator.cli.main import main; main()"]
# rich markup and a terminal escape in a task title: both must show as text.
HOSTILE_TITLE = "Add [/bold] fahrenheit [red]\x1b[2J"


def _run_args(ws, script: Path) -> list[str]:
    return [*MESH, "--db", str(ws.db), "--actor", "tester", "run", "--label", "plan:demo", "--backend", "replay",
            "--script", str(script), "--repo", str(ws.repo)]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    return env


def test_without_a_terminal_run_prints_plain_progress_lines(tmp_path):
    ws = make_workspace(tmp_path)
    steps = demo_script()
    # A vote's reason is quoted in its progress line: a terminal escape in it is shown, not sent.
    steps["critic_b"][1]["text"] = json.dumps({"vote": "agree", "reason": "fine \x1b[2J really"})
    script = ws.write_script(steps)
    done = subprocess.run(_run_args(ws, script), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("orch_preflight orch_run_id=")
    # Preflight's lines about the sandboxes follow it, then the checkpoints' lines.
    notes = [line for line in lines[1:] if not line.startswith("[orch:")]
    assert lines[1:1 + len(notes)] == notes and [n.split(":")[0] for n in notes[:3]] == [
        "configuration", "validation environment", "validation limits"], lines
    # ... then which base and integration commits the task starts from, and the base check of it.
    assert len(notes) == 5 and notes[3].startswith("tasks start from mesh/land/plan-demo at ")
    assert notes[3].endswith(": already holds it)")
    assert notes[4].startswith("base check on ") and notes[4].endswith(" passes")
    assert lines[-1] == "[orch:outcome] outcome: closed"
    assert "\x1b" not in done.stderr and "mesh run" not in done.stderr  # no live view, no escapes
    assert "critic_b: fine \\u001b[2J really" in done.stderr
    assert "  outcome:    closed" in done.stdout


def test_on_a_terminal_run_shows_the_live_table_and_ends_with_the_report(tmp_path):
    ws = make_workspace(tmp_path)
    with ws.tracker() as tracker:
        tracker.update(TASK, title=HOSTILE_TITLE)
    script = ws.write_script(demo_script())
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 140, 0, 0))
    proc = subprocess.Popen(_run_args(ws, script), cwd=ROOT, env=_env(), stdin=slave, stdout=slave, stderr=slave,
                            close_fds=True)
    os.close(slave)
    out = b""
    try:
        while True:
            # A generous guard so a hung child fails the test instead of blocking the suite.
            ready, _, _ = select.select([master], [], [], 600)
            assert ready, "mesh run wrote nothing for 600 s"
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    assert proc.wait(timeout=600) == 0, out.decode(errors="replace")[-3000:]
    text = out.decode("utf-8", errors="replace")
    assert "\x1b[?25l" in text  # rich's live display hides the cursor while it redraws
    assert "mesh run" in text and "│ demo-7kq.1 │" in text
    assert "[orch:proposal]" in text and "[orch:outcome] outcome: closed" in text  # the lines, above the table
    live, report = text[:text.rindex("task demo-7kq.1: ")], text[text.rindex("task demo-7kq.1: "):]
    assert "Add [/bold] fahrenheit [red]" in live  # markup shown as text, not interpreted
    assert "\x1b[2J" not in live and "\\u001b[2J" in live  # the title's escape is shown, never sent
    last_table = live.rindex("│ demo-7kq.1 │")
    assert "closed" in live[last_table:live.index("\n", last_table)]
    assert "outcome:    closed" in report and "review:     approve after 2 cycle(s)" in report


def test_help_does_not_import_rich_or_jinja(tmp_path):
    code = ("import sys\n"
            "from orchestrator.cli.main import cli\n"
            "try:\n"
            "    cli(['--help'], standalone_mode=False)\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'jinja2', 'anthropic')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "report" in done.stdout and "HEAVY []" in done.stdout, done.stdout
