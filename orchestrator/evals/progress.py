"""An eval's progress: what it has done, is doing and has left, while it runs and after.

The eval under way keeps a ``Progress`` and writes it to ``progress.json`` in its folder at every
start and end of a run (at once: a reader never sees half of it): the runs of the eval in all,
done (graded or in error), running (their slots and since when), in error, the spend so far,
and the estimates of the time left (the mean wall time of the eval's finished runs, times the
runs left, over the runs at a time) and of the cost left (each pending run at its arm's
estimate). ``status_data`` reads it with the results, and says whether the eval is running (its
folder's lock is held), stopped before its end, or finished: ``mesh eval status``, the progress
lines ``mesh eval run`` prints, and ``mesh serve``'s Evals page show it.
"""

from __future__ import annotations

import fcntl
import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["Progress", "progress_text", "status_data", "status_lines"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Progress:
    """The progress of the eval under way (thread-safe: runs start and end in several threads)."""

    def __init__(self, folder: Path, *, total: int, done: int, errors: int, jobs: int, walls: list[float],
                 cost_left: dict[tuple[str, str], float], spent: float):
        self.folder, self.total, self.done, self.errors, self.jobs = folder, total, done, errors, max(1, jobs)
        self.walls, self.cost_left, self.spent = list(walls), dict(cost_left), spent
        self.running: dict[str, str] = {}  # "case slot" -> when it started
        self.started_at = _now()
        self._lock = threading.Lock()
        self._writing = threading.Lock()

    def start(self, key: tuple[str, str]) -> None:
        with self._lock:
            self.running[" ".join(key)] = _now()
        self.write()

    def recount(self, done: int, errors: int) -> None:
        """The pairs done and in error as the eval's results say (a shared eval: every runner's)."""
        with self._lock:
            self.done, self.errors = done, errors
        self.write()

    def finish(self, key: tuple[str, str], result: dict | None, spent: float | None = None) -> None:
        """A run ended: graded, in error, or (``result`` None) not started (the budget)."""
        with self._lock:
            self.running.pop(" ".join(key), None)
            self.cost_left.pop(key, None)
            if result is not None:
                self.done += 1
                self.errors += result.get("state") == "error"
                if result.get("state") != "error" and result.get("wall_s"):
                    self.walls.append(float(result["wall_s"]))
            if spent is not None:
                self.spent = spent
        self.write()

    def figures(self, state: str = "running") -> dict[str, Any]:
        with self._lock:
            left = self.total - self.done
            mean = sum(self.walls) / len(self.walls) if self.walls else None
            return {"state": state, "total": self.total, "done": self.done, "errors": self.errors,
                    "running": dict(self.running), "jobs": self.jobs, "spent_usd": round(self.spent, 6),
                    "eta_s": round(left * mean / self.jobs, 1) if mean is not None else None,
                    "cost_left_usd": round(sum(self.cost_left.values()), 6), "started_at": self.started_at,
                    "updated_at": _now()}

    def write(self, state: str = "running") -> None:
        from orchestrator.evals.cases import write_json

        with self._writing:  # the last figures written are the last figures made
            write_json(self.folder / "progress.json", self.figures(state))

    def line(self) -> str:
        """One line for a terminal: ``[12/40 done, 2 running, 1 in error; $0.42 spent; about 18 min and $1.10 left]``."""
        return progress_text(self.figures())


def progress_text(figures: dict[str, Any]) -> str:
    parts = [f"{figures['done']}/{figures['total']} done", f"{len(figures.get('running') or {})} running"]
    if figures.get("errors"):
        parts.append(f"{figures['errors']} in error")
    left = []
    if figures.get("eta_s") is not None and figures["done"] < figures["total"]:
        left.append(f"about {_duration(figures['eta_s'])}")
    if figures.get("cost_left_usd"):
        left.append(f"${figures['cost_left_usd']:.2f}")
    text = ", ".join(parts) + f"; ${figures.get('spent_usd') or 0:.2f} spent"
    return f"[{text}" + (f"; {' and '.join(left)} left]" if left else "]")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _running(folder: Path) -> bool:
    """Whether an eval process holds the folder's lock now."""
    path = folder / ".lock"
    if not path.exists():
        return False
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def status_data(folder: Path, running: dict[str, str] | None = None) -> dict[str, Any]:
    """The state of the eval in ``folder``: ``running`` (a process holds it), ``stopped`` (its last
    process ended before every run was done) or ``finished``; its runs done, in error and left per
    arm, what is running, the spend, and the estimates of time and cost left of the last progress
    written. A shared eval's ``running`` (its live claims, ``orchestrator.evals.shared``) says what
    every runner works now: the time left is then the mean wall time of its runs, times the runs
    left, over the runs under way. ``ReportError`` when the folder holds no eval."""
    from orchestrator.evals.report import ReportError, report_data

    report = report_data(Path(folder))
    arms = [{"arm": row["arm"], "runs": row["runs"], "finished": row["finished"], "resolved": row["resolved"],
             "errors": row["errors"]["count"], "pending": row["pending"]} for row in report["arms"]]
    total = sum(a["runs"] for a in arms)
    done = sum(a["finished"] + a["errors"] for a in arms)
    try:
        last = json.loads((Path(folder) / "progress.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        last = {}
    live = _running(Path(folder)) if running is None else bool(running)
    state = "running" if live else ("finished" if done >= total else "stopped")
    spent = sum(c.get("cost_usd") or 0 for c in _trials(report))
    out = {"eval": report["eval"], "folder": str(folder), "state": state, "cases": len(report["cases"]),
           "total": total, "done": done,
           "errors": sum(a["errors"] for a in arms), "arms": arms,
           "running": (last.get("running") or {}) if live else {},
           "spent_usd": last.get("spent_usd", spent),
           "eta_s": last.get("eta_s") if live else None,
           "cost_left_usd": last.get("cost_left_usd") if live else None,
           "jobs": last.get("jobs"), "updated_at": last.get("updated_at")}
    if running is not None:  # a shared eval: every runner's figures, from its rows
        walls = [float(c["wall_s"]) for c in _trials(report) if c.get("wall_s") and c.get("state") != "error"]
        mean = sum(walls) / len(walls) if walls else None
        out.update(running=dict(running), spent_usd=max(spent, float(last.get("spent_usd") or 0)),
                   jobs=len(running) or None, updated_at=_now(),
                   eta_s=round((total - done) * mean / len(running), 1) if live and mean is not None else None)
    if not isinstance(out["running"], dict):
        raise ReportError(f"{folder}/progress.json is not mesh's")
    return out


def _trials(report: dict) -> list[dict]:
    return [trial for cell in report["cells"] for trial in cell["trials"]]


def status_lines(data: dict[str, Any]) -> list[str]:
    """The status as terminal lines."""
    head = {"running": "running", "stopped": "stopped before its end (mesh eval run continues it)",
            "finished": "finished"}[data["state"]]
    lines = [f"eval {data['eval']}: {head}", "  " + progress_text(data)]
    for arm in data["arms"]:
        lines.append(f"  {arm['arm']}: {arm['finished'] + arm['errors']}/{arm['runs']} done, {arm['resolved']}"
                     f" resolved, {arm['errors']} in error, {arm['pending']} left")
    for slot, since in sorted((data.get("running") or {}).items()):
        lines.append(f"  running {slot} since {since}")
    if data.get("updated_at") and data["state"] == "running":
        age = time.time() - datetime.fromisoformat(data["updated_at"]).timestamp()
        lines.append(f"  (as of {age:.0f} s ago)")
    return lines
