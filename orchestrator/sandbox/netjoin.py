"""Start a bwrap sandbox whose network namespace pasta connects to the outside.

Run as ``python -I -m orchestrator.sandbox.netjoin PORTS -- bwrap ARGS...`` (``worker_sandbox``
builds that line): bwrap is started with ``--info-fd`` (it reports its child's pid) and
``--block-fd`` (the command waits), pasta joins the child's namespaces and configures the
interface, routes and DNS, forwarding only the loopback ``PORTS`` (comma-separated, or
``none``) to the host, without mapping the gateway to the host's loopback; then the command
is released. pasta is started only once bwrap has set up the namespace's loopback (its
address in the namespace's local table): bwrap reports its child before the child adds
127.0.0.1 to ``lo`` with ``NLM_F_EXCL``, and a pasta bringing ``lo`` up first (the kernel then
adds the address itself) made bwrap die with "loopback: Failed RTM_NEWADDR" (seen in CI under
load). ``closed:PORTS`` leaves the namespace without any route out: only the loopback
``PORTS`` lead anywhere (to the host's loopback: a model endpoint, mesh's egress proxy), and
pasta is ready once it listens on each of them in the namespace. This process stays bwrap's parent and exits with its status, so the caller's
timeout and process-group kill work as for a plain bwrap.

pasta runs in the foreground as a child of this process, in its process group: it does not
notice by itself that a namespace it joined by pid is gone, so it is ended here when bwrap
exits, and a kill of the group (the caller's timeout) ends it too. It is ready when the
namespace has its routes (read from ``/proc/<pid>/net/route``). A pasta that fails ends the
call (status 125) before the command ever runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from orchestrator.sandbox.lifetime import die_with_parent

_PASTA_TIMEOUT_S = 20.0
_PASTA_WINDOWS_S = (5.0, 7.0, _PASTA_TIMEOUT_S - 12.0)
_POLL_S = 0.01


def _configured(pid: int) -> bool:
    """True once the namespace of ``pid`` has a route besides loopback (pasta set it up)."""
    for table, skip in (("route", 1), ("ipv6_route", 0)):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as handle:
                rows = [line.split() for line in handle.read().splitlines()[skip:]]
        except OSError:
            continue
        # route: the interface is the first column; ipv6_route: the last.
        if any(row and row[0 if table == "route" else -1] != "lo" for row in rows):
            return True
    return False


def _loopback_set(pid: int) -> bool:
    """True once the namespace of ``pid`` has 127.0.0.1 in its local table (bwrap's loopback
    setup is done), or once ``pid`` is gone (nothing left to wait for)."""
    try:
        with open(f"/proc/{pid}/net/fib_trie", encoding="ascii") as handle:
            return "|-- 127.0.0.1\n" in handle.read()
    except OSError:
        return not os.path.exists(f"/proc/{pid}")


def _wait(ready, pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not ready(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def _listening(pid: int, ports: set[int]) -> bool:
    """True once every port of ``ports`` is listened on in the namespace of ``pid`` (pasta's
    forwards, in a namespace with no route to wait for)."""
    found: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as handle:
                rows = [line.split() for line in handle.read().splitlines()[1:]]
        except OSError:
            continue
        found |= {int(row[1].rsplit(":", 1)[1], 16) for row in rows if len(row) > 3 and row[3] == "0A"}
    return ports <= found


def _start_pasta(argv: list[str], pid: int, ready=_configured) -> tuple[subprocess.Popen | None, str | None]:
    """pasta in the foreground, once the namespace is configured; (process, None) or (None, why).

    A pasta that has not configured the namespace within its window (seen once under heavy
    load in the suite: a call then waited the whole budget) is ended and started again; the
    windows add up to ``_PASTA_TIMEOUT_S``.
    """
    problem = "pasta did not configure the namespace in time"
    for window in _PASTA_WINDOWS_S:
        pasta = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 preexec_fn=die_with_parent)
        deadline = time.monotonic() + window
        while time.monotonic() < deadline:
            if ready(pid):
                return pasta, None
            if pasta.poll() is not None:
                lines = [line for line in pasta.stderr.read().decode("utf-8", "replace").splitlines()
                         if "syslog" not in line]
                problem = f"pasta failed: {lines[-1] if lines else f'exit status {pasta.returncode}'}"
                break
            time.sleep(_POLL_S)
        else:
            problem = "pasta did not configure the namespace in time"
        _stop(pasta)
        if not os.path.exists(f"/proc/{pid}"):
            break  # the sandbox itself is gone: nothing to connect
    return None, problem


def _stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()


def _child_pid(info_fd: int) -> int | None:
    data = b""
    while True:
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError):
            continue
    return None


def _pasta_argv(pasta: str, pid: int, ports: str, closed: bool = False) -> list[str]:
    argv = [pasta, *([] if closed else ["--config-net"]), "--quiet", "--foreground", "--no-map-gw", "-t", "none",
            "-u", "none", "-U", "none", "-T", ports]
    if os.geteuid() == 0:
        # As root pasta would switch to "nobody" before it opens the sandbox's namespaces,
        # which then refuses it; it is root's own sandbox it joins.
        argv += ["--runas", "0"]
    return [*argv, str(pid)]


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[1] != "--":
        print("usage: python -m orchestrator.sandbox.netjoin PORTS -- bwrap ARGS...", file=sys.stderr)
        return 2
    ports, bwrap, rest = argv[0], argv[2], argv[3:]
    closed = ports.startswith("closed:")
    ports = ports.removeprefix("closed:")
    wanted = {int(port) for port in ports.split(",") if port.isdigit()}
    pasta = shutil.which("pasta", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if pasta is None:
        print("mesh: pasta is not installed; cannot give the worker a network of its own", file=sys.stderr)
        return 125
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    child = subprocess.Popen([bwrap, "--info-fd", str(info_w), "--block-fd", str(block_r), *rest],
                             pass_fds=(info_w, block_r), preexec_fn=die_with_parent)
    os.close(info_w)
    os.close(block_r)
    signal.signal(signal.SIGTERM, lambda *_: child.kill())  # pasta then ends in the finally below
    pid = _child_pid(info_r)
    os.close(info_r)
    if pid is None:
        network, problem = None, "bwrap did not report its child"
    elif not _wait(_loopback_set, pid, _PASTA_TIMEOUT_S):
        network, problem = None, "bwrap did not set up the namespace's loopback in time"
    else:
        network, problem = _start_pasta(_pasta_argv(pasta, pid, ports, closed), pid,
                                        (lambda pid: _listening(pid, wanted)) if closed else _configured)
    if network is None:
        child.kill()
        child.wait()
        print(f"mesh: cannot connect the worker's network: {problem}", file=sys.stderr)
        return 125
    try:
        os.write(block_w, b"x")
    except BrokenPipeError:
        pass  # bwrap already gave up (its own error is on stderr)
    os.close(block_w)
    try:
        status = child.wait()
    finally:
        _stop(network)
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
