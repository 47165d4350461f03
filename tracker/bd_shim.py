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
command line come first (``orchestrator.cli.bd_cli``). Installed as the ``bd`` console
script, which answers the hot reads (``bd ready/list/show --json``) through ``bd_hot``
before click or the command modules are imported.
"""

from __future__ import annotations

import os
import sys

from .reader import DB_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["bd_settings", "run", "main"]


def bd_settings(environ: Mapping[str, str], *, db: str | None = None, actor: str | None = None) -> dict:
    """The tracker settings (``db``, ``actor``) bd's environment gives, unless ``db``/``actor``
    are given (a command line's, which win over the environment)."""
    beads_dir = environ.get("BEADS_DIR")
    env_db = environ.get("BEADS_DB") or (os.path.join(beads_dir, DB_NAME) if beads_dir else None)
    return {"db": db or env_db or None,
            "actor": actor or environ.get("BD_ACTOR") or environ.get("BEADS_ACTOR") or None}


def run(args: Sequence[str], settings: dict, *, prog_name: str = "bd") -> None:
    """Run bd's command line ``args`` on the tracker with ``settings``; exits the process
    with the command's status (bd's flags given in ``args`` override ``settings``)."""
    from .cli import tracker_group  # the full command line: what the hot path does not answer

    tracker_group.main(args=list(args), prog_name=prog_name, obj=dict(settings), standalone_mode=True)


def main() -> None:
    """Console-script entry point ``bd``."""
    from .bd_hot import answer
    from .hot_output import finish

    settings = bd_settings(os.environ)
    text = answer(sys.argv[1:], settings, exiting=True)
    if text is not None:
        finish(text)
    run(sys.argv[1:], settings)
