"""netjoin connects a sandbox's network namespace with pasta: a pasta that never configures
the namespace is ended and started again, and none is left behind."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from orchestrator.sandbox import netjoin
from orchestrator.sandbox.bwrap import bwrap_argv, require_bwrap
from orchestrator.sandbox.worker_sandbox import network_problem


@pytest.fixture
def sandbox():
    """A bwrap sandbox with a network namespace of its own, held before its command runs."""
    bwrap = require_bwrap()
    if network_problem(bwrap) is not None and not os.environ.get("CI"):
        pytest.skip("no pasta here")
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    argv = bwrap_argv(bwrap, ["/bin/sh", "-c", "cat /proc/net/route"], network=False, chdir="/")
    child = subprocess.Popen([argv[0], "--info-fd", str(info_w), "--block-fd", str(block_r), *argv[1:]],
                             pass_fds=(info_w, block_r), stdout=subprocess.PIPE, text=True,
                             env={"PATH": "/usr/bin:/bin"})
    os.close(info_w)
    os.close(block_r)
    pid = netjoin._child_pid(info_r)
    os.close(info_r)
    yield pid, child, block_w
    child.kill()
    child.wait()


def test_a_pasta_that_hangs_is_started_again_and_the_sandbox_gets_its_network(sandbox, tmp_path, monkeypatch):
    pid, child, block_w = sandbox
    pasta = shutil.which("pasta", path="/usr/bin:/bin:/usr/sbin:/sbin")
    real = netjoin._pasta_argv(pasta, pid, "none")
    # The first start of this "pasta" hangs without configuring anything; the second is pasta.
    first = tmp_path / "started-once"
    wrapper = tmp_path / "pasta.sh"
    wrapper.write_text(f'#!/bin/sh\nif [ ! -e {first} ]; then : > {first}; exec sleep 600; fi\nexec "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(netjoin, "_PASTA_WINDOWS_S", (0.5, 10.0))
    process, problem = netjoin._start_pasta([str(wrapper), *real], pid)
    assert problem is None and process is not None
    assert first.exists()
    os.write(block_w, b"x")
    os.close(block_w)
    routes = child.stdout.read().splitlines()[1:]
    child.wait()
    netjoin._stop(process)
    assert any(line.split()[0] != "lo" for line in routes)  # pasta's interface has the route


def test_a_pasta_that_never_configures_ends_with_a_reason_and_leaves_no_process(sandbox, tmp_path, monkeypatch):
    pid, child, _ = sandbox
    marker = f"mesh-netjoin-hang-{os.getpid()}"
    wrapper = tmp_path / "pasta.sh"
    wrapper.write_text(f"#!/bin/bash\nexec -a {marker} sleep 600\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(netjoin, "_PASTA_WINDOWS_S", (0.3, 0.3))
    process, problem = netjoin._start_pasta([str(wrapper)], pid)
    assert process is None
    assert problem == "pasta did not configure the namespace in time"
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == []


def test_pasta_starts_only_once_bwrap_has_set_up_the_loopback(monkeypatch, capfd):
    """bwrap reports its child before the child adds 127.0.0.1 to lo (with NLM_F_EXCL); a pasta
    bringing lo up first made bwrap die "loopback: Failed RTM_NEWADDR" (a CI failure under load).
    The namespace's local table is read the moment pasta is started."""
    bwrap = require_bwrap()
    if network_problem(bwrap) is not None and not os.environ.get("CI"):
        pytest.skip("no pasta here")
    tables: list[str] = []
    real = netjoin._start_pasta

    def start(argv, pid, ready=netjoin._configured):
        with open(f"/proc/{pid}/net/fib_trie", encoding="ascii") as handle:
            tables.append(handle.read())
        return real(argv, pid, ready)

    monkeypatch.setattr(netjoin, "_start_pasta", start)
    for _ in range(20):
        argv = bwrap_argv(bwrap, ["/bin/true"], network=False, chdir="/")
        assert netjoin.main(["none", "--", *argv]) == 0, capfd.readouterr().err
    assert len(tables) == 20 and all("|-- 127.0.0.1\n" in table for table in tables)


def test_the_loopback_is_waited_for_while_bwrap_holds_its_child_before_setting_it_up(tmp_path):
    """With --userns-block-fd bwrap holds its child before the loopback setup: the namespace has
    no loopback address yet, and has it once released."""
    bwrap = require_bwrap()
    info_r, info_w = os.pipe()
    hold_r, hold_w = os.pipe()
    block_r, block_w = os.pipe()
    argv = bwrap_argv(bwrap, ["/bin/true"], network=False, chdir="/")
    if "--unshare-user" not in argv:
        argv = [argv[0], "--unshare-user", *argv[1:]]
    child = subprocess.Popen([argv[0], "--info-fd", str(info_w), "--userns-block-fd", str(hold_r),
                              "--block-fd", str(block_r), *argv[1:]],
                             pass_fds=(info_w, hold_r, block_r), env={"PATH": "/usr/bin:/bin"})
    for fd in (info_w, hold_r, block_r):
        os.close(fd)
    try:
        pid = netjoin._child_pid(info_r)
        assert pid is not None
        # With --userns-block-fd the caller writes the user namespace's maps.
        for name, own in (("uid_map", os.getuid()), ("gid_map", os.getgid())):
            if name == "gid_map":
                with open(f"/proc/{pid}/setgroups", "w") as handle:
                    handle.write("deny")
            with open(f"/proc/{pid}/{name}", "w") as handle:
                handle.write(f"{own} {own} 1\n")
        assert not netjoin._wait(netjoin._loopback_set, pid, 0.3)
        os.write(hold_w, b"x")
        assert netjoin._wait(netjoin._loopback_set, pid, 30.0)
        os.write(block_w, b"x")
        assert child.wait(timeout=30) == 0
    finally:
        os.close(info_r)
        os.close(hold_w)
        os.close(block_w)
        child.kill()
        child.wait()
