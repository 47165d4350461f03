"""Benchmark: what one enormous field in a worker's answer costs a run, beside an ordinary run.

The attack review's case (issue 34, item 7): a proposal with 3.9 MB in one field was carried into
every later prompt and scrubbed each time (97 s, 57 s of mesh's CPU, 224 MB). Each case below
is a ``mesh run`` process on the demo workspace (profile ``full``, command backend, the scripted
worker ``tests/bulky_worker.py``, real bwrap, git and validation, ``ANTHROPIC_API_KEY`` and
``MESH_SIGNING_KEY`` set as in the attack tests, so the scrubber hunts known secrets):

- ``ordinary``: the baseline, every answer small;
- ``refused``: the proposer's first answer holds 3.9 MB of random base64 (the costliest text for
  the scrubber) in one assumption; it is refused (``invalid_shape``), the follow-up is answered
  small and the run closes;
- ``unbounded``: the same field with ``[answers]`` bounds raised past it, so it is taken and
  carried as before the bound (the scrubber's own speed-up still applies).

Per case, the median of N runs: mesh's own CPU (``RUSAGE_SELF`` of the ``mesh`` process, all its
threads, no worker), the CPU of mesh with every process it waited for (workers, bwrap, git,
validation), the wall time, mesh's peak memory, and the ratio of mesh's CPU to the baseline's.

Usage: python bench/bulky_answer.py [--runs 3] [--chars 3900000]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.runkit import PATCH_FEATURE, VALIDATE, make_workspace  # noqa: E402
from tests.test_attack_sandbox import mesh_env  # noqa: E402

# The mesh CLI, writing its own resource usage (not its children's) to the file named first.
_MESH = ("import atexit, json, resource, sys\n"
         "out = sys.argv.pop(1)\n"
         "def _usage():\n"
         "    u = resource.getrusage(resource.RUSAGE_SELF)\n"
         "    open(out, 'w').write(json.dumps({'cpu': u.ru_utime + u.ru_stime, 'rss_mb': u.ru_maxrss / 1024}))\n"
         "atexit.register(_usage)\n"
         "from orchestrator.cli.main import main\n"
         "main()\n")


def one_run(root: Path, bulk: dict, config: str) -> dict:
    """One ``mesh run`` of the demo task; its figures."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    ws = make_workspace(root)
    home = root / "home"
    home.mkdir()
    script = root / "bulky_worker.py"
    shutil.copy(ROOT / "tests" / "bulky_worker.py", script)
    plan = root / "plan.json"
    plan.write_text(json.dumps({"log": str(home / "prompts.jsonl"), "patch": PATCH_FEATURE, "commands": [VALIDATE],
                                "bulk": bulk}))
    (root / "mesh.toml").write_text(f'worker_home = "real"\n{config}[validation]\nallow = ["{VALIDATE}"]\n')
    usage_file = root / "usage.json"
    command = " ".join(shlex.quote(str(part)) for part in (sys.executable, script, plan))
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", _MESH, str(usage_file), "--db", str(ws.db), "--actor", "t", "run", "--label",
         "plan:demo", "--backend", "command", "--worker-cmd", command, "--repo", str(ws.repo), "--config",
         str(root / "mesh.toml"), "--json", "--no-land"],
        # mesh as this interpreter has it installed (a fresh `pip install .`: whole-process figures as
        # users have them), never the checkout's sources.
        env=mesh_env(home), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        cwd=root)
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    own = json.loads(usage_file.read_text())
    prompts = [json.loads(line) for line in (home / "prompts.jsonl").read_text().splitlines()]
    return {"outcome": json.loads(out)["outcome"], "mesh_cpu": own["cpu"], "rss_mb": own["rss_mb"],
            "all_cpu": usage.ru_utime + usage.ru_stime, "wall": wall,
            "largest_prompt": max(p["chars"] for p in prompts), "calls": len(prompts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chars", type=int, default=3_900_000)
    args = parser.parse_args()
    bulky = {"chars": args.chars, "kind": "base64", "rounds": {"proposal": [1]}}
    raised = f"[answers]\nmax_field_chars = {args.chars + 1}\nmax_answer_chars = {args.chars + 100_000}\n"
    cases = {"ordinary": ({}, ""), "refused": (bulky, ""), "unbounded": (bulky, raised)}
    results: dict[str, list[dict]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(prefix="mesh-bench-bulky-") as tmp:
        for _ in range(args.runs):
            for name, (bulk, config) in cases.items():  # interleaved: a load change hits every case alike
                results[name].append(one_run(Path(tmp) / name, bulk, config))
    base = statistics.median(r["mesh_cpu"] for r in results["ordinary"])
    print(f"{'case':10} {'outcome':8} {'calls':>5} {'largest prompt':>15} {'mesh CPU s':>10} {'ratio':>6}"
          f" {'with children s':>15} {'wall s':>7} {'mesh peak MB':>12}")
    for name, runs in results.items():
        med = {key: statistics.median(r[key] for r in runs) for key in ("mesh_cpu", "all_cpu", "wall", "rss_mb")}
        print(f"{name:10} {runs[0]['outcome']:8} {runs[0]['calls']:5} {runs[0]['largest_prompt']:15,}"
              f" {med['mesh_cpu']:10.2f} {med['mesh_cpu'] / base:6.2f} {med['all_cpu']:15.2f} {med['wall']:7.2f}"
              f" {med['rss_mb']:12.0f}")


if __name__ == "__main__":
    main()
