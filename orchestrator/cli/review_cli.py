"""``mesh review``: a person gives the review a waiting run asks for (``reviewer = "human"``).

Without TASK it lists the runs that wait for a person's review; with TASK alone it shows what to
review (the diff, the validation); with ``--approve`` or ``--request-changes`` it records the
review, comments on lines of the diff becoming findings exactly as a reviewer worker's would.
"""

from __future__ import annotations

import re

import click

from tracker.cli_io import echo as _say

from orchestrator.cli.common import _calls_context, _fail

_COMMENT = re.compile(r"^(?P<path>[^\s:][^:]*):(?P<line>\d+)(?:-(?P<end>\d+))?\s+(?P<rest>.+)$", re.S)
_WORDS = {"critical": "Critical", "high": "High", "medium": "Medium", "low": "Low"}
_LABELS = {"must_fix": "MUST_FIX", "should_consider": "SHOULD_CONSIDER", "can_ignore": "CAN_IGNORE"}


def parse_comment(spec: str):
    """``PATH:LINE[-END] [SEVERITY] [LABEL] TEXT`` as a LineComment; click.BadParameter when it is not."""
    from orchestrator.protocol.human_review import LineComment

    match = _COMMENT.match(spec.strip())
    if not match:
        raise click.BadParameter(f"{spec!r}: write PATH:LINE[-END] [SEVERITY] [LABEL] TEXT,"
                                 " e.g. 'src/app.py:12 High MUST_FIX the loop never ends'", param_hint="--comment")
    words = match.group("rest").split(" ")
    severity, label = "Medium", None
    if words and words[0].lower() in _WORDS:
        severity = _WORDS[words.pop(0).lower()]
    if words and words[0].lower() in _LABELS:
        label = _LABELS[words.pop(0).lower()]
    return LineComment(path=match.group("path"), line=int(match.group("line")),
                       end=int(match.group("end")) if match.group("end") else None,
                       severity=severity, label=label, text=" ".join(words))


def _file_comments(path: str):
    import json
    from pathlib import Path

    from orchestrator.protocol.human_review import LineComment

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--comments-file") from None
    if not isinstance(data, list):
        raise click.BadParameter(f"{path}: a JSON array of comments", param_hint="--comments-file")
    out = []
    for index, item in enumerate(data):
        try:
            out.append(LineComment(path=str(item["path"]), line=int(item["line"]), text=str(item["text"]),
                                   severity=str(item.get("severity") or "Medium"), label=item.get("label"),
                                   end=int(item["end"]) if item.get("end") else None, fix=item.get("fix")))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise click.BadParameter(f"{path}: comment {index} needs path, line and text", param_hint="--comments-file")
    return out


def _render_wait(wait) -> str:
    from orchestrator.protocol.proof import state
    from orchestrator.safe_text import printable

    out = [f"{wait.task_id}  {wait.title}", f"  run {wait.run_id}, review cycle {wait.cycle},"
           f" commit {(wait.commit or '')[:12]} on {wait.branch}"]
    out += [f"  validation: {r.get('command')}: {state(r)}" for r in wait.validation]
    out += [f"  suspected forgery ({t.get('rule')}): {t.get('location')}: {t.get('text')}" for t in wait.tampering]
    if wait.tampering:
        out += ["  (lines reaching into the test machinery, found by mesh's tamper check: a worker reviewer could"
                " not approve them; your approval closes the task with them)"]
    out += ["", "The diff; a comment names PATH:LINE, LINE as numbered here (the file after the change):", ""]
    out += numbered_diff(wait.diff)
    return "\n".join(printable(line, one_line=True) for line in out)


def numbered_diff(diff: str) -> list[str]:
    """The diff's lines, each line of the file after the change led by its number (the LINE a
    comment names); removed lines and headers carry no number."""
    from orchestrator.protocol.human_review import hunk_start

    out, number = [], None
    for line in diff.splitlines():
        start = hunk_start(line)
        if start is not None:
            number = start
        elif line.startswith(("diff --git", "--- ", "+++ ", "index ", "new file", "deleted file", "similarity",
                              "rename ", "old mode", "new mode")):
            number = None
        elif number is not None and line[:1] in (" ", "+"):
            out.append(f"{number:>6} {line}")
            number += 1
            continue
        out.append(f"{'':>6} {line}")
    return out


@click.command("review")
@click.argument("task", required=False)
@click.option("--approve", "decision", flag_value="approve", help="Approve the work.")
@click.option("--request-changes", "decision", flag_value="request_changes", help="Ask for changes (needs a comment).")
@click.option("--summary", help="1-5 lines: the review in short (default: the decision in words).")
@click.option("--comment", "comments", multiple=True,
              help="A comment on a line of the diff: 'PATH:LINE[-END] [SEVERITY] [LABEL] TEXT' (repeatable).")
@click.option("--comments-file", type=click.Path(dir_okay=False),
              help="A JSON array of {path, line, end?, severity?, label?, text, fix?}.")
@click.option("--as", "person", help="Who reviews (default: the tracker actor).")
@click.option("--repo", type=click.Path(file_okay=False), help="The repository (default: the current folder).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="mesh.toml to use.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def review_command(ctx: click.Context, task: str | None, decision: str | None, summary: str | None,
                   comments: tuple[str, ...], comments_file: str | None, person: str | None, repo: str | None,
                   config_file: str | None, as_json: bool) -> None:
    """Review a run that waits for a person (reviewer = "human", or the label review:human).

    Without TASK: the runs waiting for a review. TASK alone: what to review. With --approve or
    --request-changes: record the review; the run goes on (findings become sub-issues and a
    revision cycle follows, as after a reviewer worker's review). Exit 2 when the review is
    refused (nothing is written), 4 when the tracker is unavailable.
    """
    import json

    from orchestrator.protocol.checkpoint import signing_key
    from orchestrator.protocol.human_review import ReviewRefused, submit_review, waiting_review, waiting_reviews
    from orchestrator.safe_text import printable

    parsed = [parse_comment(spec) for spec in comments] + (_file_comments(comments_file) if comments_file else [])
    if decision is None and (parsed or summary):
        raise click.UsageError("give --approve or --request-changes with a review")
    opened = _calls_context(ctx, repo, config_file, as_json)
    if opened is None:
        return
    key = signing_key()
    with opened[1] as tracker:
        if task is None:
            waits = waiting_reviews(tracker, [t["id"] for t in tracker.list(status="in_progress")], key)
            if as_json:
                click.echo(json.dumps([w.to_dict() for w in waits], indent=2))
            elif not waits:
                _say("no run waits for a person's review")
            else:
                for w in waits:
                    _say(printable(f"{w.task_id}  cycle {w.cycle}  {w.run_id}  {w.title}", one_line=True))
            return
        if not tracker.exists(task):
            _fail(ctx, f"unknown task {task}", 2, as_json)
            return
        if decision is None:
            wait = waiting_review(tracker, task, key)
            if wait is None:
                _fail(ctx, f"{task} has no run waiting for a person's review", 2, as_json)
                return
            click.echo(json.dumps(wait.to_dict(), indent=2)) if as_json else _say(_render_wait(wait))
            return
        words = {"approve": "Approved by a person.", "request_changes": "Changes requested by a person."}
        try:
            artifact = submit_review(tracker, task, decision=decision, summary=summary or words[decision],
                                     comments=parsed, author=person or tracker.actor, key=key)
        except ReviewRefused as exc:
            _fail(ctx, f"review refused ({exc.field}): {exc}", 2, as_json)
            return
    if as_json:
        click.echo(json.dumps({"task": task, "review": artifact}, indent=2))
    else:
        _say(f"{task}: {artifact['decision']} with {len(artifact['findings'])} comment(s); the waiting run goes on")
