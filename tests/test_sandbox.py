"""The bwrap sandbox, for real: what a sandboxed command sees, what it cannot do, what it is given."""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import ConfigError, MeshConfig, load_config
from orchestrator.sandbox.bwrap import (
    SANDBOX_HOME,
    SANDBOX_TREE,
    Limits,
    SandboxUnavailable,
    bwrap_argv,
    require_bwrap,
)
from orchestrator.sandbox.worker_sandbox import worker_launcher
from orchestrator.sandbox.validation import materialize_tree, run_validation

PY = shlex.quote(sys.executable)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def commit_all(repo: Path, message: str = "state") -> str:
    """Commit everything in ``repo`` (a git repository from the first call) and return the commit id."""
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def py_file(repo: Path, name: str, code: str) -> str:
    """Write ``code`` as ``name`` in ``repo`` and return the command line that runs it."""
    (repo / name).write_text(code)
    return f"{PY} {name}"


def validate(repo: Path, commands: list[str], **kwargs):
    return run_validation(commands, cwd=repo, allow=commands, timeout_s=kwargs.pop("timeout_s", 60), **kwargs)


# ---------------------------------------------------------------- finding bwrap


def test_bwrap_is_found_and_can_create_the_namespaces():
    assert os.path.isabs(require_bwrap())


def test_no_bwrap_on_path_is_one_line_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable) as info:
        require_bwrap()
    message = str(info.value)
    assert "\n" not in message
    assert "bwrap" in message and "apt-get install bubblewrap" in message and 'validation.sandbox = "none"' in message


def test_a_bwrap_that_cannot_create_namespaces_is_unavailable(tmp_path, monkeypatch):
    # A real program standing where bwrap is expected, failing the way bwrap does on a host
    # that forbids unprivileged user namespaces.
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable) as info:
        require_bwrap()
    assert "\n" not in str(info.value) and "namespace" in str(info.value)


# ---------------------------------------------------------------- the view from inside


def run_inside(command: list[str], *, env: dict[str, str], network: bool = False, **kwargs):
    argv = bwrap_argv(require_bwrap(), command, network=network, chdir="/", **kwargs)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_proc_1_environ_inside_is_only_the_given_environment(monkeypatch):
    monkeypatch.setenv("MESH_SIGNING_KEY", "canary-signing-key-0001")
    done = run_inside([sys.executable, "-c", "print(open('/proc/1/environ').read())"],
                      env={"PATH": "/usr/bin:/bin", "ONLY": "this"})
    assert done.returncode == 0, done.stderr
    assert "ONLY=this" in done.stdout and "canary-signing-key-0001" not in done.stdout


def test_only_the_sandbox_processes_are_visible():
    done = run_inside([sys.executable, "-c", "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"],
                      env={"PATH": "/usr/bin:/bin"})
    pids = json.loads(done.stdout)
    assert len(pids) <= 3  # bwrap's init, the command, nothing of the host


def test_the_system_is_read_only_and_capabilities_are_dropped():
    code = ("import os\n"
            "caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]\n"
            "try:\n    open('/usr/mesh-written', 'w')\n    wrote = True\nexcept OSError:\n    wrote = False\n"
            "print(caps, wrote)\n")
    done = run_inside([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"})
    assert done.stdout.split() == ["0000000000000000", "False"]
    assert not os.path.exists("/usr/mesh-written")


def test_home_and_the_repository_are_not_visible(tmp_path):
    repo = tmp_path / "repo"
    commit_all(repo)
    code = (f"import os\nprint(os.path.exists({str(repo)!r}), os.path.exists({str(Path.home())!r} + '/.bashrc'),"
            f" os.path.exists({str(tmp_path)!r}))\n")
    done = run_inside([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"})
    assert done.stdout.split() == ["False", "False", "False"]


# ---------------------------------------------------------------- the committed tree


def test_materialize_writes_exactly_the_committed_tree(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pkg").mkdir()
    (repo / "pkg" / "mod.py").write_text("X = 1\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho ok\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("pkg/mod.py")
    # export-ignore would hide a file from `git archive`; the tree copy must still hold it.
    (repo / ".gitattributes").write_text("hidden.py export-ignore\n")
    (repo / "hidden.py").write_text("H = 1\n")
    first = commit_all(repo, "first")
    (repo / "later.py").write_text("L = 1\n")
    commit_all(repo, "second")
    sub = tmp_path / "sub"
    commit_all(sub)
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendored")
    commit_all(repo, "third")
    (repo / "untracked.py").write_text("U = 1\n")

    dest = tmp_path / "copy"
    assert materialize_tree(repo, "HEAD", dest) == git(repo, "rev-parse", "HEAD").strip()
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert files == [".gitattributes", ".gitmodules", "hidden.py", "later.py", "link", "pkg", "pkg/mod.py", "run.sh"]
    assert os.readlink(dest / "link") == "pkg/mod.py"
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) & 0o111
    assert not stat.S_IMODE((dest / "hidden.py").stat().st_mode) & 0o111

    older = tmp_path / "older"
    materialize_tree(repo, first, older)
    assert not (older / "later.py").exists() and (older / "hidden.py").exists()


def test_materialize_needs_a_checkout_and_a_commit(tmp_path):
    with pytest.raises(ValueError, match="git"):
        materialize_tree(tmp_path, "HEAD", tmp_path / "copy")
    repo = tmp_path / "repo"
    commit_all(repo)
    with pytest.raises(ValueError):
        materialize_tree(repo, "no-such-ref", tmp_path / "copy")


def test_validation_runs_the_given_commit_not_the_worktree(tmp_path):
    repo = tmp_path / "repo"
    (repo).mkdir()
    (repo / "check.py").write_text("print('committed')\n")
    first = commit_all(repo)
    (repo / "check.py").write_text("print('edited later')\n")
    commit_all(repo)
    (repo / "check.py").write_text("print('uncommitted')\n")
    [at_head] = validate(repo, [f"{PY} check.py"])
    [at_first] = validate(repo, [f"{PY} check.py"], commit=first)
    assert (at_head.stdout_tail, at_first.stdout_tail) == ("edited later\n", "committed\n")


def test_the_tree_is_writable_and_thrown_away(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    command = py_file(repo, "write.py", "open('made.txt', 'w').write('x')\nimport os\nprint(os.getcwd())\n")
    commit_all(repo)
    [result] = validate(repo, [command])
    assert result.passed and result.stdout_tail.strip() == SANDBOX_TREE
    assert not (repo / "made.txt").exists()


def test_home_is_private_writable_and_empty(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    command = py_file(repo, "home.py", "import os\nh = os.environ['HOME']\nopen(h + '/f', 'w').write('1')\n"
                                       "print(h, sorted(os.listdir(h)))\n")
    commit_all(repo)
    [result] = validate(repo, [command])
    assert result.stdout_tail.strip() == f"{SANDBOX_HOME} ['f']"


def test_there_is_no_network(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    repo = tmp_path / "repo"
    repo.mkdir()
    code = ("import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=3)\n    print('connected')\n"
            "except OSError as exc:\n    print('refused', exc.errno)\n" % port)
    command = py_file(repo, "net.py", code)
    commit_all(repo)
    [result] = validate(repo, [command])
    assert result.stdout_tail.startswith("refused")


# ---------------------------------------------------------------- limits


def test_memory_limit_stops_a_greedy_command(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    # Written, not just reserved: a control group counts the pages used, RLIMIT_DATA what is written.
    command = py_file(repo, "greedy.py", "b = b'x' * (300 * 1024 * 1024)\nprint('allocated')\n")
    commit_all(repo)
    [small] = validate(repo, [command], limits=Limits(memory_mb=128))
    assert not small.passed and "allocated" not in small.stdout_tail
    assert small.limit == "memory" or "MemoryError" in small.stderr_tail, small
    [roomy] = validate(repo, [command], limits=Limits(memory_mb=4096))
    assert roomy.passed and roomy.stdout_tail == "allocated\n"


def test_file_size_limit_stops_a_big_write(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    command = py_file(repo, "big.py", "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                                      "open('big.bin', 'wb').write(b'x' * (3 * 1024 * 1024))\nprint('wrote')\n")
    commit_all(repo)
    [result] = validate(repo, [command], limits=Limits(file_size_mb=1))
    assert not result.passed and "File too large" in result.stderr_tail


def test_cpu_limit_stops_a_busy_loop(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    command = py_file(repo, "spin.py", "while True:\n    pass\n")
    commit_all(repo)
    [result] = validate(repo, [command], limits=Limits(cpu_s=1), timeout_s=120)
    assert result.reason is None and result.exit_code not in (0, None)


# ---------------------------------------------------------------- command workers


def test_a_sandboxed_worker_reads_no_secret_and_writes_only_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MESH_SIGNING_KEY", "canary-signing-key-0002")
    home = tmp_path / "home"
    home.mkdir()
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    code = ("import os, json\nout = {}\nfor name in ('home', 'worktree', 'repo'):\n"
            "    try:\n        open(os.path.join(os.environ['DIRS_' + name.upper()], 'w.txt'), 'w').write('1')\n"
            "        out[name] = 'written'\n    except OSError:\n        out[name] = 'refused'\n"
            "out['pid1'] = open('/proc/1/environ').read()\nout['cwd'] = os.getcwd()\nprint(json.dumps(out))\n")
    launch = worker_launcher(require_bwrap(), repo=repo, private_root=tmp_path / "homes")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "DIRS_HOME": str(home), "DIRS_WORKTREE": str(worktree),
           "DIRS_REPO": str(repo), "MESH_SIGNING_KEY": "canary-signing-key-0002"}
    launched = launch([sys.executable, "-c", code], env, str(worktree))
    run_env = launched.env
    launched.begin()
    try:
        done = subprocess.run(launched.argv, env=run_env, preexec_fn=launched.prepare, capture_output=True, text=True,
                              timeout=60)
    finally:
        launched.finish()
    seen = json.loads(done.stdout)
    # HOME is its private one; the worktree is read-only and the checkout is not there at all.
    assert (seen["home"], seen["worktree"], seen["repo"]) == ("written", "refused", "refused")
    private = tmp_path / "homes" / "no-repository" / "no-task" / "no-role" / Path(sys.executable).name
    assert not (home / "w.txt").exists() and (private / "w.txt").exists()
    assert seen["cwd"] == str(worktree)
    assert "canary-signing-key-0002" not in done.stdout and "MESH_SIGNING_KEY" not in run_env


# ---------------------------------------------------------------- configuration


def test_sandbox_config_keys_and_defaults(tmp_path):
    config = MeshConfig()
    assert (config.validation.sandbox, config.validation.env, config.worker_env) == ("bwrap", [], [])
    (tmp_path / "mesh.toml").write_text('worker_env = ["ANTHROPIC_API_KEY"]\n[validation]\nsandbox = "none"\n'
                                        'env = ["DATABASE_URL"]\nmemory_limit_mb = 512\n')
    loaded = load_config(tmp_path)
    assert (loaded.validation.sandbox, loaded.validation.env, loaded.worker_env) == (
        "none", ["DATABASE_URL"], ["ANTHROPIC_API_KEY"])
    assert loaded.validation.limits.memory_mb == 512


@pytest.mark.parametrize("text", ['[validation]\nsandbox = "docker"\n', 'worker_env = ["MESH_SIGNING_KEY"]\n',
                                  '[validation]\nenv = ["MESH_SIGNING_KEY"]\n', '[validation]\nenv = ["A B"]\n'])
def test_bad_sandbox_config_is_refused(tmp_path, text):
    (tmp_path / "mesh.toml").write_text(text)
    with pytest.raises(ConfigError):
        load_config(tmp_path)


def test_an_allowed_program_outside_the_system_brings_only_its_own_folder(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    commit_all(repo)
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    (tmp_path / "tools" / "secret.txt").write_text("s")
    tool = tools / "tool"
    tool.write_text(f"#!/bin/sh\ntest -e {tmp_path / 'tools' / 'secret.txt'} && echo visible || echo hidden\n")
    tool.chmod(0o755)
    [result] = validate(repo, [str(tool)])
    assert result.passed and result.stdout_tail == "hidden\n"

    # A program sitting in HOME itself is not worth showing all of HOME for: it is not found.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    in_home = home / "tool"
    in_home.write_text("#!/bin/sh\necho ran\n")
    in_home.chmod(0o755)
    [refused] = validate(repo, [str(in_home)])
    assert not refused.passed and "ran" not in refused.stdout_tail


def test_a_bind_below_tmp_keeps_tmp_writable_for_the_sandbox_user(tmp_path):
    """A checkout under /tmp puts the running Python's virtualenv below /tmp: the folders
    bwrap makes above a bind are opened up for the sandbox's user, but /tmp keeps its sticky,
    world-writable mode (found running the suite from a clone in /tmp)."""
    from orchestrator.sandbox.bwrap import sandbox_user

    shown = tmp_path / "venv-like"
    shown.mkdir()
    script = "echo x > /tmp/written && echo ok"
    argv = bwrap_argv(require_bwrap(), ["/bin/sh", "-c", script], network=False, chdir="/",
                      ro_binds=[(str(shown), str(shown))], user=sandbox_user())
    assert "/tmp" not in [argv[i + 2] for i, arg in enumerate(argv) if arg == "--chmod"]
    done = subprocess.run(argv, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert done.stdout == "ok\n", done.stderr
