"""Shared kit of the end-to-end run tests: a real git repo, a real tracker, replay scripts.

The workspace is the demo project (``examples/demo-repo``) with the example
tracker (``.beads-example``); the task under test is ``demo-7kq.1``.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.demo import prepare_demo, project_root
from tracker.store import Tracker

TASK = "demo-7kq.1"
VALIDATE = "python3 -m unittest discover -s tests -t ."
MESH = [sys.executable, "-c", "from orchestrator.cli.main import main; main()"]  # the CLI as a process of its own
_DEMO = json.loads((project_root() / "examples" / "demo-script.json").read_text())


def _json_text(entry: dict) -> dict:
    return json.loads(entry["text"])


PATCH_FEATURE = _json_text(_DEMO["synthesizer"][0])["patch"]
PATCH_REVISION = _json_text(_DEMO["synthesizer"][4])["patch"]


def r(round_name: str, artifact: Any = None, **extra: Any) -> dict:
    """One replay response for ``round_name``: an artifact (serialised) or raw fields."""
    entry: dict[str, Any] = {"round": round_name}
    if artifact is not None:
        entry["text"] = artifact if isinstance(artifact, str) else json.dumps(artifact)
    entry.update(extra)
    return entry


def proposal() -> dict:
    return {"plan": ["Add fahrenheit_to_celsius", "Test it"], "assumptions": ["floats"], "risk": "low"}


def critique(must_fix: list[str] | None = None) -> dict:
    return {"findings": ["looks fine"], "must_fix": must_fix or [], "vote_flip_conditions": [], "risk": "low"}


def synthesis(patch: str = PATCH_FEATURE, commands: list[str] | None = None) -> dict:
    return {"decision_log": [{"point": "p", "decision": "accepted", "reason": "r"}], "patch": patch,
            "validation_commands": [VALIDATE] if commands is None else commands}


def vote(v: str = "agree") -> dict:
    return {"vote": v, "reason": f"{v} for the test"}


def finding(fid: str, label: str = "MUST_FIX", location: str = "temperature.py:8") -> dict:
    return {"finding_id": fid, "location": location, "severity": "High", "label": label,
            "issue": f"issue {fid}", "evidence": "evidence", "minimal_fix": "fix it", "code_context": "x = 1"}


def review(decision: str = "approve", findings: list[dict] | None = None) -> dict:
    return {"decision": decision, "findings": findings or [],
            "summary": "No material issues found." if decision == "approve" else "Changes needed."}


def revision_plan(fids: list[str]) -> dict:
    return {"summary": "fix the findings", "steps": [{"finding_id": f, "change": "guard input"} for f in fids]}


def happy_script(*, votes: str = "agree") -> dict[str, list]:
    """A full-mode run that closes on the first review."""
    return {
        "proposer": [r("proposal", proposal()), r("vote", vote(votes))],
        "critic_a": [r("critique", critique()), r("vote", vote(votes))],
        "critic_b": [r("critique", critique()), r("vote", vote(votes))],
        "skeptic": [r("critique", critique()), r("vote", vote(votes))],
        "synthesizer": [r("synthesis", synthesis()), r("vote", vote(votes))],
        "reviewer": [r("review", review())],
    }


def demo_script() -> dict[str, list]:
    """The demo's script: one review cycle with a MUST_FIX finding, then approval."""
    return copy.deepcopy(_DEMO)


@dataclass
class Workspace:
    """A demo repo with its tracker, and a way to run the mesh CLI on it."""

    root: Path
    repo: Path
    db: Path | str

    def tracker(self) -> Tracker:
        return Tracker(self.db, actor="tester")

    def write_script(self, script: dict, name: str = "script.json") -> Path:
        path = self.root / name
        path.write_text(json.dumps(script))
        return path

    def mesh(self, *args: str, env: dict | None = None):
        """Invoke the CLI in-process; returns the click Result."""
        runner = CliRunner()
        return runner.invoke(cli, ["--db", str(self.db), "--actor", "tester", *args], env=env,
                             catch_exceptions=False)

    def run(self, script: dict, *extra: str, label: str = "plan:demo", env: dict | None = None):
        """``mesh run --json`` with a replay script; returns (exit code, report or None, result).

        Branch-only (``--no-land``) unless ``--onto`` is given: these tests pin the run protocol
        itself; landing by default is tests/test_run_then_drain.py's."""
        path = self.write_script(script)
        if "--onto" not in extra and "--no-land" not in extra:
            extra = (*extra, "--no-land")
        res = self.mesh("run", "--label", label, "--backend", "replay", "--script", str(path), "--repo",
                        str(self.repo), "--json", *extra, env=env)
        report = json.loads(res.stdout) if res.stdout.strip().startswith("{") else None
        return res.exit_code, report, res

    def kinds(self, task: str = TASK) -> list[str]:
        from orchestrator.protocol.checkpoint import load_checkpoints

        with self.tracker() as t:
            return [cp.kind for cp in load_checkpoints(t, task)]

    def checkpoints(self, task: str = TASK):
        from orchestrator.protocol.checkpoint import load_checkpoints

        with self.tracker() as t:
            return load_checkpoints(t, task)

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.repo, capture_output=True, text=True, check=True).stdout


def make_workspace(tmp_path: Path, db: str | None = None) -> Workspace:
    """The demo workspace; ``db`` puts its tracker on PostgreSQL (a URL of an empty database)."""
    repo, db, _ = prepare_demo(tmp_path, db=db)
    return Workspace(root=tmp_path, repo=repo, db=db)


def human_review_config(ws: Workspace) -> Path:
    """The demo's mesh.toml with a short wait between looks for a person's review."""
    path = ws.root / "mesh-human.toml"
    if not path.exists():
        path.write_text("human_review_poll_s = 0.2\n" + (ws.repo / "mesh.toml").read_text())
    return path


def without_reviewer(script: dict) -> dict:
    """A replay script with no reviewer answers: a person reviews."""
    return {role: entries for role, entries in script.items() if role != "reviewer"}


def finish(proc: subprocess.Popen) -> dict:
    """The ``--json`` report of a ``mesh run`` process, once it ended."""
    out, err = proc.communicate(timeout=240)
    assert out.strip().startswith("{"), err
    return json.loads(out)
