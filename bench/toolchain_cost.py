"""Benchmark: validation in each toolchain's own environment, against the same command run in the
checkout, measured in one invocation.

1. Rust: a crate with two dependencies (Debian's packaged itoa and memchr, a directory source).
   Baseline: ``cargo test`` run incrementally in the checkout after a one-line change. mesh: the
   second and later validations of a one-line patch (a new commit each time), in the sandbox,
   on a copy of its own of the build cache (the target folder) the base check wrote: the copy
   and its removal are measured apart too. Target: at most 1.5x the baseline.
2. Node (``npm test``, ``node --test`` with ``ms`` installed from the npm registry) and Python
   (a hatch-vcs package with generated files, ``python -m unittest``): the command in the checkout
   against ``run_validation`` of the same commit. What validation adds should stay within the
   sandbox figure of ``bench/sandbox_cost.py`` (the tree copy and bwrap).
3. Once per run: detecting the toolchains and building the view (``toolchains.view.inspect``).

Every figure is the median over N runs (default 7). Needs what ``make test`` installs (cargo,
Debian's crates, npm).

Usage: python bench/toolchain_cost.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.sandbox import cache_layers  # noqa: E402
from orchestrator.sandbox.validation import run_validation  # noqa: E402
from orchestrator.toolchains.caches import cache_size  # noqa: E402
from orchestrator.toolchains.view import inspect  # noqa: E402
from tests.toolchainkit import commit_all, hatch_project, node_project, rust_project, tool_env  # noqa: E402


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def validate(repo: Path, command: str, view) -> None:
    [result] = run_validation([command], cwd=repo, allow=[command], timeout_s=600, environment=view,
                              env=tool_env())
    assert result.passed, result.stdout_tail + result.stderr_tail


# npm offline in the checkout too, as in the sandbox: its update and funding checks would
# otherwise reach the registry and weigh on the baseline.
_OFFLINE = {"npm_config_offline": "true", "npm_config_update_notifier": "false", "npm_config_fund": "false",
            "npm_config_audit": "false"}


def in_checkout(repo: Path, argv: list[str]) -> None:
    subprocess.run(argv, cwd=repo, env=tool_env(**_OFFLINE), check=True, capture_output=True)


def rust(folder: Path, runs: int) -> tuple[float, float, float, int]:
    """(checkout, validation, copying the base's caches for one validation, their size in bytes)."""
    repo = rust_project(folder)
    lib = repo / "src" / "lib.rs"
    original = lib.read_text()
    in_checkout(repo, ["cargo", "test", "--offline"])  # dependencies built once, as a developer has them
    view = inspect(repo, None, tool_env()).view
    validate(repo, "cargo test", cache_layers.writing(view))  # the base check fills the build cache once
    checkout, sandboxed, copied = [], [], []
    for n in range(runs):
        lib.write_text(original + f"\npub fn edit_{n}() -> u32 {{ {n} }}\n")
        checkout.append(timed(lambda: in_checkout(repo, ["cargo", "test", "--offline"])))
        commit = commit_all(repo, f"one-line patch {n}")
        sandboxed.append(timed(lambda: validate(repo, "cargo test", view)))

        def copy_and_remove() -> None:
            with cache_layers.shown(view, repo, commit, "bwrap"):
                pass

        copied.append(timed(copy_and_remove))
    size = sum(cache_size(folder) for folder in cache_layers.trusted_commits(Path(view.cache_root)))
    return statistics.median(checkout), statistics.median(sandboxed), statistics.median(copied), size


def same_command(repo: Path, command: str, argv: list[str], runs: int) -> tuple[float, float, float, float]:
    """(the command in the checkout, the same in validation, validation's floor: ``true`` validated
    with the same view less ``true`` run directly, and ``inspect``), medians in ms."""
    inspected = [timed(lambda: inspect(repo, None, tool_env())) for _ in range(runs)]
    view = inspect(repo, None, tool_env()).view
    in_checkout(repo, argv)
    validate(repo, command, view)
    checkout = statistics.median(timed(lambda: in_checkout(repo, argv)) for _ in range(runs))
    sandboxed = statistics.median(timed(lambda: validate(repo, command, view)) for _ in range(runs))
    floor = (statistics.median(timed(lambda: validate(repo, "true", view)) for _ in range(runs))
             - statistics.median(timed(lambda: in_checkout(repo, ["true"])) for _ in range(runs)))
    return checkout, sandboxed, floor, statistics.median(inspected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mesh-bench-toolchains-") as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        print(f"median of {args.runs} runs, milliseconds")
        print(f"{'project':<34} {'checkout':>9} {'mesh':>9} {'ratio':>6} {'added':>8} {'floor':>8}")
        base, mesh, copy, size = rust(Path(tmp) / "rust", args.runs)
        print(f"{'rust: one-line patch, cargo test':<34} {base:>9.0f} {mesh:>9.0f} {mesh / base:>6.2f}"
              f" {mesh - base:>8.0f}")
        print(f"{'  of which the cache copy':<34} {'':>9} {copy:>9.0f} {'':>6} {'':>8}   ({size >> 20} MB copied"
              " and removed per validation)")
        node = node_project(Path(tmp), Path(tmp) / "node-run")
        base, mesh, floor, found = same_command(node, "npm test", ["npm", "test"], args.runs)
        print(f"{'node: npm test (node --test)':<34} {base:>9.0f} {mesh:>9.0f} {mesh / base:>6.2f}"
              f" {mesh - base:>8.0f} {floor:>8.0f}")
        node_inspect = found
        python = hatch_project(Path(tmp) / "python")
        command = "python -m unittest discover -s tests -t ."
        base, mesh, floor, found = same_command(python, command, [str(python / ".venv" / "bin" / "python"), "-m",
                                                           "unittest", "discover", "-s", "tests", "-t", "."],
                                         args.runs)
        print(f"{'python: hatch-vcs, unittest':<34} {base:>9.0f} {mesh:>9.0f} {mesh / base:>6.2f}"
              f" {mesh - base:>8.0f} {floor:>8.0f}")
        print(f"once per run, toolchains.view.inspect: node {node_inspect:.0f} ms, python {found:.0f} ms")


if __name__ == "__main__":
    main()
