"""bd's read commands (``ready``, ``list``, ``show``, ``blocked``, ``stats``/``status``, with
``--json``) answered without click, for ``bd`` and ``mesh tracker`` alike.

Agents run ``bd ready --json``, ``bd show ID --json`` and ``bd list --json`` dozens of times
per task, a new process each (beads-mcp runs one per tool call, beads-ui one per refresh).
The full command line pays for click and every command module at each start, several
times the bare interpreter. ``answer`` recognises exactly those command lines, with every
option of their own (``_OPTIONS``: the values click would read the same way) and bd's global
flags, and returns what the full command prints, built by the same functions
(``ready_issues``, ``list_issues``, ``show_issues``, ``bd_reads.blocked`` and
``statistics``, which ``cli`` calls too). Anything else, and any failure (no workspace, an unknown id, a damaged
database), returns None: the caller then runs the full command line, which does the work
again and reports it as it always does. So this module changes how fast an answer comes,
never what it is.
"""

from __future__ import annotations

import sys

from . import bd_reads as bd
from .hot_output import option_value, split_csv
from .jsontext import json_text
from .model import INFRA_TYPES
from .reader import Reader

TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["answer", "ready_issues", "list_issues", "show_issues"]

# bd's global flags (cli_flags) that change nothing in a read's answer, and those taking a value.
_FLAGS = frozenset({"--json", "--readonly", "-q", "--quiet", "-v", "--verbose", "--no-daemon", "--no-auto-flush",
                    "--no-auto-import", "--sandbox", "--allow-stale", "--profile"})
_GLOBAL_VALUES = {"--db": "db", "--actor": "actor", "--lock-timeout": None, "--dolt-auto-commit": None}

# What each command's own options take, as click reads them (``tracker.cli``): a value, a repeatable
# value, a flag, a count (``--limit``: digits; anything else, a negative number too, is click's to
# read), a priority (0-4) or one of a few words. A value that is empty or looks like an option is
# left to click, which reports it or reads it its own way.
_VALUE, _MANY, _FLAG, _COUNT, _PRIORITY = "value", "many", "flag", "count", "priority"


def _options(*specs: tuple[tuple[str, ...], str, object]) -> dict[str, tuple[str, object]]:
    return {name: (key, kind) for names, key, kind in specs for name in names}


_SHARED = ((("-l", "--label"), "labels", _MANY), (("--label-any",), "labels_any", _MANY),
           (("-t", "--type"), "issue_type", _VALUE), (("-p", "--priority"), "priority", _PRIORITY),
           (("--parent",), "parent", _VALUE), (("-a", "--assignee"), "assignee", _VALUE),
           (("-n", "--limit"), "limit", _COUNT))
_OPTIONS = {
    "ready": _options(*_SHARED, (("-u", "--unassigned"), "unassigned", _FLAG), (("-s", "--sort"), "sort", bd.READY_SORTS)),
    "list": _options(*_SHARED, (("-s", "--status"), "status", _VALUE), (("--no-assignee",), "no_assignee", _FLAG),
                     (("--title",), "title", _VALUE), (("--all",), "include_closed", _FLAG),
                     (("--include-templates",), "include_templates", _FLAG),
                     (("--include-gates",), "include_gates", _FLAG), (("--include-infra",), "include_infra", _FLAG),
                     (("--sort",), "sort_by", bd.LIST_SORTS), (("-r", "--reverse"), "reverse", _FLAG)),
    "show": {},
    "blocked": _options((("--parent",), "parent", _VALUE)),
    "stats": {},
    "status": {},
}
_DEFAULT_LIMIT = {"ready": 10, "list": 50}  # bd's defaults (``--limit 0``: all)


def ready_issues(t: Reader, *, labels: Sequence[str] = (), labels_any: Sequence[str] = (),
                 issue_type: str | None = None, priority: int | None = None, assignee: str | None = None,
                 unassigned: bool = False, sort: str | None = None, parent: str | None = None,
                 limit: int = 10) -> list[dict]:
    """``ready --json``'s answer (``limit`` 0: all)."""
    return bd.ready(t, labels=labels, labels_any=labels_any, issue_type=issue_type, parent=parent,
                    priority=priority, assignee=assignee, unassigned=unassigned, sort=sort, limit=limit or None)


def list_issues(t: Reader, *, status: str | None = None, labels: Sequence[str] = (), labels_any: Sequence[str] = (),
                issue_type: str | None = None, priority: int | None = None, parent: str | None = None,
                assignee: str | None = None, no_assignee: bool = False, title: str | None = None,
                include_closed: bool = False, limit: int = 0, sort_by: str | None = None,
                reverse: bool = False, include_templates: bool = False, include_gates: bool = False,
                include_infra: bool = False) -> list[dict]:
    """``list --json``'s answer: the tracker's list, then bd's extra filters and ``--sort``
    (which come before ``--limit``; 0: all). As bd's (cmd/bd/list.go), it leaves out templates,
    gates and the infrastructure beads (agents, roles, messages: mesh's own role agents among
    them) unless asked (``include_templates``, ``include_gates``, ``include_infra``, or an
    ``issue_type`` of theirs)."""
    post_filter = bool(labels_any or priority is not None or no_assignee or title or sort_by)
    if parent or post_filter:  # the views module: a plain list never needs it
        from .bd_views import resolve_id, sort_issues
    statuses = [s.strip() for s in status.split(",") if s.strip()] if status else None
    issues = t.list(status=statuses, labels=labels, issue_type=issue_type,
                    parent=resolve_id(t, parent) if parent else None,
                    assignee=assignee, include_closed=include_closed,
                    limit=None if post_filter else limit or None, templates=include_templates,
                    exclude_types=[t for t in (*(() if include_gates else ("gate",)),
                                               *(() if include_infra else INFRA_TYPES)) if t != issue_type])
    if post_filter:
        issues = sort_issues(bd.list_filter(issues, labels_any=labels_any, priority=priority,
                                            title=title, no_assignee=no_assignee), sort_by, reverse)
        issues = issues[:limit] if limit else issues
    return [bd.issue_with_counts(i, dependencies=True) for i in issues]


def show_issues(t: Reader, issue_ids: Sequence[str]) -> list[dict]:
    """``show --json``'s answer: each issue with its dependencies, dependents and comments."""
    from .bd_views import resolve_ids

    return [bd.details(t, issue_id) for issue_id in resolve_ids(t, issue_ids)]


def _parse(args: Sequence[str]) -> tuple[str, dict, list[str], dict] | None:
    """(command, global settings given, positional arguments, command options) of a hot command
    line, or None for any other."""
    command: str | None = None
    given: dict = {}
    positional: list[str] = []
    options: dict = {}
    json_seen = False
    words = list(args)
    k = 0
    while k < len(words):
        word = words[k]
        name = word.partition("=")[0] if word.startswith("--") else word
        own = _OPTIONS.get(command or "", {})
        if word in _FLAGS:
            json_seen = json_seen or word == "--json"
        elif name in _GLOBAL_VALUES:
            value, k = option_value(words, k)
            if not value or value.startswith("-"):
                return None
            if _GLOBAL_VALUES[name]:
                given[_GLOBAL_VALUES[name]] = value
        elif name in own:
            key, kind = own[name]
            if kind == _FLAG:
                if name != word:  # --flag=value: click's to refuse
                    return None
                options[key] = True
            else:
                value, k = option_value(words, k)
                if not _valid(value, kind):
                    return None
                if kind == _MANY:
                    options.setdefault(key, []).append(value)
                else:
                    options[key] = int(value) if kind in (_COUNT, _PRIORITY) else value
        elif word.startswith("-"):
            return None
        elif command is None:
            if word not in _OPTIONS:
                return None
            command = word
        elif command == "show":
            positional.append(word)
        else:
            return None
        k += 1
    if command is None or not json_seen or (command == "show") != bool(positional):
        return None
    if command in _DEFAULT_LIMIT:
        options.setdefault("limit", _DEFAULT_LIMIT[command])
    for key in ("labels", "labels_any"):
        if key in options:
            options[key] = split_csv(options[key])
    return command, given, positional, options


def _valid(value: str | None, kind: object) -> bool:
    """Whether the hot path reads ``value`` of an option of ``kind`` as click would."""
    if not value or value.startswith("-"):
        return False
    if kind == _COUNT:
        return value.isascii() and value.isdigit()
    if kind == _PRIORITY:
        return value in ("0", "1", "2", "3", "4")
    return kind in (_VALUE, _MANY) or value in kind  # type: ignore[operator]


def answer(args: Sequence[str], settings: dict, *, exiting: bool = False) -> str | None:
    """What ``args`` (a ``bd``/``mesh tracker`` command line) prints on stdout when it is a hot
    read with ``--json``, on the tracker ``settings`` names (``db``, ``actor``; a ``--db``/
    ``--actor`` in ``args`` wins); None when the full command line must answer.

    ``exiting``: the caller prints the answer and ends the process at once (``hot_output.finish``,
    which the console scripts call). The database is then left open, not closed: the last
    connection to close a WAL database checkpoints it and deletes its ``-wal`` and ``-shm``
    files, which the next read has to make again (about 0.7 ms of a hot read's 6 above the bare
    interpreter: docs/benchmarks-tracker.md). A read leaves nothing to checkpoint, and the files
    are the ones any open tracker keeps (``mesh init`` ignores ``.beads/*.db*``)."""
    parsed = _parse(args)
    if parsed is None or sys.stdout is None or (sys.stdout.encoding or "").lower().replace("-", "") != "utf8":
        return None
    command, given, positional, options = parsed
    merged = {**settings, **given}
    try:
        t = Reader.open(merged.get("db"), actor=merged.get("actor"))
    except Exception:  # every failure is the full command line's to report, in its words
        return None
    try:
        if command == "ready":
            result = ready_issues(t, **options)
        elif command == "list":
            result = list_issues(t, **options)
        elif command == "show":
            result = show_issues(t, positional)
        elif command == "blocked":
            result = bd.blocked(t, **options)
        else:
            result = bd.statistics(t)
    except Exception:
        t.close()
        return None
    if not exiting:
        t.close()
    return json_text(result, indent=2) + "\n"
