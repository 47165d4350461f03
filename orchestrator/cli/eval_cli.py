"""``mesh eval``: evaluation suites from a repository's history (``orchestrator.evals``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tracker.cli_io import echo as _say

__all__ = ["eval_group"]


@click.group("eval")
def eval_group() -> None:
    """Measure on your repository's history whether a team beats one agent."""


@eval_group.command("suite")
@click.option("--from-git", "from_git", is_flag=True, required=True,
              help="Build the suite from the first-parent history of the repository.")
@click.option("--repo", type=click.Path(file_okay=False), help="The repository (default: the current folder's).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="mesh.toml to use.")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default="mesh-eval-suite.jsonl",
              show_default=True, help="Where to write the suite (JSONL, one case a line).")
@click.option("--command", "command",
              help="The hidden tests' command; {tests} stands for the case's test files"
                   " (default: the project's Python, Node, Go or Rust test runner on them).")
@click.option("--max-files", type=click.IntRange(1), default=20, show_default=True, help="Largest commit, in files.")
@click.option("--max-lines", type=click.IntRange(1), default=400, show_default=True,
              help="Largest commit, in lines added and removed.")
@click.option("--limit", type=click.IntRange(1), help="Stop after this many candidate cases.")
@click.option("--json", "as_json", is_flag=True, help="Print the kept and dropped cases as one JSON object.")
@click.pass_context
def suite_command(ctx: click.Context, from_git: bool, repo, config_file, out, command, max_files, max_lines, limit,
                  as_json: bool) -> None:
    """Build an evaluation suite: commits that change source and tests become cases, kept only
    when their tests fail on the base and pass with the commit, in the validation sandbox."""
    from orchestrator.cli.common import _fail
    from orchestrator.evals.builder import SuiteError, build_suite

    root = ctx.find_root().obj or {}
    try:
        built = build_suite(Path(repo) if repo else Path.cwd(), Path(config_file) if config_file else None,
                            out=Path(out), command=command, max_files=max_files, max_lines=max_lines, limit=limit,
                            db=root.get("db"))
    except SuiteError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    if as_json:
        click.echo(json.dumps(built.to_dict(), indent=2))
        return
    for line in built.lines():
        _say(line)
