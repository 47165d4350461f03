"""The terminal side of ``mesh drain``: options, the event sink, Ctrl-C, exit code.

Ctrl-C once: no new task starts; the running ones finish and what is approved lands.
Ctrl-C twice: the process stops at once (exit 130), like a crash, which the checkpoints make
resumable: the same ``mesh drain`` command continues where it stopped.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from orchestrator.drain import DrainControl, DrainOptions, drain
from orchestrator.views.live import LineSink, LiveSink, NdjsonSink, summary_lines
from orchestrator.runner import RunError, RunOptions
from orchestrator.safe_text import printable
from orchestrator.stopping import announce_ready
from redact import scrub

__all__ = ["run_drain_command", "install_interrupts"]

INTERRUPTED_EXIT = 130


def install_interrupts(control: DrainControl, say) -> None:
    """SIGINT once: ``control.stop_new()``; twice: exit 130 now (the drain stays resumable)."""
    count = {"n": 0}

    def handler(signum: int, frame: Any) -> None:
        count["n"] += 1
        if count["n"] == 1:
            control.stop_new()
            say("mesh: Ctrl-C: starting no new task; the running ones finish and approved work lands."
                " Press Ctrl-C again to stop now.")
            return
        say("mesh: Ctrl-C again: stopping now. Everything is resumable: run the same mesh drain command again.")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED_EXIT)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)
        announce_ready()


def run_drain_command(root: dict, *, jobs, max_tasks, max_usd, label, parent, ids, no_integrate, strict_output,
                      backend, script, worker_cmd, repo, config_file, as_json, onto, take_over, remote=None,
                      worker=None, no_land=False, reviewer=None, allow_failing_base=None, profile=None,
                      batch=False, models=()) -> int:
    """Run ``mesh drain`` with the CLI's options; returns the exit code."""
    options = DrainOptions(
        run=RunOptions(label=label, parent=parent, ids=[i.strip() for i in (ids or "").split(",") if i.strip()],
                       integrate=False if no_integrate else None, strict_output=strict_output, backend=backend,
                       script=Path(script) if script else None, worker_cmd=worker_cmd, worker=worker,
                       repo=Path(repo) if repo else None, config_file=Path(config_file) if config_file else None,
                       db=root.get("db"), actor=root.get("actor"), onto=onto,
                       take_over=take_over, remote=remote, land=not no_land, reviewer=reviewer,
                       allow_failing_base=allow_failing_base, profile=profile, batch=batch, models=list(models)),
        jobs=jobs, max_tasks=max_tasks, max_usd=max_usd)

    def say(text: str) -> None:
        click.echo(printable(scrub(text)), err=True)

    if as_json:
        sink: Any = NdjsonSink(sys.stdout)
    elif sys.stderr.isatty():
        from rich.console import Console

        sink = LiveSink(Console(stderr=True))
    else:
        sink = LineSink(sys.stderr)
    control = DrainControl()
    install_interrupts(control, say)
    try:
        report = drain(options, emit=sink, control=control)
    except RunError as exc:
        sink.close()
        if as_json:
            sink({"event": "error", "error": scrub(str(exc)), "code": exc.exit_code})
        else:
            say(f"mesh: {exc}")
        return exc.exit_code
    sink.close()
    summary = report.to_dict()
    if as_json:
        sink(summary)
    else:
        for line in summary_lines(summary):
            click.echo(line)
    return report.exit_code
