"""Benchmark: what the bwrap sandbox adds to each validation command.

1. Per command: a trivial program (``true``, then ``python -c pass``) started directly with
   the minimal environment, against the same program started through ``bwrap`` with the
   sandbox validation uses (new namespaces, read-only system, private /tmp and HOME).
2. Per validation run: ``run_validation`` with one ``true`` command on the demo repository,
   ``sandbox="none"`` against ``sandbox="bwrap"``; the bwrap figure includes writing the
   committed tree to a temporary directory and deleting it afterwards.

Every figure is the median over N runs (default 20), all measured in one invocation.

Usage: python bench/sandbox_cost.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.demo import prepare_demo  # noqa: E402
from orchestrator.sandbox.bwrap import SANDBOX_HOME, bwrap_argv, minimal_env, require_bwrap  # noqa: E402
from orchestrator.sandbox.validation import run_validation  # noqa: E402


def median_ms(action, runs: int) -> float:
    """Median wall time of ``action()`` in milliseconds, after one warm-up call."""
    action()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    bwrap = require_bwrap()
    env = minimal_env({}, (), home=SANDBOX_HOME, path="/usr/bin:/bin")

    print(f"median of {args.runs} runs, milliseconds")
    print(f"{'command':<28} {'direct':>8} {'bwrap':>8} {'added':>8}")
    for label, argv in (("true", ["/usr/bin/true"]), ("python -c pass", [sys.executable, "-c", "pass"])):
        direct = median_ms(lambda: subprocess.run(argv, env=env, check=True), args.runs)
        wrapped = bwrap_argv(bwrap, argv, network=False, chdir="/")
        sandboxed = median_ms(lambda: subprocess.run(wrapped, env=env, check=True), args.runs)
        print(f"{label:<28} {direct:>8.1f} {sandboxed:>8.1f} {sandboxed - direct:>8.1f}")

    with tempfile.TemporaryDirectory(prefix="mesh-bench-") as tmp:
        repo, _, _ = prepare_demo(Path(tmp))

        def validation(sandbox: str):
            return lambda: run_validation(["true"], cwd=repo, allow=["true"], timeout_s=60, sandbox=sandbox)

        plain = median_ms(validation("none"), args.runs)
        boxed = median_ms(validation("bwrap"), args.runs)
        print(f"{'run_validation([true])':<28} {plain:>8.1f} {boxed:>8.1f} {boxed - plain:>8.1f}")


if __name__ == "__main__":
    main()
