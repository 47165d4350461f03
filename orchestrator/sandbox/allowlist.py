"""The validation allowlist: which commands a project lets validation run.

Validation commands come from model output, so they are untrusted. A command runs only if
its shlex-split argv matches an entry of the config's allowlist token by token. Entries are
exact commands or templates: the token ``{path}`` stands for one relative path argument that
stays inside the worktree, and a final token ``{args...}`` for any number of further plain
arguments (no options, no shell syntax, nothing escaping the worktree). ``explain`` says, for a
command no entry admits, which token of it fell outside which entry, so a configuration
mistake reads as one.

May import what ``orchestrator.sandbox`` may.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Sequence

from roles.backends.command import split_command

__all__ = ["ARGS_PLACEHOLDER", "PATH_PLACEHOLDER", "explain", "is_allowed", "matching_template",
           "parse_allow_entry", "placeholder_args", "split", "stays_inside"]

PATH_PLACEHOLDER = "{path}"
ARGS_PLACEHOLDER = "{args...}"

# Nothing is ever handed to a shell, but a command that is written as shell syntax was
# meant for one: refusing it outright keeps a "; rm -rf" from ever looking like arguments.
_SHELL_SYNTAX = re.compile(r"[;|&<>`$\n\r\x00]")
# A plain argument: no option dash up front (options like pytest's --basetemp or make's -C
# can delete or redirect), no '=' (VAR=value injection), no '@' (response files), no quotes,
# spaces, globs or escapes.
_PLAIN_ARG = re.compile(r"[A-Za-z0-9_.,/:+%\[\]][A-Za-z0-9_.,/:+%\[\]-]*")

def parse_allow_entry(entry: str) -> list[str]:
    """Split an allowlist entry into its template tokens; ValueError if it is unusable."""
    if _SHELL_SYNTAX.search(entry):
        raise ValueError("shell syntax (; | & < > ` $ or a newline) never matches a command")
    tokens = split_command(entry)
    if tokens[0] in (PATH_PLACEHOLDER, ARGS_PLACEHOLDER):
        raise ValueError("the program itself cannot be a placeholder")
    for index, token in enumerate(tokens):
        if token == ARGS_PLACEHOLDER and index != len(tokens) - 1:
            raise ValueError(f"{ARGS_PLACEHOLDER} must be the last token")
        if token not in (PATH_PLACEHOLDER, ARGS_PLACEHOLDER) and (
            PATH_PLACEHOLDER in token or "{args" in token
        ):
            raise ValueError("a placeholder must be a whole argument")
    return tokens


def _has_escape(arg: str) -> bool:
    parts = PurePosixPath(arg).parts
    return arg.startswith("/") or ".." in parts or "\\" in arg


def _plain_arg(arg: str) -> bool:
    return bool(_PLAIN_ARG.fullmatch(arg)) and not _has_escape(arg)


def _match(argv: Sequence[str], template: Sequence[str]) -> bool:
    for index, token in enumerate(template):
        if token == ARGS_PLACEHOLDER:
            return all(_plain_arg(arg) for arg in argv[index:])
        if index >= len(argv):
            return False
        if token == PATH_PLACEHOLDER:
            if not _plain_arg(argv[index]):
                return False
        elif token != argv[index]:
            return False
    return len(argv) == len(template)


def split(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


def matching_template(command: str, allow: Sequence[str]) -> list[str] | None:
    if _SHELL_SYNTAX.search(command):
        return None
    argv = split(command)
    if not argv:
        return None
    for entry in allow:
        try:
            template = parse_allow_entry(entry)
        except ValueError:
            continue
        if _match(argv, template):
            return template
    return None


def is_allowed(command: str, allow: Sequence[str]) -> bool:
    """True when ``command`` matches an allowlist entry (exact or template), token by token."""
    return matching_template(command, allow) is not None


def placeholder_args(argv: Sequence[str], template: Sequence[str]) -> list[str]:
    args: list[str] = []
    for index, token in enumerate(template):
        if token == ARGS_PLACEHOLDER:
            args.extend(argv[index:])
        elif token == PATH_PLACEHOLDER:
            args.append(argv[index])
    return args


def stays_inside(cwd: Path, arg: str) -> bool:
    # The lexical check already passed; this one follows symlinks already in the tree.
    # pytest-style node ids ("tests/x.py::test") name a file before the "::".
    path_part = arg.split("::", 1)[0]
    root = os.path.realpath(cwd)
    target = os.path.realpath(os.path.join(root, path_part))
    return target == root or target.startswith(root + os.sep)


def _token_problem(arg: str, token: str) -> str:
    if token == PATH_PLACEHOLDER:
        what = "{path}"
    elif token == ARGS_PLACEHOLDER:
        what = "{args...}"
    else:
        return f"{arg!r} is not {token!r}"
    if arg.startswith("-"):
        return f"{arg!r} is an option, and {what} never matches options (add an entry that names it)"
    if _has_escape(arg):
        return f"{arg!r} leaves the worktree, which {what} never matches"
    return f"{arg!r} holds characters {what} never matches (quotes, spaces, '=', '@', globs)"


def explain(command: str, allow: Sequence[str]) -> str:
    """Why no entry of ``allow`` admits ``command``: the closest entry (the one that matched the
    most leading tokens) and the first token of the command that fell outside it."""
    if _SHELL_SYNTAX.search(command):
        return "it holds shell syntax (; | & < > ` $ or a newline), which no entry ever matches"
    argv = split(command)
    if not argv:
        return "it cannot be split into arguments"
    if not allow:
        return "validation.allow is empty"
    best: tuple[int, str, bool] | None = None
    for entry in allow:
        try:
            template = parse_allow_entry(entry)
        except ValueError:
            continue
        problem, matched = "", 0
        for index, token in enumerate(template):
            if token == ARGS_PLACEHOLDER:
                bad = next((arg for arg in argv[index:] if not _plain_arg(arg)), None)
                problem = f"token {argv.index(bad) + 1} {_token_problem(bad, token)}" if bad else ""
                matched = len(argv) if not bad else argv.index(bad)
                break
            if index >= len(argv):
                problem = f"the command ends where {entry!r} expects {token!r}"
                break
            ok = _plain_arg(argv[index]) if token == PATH_PLACEHOLDER else token == argv[index]
            if not ok:
                problem = f"token {index + 1} {_token_problem(argv[index], token)}"
                break
            matched = index + 1
        else:
            if len(argv) > len(template):
                problem = (f"{argv[len(template)]!r} and what follows are more arguments than {entry!r} takes"
                           " (end the entry with {args...} to admit plain arguments)")
        line = f"closest entry {entry!r}: {problem}"
        # On a tie the entry with a placeholder explains more (why a token did not fit it).
        templated = PATH_PLACEHOLDER in template or ARGS_PLACEHOLDER in template
        if best is None or matched > best[0] or (matched == best[0] and templated and not best[2]):
            best = (matched, line, templated)
    return best[1] if best else "no entry of validation.allow can be parsed"
