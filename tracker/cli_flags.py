"""bd v0.50.3's global flags on every ``mesh tracker`` command, before or after the subcommand
(bd's persistent flags), and ``BdGroup``, the group that hands them to its commands.

The flags a command reads (``--db``, ``--actor``, ``--readonly``, ``-q``, ``--json``) are
remembered on the root context, where ``cli_io.settings`` finds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["BdGroup", "add_global_flags"]


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value not in (None, False):
            ctx.find_root().ensure_object(dict)[key] = value

    return store


# bd v0.50.3's persistent flags (cmd/bd/main.go:200-213, daemon_compat.go:11). Those that
# steer JSONL sync, the daemon, Dolt or profiling have nothing to act on here and are
# accepted so that clients passing them keep working; --no-db (JSONL-only mode) is not.
_GLOBAL_FLAGS: tuple[tuple[tuple[str, ...], dict, str | None], ...] = (
    (("--db",), {"type": click.Path(dir_okay=False), "metavar": "PATH",
                 "help": "Tracker database (a file, or a postgresql:// URL)."}, "db"),
    (("--actor",), {"metavar": "NAME", "help": "Who writes (audit trail, claims, comments)."}, "actor"),
    (("--readonly",), {"is_flag": True, "help": "Refuse every command that would change the tracker."}, "readonly"),
    (("-q", "--quiet"), {"is_flag": True, "help": "Print no warnings, only results and errors."}, "quiet"),
    (("-v", "--verbose"), {"is_flag": True, "help": "Accepted for bd's clients; output is the same."}, None),
    (("--no-daemon",), {"is_flag": True, "help": "Accepted for bd's clients (there is no daemon)."}, None),
    (("--no-auto-flush",), {"is_flag": True, "help": "Accepted for bd's clients (there is no JSONL sync)."}, None),
    (("--no-auto-import",), {"is_flag": True, "help": "Accepted for bd's clients (there is no JSONL sync)."}, None),
    (("--sandbox",), {"is_flag": True, "help": "Accepted for bd's clients (there is no sync to disable)."}, None),
    (("--allow-stale",), {"is_flag": True, "help": "Accepted for bd's clients (the database is never stale)."}, None),
    (("--profile",), {"is_flag": True, "help": "Accepted for bd's clients (no profile is written)."}, None),
    (("--lock-timeout",), {"metavar": "DURATION", "help": "Accepted for bd's clients (the busy timeout is fixed)."},
     None),
    (("--dolt-auto-commit",), {"metavar": "off|on", "help": "Accepted for bd's clients (there is no Dolt)."}, None),
)


def add_global_flags(command: click.Command, *, top: bool) -> None:
    """Give ``command`` bd's global flags, shown in help only on the top group."""
    command.bd_flags = True
    names = {opt for param in command.params for opt in getattr(param, "opts", ())}
    flags = list(_GLOBAL_FLAGS)
    if "--json" not in names:
        flags.append((("--json",), {"is_flag": True, "help": "Print results as JSON."}, "json"))
    for decls, attrs, key in flags:
        command.params.append(click.Option(decls, expose_value=False, hidden=not top,
                                           callback=_remember(key) if key else None, **attrs))


class BdGroup(click.Group):
    """A group whose commands get bd's global flags when they are looked up.

    Building those options for every command at import would cost each tracker call
    some 12 ms; looked up, only the command that runs (or a help page) pays.
    """

    group_class = type  # subgroups are BdGroups too

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None and not getattr(command, "bd_flags", False):
            add_global_flags(command, top=False)
        return command
