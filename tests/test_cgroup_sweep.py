"""Issue 34, item 8: the control groups mesh makes for calls are removed when the call ends, and
those a killed run left behind are swept by the next process that starts (real groups, a real
SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.sandbox import cgroups

pytestmark = pytest.mark.skipif(cgroups.probe() is not None, reason=f"no control groups here: {cgroups.probe()}")

# A mesh process that made a group for a call and was killed outright before it could remove it.
KILLED = r'''
import os, signal, sys
from orchestrator.sandbox import cgroups
group = cgroups.make_group(64 << 20, 8)
print("\n".join(str(folder) for folder in group.folders), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
'''
NEXT_START = r'''
from orchestrator.sandbox import cgroups
print(cgroups.probe())
'''


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1],
                          timeout=120)


def _age(folders: list[Path], seconds: float) -> None:
    past = time.time() - seconds
    for folder in folders:
        os.utime(folder, (past, past))


def test_a_killed_runs_group_is_swept_by_the_next_start():
    done = _python(KILLED)
    assert done.returncode == -signal.SIGKILL
    folders = [Path(line) for line in done.stdout.split()]
    assert folders and all(folder.is_dir() for folder in folders)
    # Too young: its maker could be a process of another pid namespace about to join it.
    assert _python(NEXT_START).stdout.strip() == "None"
    assert all(folder.is_dir() for folder in folders)
    _age(folders, 3600)
    assert _python(NEXT_START).stdout.strip() == "None"
    assert not any(folder.exists() for folder in folders)


def test_a_group_with_a_process_in_it_or_of_a_live_process_is_left_alone():
    group = cgroups.make_group(64 << 20, 8)
    try:
        _age(group.folders, 3600)
        assert _python(NEXT_START).stdout.strip() == "None"  # its maker (this process) is alive
        assert all(folder.is_dir() for folder in group.folders)
    finally:
        group.kill_and_remove()
    done = _python(KILLED)
    folders = [Path(line) for line in done.stdout.split()]
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for folder in folders:
            (folder / "cgroup.procs").write_text(str(sleeper.pid))
        _age(folders, 3600)
        # Only this test's groups are asked of: a sweep may also remove what other tests' killed
        # runs (run beside this one) left, which is its job.
        swept = set(cgroups.sweep(min_age_s=0))
        assert not swept & {str(folder) for folder in folders} and all(folder.is_dir() for folder in folders)
    finally:
        sleeper.kill()
        sleeper.wait()
        cgroups.TreeGroup(folders, 2 if len(folders) == 1 else 1, 0, 0).kill_and_remove()
    assert not any(folder.exists() for folder in folders)
