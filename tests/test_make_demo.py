"""After ``make demo`` a newcomer knows where ``mesh`` is (issue 35, item 7): the real Makefile
target run (the venv and the sandbox taken as made), its last line naming the command, which
then works as plain ``mesh`` the way it says; the README says the same."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_make_demo_says_where_mesh_is_and_how_to_call_it_as_mesh(tmp_path):
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "mesh").is_file() or shutil.which("make") is None:
        pytest.skip("needs make and mesh installed beside this interpreter (make install)")
    # -o: the venv and the sandbox count as made; BIN: the venv this suite runs in.
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed", "-o", "sandbox", "demo",
                           f"BIN={bin_dir}"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    last = done.stdout.rstrip().splitlines()[-1]
    assert last == (f"mesh is {bin_dir}/mesh; to call it as mesh: source {bin_dir}/activate"
                    f' (or export PATH="{bin_dir}:$PATH")')
    # What the line says works: with that PATH, plain `mesh` is this mesh.
    export = last.split("(or ", 1)[1].rstrip(")")
    shell = subprocess.run(["sh", "-c", f"{export} && cd {shlex.quote(str(tmp_path))} && command -v mesh && mesh --help"],
                           capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines()[0] == f"{bin_dir}/mesh" and "Usage: mesh" in shell.stdout
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "the command is `.venv/bin/mesh` (the demo's last line names it)" in readme
    assert "`source .venv/bin/activate`" in readme and '`export PATH="$PWD/.venv/bin:$PATH"`' in readme
