"""What ``mesh drain`` shows while it works.

Three sinks for the drain's events (dicts with an ``event`` key and ``t``, seconds since the
start):

- ``NdjsonSink``: one JSON object per event on a stream (``--json``), then the summary object;
- ``LineSink``: one plain line per event (no terminal: CI logs, pipes);
- ``LiveSink``: a rich live table on a terminal: one row per task (id, title, round and
  cycle, elapsed time, cost, outcome), the landing queue, and totals.

``mesh run`` shows the same live table for its one task on a terminal: ``RunProgress`` turns
the engine's progress lines into these events (``live_run_progress``); without a terminal
it prints the engine's lines as they are.

The engine's lines are of two sorts (``line_kind``): a checkpoint's line (and preflight's),
which moves the task's row on, and a note between checkpoints (a failed call, the fallback
switch, a failing command's output, a call still waiting: ``orchestrator.protocol.watch``), a ``note``
event that is printed and changes no row. ``call_started`` and ``call_finished`` events keep
the table's "waiting" column: which roles the task waits on, and for how long.

Every text that leaves mesh here is scrubbed like the rest of its logs and printable (terminal
escapes and bidirectional overrides shown, never sent); rich renders it as plain text, never as
markup (a task title or a block detail can hold ``[/bold]``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from redact import scrub, scrub_obj

from orchestrator.safe_text import clip, printable

__all__ = ["NdjsonSink", "LineSink", "LiveSink", "RunProgress", "live_run_progress", "checkpoint_fields",
           "line_kind", "summary_lines"]

_QUIET = ("call_started", "call_finished", "interrupt")


def line_kind(line: str) -> str | None:
    """The checkpoint kind of one of the engine's lines (``preflight`` for preflight's own),
    or None for a note between checkpoints."""
    if line.startswith("[orch:") and "]" in line:
        return line[len("[orch:"):line.index("]")]
    return "preflight" if line.startswith("orch_preflight ") else None


# What a run does after its latest checkpoint of each kind: the step it is in now.
_NEXT_STEP = {"preflight": "proposal", "proposal": "critique", "critique": "synthesis", "synthesis": "vote",
              "vote": "validation", "revision": "validation", "proof": "review",
              "review-request": "waiting for a person", "human-review": "review", "review": "review cycle",
              "revision-plan": "revision", "choice": "validation", "land": "closing", "run-head": "closing", "outcome": "done"}


def current_step(kind: str | None, summary: str = "") -> str:
    """The step a run is in, from its latest checkpoint's ``kind`` and summary line: ``validation``
    while the tests run after a vote, ``landing`` once the review approved, ``waiting for a
    person`` at a review request."""
    if kind is None:
        return "starting"
    if kind == "review-cycle":
        return "landing" if "approved" in summary else "revision plan"
    return _NEXT_STEP.get(kind, kind)


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


def _starts_from(event: dict[str, Any]) -> str:
    """" from <branch> at <sha>, base <base> at <sha>" of a ``task_started`` event that says."""
    if not event.get("onto_sha"):
        return ""
    base = f", base {event['base']} at {event['base_sha'][:12]}" if event.get("base_sha") else ", no base branch"
    return f" from {event.get('branch')} at {event['onto_sha'][:12]}{base}"


def _plain(event: dict[str, Any]) -> str | None:
    kind, task = event["event"], event.get("task", "")
    stamp = f"[{event['t']:8.2f}s]"
    if kind in ("checkpoint", "note"):
        return f"{stamp} {task}: {event['line'].split(chr(10), 1)[0]}"
    if kind == "drain_started":
        return f"{stamp} drain of {event['scope'].get('plan_label') or event['scope'].get('parent_epic')} onto" \
               f" {event['branch']} with {event['jobs']} job(s)"
    if kind == "task_started":
        return f"{stamp} {task}: started ({event.get('title', '')})" + _starts_from(event)
    if kind == "base_followed":
        return f"{stamp} {event['line']}"
    if kind == "task_run":
        return f"{stamp} {task}: run {event['run_id']}" + (" (resumed)" if event.get("resumed") else "")
    if kind == "task_finished":
        what = event["state"] + (f" ({event['block_reason']}: {event.get('block_detail') or ''})"
                                 if event.get("block_reason") else "")
        return f"{stamp} {task}: {what} after {event['elapsed_s']:.1f}s, ${event['cost_usd']:.4f}"
    if kind == "task_skipped":
        return f"{stamp} {task}: left alone: {event['why']}"
    if kind == "task_held":
        who = f" by {event['holder']}" if event.get("holder") else ""
        return f"{stamp} {task}: held by another run{who}; this drain waits for it and starts other ready tasks"
    if kind == "task_released":
        return f"{stamp} {task}: released by the other run ({event.get('status')})"
    if kind == "land_queued":
        return f"{stamp} {task}: queued for landing"
    if kind == "land_started":
        return f"{stamp} {task}: landing"
    if kind == "land_waiting":
        holder = event.get("holder") or {}
        who = f"{holder.get('holder')} (pid {holder.get('pid')} on {holder.get('host')})" if holder else "another runner"
        return f"{stamp} {task}: waiting for the landing lock held by {who}"
    if kind == "land_done":
        sha = (event.get("sha") or "")[:12]
        return f"{stamp} {task}: land {event['result']}" + (f" at {sha} ({event.get('method')})" if sha else "")
    if kind == "catch_up":
        return f"{stamp} {task}: closed (run {event.get('run_id')}) but not landed: landing it before its dependents"
    if kind == "epic_closed":
        return f"{stamp} {task}: epic closed: {event.get('reason') or 'every task landed'}"
    if kind in ("land_verified", "land_missing"):
        state = "on the branch" if event["on_branch"] else "NOT on the branch any more"
        return f"{stamp} {task}: earlier landing {event['sha'][:12]} {state}"
    if kind == "stop_requested":
        return f"{stamp} stop requested by {event.get('by')} through the tracker: starting no new task"
    if kind in _QUIET:
        return None  # the CLI says an interrupt on stderr the moment Ctrl-C is pressed; calls show as notes
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
            self.stream.write(printable(scrub(line), one_line=True) + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Nothing to tear down."""


class LiveSink:
    """A rich live table redrawn on every event (and four times a second for the clocks).

    ``title`` heads the table (``onto <branch>`` is added once the branch is known);
    ``landing`` shows the landing queue and count; ``lines`` also prints each checkpoint's
    line above the table, as the plain output would. Notes (failed calls, failing output) are
    printed above it either way, with their task's id when checkpoint lines are not."""

    def __init__(self, console: Any, *, title: str = "mesh drain", branch: str = "", landing: bool = True,
                 lines: bool = False) -> None:
        from rich.live import Live

        self.rows: dict[str, dict[str, Any]] = {}
        self.queue: list[str] = []
        self.landing: str | None = None
        self.landed = 0
        self.title = title
        self.branch = branch
        self.show_landing = landing
        self.show_lines = lines
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.live = Live(self._render(), console=console, refresh_per_second=4, get_renderable=self._render)
        self.live.start()

    def __call__(self, event: dict[str, Any]) -> None:
        kind, task = event["event"], event.get("task")
        if (kind == "checkpoint" and self.show_lines) or kind in ("note", "base_followed", "task_held",
                                                                   "task_released") \
                or (kind == "task_started" and event.get("onto_sha")):
            from rich.text import Text

            line = (event["line"] if kind == "base_followed" or self.show_lines and kind == "checkpoint"
                    else f"{task}: started{_starts_from(event)}" if kind == "task_started"
                    else f"{task}: {event['line']}" if kind == "note"
                    else (_plain(event) or "").partition("] ")[2])
            # Outside self.lock: the refresh thread holds the console while it asks for a frame.
            self.live.console.print(Text(scrub(clip(line, 400))), soft_wrap=True)
        with self.lock:
            if kind == "drain_started":
                self.branch = event["branch"]
            elif kind == "task_started":
                self.rows[task] = {"id": task, "title": event.get("title", ""), "round": "", "cycle": "",
                                   "start": time.monotonic(), "end": None, "cost": 0.0, "outcome": "running",
                                   "calls": {}}
            elif kind == "call_started" and task in self.rows:
                self.rows[task]["calls"][event["call"]] = (event["role"], time.monotonic())
            elif kind == "call_finished" and task in self.rows:
                self.rows[task]["calls"].pop(event["call"], None)
            elif kind == "checkpoint" and task in self.rows:
                self.rows[task].update(round=event["kind"], cycle=event.get("cycle", ""),
                                       cost=event.get("cost_usd", 0.0))
            elif kind == "task_finished" and task in self.rows:
                self.rows[task].update(end=time.monotonic(), cost=event["cost_usd"], calls={},
                                       outcome=event["state"] + (f" ({event['block_reason']})"
                                                                 if event.get("block_reason") else ""))
            elif kind == "task_skipped":
                # Held by another runner: off the table until it is started here again.
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

        title = f"{self.title} onto {self.branch}" if self.branch else self.title
        table = Table(title=Text(clip(title, 120)), expand=False)
        for name in ("task", "title", "round", "cycle", "elapsed", "cost", "waiting on", "outcome"):
            table.add_column(name, justify="right" if name in ("elapsed", "cost") else "left")
        now = time.monotonic()
        with self.lock:
            rows = [{**row, "calls": list(row["calls"].values())} for row in self.rows.values()]
            queue = list(self.queue)
            landing = self.landing
        for row in rows:
            elapsed = (row["end"] or now) - row["start"]
            cells = (row["id"], scrub(row["title"]), row["round"], row["cycle"], f"{elapsed:.1f}s",
                     f"${row['cost']:.4f}", _waiting(row["calls"], now), row["outcome"])
            table.add_row(*(Text(clip(str(cell), 40)) for cell in cells))
        done = sum(1 for r in rows if r["end"] is not None)
        queued = f"landing: {clip(landing, 40) or '-'}   queue: {clip(', '.join(queue), 80) or '-'}   " \
            if self.show_landing else ""
        landed = f"   landed: {self.landed}" if self.show_landing else ""
        lines = Text(f"{queued}tasks: {done} done / {len(rows) - done} running{landed}   "
                     f"cost: ${sum(r['cost'] for r in rows):.4f}   wall: {now - self.started:.1f}s")
        return Group(table, lines)

    def close(self) -> None:
        """Draw the last frame and give the terminal back."""
        self.live.stop()


def _waiting(calls: list[tuple[str, float]], now: float) -> str:
    """``synthesizer 42s``, ``critic_a, critic_b +1 12s``: the roles a task waits on, and how
    long the oldest call has been outstanding."""
    if not calls:
        return ""
    roles = [role for role, _ in sorted(calls, key=lambda c: c[1])]
    more = f" +{len(roles) - 2}" if len(roles) > 2 else ""
    return f"{', '.join(roles[:2])}{more} {now - min(start for _, start in calls):.0f}s"


def checkpoint_fields(engine: Any, line: str) -> dict[str, Any]:
    """The fields of a ``checkpoint`` event for one of ``engine``'s progress lines: the kind
    (``preflight`` for the preflight line), the cycle, the run's cost so far and the line."""
    kind = line_kind(line) or "preflight"
    if engine is None:
        return {"kind": kind, "cycle": "", "cost_usd": 0.0, "line": line}
    return {"kind": kind, "cycle": f"c{engine.bus.consensus_cycle}/r{engine.bus.review_cycle}",
            "cost_usd": round(engine.usage.cost_usd, 6), "line": line}


class RunProgress:
    """``mesh run``'s progress as drain events for a sink: ``hook`` (the runner's engine hook)
    starts the task's row, ``echo`` (the runner's echo) turns each progress line into a
    ``checkpoint`` event, ``finish`` ends the row with the run's outcome and cost, ``close``
    gives the terminal back."""

    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        self.sink = sink
        self.t0 = time.monotonic()
        self.engine: Any = None

    def _emit(self, event: str, **fields: Any) -> None:
        self.sink({"event": event, "t": round(time.monotonic() - self.t0, 3), **fields})

    def _task(self) -> str:
        return self.engine.task["id"] if self.engine is not None else ""

    def hook(self, engine: Any) -> None:
        """The engine of the run (a sent-back task gets a new one: same row, new run id)."""
        first = self.engine is None
        self.engine = engine
        if first:
            self._emit("task_started", task=self._task(), title=engine.task.get("title") or "")
        self._emit("task_run", task=self._task(), run_id=engine.run_id, resumed=engine.resumed)
        engine.watch.listen(lambda event: self._emit(event.pop("event"), task=self._task(), **event))

    def echo(self, line: str) -> None:
        """One progress line of the engine: a checkpoint's, or a note between them."""
        if self.engine is not None and line_kind(line) is None:
            self._emit("note", task=self._task(), line=line)
        else:
            self._emit("checkpoint", task=self._task(), **checkpoint_fields(self.engine, line))

    def finish(self, report: Any) -> None:
        """The run's report: its outcome and cost end the task's row."""
        if self.engine is None:
            return
        self._emit("task_finished", task=self._task(), state=report.outcome, block_reason=report.block_reason,
                   block_detail=report.block_detail, elapsed_s=round(time.monotonic() - self.t0, 3),
                   cost_usd=round(self.engine.usage.cost_usd, 6))

    def close(self) -> None:
        """Draw the last frame and give the terminal back."""
        close = getattr(self.sink, "close", None)
        if close is not None:
            close()


def live_run_progress(console: Any, *, onto: str | None = None) -> RunProgress:
    """``mesh run``'s live table on a rich ``console``: the task's row (round, cycle, time,
    cost, outcome) under the checkpoint lines; the landing queue only with ``onto``."""
    return RunProgress(LiveSink(console, title="mesh run", branch=onto or "", landing=bool(onto), lines=True))


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The end-of-drain text: outcomes, totals, and how to look at and merge the branch."""
    branch = summary["branch"]
    out = [f"drain {summary['stop_reason']}: {len(summary['closed'])} closed, {len(summary['blocked'])} blocked,"
           f" {summary['landings']} landed, {summary['conflicts']} conflict(s); wall {summary['wall_s']:.1f}s,"
           f" task time {summary['task_s']:.1f}s, {summary['calls']} calls, {summary['tokens']} tokens,"
           f" ${summary['cost_usd']:.4f}"]
    for task_id, reason in summary["blocked"].items():
        out.append(f"  blocked {task_id}: {reason}  ->  mesh retry {task_id}")
    for why in summary["skipped"]:
        out.append(f"  left alone: {why}")
    for error in summary.get("errors") or []:
        out.append(f"  error {error}")
    remote = summary.get("remote")
    if not branch:
        from orchestrator.protocol.idle import other_types_lines

        types = summary.get("types") or ["task"]
        out.append(f"no issue of type {' or '.join(types)} in scope: nothing was run and no branch was made")
        out += other_types_lines(summary.get("others") or [], types)
    elif remote:
        out.append(f"integration branch {branch} on {remote} (landings push it; your checkout is untouched)."
                   " To look and merge:")
        out.append(f"  git fetch {remote} && git log --oneline HEAD..{remote}/{branch}")
        out.append(f"  git merge --ff-only {remote}/{branch}")
    else:
        out.append(f"integration branch {branch} (never pushed; your checkout is untouched). To look and merge:")
        out.append(f"  git log --oneline HEAD..{branch}")
        out.append(f"  git merge --ff-only {branch}")
    return [printable(scrub(line), one_line=True) for line in out]
