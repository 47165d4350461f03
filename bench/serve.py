"""What ``mesh serve`` costs: the board of a large tracker, the delay from a checkpoint's commit to
its event, and the server's memory and CPU with many pages streaming.

    .venv/bin/python bench/serve.py [--issues 10000] [--streams 100] [--checkpoints 60]

1. The board of a generated 10,000-issue tracker (``bench/gen_workspace.py``): the page function
   (``orchestrator.web.board.board``) and the whole HTTP answer of a running ``mesh serve``
   (median of several), with no scope (every task) and with a plan label's scope, each beside
   its baseline, the tracker's own listing of the same tasks (``scope_tasks`` / ``list``), as a
   ratio.
2. The delay from a checkpoint's commit (``add_comment`` returned in this process) to its
   ``checkpoint`` event read from the task's stream by a client over HTTP, for a checkpoint
   written every 0.2 s: median and 95th percentile, beside the SQLite change watch's period.
3. The server process's resident memory and CPU time with ``--streams`` task streams open at
   once: idle for 10 s, then while checkpoints are written (each one goes to every stream).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gen_workspace import BENCH_LABEL, generate, write_jsonl  # noqa: E402
from orchestrator.protocol.checkpoint import format_checkpoint  # noqa: E402
from orchestrator.protocol.scope import Scope, scope_tasks  # noqa: E402
from orchestrator.web.board import board  # noqa: E402
from tracker.changes import SQLITE_PERIOD_S  # noqa: E402
from tracker.jsonl import import_jsonl  # noqa: E402
from tracker.store import Tracker  # noqa: E402

MESH = [sys.executable, "-c", "from orchestrator.cli.main import main; main()"]


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(db: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([*MESH, "--db", str(db), "serve", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=db.parent.parent)
    proc.stderr.readline()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        time.sleep(0.02)
    raise SystemExit("mesh serve did not start")


def get_ms(port: int, path: str, reps: int) -> float:
    def once() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
        conn.close()

    once()
    return median_ms(once, reps)


def checkpoint_text(run_id: str, task_id: str, seq: int) -> str:
    payload = {"v": 1, "run_id": run_id, "seq": seq, "kind": "vote", "task_id": task_id, "role": "critic_a",
               "consensus_cycle": 0, "review_cycle": 1, "artifact": {"vote": "agree", "reason": f"bench {seq}"}}
    return format_checkpoint("vote", f"agree (bench {seq})", payload)


class Stream:
    """One task stream read in a thread; ``arrived[comment_id]`` is when each event was read."""

    def __init__(self, port: int, task_id: str, after: int) -> None:
        self.arrived: dict[int, float] = {}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.conn.request("GET", f"/events/task/{task_id}?last_event_id={after}")
        self.response = self.conn.getresponse()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        event_id = None
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("data: ") and event_id is not None:
                    self.arrived[event_id] = time.perf_counter()
                    event_id = None
        except (OSError, ValueError, http.client.HTTPException):  # the server ended the stream
            return


def proc_figures(pid: int) -> tuple[float, float]:
    """Resident memory (MB) and CPU seconds (user + system) of a process."""
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS:")) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_board(work: Path, issues: int) -> Path:
    source = work / "issues.jsonl"
    write_jsonl(generate(issues), source)
    tracker = Tracker.init(work / "ws", prefix="bm")
    import_jsonl(tracker, source)
    db = Path(tracker.path)
    scope = Scope("label", plan_label=BENCH_LABEL)
    every = len(tracker.list(issue_type="task", include_closed=True))
    scoped = len(scope_tasks(tracker, scope))
    print(f"\n== board of a {issues:,}-issue tracker ({every:,} tasks; {scoped} in label {BENCH_LABEL})")
    print("| figure | ms | baseline ms | ratio |\n|---|---:|---:|---:|")
    base_all = median_ms(lambda: tracker.list(issue_type="task", include_closed=True), 5)
    base_scoped = median_ms(lambda: scope_tasks(tracker, scope), 9)
    fn_all = median_ms(lambda: board(tracker, None), 5)
    fn_scoped = median_ms(lambda: board(tracker, scope), 9)
    tracker.close()
    proc, port = start_server(db)
    try:
        http_all = get_ms(port, "/", 5)
        http_scoped = get_ms(port, f"/?scope=label:{BENCH_LABEL}", 9)
    finally:
        proc.terminate()
        proc.wait()
    for name, value, base in (("board(), every task", fn_all, base_all), ("GET /, every task", http_all, base_all),
                              ("board(), one plan label", fn_scoped, base_scoped),
                              ("GET /?scope=label:..., one plan label", http_scoped, base_scoped)):
        print(f"| {name} | {value:.1f} | {base:.1f} | {value / base:.2f} |")
    return db


def bench_stream(db: Path, streams: int, checkpoints: int) -> None:
    with Tracker(db, actor="bench") as tracker:
        task = tracker.create("streamed task", issue_type="task")["id"]
        after = tracker.add_comment(task, "start")["id"]
    proc, port = start_server(db)
    try:
        rss0, cpu0 = proc_figures(proc.pid)
        opened = [Stream(port, task, after) for _ in range(streams)]
        time.sleep(2)
        rss_open, cpu_open = proc_figures(proc.pid)
        time.sleep(10)
        rss_idle, cpu_idle = proc_figures(proc.pid)
        written: dict[int, float] = {}
        with Tracker(db, actor="bench") as tracker:
            for seq in range(checkpoints):
                comment = tracker.add_comment(task, checkpoint_text("run-bench", task, seq))
                written[comment["id"]] = time.perf_counter()
                time.sleep(0.2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(len(s.arrived) >= checkpoints for s in opened):
            time.sleep(0.1)
        rss_busy, cpu_busy = proc_figures(proc.pid)
        delays = sorted((s.arrived[cid] - at) * 1000 for s in opened for cid, at in written.items() if cid in s.arrived)
        missing = streams * checkpoints - len(delays)
    finally:  # ends every stream (closing a connection another thread reads from would wait for it)
        proc.terminate()
        proc.wait()
    p95 = delays[int(len(delays) * 0.95) - 1] if delays else float("nan")
    print(f"\n== {streams} task streams, {checkpoints} checkpoints, one every 0.2 s ({missing} event(s) missing)")
    print("| figure | measured | baseline | ratio |\n|---|---:|---:|---:|")
    period = SQLITE_PERIOD_S * 1000
    print(f"| commit to event, median | {statistics.median(delays):.1f} ms | {period:.0f} ms (change watch period) |"
          f" {statistics.median(delays) / period:.2f} |")
    print(f"| commit to event, 95th percentile | {p95:.1f} ms | {period:.0f} ms | {p95 / period:.2f} |")
    print(f"| resident memory, no stream | {rss0:.0f} MB | | |")
    print(f"| resident memory, {streams} streams open | {rss_open:.0f} MB | {rss0:.0f} MB | {rss_open / rss0:.2f} |")
    print(f"| resident memory after the checkpoints | {rss_busy:.0f} MB | {rss0:.0f} MB | {rss_busy / rss0:.2f} |")
    print(f"| CPU, {streams} streams idle for 10 s | {cpu_idle - cpu_open:.2f} s | 10 s of one core |"
          f" {(cpu_idle - cpu_open) / 10:.3f} |")
    busy_s = checkpoints * 0.2
    print(f"| CPU while {checkpoints} checkpoints reach {streams} streams | {cpu_busy - cpu_idle:.2f} s |"
          f" {busy_s:.0f} s of one core | {(cpu_busy - cpu_idle) / busy_s:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--issues", type=int, default=10_000)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--checkpoints", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mesh-bench-serve-") as tmp:
        db = bench_board(Path(tmp), args.issues)
        bench_stream(db, args.streams, args.checkpoints)
    print(json.dumps({"issues": args.issues, "streams": args.streams, "checkpoints": args.checkpoints}))


if __name__ == "__main__":
    main()
