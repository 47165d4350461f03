"""What every ``mesh tracker`` (and ``bd``) command shares: the ``--json`` option, opening the
workspace, turning errors into one message and an exit code, and printing.

Printing is where untrusted text meets the terminal: ``--json`` prints exact JSON
(``json_text``), every other output goes through ``echo``, which shows control sequences and
bidirectional overrides as escapes (``tracker.safe_text``), and ``run_action`` hands a
command's human formatter a copy of its result whose fields are already inert, each on its
line (text bodies keep their line breaks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from .errors import TrackerError, WorkspaceError
from .hot_output import split_csv
from .safe_text import inert, json_text, printable

if TYPE_CHECKING:
    from .store import Tracker

__all__ = ["EXIT_USER_ERROR", "EXIT_UNAVAILABLE", "json_option", "settings", "writes", "with_tracker", "fail",
           "guard", "run_action", "print_json", "echo", "say", "split_csv", "issue_line", "print_issues"]

EXIT_USER_ERROR = 1
EXIT_UNAVAILABLE = 4
# The fields whose text may span lines (descriptions, comment bodies): the rest print on one.
_TEXT_BODIES = frozenset({"description", "design", "acceptance_criteria", "notes", "text"})


def _json_or_global(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    # bd's --json is a persistent flag: given before the subcommand it still applies.
    return value or bool((ctx.find_root().obj or {}).get("json"))


json_option = click.option(
    "--json", "as_json", is_flag=True, callback=_json_or_global,
    help="Print the result as JSON (errors as {\"error\", \"code\"} on stderr).",
)


def settings() -> dict:
    """``--db`` and ``--actor`` of the top-level ``mesh`` command (absent when run standalone)."""
    return click.get_current_context().find_root().obj or {}


def writes(command: click.Command) -> click.Command:
    """Mark a command as one that changes the tracker: refused under bd's ``--readonly``."""
    command.bd_writes = True
    return command


def with_tracker(action: Callable[[Tracker], Any]) -> Any:
    """``action`` on the workspace's tracker, closed afterwards."""
    ctx = click.get_current_context()
    if settings().get("readonly") and getattr(ctx.command, "bd_writes", False):
        # Worker sandboxes run bd --readonly; refuse before the database is even opened.
        raise TrackerError(f"operation '{ctx.command_path}' is not allowed in read-only mode", code="readonly")
    from .store import Tracker  # here, not at the top: ``mesh --help`` imports this module for ``echo``

    tracker = Tracker.open(settings().get("db"), actor=settings().get("actor"))
    try:
        return action(tracker)
    finally:
        tracker.close()


def fail(message: str, code: str, exit_code: int, as_json: bool) -> None:
    """Print ``message`` on stderr (``{"error", "code"}`` with ``--json``) and exit."""
    if as_json:
        click.echo(json_text({"error": message, "code": code}), err=True)
    else:
        echo(f"Error: {message}", err=True)
    raise click.exceptions.Exit(exit_code)


def guard(as_json: bool, work: Callable[[], Any]) -> Any:
    """Run ``work``, turning every expected failure into a clean message and exit code."""
    import sqlite3  # loaded already by the tracker ``work`` opens; not at the top, for ``mesh --help``

    try:
        return work()
    except WorkspaceError as exc:
        fail(exc.message, exc.code, EXIT_UNAVAILABLE, as_json)
    except TrackerError as exc:
        fail(exc.message, exc.code, EXIT_USER_ERROR, as_json)
    except sqlite3.Error as exc:
        # A locked, read-only or damaged file is the workspace being unavailable, not a bug.
        fail(f"database error: {exc}", "database_error", EXIT_UNAVAILABLE, as_json)
    except OSError as exc:
        name = f" {exc.filename}" if exc.filename else ""
        fail(f"cannot access{name}: {exc.strerror or exc}", "io_error", EXIT_USER_ERROR, as_json)


def run_action(as_json: bool, action: Callable[[Tracker], Any], human: Callable[[Any], None]) -> Any:
    """Open the workspace, call ``action`` on it, print its result as JSON or via ``human``
    (given an inert copy); returns the result as the action gave it."""
    result = guard(as_json, lambda: with_tracker(action))
    if as_json:
        print_json(result)
    else:
        human(inert(result, multiline=_TEXT_BODIES))
    return result


def print_json(value: Any) -> None:
    """``value`` as indented, exact JSON on stdout."""
    click.echo(json_text(value, indent=2))


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Human-readable ``text`` on stdout (stderr with ``err``), every control sequence and
    bidirectional override in it shown as an escape."""
    click.echo(printable(text), err=err, nl=nl)


def say(text: Callable[[Any], str]) -> Callable[[Any], None]:
    """A human formatter printing the one line ``text`` makes of a result."""
    return lambda result: echo(text(result))


def issue_line(issue: dict) -> str:
    """One issue on one line: id, priority, type, status, title and labels."""
    line = f"{issue['id']}  [P{issue['priority']}] [{issue['issue_type']}] {issue['status']}  {issue['title']}"
    if issue.get("labels"):
        line += f"  ({', '.join(issue['labels'])})"
    return line


def print_issues(empty: str) -> Callable[[list[dict]], None]:
    """A human formatter printing each issue of a list on its line, or ``empty`` for none."""
    def show(issues: list[dict]) -> None:
        if not issues:
            echo(empty)
        for issue in issues:
            echo(issue_line(issue))

    return show
