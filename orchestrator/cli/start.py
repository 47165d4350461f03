"""The ``mesh`` console script: ``mesh tracker ready/list/show --json`` answered before click
and the command modules are imported (``tracker.bd_hot``), everything else by the full
command line (``orchestrator.cli.main``).

The orchestrator and agents run ``mesh tracker ready --json`` in their loops, a process each;
the full command line would cost them click and every command of ``mesh`` at each start.
Only ``mesh tracker ...`` with no option of ``mesh`` itself is tried: its settings are then
exactly the environment's (``MESH_DB``, ``MESH_ACTOR``), as ``mesh``'s options read them.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]


def main() -> None:
    """Console-script entry point ``mesh``."""
    args = sys.argv[1:]
    if args[:1] == ["tracker"]:
        from tracker.bd_hot import answer, write_answer

        settings = {"db": os.environ.get("MESH_DB") or None, "actor": os.environ.get("MESH_ACTOR") or None}
        text = answer(args[1:], settings)
        if text is not None:
            write_answer(text)
            return
    from orchestrator.cli.main import main as full_command_line

    full_command_line()
