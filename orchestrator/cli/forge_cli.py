"""``mesh forge``: the pull requests of the configured forge (``[forge]``, docs/pull-requests.md).

``mesh forge status`` lists each scope's integration branch (``mesh/land/*``), the branch it
follows, and the open pull request the forge holds for it (number, state, URL, its head's checks
and the reviews given), asking the forge itself: what the checkpoints recorded may have been
merged or closed since. ``mesh forge sync`` closes a scope's tasks once its pull request merged
(or, with ``close_mode = "forge"``, once its required checks passed).
"""

from __future__ import annotations

import click

from orchestrator.cli.common import _calls_context, _fail, _result

__all__ = ["forge_group"]


@click.group("forge")
def forge_group() -> None:
    """Pull requests on the configured forge ([forge] in mesh.toml)."""


@forge_group.command("status")
@click.option("--repo", type=click.Path(file_okay=False), help="The git checkout (default: .).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="Config file.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per scope.")
@click.pass_context
def status_command(ctx: click.Context, repo, config_file, as_json) -> None:
    """Each scope's integration branch and its pull request on the forge."""
    from pathlib import Path

    from orchestrator.forges.model import ForgeError
    from orchestrator.forges.table import connect
    from orchestrator.landing.records import base_branch
    from orchestrator.worktree.gitops import _git, repo_root
    from tracker.safe_text import printable

    found = _calls_context(ctx, repo, config_file, as_json)
    if found is None:
        return
    config, tracker = found
    if config.forge is None:
        _fail(ctx, "no [forge] table in the configuration (docs/pull-requests.md)", 2, as_json)
        return
    root = repo_root(Path(repo or "."))
    branches = [line.strip() for line in _git(root, "for-each-ref", "--format=%(refname:short)",
                                              "refs/heads/mesh/land/").stdout.splitlines() if line.strip()]
    cfg = config.forge
    try:
        forge = connect(cfg.provider, cfg.repository, cfg.api_url, cfg.token_env)
    except ForgeError as exc:
        _fail(ctx, str(exc), 2, as_json)
        return
    rows = []
    try:
        with tracker:
            for branch in branches:
                base = base_branch(tracker, root, branch, config.drain.base)
                row = {"branch": branch, "base": base, "pull_request": None, "error": None}
                try:
                    pull = forge.find_open(branch, base) if base else None
                    row["pull_request"] = pull.to_dict() if pull else None
                    if pull is None and base:  # merged or closed: the latest says which
                        last = forge.latest(branch, base)
                        row["latest"] = last.to_dict() if last else None
                    if pull is not None and pull.head_sha:
                        # Its head's checks and the reviews given on it, as the forge has them now.
                        row["checks"] = [c.to_dict() for c in forge.checks(pull.head_sha)]
                        row["reviews"] = [{"login": r.login, "state": r.state, "comments": len(r.notes)}
                                          for r in forge.reviews(pull.number)]
                except ForgeError as exc:
                    row["error"] = str(exc)
                rows.append(row)
    finally:
        forge.api.close()

    def render(data: list[dict]) -> str:
        if not data:
            return "no integration branch (mesh/land/*) here yet"
        lines = []
        for row in data:
            pull = row["pull_request"]
            last = row.get("latest")
            what = (f"{forge.noun} #{pull['number']} {pull['state']}: {pull['url']}" if pull
                    else f"error: {row['error']}" if row["error"] else f"no open {forge.noun}"
                    + (f" (the latest, #{last['number']}, is {last['state']}: {last['url']})" if last else ""))
            lines.append(printable(f"{row['branch']} -> {row['base'] or '(no base)'}: {what}"))
            checks = row.get("checks") or []
            if checks:
                counted = {state: sum(1 for c in checks if c["state"] == state) for state in ("passed", "failed",
                                                                                              "pending")}
                lines.append(printable("  checks: " + ", ".join(f"{n} {state}" for state, n in counted.items() if n)
                                       + "".join(f"; {c['name']} {c['conclusion']}" for c in checks
                                                 if c["state"] == "failed")))
            lines += [printable(f"  review: {r['login']} {r['state'].replace('_', ' ')}"
                                + (f" ({r['comments']} line comment(s))" if r["comments"] else ""))
                      for r in row.get("reviews") or []]
        return "\n".join(lines)

    _result(as_json, rows, render)
    if any(row["error"] for row in rows):
        ctx.exit(1)


@forge_group.command("sync")
@click.option("--label", help="Scope: the plan label (else env BD_PLAN_LABEL, else --parent).")
@click.option("--parent", help="Scope: the parent epic id.")
@click.option("--repo", type=click.Path(file_okay=False), help="The git checkout (default: .).")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="Config file.")
@click.option("--revalidate", is_flag=True,
              help="Re-run each task's signed validation commands, sandboxed, on the merge commit first.")
@click.option("--require-signed", "require_signed", is_flag=True,
              help="Refuse evidence whose checkpoints are not signed with MESH_SIGNING_KEY.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def sync_command(ctx: click.Context, label, parent, repo, config_file, revalidate, require_signed, as_json) -> None:
    """Close the scope's approved tasks once its pull request is merged (exit 1 if one was refused).

    Asks the forge for the scope's latest pull request. Merged: its merge commit is fetched and
    checked out apart, and each waiting task is closed as `mesh ci-close` closes it there, bound
    to that commit, only when the merged tree holds the tree its run head approved. Closed
    without a merge: its tasks stay open, told so in a comment. Open: nothing changes, except
    with close_mode = "forge": once its head's required checks passed, its waiting tasks are
    closed the same way on a checkout of that head.
    """
    from pathlib import Path

    from orchestrator.cli.common import _open_scope
    from orchestrator.forges.model import ForgeError
    from orchestrator.landing.forge_sync import sync
    from orchestrator.worktree.gitops import GitError, repo_root
    from tracker.safe_text import printable

    opened = _open_scope(ctx, label, parent, repo, config_file)
    if opened is None:
        return
    scope, config, tracker = opened
    try:
        with tracker:
            result = sync(tracker, config, scope, repo_root(Path(repo or ".")), revalidate=revalidate,
                          require_signed=require_signed)
    except (ForgeError, GitError) as exc:
        _fail(ctx, str(exc), 2, as_json)
        return

    def render(data: dict) -> str:
        pull = data["pull_request"]
        head = f"{data['branch']} -> {data['base'] or '(no base)'}: "
        if pull is None:
            return head + "no pull request"
        what = {"closed": "its waiting tasks closed", "none_closed": "no task closed", "nothing_waiting":
                "no task waiting", "open": "open: nothing to close yet", "closed_unmerged": "closed without a merge:"
                " its tasks stay open"}.get(data["action"], data["action"].replace("_", " "))
        lines = [head + f"#{pull['number']} {pull['state']}: {pull['url']} ({what})"]
        lines += [f"  {check['task_id']}: {check['result']}" + "".join(f"; {p}" for p in check.get("problems") or [])
                  for check in data["tasks"]]
        lines += [f"  {task}: stays open (told so)" for task in data["told"]]
        return "\n".join(printable(line) for line in lines)

    _result(as_json, result.to_dict(), render)
    if result.action == "none_closed":
        ctx.exit(1)
