"""``bd``: mesh's tracker under beads' own command name, for clients that run ``bd``.

beads-mcp, beads-ui, beadsflow and scripts call ``bd`` with bd's global flags and
environment. ``bd ARGS`` here is ``mesh tracker ARGS`` with bd's environment read
the way bd reads it:

- the database: ``--db PATH``, else ``BEADS_DB``, else ``BEADS_DIR``'s
  ``mesh.db``, else mesh's own choice (``MESH_DB``, then the enclosing
  ``.beads/``);
- who writes: ``--actor NAME``, else ``BD_ACTOR``, else ``BEADS_ACTOR``, else
  mesh's own choice (``MESH_ACTOR``, then ``$USER``).

``mesh bd ARGS`` is the same, except that ``mesh --db``/``--actor`` given on its
command line come first. Installed as the ``bd`` console script.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import click

from .cli import tracker_group
from .store import DB_NAME

__all__ = ["bd_settings", "run", "main", "bd_command"]


def bd_settings(environ: Mapping[str, str], *, db: str | None = None, actor: str | None = None) -> dict:
    """The tracker settings (``db``, ``actor``) bd's environment gives, unless ``db``/``actor``
    are given (a command line's, which win over the environment)."""
    beads_dir = environ.get("BEADS_DIR")
    env_db = environ.get("BEADS_DB") or (str(Path(beads_dir) / DB_NAME) if beads_dir else None)
    return {"db": db or env_db or None,
            "actor": actor or environ.get("BD_ACTOR") or environ.get("BEADS_ACTOR") or None}


def run(args: Sequence[str], settings: dict, *, prog_name: str = "bd") -> None:
    """Run bd's command line ``args`` on the tracker with ``settings``; exits the process
    with the command's status (bd's flags given in ``args`` override ``settings``)."""
    tracker_group.main(args=list(args), prog_name=prog_name, obj=dict(settings), standalone_mode=True)


def main() -> None:
    """Console-script entry point ``bd``."""
    run(sys.argv[1:], bd_settings(os.environ))


@click.command("bd", add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def bd_command(ctx: click.Context, args: tuple[str, ...]) -> None:
    """bd's command line on this tracker (the same as the bd command mesh installs)."""
    root = ctx.find_root()
    given = root.obj or {}

    def from_command_line(name: str, key: str) -> str | None:
        # mesh --db/--actor typed on this command line win; MESH_DB/MESH_ACTOR yield to bd's env.
        return given.get(key) if root.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE else None

    settings = bd_settings(os.environ, db=from_command_line("db_path", "db"), actor=from_command_line("actor", "actor"))
    run(args, settings, prog_name=f"{root.info_name} bd")
