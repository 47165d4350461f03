"""``mesh bd ARGS``: bd's command line (``tracker.bd_shim``) as a command of ``mesh``.

It lives here, not beside the shim, because it is a click command of the ``mesh`` group:
the ``bd`` console script itself must not import click before it knows the command line
is not a hot read (``tracker.bd_hot``).
"""

from __future__ import annotations

import os

import click

__all__ = ["bd_command"]


@click.command("bd", add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def bd_command(ctx: click.Context, args: tuple[str, ...]) -> None:
    """bd's command line on this tracker (the same as the bd command mesh installs)."""
    from tracker.bd_shim import bd_settings, run  # the tracker library: not for `mesh --help`

    root = ctx.find_root()
    given = root.obj or {}

    def from_command_line(name: str, key: str) -> str | None:
        # mesh --db/--actor typed on this command line win; MESH_DB/MESH_ACTOR yield to bd's env.
        return given.get(key) if root.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE else None

    settings = bd_settings(os.environ, db=from_command_line("db_path", "db"), actor=from_command_line("actor", "actor"))
    run(args, settings, prog_name=f"{root.info_name} bd")
