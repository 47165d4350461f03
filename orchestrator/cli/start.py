"""The ``mesh`` console script: ``mesh tracker ready/list/show --json`` answered before click
and the command modules are imported (``tracker.bd_hot``), everything else by the full
command line (``orchestrator.cli.main``).

The orchestrator and agents run ``mesh tracker ready --json`` in their loops, a process each;
the full command line would cost them click and every command of ``mesh`` at each start.
Only ``mesh tracker ...`` with no option of ``mesh`` itself is tried: its settings are then
exactly the environment's (``MESH_DB``, ``MESH_ACTOR``), as ``mesh``'s options read them.

``mesh logs`` with its own options is answered by ``orchestrator.cli.hot_logs`` the same way
(its search is asked again and again; the full command line would import click, pydantic and
rich to print it).

``mesh --help`` (or ``-h``) on a terminal of 80 columns or more prints the text click would
print there, generated into ``orchestrator.cli.help_text``; a narrower terminal, where click
wraps the text to its width, gets click's own.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]


def main() -> None:
    """Console-script entry point ``mesh``."""
    args = sys.argv[1:]
    if args in (["--help"], ["-h"]) and _columns() >= 80:
        from orchestrator.cli.help_text import MESH_HELP
        from tracker.hot_output import finish

        finish(MESH_HELP)
    if args[:1] == ["tracker"]:
        from tracker.bd_hot import answer
        from tracker.hot_output import finish

        settings = {"db": os.environ.get("MESH_DB") or None, "actor": os.environ.get("MESH_ACTOR") or None}
        text = answer(args[1:], settings, exiting=True)
        if text is not None:
            finish(text)
    if args[:1] == ["logs"]:
        from orchestrator.cli.hot_logs import answer as logs_answer
        from tracker.hot_output import finish

        text = logs_answer(args[1:])
        if text is not None:
            finish(text)
    from orchestrator.cli.main import main as full_command_line

    full_command_line()


def _columns() -> int:
    """The terminal's width as click's help formatter reads it (``shutil.get_terminal_size``:
    ``COLUMNS``, else standard output's terminal, else 80), without importing shutil."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80
