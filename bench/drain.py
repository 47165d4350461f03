"""Benchmark: ``mesh drain`` on a generated epic of 24 tasks in a DAG of depth 4.

Six tasks per level; task (l, i) is blocked by tasks (l-1, i) and (l-1, i+1 mod 6) and adds
one file. Workers answer in-process after a fixed latency L per call (the protocol's 11 calls
per task: proposal, 3 critiques, synthesis, 5 votes, review; critiques and votes concurrent,
so one task's critical path is 5 L plus mesh's own work). Everything else is real: a git
repository, the tracker, worktrees, validation (``python3 check.py``) in the configured
sandbox, landing through the merge queue.

Reports, from one run of this script: wall time with ``--jobs 1`` and ``--jobs 8``; one task's
protocol time (median elapsed of a task under ``--jobs 1``, landing included); the DAG's
critical path (depth x that); the ratio wall / critical path; the landing overhead per task
(a landing's time minus its validation's).

Usage: python bench/drain.py [--latency L] [--sandbox bwrap|none]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.drain import DrainOptions, drain  # noqa: E402
from orchestrator.runner import RunOptions  # noqa: E402
from roles.backends.base import Backend, WorkerRequest, WorkerResponse  # noqa: E402
from tests.drainkit import LABEL, BRANCH, make_drain_workspace  # noqa: E402

DEPTH, WIDTH = 4, 6


class LatencyBackend(Backend):
    """Answers every call after ``latency`` seconds; the synthesis patch comes from ``patches``."""

    name = "bench"

    def __init__(self, latency: float, patches: dict[str, str]) -> None:
        self.latency = latency
        self.patches = patches

    def call(self, request: WorkerRequest) -> WorkerResponse:
        time.sleep(self.latency)
        answers = {
            "proposal": {"plan": ["do it"], "assumptions": ["none"], "risk": "low"},
            "critique": {"findings": ["fine"], "must_fix": [], "vote_flip_conditions": [], "risk": "low"},
            "synthesis": {"decision_log": [{"point": "p", "decision": "accepted", "reason": "r"}],
                          "patch": self.patches[request.task_id], "validation_commands": ["python3 check.py"]},
            "vote": {"vote": "agree", "reason": "fine"},
            "review": {"decision": "approve", "findings": [], "summary": "No material issues found."},
        }
        return WorkerResponse(text=json.dumps(answers[request.round]), model="bench", duration_s=self.latency)


def build(tmp: Path, sandbox: str):
    ws = make_drain_workspace(tmp, sandbox=sandbox)
    patches: dict[str, str] = {}
    for level in range(DEPTH):
        for i in range(WIDTH):
            name = f"t{level}_{i}"
            after = () if level == 0 else (f"t{level - 1}_{i}", f"t{level - 1}_{(i + 1) % WIDTH}")
            task_id = ws.task(name, after=after)
            patches[task_id] = f"--- /dev/null\n+++ b/{name}.txt\n@@ -0,0 +1 @@\n+{name}\n"
    return ws, patches


def one_drain(jobs: int, latency: float, sandbox: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="mesh-bench-drain-") as tmp:
        ws, patches = build(Path(tmp), sandbox)
        options = DrainOptions(run=RunOptions(label=LABEL, repo=ws.repo, db=ws.db, actor="bench",
                                              config_file=ws.config),
                               jobs=jobs, backend=LatencyBackend(latency, patches))
        report = drain(options)
        summary = report.to_dict()
        assert summary["landings"] == DEPTH * WIDTH and not summary["blocked"], summary
        landed = len(ws.tree(BRANCH))
        lands = [a for name in ws.ids if name != "epic" for a in ws.lands(name)]
        return {"summary": summary, "files": landed, "lands": lands}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per worker call")
    parser.add_argument("--sandbox", choices=["bwrap", "none"], default="bwrap")
    args = parser.parse_args()
    serial = one_drain(1, args.latency, args.sandbox)
    parallel = one_drain(8, args.latency, args.sandbox)
    task_time = statistics.median(t["elapsed_s"] for t in serial["summary"]["tasks"])
    critical = DEPTH * task_time
    overhead = [land["duration_s"] - land["validation_s"] for land in parallel["lands"]]
    revalidated = sum(1 for land in parallel["lands"] if land["revalidated"])
    rows = [
        ("wall, --jobs 1", f"{serial['summary']['wall_s']:.2f} s"),
        ("wall, --jobs 8", f"{parallel['summary']['wall_s']:.2f} s"),
        ("one task's protocol time (median, --jobs 1, landing included)", f"{task_time:.2f} s"),
        (f"critical path ({DEPTH} x protocol time)", f"{critical:.2f} s"),
        ("ratio wall / critical path, --jobs 8", f"{parallel['summary']['wall_s'] / critical:.3f}"),
        ("ratio wall / critical path, --jobs 1", f"{serial['summary']['wall_s'] / critical:.3f}"),
        ("landing overhead per task beyond validation (mean / max, --jobs 8)",
         f"{statistics.mean(overhead):.3f} s / {max(overhead):.3f} s"),
        ("landings that re-ran validation on a moved tip (--jobs 8)", f"{revalidated} of {len(overhead)}"),
        ("landing validation time (mean of those, --jobs 8)",
         f"{statistics.mean([l['validation_s'] for l in parallel['lands'] if l['revalidated']] or [0]):.3f} s"),
    ]
    print(f"latency {args.latency} s per call, sandbox {args.sandbox}, {DEPTH * WIDTH} tasks, depth {DEPTH}")
    print("| figure | measured |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
