"""Shared kit of the drain tests: a real git repo, a real tracker with an epic of tasks, the
scripted command worker (``tests/drain_worker.py``) and ways to run ``mesh drain``.

The repository holds ``check.py``, the one allowed validation command: it runs every
``checks/*.py`` and fails when one raises, so a task can add a check that a later change
breaks (a post-merge validation failure).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.protocol.checkpoint import load_checkpoints
from tracker.store import Tracker

LABEL = "plan:drain"
BRANCH = "mesh/land/plan-drain"
WORKER = Path(__file__).with_name("drain_worker.py")
ROOT = Path(__file__).resolve().parents[1]

CHECK_PY = """\
import pathlib, runpy, sys

for path in sorted(pathlib.Path("checks").glob("*.py")):
    try:
        runpy.run_path(str(path))
    except Exception as exc:
        print(f"{path}: {exc!r}", file=sys.stderr)
        sys.exit(1)
print("ok")
"""


def git(repo: Path, *args: str, check: bool = True) -> str:
    """Run git in ``repo`` and return its stdout."""
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=check).stdout


@dataclass
class DrainWorkspace:
    """A repo, a tracker, a plan for the worker, and a config file outside the repo."""

    root: Path
    repo: Path
    db: Path | str
    config: Path
    plan: dict[str, Any] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)

    def tracker(self, actor: str = "tester") -> Tracker:
        return Tracker(self.db, actor=actor)

    def task(self, name: str, *, after: tuple[str, ...] = (), priority: int = 2, **entry: Any) -> str:
        """Create task ``name`` (blocked by the tasks ``after``) and its worker plan entry."""
        with self.tracker() as t:
            epic = self.ids.get("epic") or t.create("Epic", issue_type="epic", labels=[LABEL])["id"]
            self.ids["epic"] = epic
            issue = t.create(name, issue_type="task", labels=[LABEL], parent=epic, priority=priority,
                             acceptance_criteria="works", design="simple", notes="none")
            for blocker in after:
                t.add_dependency(issue["id"], self.ids[blocker])
        self.ids[name] = issue["id"]
        self.plan[issue["id"]] = entry
        return issue["id"]

    def worker_cmd(self) -> str:
        path = self.root / "plan.json"
        path.write_text(json.dumps(self.plan))
        return f"{sys.executable} {WORKER} {path}"

    def drain_args(self, *extra: str, jobs: int = 1) -> list[str]:
        return ["--db", str(self.db), "--actor", "tester", "drain", "--label", LABEL, "--backend", "command",
                "--worker-cmd", self.worker_cmd(), "--repo", str(self.repo), "--config", str(self.config),
                "--jobs", str(jobs), "--json", *extra]

    def drain(self, *extra: str, jobs: int = 1) -> tuple[int, list[dict], Any]:
        """``mesh drain --json`` in-process: (exit code, events, click result)."""
        res = CliRunner().invoke(cli, self.drain_args(*extra, jobs=jobs), catch_exceptions=False)
        events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
        return res.exit_code, events, res

    def status(self, name: str) -> str:
        with self.tracker() as t:
            return t.get(self.ids[name])["status"]

    def checkpoints(self, name: str):
        with self.tracker() as t:
            return load_checkpoints(t, self.ids[name])

    def lands(self, name: str) -> list[dict]:
        return [cp.payload["artifact"] for cp in self.checkpoints(name) if cp.kind == "land"]

    def tree(self, ref: str = BRANCH) -> dict[str, str]:
        """path -> content of every file at ``ref``."""
        names = git(self.repo, "ls-tree", "-r", "--name-only", ref).split()
        return {name: git(self.repo, "show", f"{ref}:{name}") for name in names}

    def landed_tasks(self, ref: str = BRANCH) -> list[str]:
        """The ``Mesh-Task`` trailer of each commit on ``ref`` since the first commit, oldest first."""
        out = git(self.repo, "log", "--reverse", "--format=%(trailers:key=Mesh-Task,valueonly)%x1e", ref)
        return [rec.strip() for rec in out.split("\x1e") if rec.strip()]


def make_drain_workspace(tmp_path: Path, *, sandbox: str = "none", files: dict[str, str] | None = None,
                         extra_config: str = "", db: str | None = None) -> DrainWorkspace:
    """The repo, its tracker (a SQLite file, or the PostgreSQL database at URL ``db``) and a config."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    git(repo, "config", "user.name", "Dev")
    git(repo, "config", "user.email", "dev@example.com")
    for path, content in {"check.py": CHECK_PY, "checks/base.py": "assert True\n", **(files or {})}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "base")
    ws = tmp_path / "ws"
    ws.mkdir()
    Tracker.init(ws, prefix="dr", actor="tester", db_path=db).close()
    config = tmp_path / "mesh.toml"
    config.write_text(f'[validation]\nallow = ["python3 check.py"]\nsandbox = "{sandbox}"\n{extra_config}')
    return DrainWorkspace(root=tmp_path, repo=repo, db=db or ws / ".beads" / "mesh.db", config=config)
