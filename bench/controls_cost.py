"""Benchmark: what mesh's controls (the twins of a project's tests and the synthetic control tests)
cost a validation, on real projects nobody here wrote, measured in one invocation.

For each project (an sdist or npm package from the registry, unpacked into a git repository whose
last commit changes one function of the library, as a task's commit does):

- direct: the project's test command run in the checkout, as a person runs it;
- without controls: ``run_validation`` of that commit with mesh's twins and control tests turned
  off (the sandbox, the tree copy and the report, as before issue 43's item 2);
- with controls: ``run_validation`` as it runs in validation, the base check, landing and eval.

Printed: each median over N runs, the twins planted, and the ratios with/without and with/direct.
Needs what ``make test`` installs (npm, go) and the package registries (``pip download``,
``npm pack``) the first time; the downloads are kept in ``--cache``.

Usage: python bench/controls_cost.py [--runs N] [--cache DIR] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.mutants import planting  # noqa: E402
from orchestrator.sandbox import canaries  # noqa: E402
from orchestrator.sandbox.validation import run_validation  # noqa: E402
from orchestrator.toolchains.view import inspect  # noqa: E402

PY = sys.executable
GO_CMP = "/usr/share/gocode/src/github.com/google/go-cmp"  # Debian's golang-github-google-go-cmp-dev
# name: (how to fetch, the file and text a task's commit changes, the test command)
PROJECTS = {
    "go-cmp": (["dir", GO_CMP], ("cmp/compare.go", "func Equal("), "go test ./..."),
    "more-itertools": (["pip", "download", "--no-binary", ":all:", "--no-deps", "more-itertools==11.2.1"],
                       ("more_itertools/more.py", "def chunked("),
                       f"{PY} -m pytest -q -p no:cacheprovider tests"),
    "more-itertools-unittest": (["pip", "download", "--no-binary", ":all:", "--no-deps", "more-itertools==11.2.1"],
                             ("more_itertools/recipes.py", "def take("),
                             f"{PY} -m unittest discover -s tests -t ."),
}


def fetch(spec: list[str], cache: Path) -> Path:
    """The downloaded archive (kept in ``cache``), or the folder of a ``dir`` source."""
    if spec[0] == "dir":
        return Path(spec[1])
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(p for p in cache.iterdir() if p.suffix in (".gz", ".tgz"))
    if spec[0] == "pip":
        name = spec[-1].split("==")[0].replace("-", "_")
        have = [p for p in found if p.name.startswith(name)]
        if not have:
            subprocess.run([PY, "-m", "pip", *spec[1:], "-d", str(cache), "-q"], check=True)
            have = [p for p in cache.iterdir() if p.name.startswith(name)]
        return have[0]
    raise ValueError(spec)


def checkout(archive: Path, change: tuple[str, str], dest: Path) -> Path:
    """``archive`` unpacked into a git repository of two commits, the second changing ``change``."""
    if archive.is_dir():
        shutil.copytree(archive, dest / archive.name, symlinks=True)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    [top] = list(dest.iterdir())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(top), "-c", "user.name=b", "-c", "user.email=b@b", *args], check=True,
                       env=env, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    path, where = change
    text = (top / path).read_text()
    start = text.index(where)
    if path.endswith(".py"):
        end = text.index("\n", text.index(":\n", start) + 2)
        line = "\n    # a task's change"
    else:
        end = text.index("{\n", start) + 1
        line = "\n\t// a task's change"
    (top / path).write_text(text[:end] + line + text[end:])
    git("commit", "-qam", "task")
    return top


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "mesh-bench-controls")
    parser.add_argument("--only")
    args = parser.parse_args()
    real_plant, real_canaries = planting.plant, canaries.plant
    counted: list[int] = []

    def counting(*a, **k):
        done = real_plant(*a, **k)
        counted.append(len(done.twins) if done else 0)
        return done

    print(f"{'project':22} {'direct s':>9} {'without s':>10} {'with s':>8} {'twins':>6} {'with/without':>13}"
          f" {'with/direct':>12}")
    for name, (spec, change, command) in PROJECTS.items():
        if args.only and args.only != name:
            continue
        with tempfile.TemporaryDirectory() as scratch:
            repo = checkout(fetch(spec, args.cache), change, Path(scratch))

            env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
            view = inspect(repo, None, env).view

            def validate() -> None:
                [result] = run_validation([command], cwd=repo, allow=[command], timeout_s=900, environment=view,
                                          env=env)
                assert result.passed, result.stdout_tail[-2000:] + result.stderr_tail[-2000:]

            def direct() -> None:
                # go test's own result cache would answer a direct run from memory: not a run.
                subprocess.run(command.split(), cwd=repo, check=True, capture_output=True,
                               env={**env, "GOFLAGS": "-mod=mod -count=1"})

            figures: dict[str, list[float]] = {"direct": [], "without": [], "with": []}
            for _ in range(args.runs):
                figures["direct"].append(timed(direct))
                planting.plant, canaries.plant = (lambda *a, **k: None), (lambda *a, **k: None)
                figures["without"].append(timed(validate))
                planting.plant, canaries.plant = counting, real_canaries
                figures["with"].append(timed(validate))
            shutil.rmtree(repo / ".git", ignore_errors=True)
        direct_s, without_s, with_s = (statistics.median(figures[key]) for key in ("direct", "without", "with"))
        print(f"{name:22} {direct_s:9.2f} {without_s:10.2f} {with_s:8.2f} {max(counted, default=0):6d}"
              f" {with_s / without_s:12.2f}x {with_s / direct_s:11.2f}x")


if __name__ == "__main__":
    main()
