"""Start a bwrap sandbox whose network namespace pasta connects to the outside.

Run as ``python -I -m orchestrator.netjoin PORTS -- bwrap ARGS...`` (``worker_sandbox``
builds that line): bwrap is started with ``--info-fd`` (it reports its child's pid) and
``--block-fd`` (the command waits), pasta joins the child's namespaces and configures the
interface, routes and DNS, forwarding only the loopback ``PORTS`` (comma-separated, or
``none``) to the host, without mapping the gateway to the host's loopback; then the command
is released. This process stays bwrap's parent and exits with its status, so the caller's
timeout and process-group kill work as for a plain bwrap; pasta ends with the namespace.
A pasta that fails ends the call (status 125) before the command ever runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

_PASTA_TIMEOUT_S = 20.0


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


def _pasta_argv(pasta: str, pid: int, ports: str) -> list[str]:
    argv = [pasta, "--config-net", "--quiet", "--no-map-gw", "-t", "none", "-u", "none", "-U", "none",
            "-T", ports]
    if os.geteuid() == 0:
        # As root pasta would switch to "nobody" before it opens the sandbox's namespaces,
        # which then refuses it; it is root's own sandbox it joins.
        argv += ["--runas", "0"]
    return [*argv, str(pid)]


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[1] != "--":
        print("usage: python -m orchestrator.netjoin PORTS -- bwrap ARGS...", file=sys.stderr)
        return 2
    ports, bwrap, rest = argv[0], argv[2], argv[3:]
    pasta = shutil.which("pasta", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if pasta is None:
        print("mesh: pasta is not installed; cannot give the worker a network of its own", file=sys.stderr)
        return 125
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    child = subprocess.Popen([bwrap, "--info-fd", str(info_w), "--block-fd", str(block_r), *rest],
                             pass_fds=(info_w, block_r))
    os.close(info_w)
    os.close(block_r)
    signal.signal(signal.SIGTERM, lambda *_: child.kill())
    pid = _child_pid(info_r)
    os.close(info_r)
    problem = "bwrap did not report its child" if pid is None else None
    if pid is not None:
        try:
            done = subprocess.run(_pasta_argv(pasta, pid, ports), capture_output=True, text=True,
                                  timeout=_PASTA_TIMEOUT_S, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                lines = [line for line in done.stderr.splitlines() if "syslog" not in line]
                problem = f"pasta failed: {lines[-1] if lines else f'exit status {done.returncode}'}"
        except subprocess.TimeoutExpired:
            problem = "pasta did not finish"
    if problem is not None:
        child.kill()
        child.wait()
        print(f"mesh: cannot connect the worker's network: {problem}", file=sys.stderr)
        return 125
    try:
        os.write(block_w, b"x")
    except BrokenPipeError:
        pass  # bwrap already gave up (its own error is on stderr)
    os.close(block_w)
    status = child.wait()
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
