"""A command worker that tries to start mesh from inside itself (the nested-run guard's test).

``nested_worker.py PLAN OUT DB REPO CONFIG``: on its first proposal call it runs
``mesh --db DB run --label plan:drain ...`` (a command worker ``true``) as any program a
worker starts would, and writes to OUT what came of it (exit code, stderr, the marker it
saw); then, and on every other call, it answers like ``tests/drain_worker.py`` from PLAN.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

plan, out, db, repo, config = sys.argv[1:6]
if os.environ.get("MESH_ROUND") == "proposal" and not Path(out).exists():
    ran = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "--db", db, "run", "--label", "plan:drain",
                          "--repo", repo, "--config", config, "--json",
                          "--backend", "command", "--worker-cmd", "true"],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    Path(out).write_text(json.dumps({"code": ran.returncode, "stderr": ran.stderr,
                                     "marker": os.environ.get("MESH_WORKER")}))
sys.argv = [str(Path(__file__).with_name("drain_worker.py")), plan]
runpy.run_path(sys.argv[0], run_name="__main__")
