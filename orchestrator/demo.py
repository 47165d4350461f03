"""``mesh demo``: the offline end-to-end run on the example workspace.

Copies ``examples/demo-repo`` into a temporary folder, makes it a git repo,
imports ``.beads-example/`` into a fresh tracker, and runs one task end to end
with the replay script ``examples/demo-script.json``: a real patch, the demo
repo's real tests, one review cycle with a MUST_FIX finding (sub-issues and a
revision), then approval and close. Prints the report and ``mesh show``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["run_demo", "project_root", "prepare_demo"]


def project_root() -> Path:
    """The source checkout that holds ``examples/`` and ``.beads-example/``."""
    return Path(__file__).resolve().parents[1]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)


def prepare_demo(dest: Path, *, root: Path | None = None,
                 db: str | None = None) -> tuple[Path, Path | str, Path]:
    """Lay the demo out in ``dest``: the git repo (with ``.beads/``), its tracker db (the
    workspace's file, or ``db``: a PostgreSQL URL of an empty database) and the script."""
    from tracker.jsonl import import_jsonl
    from tracker.store import Tracker

    src = root or project_root()
    repo = dest / "demo-repo"
    shutil.copytree(src / "examples" / "demo-repo", repo)
    (repo / ".beads").mkdir()
    shutil.copy(src / ".beads-example" / "config.yaml", repo / ".beads" / "config.yaml")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "demo@mesh.invalid")
    _git(repo, "config", "user.name", "mesh demo")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "demo project")
    tracker = Tracker.init(repo, actor="mesh-demo", db_path=db)
    try:
        report = import_jsonl(tracker, src / ".beads-example" / "issues.jsonl")
        if report.warnings:
            raise RuntimeError(f"example workspace has warnings: {report.warnings}")
    finally:
        tracker.close()
    return repo, db or repo / ".beads" / "mesh.db", src / "examples" / "demo-script.json"


def run_demo(*, keep: bool = False, echo: Callable[[str], None] = print) -> int:
    """Run the demo; returns the exit code of the run (0 when the task closed)."""
    from tracker.store import Tracker

    from orchestrator.views.report import render_report
    from orchestrator.runner import RunError, RunOptions, run
    from orchestrator.views.show import render_history, task_history

    folder = Path(tempfile.mkdtemp(prefix="mesh-demo-"))
    try:
        repo, db, script = prepare_demo(folder)
        with Tracker(db) as tracker:
            ready = tracker.ready(labels=["plan:demo"], issue_type="task")
        echo(f"demo workspace: {repo}")
        echo("ready work (plan:demo): " + ", ".join(f"{i['id']} [P{i['priority']}] {i['title']}" for i in ready))
        echo("")
        try:
            report = run(RunOptions(label="plan:demo", backend="replay", script=script, repo=repo, db=db,
                                    actor="mesh-demo"), echo=echo)
        except RunError as exc:
            echo(f"mesh: {exc}")
            return exc.exit_code
        echo("")
        echo(render_report(report, preflight=False))
        echo("")
        echo("the task's history (mesh show); c<N>/r<M> is the consensus cycle N (a vote that failed")
        echo("is re-run) within the review cycle M (each review that requests changes starts one):")
        with Tracker(db) as tracker:
            echo(render_history(task_history(tracker, report.task["id"])))
            echo("")
            after = tracker.ready(labels=["plan:demo"], issue_type="task")
            echo("ready work now: " + ", ".join(f"{i['id']} {i['title']}" for i in after))
        branch = subprocess.run(["git", "log", "--format=%h %s%n%(trailers:only,unfold)", f"mesh/{report.task['id']}",
                                 "-3"], cwd=repo, capture_output=True, text=True).stdout
        echo("")
        echo(f"branch mesh/{report.task['id']} (never merged, never pushed):")
        echo(branch.rstrip())
        task = report.task["id"]
        echo("")
        if keep:
            echo(f"kept: {folder}; try, in {repo}:")
        else:
            echo("the demo folder is removed now; run 'mesh demo --keep' to keep it, then in its demo-repo:")
        for command, what in ((f"mesh show {task}", "the rounds again"),
                              (f"mesh report {task}", f"mesh-report-{task}.html: the task on one page"),
                              ("mesh status --label plan:demo", "the scope as a tree"),
                              ("mesh tracker ready --label plan:demo", "what is ready now")):
            echo(f"  {command:38} # {what}")
        return report.exit_code
    finally:
        if not keep:
            from orchestrator.worktree.gitops import worktree_home

            # The task worktree lives in the user's cache, not in the folder: it goes too.
            shutil.rmtree(worktree_home(folder / "demo-repo" / ".git"), ignore_errors=True)
            shutil.rmtree(folder, ignore_errors=True)
