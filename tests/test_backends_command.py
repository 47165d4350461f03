"""The command backend, driven with small Python workers written to tmp_path."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roles.backends import BackendError, CommandBackend, WorkerRequest, get_backend
from roles.prompts import Prompt


def request(role="proposer", round="proposal", attempt=1, worktree=None, text="shared ✓\n") -> WorkerRequest:
    return WorkerRequest(
        role=role,
        round=round,
        task_id="bd-9",
        run_id="run-42",
        attempt=attempt,
        prompt=Prompt(text, "role part\n"),
        worktree=worktree,
    )


def worker(tmp_path: Path, body: str, name: str = "worker.py") -> str:
    """Write a Python worker script and return the command that runs it."""
    script = tmp_path / name
    script.write_text("import os, sys, json, time, subprocess\n" + body, encoding="utf-8")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


ECHO = """
prompt = sys.stdin.read()
json.dump({
    "prompt": prompt,
    "cwd": os.getcwd(),
    "env": {k: os.environ.get(k) for k in ("MESH_ROLE", "MESH_ROUND", "MESH_TASK_ID", "MESH_RUN_ID", "MESH_ATTEMPT",
                                           "MESH_WORKER")},
}, sys.stdout)
"""


def test_prompt_goes_to_stdin_and_env_names_the_call(tmp_path):
    backend = CommandBackend(worker(tmp_path, ECHO))
    response = backend.call(request("skeptic", "critique", attempt=2))
    assert response.error is None and response.duration_s > 0
    answer = json.loads(response.text)
    assert answer["prompt"] == "shared ✓\nrole part\n"
    assert answer["env"] == {
        "MESH_ROLE": "skeptic",
        "MESH_ROUND": "critique",
        "MESH_TASK_ID": "bd-9",
        "MESH_RUN_ID": "run-42",
        "MESH_ATTEMPT": "2",
        "MESH_WORKER": "run-42",
    }


def test_worker_runs_in_the_worktree(tmp_path):
    worktree = tmp_path / "tree"
    worktree.mkdir()
    response = CommandBackend(worker(tmp_path, ECHO)).call(request(worktree=worktree))
    assert Path(json.loads(response.text)["cwd"]).resolve() == worktree.resolve()


def test_non_zero_exit_is_no_response_with_stderr_in_detail(tmp_path):
    body = "sys.stdin.read(); print('partial'); print('model overloaded', file=sys.stderr); sys.exit(3)"
    response = CommandBackend(worker(tmp_path, body)).call(request())
    assert (response.text, response.error) == (None, "no_response")
    assert response.detail == "worker exited with status 3: model overloaded"


def test_empty_stdout_is_no_response(tmp_path):
    response = CommandBackend(worker(tmp_path, "sys.stdin.read(); print('   ')")).call(request())
    assert (response.text, response.error) == (None, "no_response")


def test_worker_that_ignores_stdin_still_answers(tmp_path):
    response = CommandBackend(worker(tmp_path, "print('ok')")).call(request(text="x" * 1_000_000))
    assert response.text == "ok\n"


def _dead(pid: int) -> bool:
    """Gone, or a zombie nobody has reaped yet (containers may lack an init that reaps)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_timeout_kills_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    body = (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    backend = CommandBackend(worker(tmp_path, body), timeout_s=1.5)
    started = time.monotonic()
    response = backend.call(request())
    # The profile's name for a worker that did not answer; the detail says it timed out.
    assert (response.text, response.error) == (None, "no_response")
    assert response.detail.startswith("timeout: the worker ran past 1.5s")
    # Not held until the grandchild's 600 s sleep ends (it holds the output pipes); a loaded
    # machine may take long to end the group, but never that long.
    assert time.monotonic() - started < 120
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 60
    while not _dead(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(grandchild)


def test_concurrent_calls_are_independent(tmp_path):
    backend = CommandBackend(worker(tmp_path, ECHO))
    roles = ["critic_a", "critic_b", "skeptic"]
    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = list(pool.map(lambda role: json.loads(backend.call(request(role, "critique")).text), roles))
    assert [answer["env"]["MESH_ROLE"] for answer in answers] == roles


def test_missing_or_bad_commands_are_backend_errors(tmp_path):
    with pytest.raises(BackendError, match="not found or not executable: no-such-worker-xyz"):
        CommandBackend("no-such-worker-xyz --flag")
    with pytest.raises(BackendError, match="empty"):
        CommandBackend("   ")
    with pytest.raises(BackendError, match="cannot split"):
        CommandBackend("claude 'unterminated")
    with pytest.raises(BackendError, match="timeout must be positive"):
        CommandBackend(sys.executable, timeout_s=0)


def test_worker_removed_after_setup_is_a_backend_error(tmp_path):
    program = tmp_path / "agent"
    program.write_text(f"#!{sys.executable}\nprint('hi')\n")
    program.chmod(0o755)
    backend = CommandBackend(str(program))
    assert backend.call(request()).text == "hi\n"
    os.remove(program)
    with pytest.raises(BackendError, match="cannot start worker command"):
        backend.call(request())


def test_get_backend_builds_command(tmp_path):
    backend = get_backend("command", worker_cmd=worker(tmp_path, "print(sys.stdin.read()[:6])"), timeout_s=30, script=None)
    assert isinstance(backend, CommandBackend) and backend.name == "command"
    assert backend.call(request()).text == "shared\n"
