"""Benchmark: the orchestrator's own cost per task.

1. Overhead: a whole ``mesh run`` (library call) on the demo workspace with
   zero-latency replay workers, minus the time the validation commands took.
2. Wall time with every worker call delayed by L seconds (replay ``delay_s``),
   against the critical path of the profile's rounds with concurrent critics and
   votes: proposal, critiques, synthesis, votes, review = 5 L. (The profile's
   sequential order would take 11 L: 1 + 3 + 1 + 5 + 1.)

Usage: python bench/run_overhead.py [--runs N] [--delay L]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.demo import prepare_demo  # noqa: E402
from orchestrator.runner import RunOptions, run  # noqa: E402
from tests.runkit import happy_script  # noqa: E402


def one_run(script: dict) -> tuple[float, float, str]:
    """(wall seconds, validation seconds, outcome) of one run in a fresh workspace."""
    with tempfile.TemporaryDirectory(prefix="mesh-bench-") as tmp:
        repo, db, _ = prepare_demo(Path(tmp))
        import json

        path = Path(tmp) / "script.json"
        path.write_text(json.dumps(script))
        started = time.perf_counter()
        report = run(RunOptions(label="plan:demo", backend="replay", script=path, repo=repo, db=db,
                                actor="bench"), echo=lambda line: None)
        wall = time.perf_counter() - started
        from orchestrator.protocol.checkpoint import load_checkpoints
        from tracker.store import Tracker

        with Tracker(db) as tracker:
            proofs = [cp for cp in load_checkpoints(tracker, report.task["id"]) if cp.kind == "proof"]
        validation = sum(r.get("duration_s") or 0.0 for cp in proofs for r in cp.payload["artifact"]["results"])
        return wall, validation, report.outcome


def delayed(script: dict, delay: float) -> dict:
    out = copy.deepcopy(script)
    for responses in out.values():
        for entry in responses:
            entry["delay_s"] = delay
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="repetitions of the zero-latency run (median)")
    parser.add_argument("--delay", type=float, default=0.5, help="L: seconds each delayed worker call takes")
    parser.add_argument("--delayed-runs", type=int, default=3, help="repetitions of the delayed run (median)")
    args = parser.parse_args()

    script = happy_script()
    calls = sum(len(v) for v in script.values())
    one_run(script)  # warm imports and caches
    overheads, walls = [], []
    for _ in range(args.runs):
        wall, validation, outcome = one_run(script)
        assert outcome == "closed", outcome
        overheads.append(wall - validation)
        walls.append(wall)
    overhead = statistics.median(overheads)
    print(f"zero-latency run ({calls} worker calls, {args.runs} runs): median wall {statistics.median(walls) * 1000:.0f} ms,"
          f" validation excluded -> overhead {overhead * 1000:.0f} ms per task (target <= 300 ms)")

    delayed_walls = []
    for _ in range(args.delayed_runs):
        wall, validation, outcome = one_run(delayed(script, args.delay))
        assert outcome == "closed", outcome
        delayed_walls.append(wall - validation)
    wall = statistics.median(delayed_walls)
    critical = 5 * args.delay
    print(f"delayed run (L = {args.delay:.2f} s per call, {args.delayed_runs} runs): median wall {wall:.2f} s"
          f" (validation excluded); critical path 5 L = {critical:.2f} s; ratio {wall / critical:.3f}"
          f" (target <= 1.15; sequential order 11 L = {11 * args.delay:.2f} s would be {11 / 5:.2f})")


if __name__ == "__main__":
    main()
