"""Benchmark: what ``mesh eval run`` adds to each case beyond its run, measured in one invocation.

A library of a dozen commits (tests/evalkit.py: nine cases), its suite, and ``mesh eval run`` of
one profile with the scripted command worker (real bwrap, real git, real validation sandbox).
The eval records each run's wall time (the ``mesh run`` process); the baseline is that figure,
the overhead is the eval's whole wall time less the runs', per case: making the case's
repository (fetching the base, cloning), the task, grading (the hidden tests and the project's
check in the sandbox) and the run's report page. The same eval with ``--jobs 1``, so the runs do
not overlap and the difference is the eval's own work.

Usage: python bench/eval_overhead.py [--profile lite] [--cases 9]
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

from tests.evalkit import library_suite, mesh, write_worker  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="lite", choices=["full", "lite", "single", "candidates"])
    parser.add_argument("--cases", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mesh-bench-eval-") as tmp:
        root = Path(tmp)
        try:
            repo, suite, cases = library_suite(root, args.cases)
        except RuntimeError as exc:
            sys.exit(str(exc))
        command = write_worker(root, repo, cases, {args.profile: [c.id for c in cases[::2]]})
        out = root / "ev"
        started = time.monotonic()
        done = mesh("eval", "run", str(suite), "--profile", args.profile, "--jobs", "1", "--worker-cmd", command,
                    "--out", str(out), "--yes", cwd=repo)
        whole = time.monotonic() - started
        if done.returncode:
            sys.exit(done.stderr)
        results = [json.loads(p.read_text()) for p in (out / "results").glob("*/*.json")]
        runs = [r["wall_s"] for r in results]
        report_started = time.monotonic()
        mesh("eval", "report", str(out), cwd=repo)
        report_s = time.monotonic() - report_started
    n = len(results)
    overhead = (whole - sum(runs)) / n
    run = statistics.median(runs)
    print(f"{n} cases, profile {args.profile}, --jobs 1: eval {whole:.1f} s in all")
    print(f"run per case (mesh run process, median): {run:.2f} s (baseline)")
    print(f"eval's own work per case (repository, task, grading, report page): {overhead:.2f} s"
          f" = {overhead / run:.2f}x the run")
    print(f"mesh eval report of the {n} cases (a process): {report_s:.2f} s")


if __name__ == "__main__":
    main()
