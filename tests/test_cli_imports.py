"""What each command of ``mesh`` imports: none loads the eval, web (``mesh serve``), MCP or
sandbox packages (nor starlette, uvicorn or the MCP SDK) unless it runs them. Each command runs
in a process of its own, through the console script's entry point, on a small workspace; the
modules it imported are listed at exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from orchestrator.cli.main import cli
from tracker.store import Tracker

# The packages a command may import only when it runs them, each with the commands that do.
_PACKAGES = {"orchestrator.evals": {"eval"}, "orchestrator.web": {"serve"}, "starlette": {"serve"},
             "uvicorn": {"serve"}, "orchestrator.mcp_server": {"mcp"}, "mcp": {"mcp"},
             "orchestrator.sandbox": {"clean"}}  # clean removes the sandbox's worker HOMEs
_WRAPPER = ("import atexit, sys\n"
            "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules))))\n"
            "sys.argv[0] = 'mesh'\n"
            "from orchestrator.cli.start import main\nmain()\n")


def _imported(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MESH_", "BEADS_", "BD_"))}
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *args], cwd=cwd, capture_output=True, timeout=120,
                          env={**env, "COLUMNS": "120"})
    return done, set(done.stderr.decode().rpartition("MODULES ")[2].split())


def _forbidden(modules: set[str], command: str) -> set[str]:
    return {m for m in modules for package, runners in _PACKAGES.items()
            if (m == package or m.startswith(package + ".")) and command not in runners}


def _help_lines() -> list[list[str]]:
    ctx = click.Context(cli)
    lines = [["--help"]]
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        lines.append([name, "--help"])
        if isinstance(command, click.Group) and name != "tracker":
            lines += [[name, sub, "--help"] for sub in command.list_commands(ctx)]
    return lines


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, str]:
    """A git repository with a tracker of two issues; the folder and one issue's id."""
    root = tmp_path_factory.mktemp("imports")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    tracker = Tracker.init(root, prefix="im")
    try:
        first = tracker.create("first task")["id"]
        second = tracker.create("second task")["id"]
        tracker.add_dependency(second, first)
        tracker.add_label(first, "plan-x")
    finally:
        tracker.close()
    return root, first


@pytest.mark.parametrize("args", _help_lines(), ids=" ".join)
def test_no_command_imports_what_only_others_run_to_print_its_help(workspace, args):
    root, _ = workspace
    done, modules = _imported(args, root)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert not _forbidden(modules, ""), args


_RUNS = [["tracker", "ready", "--json"], ["tracker", "list", "--json"], ["tracker", "show", "ID", "--json"],
         ["tracker", "blocked", "--json"], ["tracker", "stats", "--json"], ["tracker", "ready"],
         ["tracker", "blocked"], ["tracker", "stats"], ["tracker", "doctor"], ["status", "--label", "plan-x"], ["logs"], ["usage"],
         ["prices"], ["clean"], ["show", "ID"]]


@pytest.mark.parametrize("args", _RUNS, ids=lambda a: " ".join(a))
def test_no_command_imports_what_only_others_run(workspace, args):
    root, issue = workspace
    args = [issue if a == "ID" else a for a in args]
    done, modules = _imported(args, root)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "tracker.reader" in modules  # it did its work (every read and write goes through it)
    assert not _forbidden(modules, args[0]), args
