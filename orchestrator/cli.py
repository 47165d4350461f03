"""The ``mesh`` command line: a thin layer over the ``tracker`` and ``orchestrator`` libraries.

Heavy modules (GitPython, pydantic models, jinja2, rich, the anthropic SDK) are
imported inside the commands that need them, so ``mesh --help`` and the tracker
commands start fast.
"""

from __future__ import annotations

import click

from tracker.cli import tracker_group

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_path", type=click.Path(dir_okay=False), envvar="MESH_DB",
              help="Tracker database (default: .beads/mesh.db of the enclosing workspace; env MESH_DB).")
@click.option("--actor", envvar="MESH_ACTOR", help="Who writes (env MESH_ACTOR; default $USER).")
@click.version_option(package_name="beads-mesh", prog_name="mesh")
@click.pass_context
def cli(ctx: click.Context, db_path: str | None, actor: str | None) -> None:
    """mesh: take one beads task from ready to closed with an LLM team.

    A proposer plans, three critics object, a synthesizer writes one unified
    diff, five roles vote, the patch is applied in a git worktree and validated,
    a third-party reviewer approves, and every round is checkpointed into the
    tracker as an [orch:*] comment.
    """
    ctx.ensure_object(dict)
    ctx.obj["db"] = db_path
    ctx.obj["actor"] = actor


cli.add_command(tracker_group)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="mesh")
