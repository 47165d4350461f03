"""Attacks on validation, performed for real in the bwrap sandbox: what a test suite the patch
controls can read (``/etc/shadow`` as root), what it can exhaust (memory across children,
``/tmp``, the tree copy, processes), and what its output can carry into the tracker and the
terminal (secrets, terminal escapes). Each attack must end as a typed validation failure
within the timeout, leave nothing running, and name the limit that stopped it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.sandbox import cgroups
from orchestrator.sandbox.bwrap import SANDBOX_UID, Limits, sandbox_user
from orchestrator.sandbox.validation import run_validation, tree_limits_note
from tests.test_sandbox import PY, commit_all, py_file

WHOLE_TREE = cgroups.probe() is None
needs_cgroups = pytest.mark.skipif(not WHOLE_TREE and not os.environ.get("MESH_REQUIRE_CGROUPS"),
                                   reason=f"no control groups here: {cgroups.probe()}")


def validate(repo: Path, commands: list[str], **kwargs):
    return run_validation(commands, cwd=repo, allow=commands, timeout_s=kwargs.pop("timeout_s", 60), **kwargs)


def _left_running(marker: str) -> list[str]:
    """Processes of this attack (their command lines carry ``marker``) still alive on the host."""
    listing = subprocess.run(["ps", "-e", "-o", "uid=,pid=,args="], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if marker in line and "ps -e" not in line]


def _mesh_groups() -> list[str]:
    found = []
    for hierarchy in ("memory", "pids", ""):
        folder = Path("/sys/fs/cgroup") / hierarchy
        if folder.is_dir():
            # This process's groups only: other suites may run on the machine at the same time.
            found += [entry.name for entry in folder.iterdir() if entry.name.startswith(f"mesh-{os.getpid()}-")]
    return found


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    return path


def test_validation_does_not_run_as_root_and_sees_no_shadow(repo):
    command = py_file(repo, "peek.py", (
        "import os, getpass\n"
        "print('uid', os.getuid(), getpass.getuser())\n"
        "for path in ('/etc/shadow', '/etc/gshadow', '/etc/sudoers', '/root/.bashrc', '/etc/ssh'):\n"
        "    try:\n"
        "        print(path, 'READ', open(path).read(40))\n"
        "    except OSError as exc:\n"
        "        print(path, 'refused', type(exc).__name__)\n"
        "print('etc', sorted(os.listdir('/etc')))\n"))
    commit_all(repo)
    [result] = validate(repo, [command])
    assert result.passed, result.stderr_tail
    out = result.stdout_tail
    assert "READ" not in out
    assert ("uid 0 " not in out) if os.geteuid() == 0 else f"uid {os.getuid()} " in out
    if sandbox_user() is not None:
        assert f"uid {SANDBOX_UID} mesh" in out
    listed = out.split("etc ", 1)[1]
    assert "'passwd'" in listed and "'shadow'" not in listed and "'sudoers'" not in listed


def test_the_tests_of_a_real_suite_still_run_as_that_user(repo):
    # pytest's tmp_path, pathlib.home, tempfile and subprocess work for the sandbox's user.
    (repo / "test_it.py").write_text(
        "import os, pathlib, subprocess, sys, tempfile\n"
        "def test_files(tmp_path):\n"
        "    (tmp_path / 'a').write_text('x')\n"
        "    assert pathlib.Path.home().is_dir() and os.access(pathlib.Path.home(), os.W_OK)\n"
        "    with tempfile.NamedTemporaryFile() as handle:\n"
        "        handle.write(b'y')\n"
        "    assert subprocess.run([sys.executable, '-c', 'print(1)'], capture_output=True).stdout == b'1\\n'\n"
        "    pathlib.Path('written-in-tree.txt').write_text('z')\n")
    commit_all(repo)
    [result] = validate(repo, [f"{PY} -m pytest -q -p no:cacheprovider test_it.py"])
    assert result.passed, result.stdout_tail + result.stderr_tail
    assert "1 passed" in result.stdout_tail
    assert not (repo / "written-in-tree.txt").exists()


@needs_cgroups
def test_a_memory_bomb_across_children_hits_the_tree_cap(repo):
    command = py_file(repo, "children.py", (
        "import os, signal, subprocess, sys\n"
        "code = 'import time\\nb = b\"x\" * (150 << 20)\\ntime.sleep(30)'\n"
        "kids = [subprocess.Popen([sys.executable, '-c', code, sys.argv[1]]) for _ in range(6)]\n"
        # The first child to end ends the bomb: one the cap killed (at once), or, with no cap, one
        # that held its memory for its 30 s (exit 0: the command passes and the test fails).
        "pid, status = os.wait()\n"
        "for kid in kids:\n"
        "    if kid.pid != pid:\n"
        "        os.kill(kid.pid, signal.SIGKILL)\n"
        "print('first exit', os.waitstatus_to_exitcode(status))\n"
        "sys.exit(1 if status else 0)\n"))
    commit_all(repo)
    marker = f"bomb-{repo.parent.name}"
    [result] = validate(repo, [f"{command} {marker}"], limits=Limits(memory_mb=512), timeout_s=60)
    assert not result.passed and result.limit == "memory"
    assert not _left_running(marker) and not _mesh_groups()


@needs_cgroups
def test_a_fork_bomb_is_capped_and_ends_within_the_timeout(repo):
    (repo / "bomb.sh").write_text("bomb() { bomb & bomb & wait; }\nbomb\n")
    commit_all(repo)
    marker = f"forks-{repo.parent.name}"
    [result] = validate(repo, [f"sh bomb.sh {marker}"], limits=Limits(max_processes=64, memory_mb=1024), timeout_s=8)
    assert not result.passed and result.limit == "processes"
    assert not _left_running(marker) and not _mesh_groups()


def test_a_tmp_filler_ends_on_the_tmp_size(repo):
    command = py_file(repo, "fill_tmp.py", (
        "import sys\n"
        "try:\n"
        "    with open('/tmp/fill', 'wb') as handle:\n"
        "        for _ in range(100):\n"
        "            handle.write(b'x' * (10 << 20))\n"
        "except OSError as exc:\n"
        "    sys.exit(str(exc))\n"
        "print('filled')\n"))
    commit_all(repo)
    [result] = validate(repo, [command], limits=Limits(memory_mb=256, file_size_mb=2048), timeout_s=60)
    assert not result.passed and "filled" not in result.stdout_tail
    assert result.limit in (("disk", "memory") if WHOLE_TREE else ("disk",))
    assert not _left_running("fill_tmp.py")


def test_a_disk_filler_in_the_tree_ends_on_the_growth_bound(repo, tmp_path):
    command = py_file(repo, "fill_tree.py", (
        "import sys\n"
        "try:\n"
        "    for n in range(30):\n"
        "        with open(f'junk{n}.bin', 'wb') as handle:\n"
        "            handle.write(b'x' * (9 << 20))\n"
        "except OSError as exc:\n"
        "    sys.exit(str(exc))\n"
        "print('filled')\n"))
    commit_all(repo)
    [result] = validate(repo, [command], limits=Limits(memory_mb=2048, file_size_mb=10, tree_growth_mb=64),
                        timeout_s=60)
    assert not result.passed and result.limit == "disk" and "No space left" in result.stderr_tail
    assert not _left_running("fill_tree.py")
    # Nothing of it reached the host's disk: the copy lived on the sandbox's own tmpfs.
    assert not list(repo.glob("junk*")) and not list(Path(tmp_path).rglob("junk0.bin"))


def test_validation_output_is_stripped_scrubbed_and_keeps_no_passed_value(repo):
    command = py_file(repo, "noisy.py", (
        "import os\n"
        "print('\\x1b[2J\\x1b]0;pwned\\x07\\x1b]52;c;aGVsbG8=\\x07red \\x1b[31mtext\\x1b[0m \\u202eevil')\n"
        "print('token', os.environ['DEPLOY_DATABASE_URL'])\n"
        "print('ok\\rprogress\\x00')\n"))
    commit_all(repo)
    env = {"PATH": os.environ["PATH"], "DEPLOY_DATABASE_URL": "postgres://app:hunter2-secret@db/prod"}
    [result] = validate(repo, [command], env=env, env_names=["DEPLOY_DATABASE_URL"])
    assert result.passed
    out = result.stdout_tail
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "\x00" not in out
    assert "red text evil" in out and "hunter2-secret" not in out and "[REDACTED]" in out
    assert "pwned" not in out and "aGVsbG8" not in out


def test_preflight_says_which_limits_hold():
    note = tree_limits_note(Limits(memory_mb=512, max_processes=512, tree_growth_mb=1024))
    assert "512 MB" in note and "+1024 MB" in note
    assert ("control group" in note) if WHOLE_TREE else ("no control group" in note)


def test_a_run_whose_validation_hits_a_limit_says_which_one(tmp_path):
    """End to end: a patch whose test fills the tree copy blocks, and the run report, the
    block detail and ``mesh show`` name the limit."""
    from tests.runkit import PATCH_FEATURE, happy_script, make_workspace, r, synthesis

    ws = make_workspace(tmp_path)
    filler = ("diff --git a/tests/test_fill.py b/tests/test_fill.py\nnew file mode 100644\n--- /dev/null\n"
              "+++ b/tests/test_fill.py\n@@ -0,0 +1,7 @@\n+import unittest\n+\n+\n+class Fill(unittest.TestCase):\n"
              "+    def test_fill(self):\n+        for n in range(40):\n"
              "+            open(f'junk{n}.bin', 'wb').write(b'x' * (8 << 20))\n")
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(PATCH_FEATURE + filler))
    config = ws.root / "small.toml"
    config.write_text((ws.repo / "mesh.toml").read_text().replace("review_max_cycles = 3", "review_max_cycles = 1")
                      .replace("[validation]\n", "[validation]\ntree_growth_mb = 64\nfile_size_limit_mb = 16\n", 1))
    code, report, res = ws.run(script, "--config", str(config))
    assert code == 3 and report["block_reason"] == "validation_failed", res.output
    assert "disk limit hit" in report["block_detail"]
    assert report["validation"][0]["limit"] == "disk"
    shown = ws.mesh("show", "demo-7kq.1")
    assert "disk limit hit" in shown.output
