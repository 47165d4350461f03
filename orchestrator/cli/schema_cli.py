"""``mesh schema``: the JSON a worker must answer, per round, from the artifact schemas.

A worker is asked per round (MESH_ROUND), and a role answers several rounds, so the argument
is a round; a role name gets the rounds it answers. pydantic and the prompt templates are
imported inside the command, keeping ``mesh --help`` light. docs/rounds.md shows the same
schemas with the prompt each round sends (``roles.contract``).
"""

from __future__ import annotations

import click

from tracker.cli_io import echo as _say

__all__ = ["schema_command"]


@click.command("schema")
@click.argument("round_name", metavar="ROUND", required=False)
@click.option("--example", is_flag=True, help="Print an example answer instead of the schema.")
@click.option("--strict", is_flag=True,
              help="The strict envelope {role, task_id, artifact, outbox?} that --strict-output requires.")
@click.pass_context
def schema_command(ctx: click.Context, round_name: str | None, example: bool, strict: bool) -> None:
    """Print the JSON schema of a round's answer (or, with --example, an answer).

    ROUND is one of hydration, proposal, critique, synthesis, vote, review, revision-plan,
    revision; without it, the rounds and the roles that answer them are listed. The whole
    contract is docs/workers.md, each round's prompt docs/rounds.md.
    """
    from roles.contract import answer_schema, compact_json, example_answer
    from roles.definitions import ALL_ROLES, ROUNDS, round_roles

    if round_name is None:
        for name in ROUNDS:
            _say(f"{name:<14} {', '.join(round_roles(name))}")
        return
    wanted = round_name.strip().lower().replace("_", "-")
    if wanted not in ROUNDS:
        if wanted.replace("-", "_") in ALL_ROLES:
            role = wanted.replace("-", "_")
            rounds = [name for name in ROUNDS if role in round_roles(name)]
            message = (f"{role} is a role; it answers the rounds {', '.join(rounds)}: "
                       f"name one, e.g. mesh schema {rounds[0]}")
        else:
            message = f"unknown round {round_name!r}; choose one of {', '.join(ROUNDS)}"
        _say(f"mesh: {message}", err=True)
        ctx.exit(2)
        return
    value = example_answer(wanted, strict=strict) if example else answer_schema(wanted, strict=strict)
    _say(compact_json(value))
