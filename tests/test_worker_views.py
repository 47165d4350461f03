"""Issue 43, item 6: a worker call's sandbox files (its ``/etc/passwd`` and ``group``, the
unpacking's) go when the call ends, however it ends, and ``mesh clean`` removes those a killed
process left. Real sandboxed calls (bwrap, the real worker launcher, a private HOME carried back),
several at once in one process; ``mesh clean`` in-process against a live and a gone process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.sandbox import worker_homes
from orchestrator.sandbox.bwrap import require_bwrap
from orchestrator.sandbox.worker_sandbox import worker_launcher
from roles.backends import CommandBackend, WorkerRequest
from roles.prompts import Prompt
from tests.test_worker_contained import _home, _repo

# A worker that reads its sandbox's passwd (written in the views folder for this call), writes to
# its HOME (so the HOME is carried back and unpacked in a sandbox of its own), then does as told.
WORKER = r'''
import json, os, sys, time
order = json.loads(sys.stdin.read())
open(os.path.join(os.environ["HOME"], "note.txt"), "w").write("x")
user = [line for line in open("/etc/passwd") if line.startswith("mesh:")]
time.sleep(order.get("sleep", 0))
release = order.get("wait_for")
while release and not os.path.exists(release):  # held until the test lets it go (a file it makes)
    time.sleep(0.05)
if order.get("fail"):
    sys.exit(3)
print(json.dumps({"user": user}))
'''


@pytest.fixture
def bwrap():
    return require_bwrap()


@pytest.fixture
def made(monkeypatch):
    """Every call folder the launcher and the unpacking asked for, in order."""
    found: list[Path] = []
    real = worker_homes.call_folder

    def recording(scratch: Path, kind: str) -> Path:
        folder = real(scratch, kind)
        found.append(folder)
        return folder

    monkeypatch.setattr(worker_homes, "call_folder", recording)
    return found


def _backend(tmp_path: Path, bwrap: str, timeout_s: float = 120) -> tuple[CommandBackend, Path]:
    program = tmp_path / "bin" / "worker"
    program.parent.mkdir(exist_ok=True)
    program.write_text(f"#!{sys.executable}\n{WORKER}")
    program.chmod(0o755)
    root = tmp_path / "homes"
    launcher = worker_launcher(bwrap, private_root=root, network="host")
    return CommandBackend(str(program), timeout_s, launcher=launcher), root.parent / "homes-views"


def _call(backend: CommandBackend, repo: Path, task: str, role: str = "proposer", **order):
    return backend.call(WorkerRequest(role=role, round="proposal", task_id=task, run_id="run-1", attempt=1,
                                      prompt=Prompt(json.dumps(order), ""), worktree=repo))


def _leftovers(views: Path) -> list[str]:
    return sorted(path.name for path in views.iterdir() if path.name.startswith("etc-"))


def test_each_call_removes_its_sandbox_files_however_it_ends(tmp_path, bwrap, made, monkeypatch):
    monkeypatch.setenv("HOME", str(_home(tmp_path)))
    repo = _repo(tmp_path / "repo")
    backend, views = _backend(tmp_path, bwrap)
    answer = _call(backend, repo, "t-1")
    assert answer.text, answer.detail
    assert json.loads(answer.text)["user"][0].startswith("mesh:x:")  # the call's passwd was shown
    kinds = [folder.name.rsplit("-", 2)[0] for folder in made]
    assert kinds == ["etc", "etc-unpack"] and all(f"-{os.getpid()}-" in folder.name for folder in made)
    assert _leftovers(views) == []
    # A failing call, then one killed at its timeout.
    failed = _call(backend, repo, "t-1", fail=True)
    assert not failed.text and "status 3" in (failed.detail or "")
    slow, _ = _backend(tmp_path, bwrap, timeout_s=3)
    timed_out = _call(slow, repo, "t-1", sleep=30)
    assert (timed_out.detail or "").startswith("timeout: "), timed_out.detail
    assert len(made) >= 5 and _leftovers(views) == []


def test_calls_at_once_in_one_process_never_share_or_remove_each_others_files(tmp_path, bwrap, made, monkeypatch):
    monkeypatch.setenv("HOME", str(_home(tmp_path)))
    repo = _repo(tmp_path / "repo")
    backend, views = _backend(tmp_path, bwrap)
    answers: dict[str, object] = {}
    during: list[list[str]] = []

    release = tmp_path / "bin" / "release"  # the program's folder: the workers see it, read-only

    def ask(role: str) -> None:
        answers[role] = _call(backend, repo, "t-1", role=role, wait_for=str(release))

    threads = [threading.Thread(target=ask, args=(f"critic-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    # Each call holds until all four run at once (counted, not timed); then they are let go.
    while any(thread.is_alive() for thread in threads):
        during.append(_leftovers(views))
        if not release.exists() and len([n for n in during[-1] if not n.startswith("etc-unpack-")]) == 4:
            release.write_text("go")
        threads[0].join(0.05)
    for thread in threads:
        thread.join()
    assert all(answer.text for answer in answers.values()), [answer.detail for answer in answers.values()]
    assert len(made) == 8 and len(set(made)) == 8  # a launch and an unpacking per call, each its own
    assert max(len([name for name in seen if not name.startswith("etc-unpack-")]) for seen in during) == 4
    assert _leftovers(views) == []


def _gone_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_mesh_clean_removes_what_a_gone_process_left_and_keeps_a_live_ones(tmp_path, monkeypatch):
    from orchestrator.sandbox.bwrap import write_identity
    from tests.runkit import make_workspace

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ws = make_workspace(tmp_path)
    views = tmp_path / "cache" / "mesh-worker-homes-views"
    dead, alive = _gone_pid(), subprocess.Popen(["sleep", "60"])
    try:
        stale = [views / f"etc-{dead}-0", views / f"etc-unpack-{dead}-1", views / f"etc-{dead}"]  # and an older mesh's
        live = [views / f"etc-{alive.pid}-2", views / f"etc-unpack-{os.getpid()}-3"]  # another process's, and ours
        for folder in stale + live:
            write_identity(folder, "/")
        (views / "git-0123456789abcdef").mkdir()  # a repository's git view: not a call's
        (views / f"etc-{dead}-x").mkdir()  # not a name mesh gives

        def clean(*extra: str) -> dict[str, dict]:
            done = ws.mesh("clean", "--repo", str(ws.repo), "--json", *extra)
            assert done.exit_code == 0, done.output
            return {item["name"]: item for item in json.loads(done.stdout) if item["kind"] == "home"}

        plan = clean()
        assert all(plan[str(folder)]["action"] == "remove" and f"process {dead} is gone" in plan[str(folder)]["why"]
                   for folder in stale)
        assert all(plan[str(folder)]["action"] == "keep" and "still runs" in plan[str(folder)]["why"]
                   for folder in live)
        assert all(folder.is_dir() for folder in stale)  # a dry run removes nothing
        done = clean("--yes")
        assert all(done[str(folder)]["action"] == "removed" for folder in stale)
        assert not any(folder.exists() for folder in stale)
        assert all(folder.is_dir() for folder in live)
        assert (views / "git-0123456789abcdef").is_dir() and (views / f"etc-{dead}-x").is_dir()
        text = ws.mesh("clean", "--repo", str(ws.repo)).output
        assert f"a worker call's sandbox files; its process {alive.pid} still runs" in text
    finally:
        alive.kill()
        alive.wait()
