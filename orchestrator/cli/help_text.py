"""The text of ``mesh --help`` as click prints it on a terminal of 80 columns or more, kept
here so that ``orchestrator.cli.start`` prints it without importing click and every command
module (about half the start of ``mesh --help``).

It is generated, not written: ``python -m orchestrator.cli.help_text`` writes it anew from the
command line itself, and ``tests/test_bd_hot.py`` fails, naming that command, whenever the
command line's help and this text differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["MESH_HELP", "render"]

MESH_HELP = (
    'Usage: mesh [OPTIONS] COMMAND [ARGS]...\n'
    '\n'
    '  mesh: take one beads task from ready to closed with an LLM team.\n'
    '\n'
    '  A proposer plans, three critics object, a synthesizer writes one unified\n'
    '  diff, five roles vote, the patch is applied in a git worktree and validated,\n'
    '  a third-party reviewer approves, and every round is checkpointed into the\n'
    '  tracker as an [orch:*] comment.\n'
    '\n'
    'Options:\n'
    '  --db FILE     Tracker database (default: .beads/mesh.db of the enclosing\n'
    '                workspace; env MESH_DB).\n'
    '  --actor TEXT  Who writes (env MESH_ACTOR; default $USER).\n'
    '  --version     Show the version and exit.\n'
    '  -h, --help    Show this message and exit.\n'
    '\n'
    'Commands:\n'
    "  bd        bd's command line on this tracker (the same as the bd command...\n"
    '  ci-close  Close approved tasks from CI after checking their evidence...\n'
    '  clean     Remove the mesh/<task> branches and worktrees of landed or...\n'
    '  demo      The offline end-to-end demo: a real patch, real tests, one...\n'
    '  drain     Run every ready task of the scope, in parallel, landing each...\n'
    "  eval      Measure on your repository's history whether a team beats one...\n"
    '  forge     Pull requests on the configured forge ([forge] in mesh.toml).\n'
    '  init      Set a project up: detect its toolchains, write mesh.toml,...\n'
    '  logs      Logged worker calls, newest first: role, round, model,...\n'
    '  mcp       Serve mesh over MCP: an agent session creates tasks, starts...\n'
    '  prices    The model price table in use, with its date; --update-from...\n'
    '  report    Write one self-contained HTML page of a task: rounds, votes,...\n'
    '  resume    Continue an interrupted run from its [orch:*] checkpoints...\n'
    "  retry     Re-open a blocked TASK for a new run (its earlier runs'...\n"
    '  review    Review a run that waits for a person (reviewer = "human", or...\n'
    '  run       Take one scoped task from ready to closed (or blocked),...\n'
    "  schema    Print the JSON schema of a round's answer (or, with...\n"
    '  serve     Serve the live web view of the tracker: board, runs, drains,...\n'
    "  show      A task's run history from its comments: rounds, votes,...\n"
    '  status    The scope as a tree: epic, tasks, state, blockers, branch,...\n'
    "  tracker   Work the issue tracker by hand (bd's commands, flags and JSON...\n"
    '  usage     Tokens, cache reads and writes, and dollars by task, role,...\n'
)  # generated


def render() -> str:
    """``mesh --help`` as click renders it at 80 columns (imports the whole command line)."""
    from orchestrator.cli.main import cli

    # On a terminal of 80 columns or more click formats to 78 (min(columns, 80) - 2).
    with cli.context_class(cli, info_name="mesh", terminal_width=78, **cli.context_settings) as ctx:
        return cli.get_help(ctx) + "\n"


def _write() -> None:
    path = Path(__file__)
    text = path.read_text(encoding="utf-8")
    head, _, rest = text.partition("\nMESH_HELP = (")
    _, _, tail = rest.partition("\n)  # generated\n")
    lines = "".join(f"    {line!r}\n" for line in render().splitlines(keepends=True))
    path.write_text(f"{head}\nMESH_HELP = (\n{lines})  # generated\n{tail}", encoding="utf-8")


if __name__ == "__main__":
    _write()
    sys.exit(0)
