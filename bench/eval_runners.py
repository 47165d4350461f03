"""Benchmark: an eval's throughput with two runners against one, through a PostgreSQL server.

A library of a dozen commits (tests/evalkit.py), its suite, and a throwaway PostgreSQL server
(tests/pgserver.py). The scripted command worker waits a fixed delay before each answer (as a
model would), so a run's time is mostly waiting. The same eval is run three times, each in a new
database:

1. one ``mesh --db postgresql://... eval run --jobs 1`` process: the baseline;
2. two such processes at once, each in a folder of its own (as two machines are: case
   repositories of their own, built from the eval's git remote), sharing the eval: each claims
   the pairs left;
3. one process with ``--jobs 2``: the same number of runs at a time in one process, to tell the
   cost of sharing (claims, case repositories built twice) from the gain of running two at once.

Every figure is a whole wall time (the ``mesh`` processes started to the last one ended); the
ratios are throughputs against the baseline's.

Usage: python bench/eval_runners.py [--cases 8] [--delay 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.evalkit import MESH, git, library_suite, mesh, write_worker  # noqa: E402
from tests.pgserver import start_server  # noqa: E402

DELAYED = """
import os, sys, time
time.sleep(float(sys.argv[1]))
os.execvp(sys.argv[2], sys.argv[2:])
"""


def runners(db: str, suite: Path, folders: list[Path], command: str, repo: Path, remote: Path,
            jobs: int = 1) -> float:
    """Wall seconds of ``mesh eval run`` processes, one per folder, started together, sharing the eval."""
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    started = time.monotonic()
    procs = [subprocess.Popen([*MESH, "--db", db, "eval", "run", str(suite), "--arm", "team: profile=single",
                               "--worker-cmd", command, "--remote", str(remote), "--out", str(folder), "--jobs",
                               str(jobs), "--yes"], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for folder in folders]
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"mesh eval run exited {proc.returncode}: {err[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument("--delay", type=float, default=2.0, help="Seconds each worker call waits.")
    args = parser.parse_args()
    server, why = start_server()
    if server is None:
        sys.exit(f"no PostgreSQL server: {why}")
    try:
        with tempfile.TemporaryDirectory(prefix="mesh-bench-runners-") as tmp:
            root = Path(tmp)
            try:
                repo, suite, cases = library_suite(root, args.cases)
            except RuntimeError as exc:
                sys.exit(str(exc))
            remote = root / "remote.git"
            git(root, "init", "-q", "--bare", str(remote))
            git(repo, "push", "-q", str(remote), "main")
            command = write_worker(root, repo, cases, {"team": [c.id for c in cases]})
            (root / "worker" / "delayed.py").write_text(DELAYED)
            command = f"python3 {root / 'worker' / 'delayed.py'} {args.delay} {command}"
            figures = {}
            for name, folders, jobs in (("one runner", ["a"], 1), ("two runners", ["b1", "b2"], 1),
                                        ("one runner, --jobs 2", ["c"], 2)):
                db = server.create_database(name.replace(" ", "_").replace(",", "").replace("-", ""))
                figures[name] = runners(db, suite, [root / f / "ev" for f in folders], command, repo, remote, jobs)
                with_results = mesh("--db", db, "eval", "report", str(root / folders[0] / "ev"), "--json", cwd=repo)
                report = json.loads(with_results.stdout)
                assert [a["finished"] for a in report["arms"]] == [len(cases)], report["arms"]
    finally:
        server.stop()
    base = figures["one runner"]
    print(f"{len(cases)} cases, profile single (3 calls a run), {args.delay:g} s per worker call")
    print(f"{'figure':<24} {'wall s':>8} {'throughput':>11}")
    for name, wall in figures.items():
        print(f"{name:<24} {wall:>8.2f} {base / wall:>10.2f}x")


if __name__ == "__main__":
    main()
