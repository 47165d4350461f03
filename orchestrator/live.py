"""What ``mesh drain`` shows while it works.

Three sinks for the drain's events (dicts with an ``event`` key and ``t``, seconds since the
start):

- ``NdjsonSink``: one JSON object per event on a stream (``--json``), then the summary object;
- ``LineSink``: one plain line per event (no terminal: CI logs, pipes);
- ``LiveSink``: a rich live table on a terminal: one row per task (id, title, round and
  cycle, elapsed time, cost, outcome), the landing queue, and totals.

Every text that leaves mesh here is scrubbed like the rest of its logs.
"""

from __future__ import annotations

import json
import threading
import time
from typing import IO, Any

from redact import scrub, scrub_obj

__all__ = ["NdjsonSink", "LineSink", "LiveSink", "summary_lines"]


class NdjsonSink:
    """One JSON object per line; thread-safe."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        line = json.dumps(scrub_obj(event), sort_keys=False)
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Nothing to tear down."""


def _plain(event: dict[str, Any]) -> str | None:
    kind, task = event["event"], event.get("task", "")
    stamp = f"[{event['t']:8.2f}s]"
    if kind == "checkpoint":
        return f"{stamp} {task}: {event['line'].split(chr(10), 1)[0]}"
    if kind == "drain_started":
        return f"{stamp} drain of {event['scope'].get('plan_label') or event['scope'].get('parent_epic')} onto" \
               f" {event['branch']} with {event['jobs']} job(s)"
    if kind == "task_started":
        return f"{stamp} {task}: started ({event.get('title', '')})"
    if kind == "task_run":
        return f"{stamp} {task}: run {event['run_id']}" + (" (resumed)" if event.get("resumed") else "")
    if kind == "task_finished":
        what = event["state"] + (f" ({event['block_reason']}: {event.get('block_detail') or ''})"
                                 if event.get("block_reason") else "")
        return f"{stamp} {task}: {what} after {event['elapsed_s']:.1f}s, ${event['cost_usd']:.4f}"
    if kind == "task_skipped":
        return f"{stamp} {task}: left alone: {event['why']}"
    if kind == "land_queued":
        return f"{stamp} {task}: queued for landing"
    if kind == "land_started":
        return f"{stamp} {task}: landing"
    if kind == "land_done":
        sha = (event.get("sha") or "")[:12]
        return f"{stamp} {task}: land {event['result']}" + (f" at {sha} ({event.get('method')})" if sha else "")
    if kind in ("land_verified", "land_missing"):
        state = "on the branch" if event["on_branch"] else "NOT on the branch any more"
        return f"{stamp} {task}: earlier landing {event['sha'][:12]} {state}"
    if kind == "interrupt":
        return None  # the CLI says it on stderr the moment Ctrl-C is pressed
    return f"{stamp} {kind} {task}".rstrip()


class LineSink:
    """One plain line per event."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        line = _plain(event)
        if line is None:
            return
        with self.lock:
            self.stream.write(scrub(line) + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Nothing to tear down."""


class LiveSink:
    """A rich live table redrawn on every event (and four times a second for the clocks)."""

    def __init__(self, console: Any) -> None:
        from rich.live import Live

        self.rows: dict[str, dict[str, Any]] = {}
        self.queue: list[str] = []
        self.landing: str | None = None
        self.landed = 0
        self.branch = ""
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.live = Live(self._render(), console=console, refresh_per_second=4, get_renderable=self._render)
        self.live.start()

    def __call__(self, event: dict[str, Any]) -> None:
        kind, task = event["event"], event.get("task")
        with self.lock:
            if kind == "drain_started":
                self.branch = event["branch"]
            elif kind == "task_started":
                self.rows[task] = {"id": task, "title": event.get("title", ""), "round": "", "cycle": "",
                                   "start": time.monotonic(), "end": None, "cost": 0.0, "outcome": "running"}
            elif kind == "checkpoint" and task in self.rows:
                self.rows[task].update(round=event["kind"], cycle=event.get("cycle", ""),
                                       cost=event.get("cost_usd", 0.0))
            elif kind == "task_finished" and task in self.rows:
                self.rows[task].update(end=time.monotonic(), cost=event["cost_usd"],
                                       outcome=event["state"] + (f" ({event['block_reason']})"
                                                                 if event.get("block_reason") else ""))
            elif kind == "task_skipped":
                self.rows.pop(task, None)
            elif kind == "land_queued":
                self.queue.append(task)
            elif kind == "land_started":
                self.landing = task
                if task in self.queue:
                    self.queue.remove(task)
            elif kind == "land_done":
                self.landing = None
                self.landed += event.get("result") == "landed"

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"mesh drain onto {self.branch}", expand=False)
        for name in ("task", "title", "round", "cycle", "elapsed", "cost", "outcome"):
            table.add_column(name, justify="right" if name in ("elapsed", "cost") else "left")
        now = time.monotonic()
        with self.lock:
            rows = list(self.rows.values())
            queue = list(self.queue)
            landing = self.landing
        for row in rows:
            elapsed = (row["end"] or now) - row["start"]
            table.add_row(row["id"], scrub(row["title"])[:40], row["round"], row["cycle"], f"{elapsed:.1f}s",
                          f"${row['cost']:.4f}", row["outcome"])
        done = sum(1 for r in rows if r["end"] is not None)
        lines = Text(f"landing: {landing or '-'}   queue: {', '.join(queue) or '-'}   "
                     f"tasks: {done} done / {len(rows) - done} running   landed: {self.landed}   "
                     f"cost: ${sum(r['cost'] for r in rows):.4f}   wall: {now - self.started:.1f}s")
        return Group(table, lines)

    def close(self) -> None:
        """Draw the last frame and give the terminal back."""
        self.live.stop()


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The end-of-drain text: outcomes, totals, and how to look at and merge the branch."""
    branch = summary["branch"]
    out = [f"drain {summary['stop_reason']}: {len(summary['closed'])} closed, {len(summary['blocked'])} blocked,"
           f" {summary['landings']} landed, {summary['conflicts']} conflict(s); wall {summary['wall_s']:.1f}s,"
           f" task time {summary['task_s']:.1f}s, {summary['calls']} calls, {summary['tokens']} tokens,"
           f" ${summary['cost_usd']:.4f}"]
    for task_id, reason in summary["blocked"].items():
        out.append(f"  blocked {task_id}: {reason}")
    for why in summary["skipped"]:
        out.append(f"  left alone: {why}")
    out.append(f"integration branch {branch} (never pushed; your checkout is untouched). To look and merge:")
    out.append(f"  git log --oneline HEAD..{branch}")
    out.append(f"  git merge --ff-only {branch}")
    return [scrub(line) for line in out]
