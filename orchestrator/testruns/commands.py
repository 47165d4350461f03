"""How a command names its program: ``python -m module``, ``npx tool``, a path to a tool.

May import the standard library only.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

__all__ = ["module_run", "program", "script_chain", "script_run", "scripts", "tool_args"]

_PYTHON = re.compile(r"python(?:3(?:\.\d+)?)?")
# Interpreter options that take a value as the next argument; any other option stands alone.
_PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X")


def program(argv: Sequence[str]) -> str:
    """The base name of ``argv``'s program ('' for none)."""
    return os.path.basename(argv[0]) if argv else ""


def module_run(argv: Sequence[str]) -> tuple[str, list[str], list[str]] | None:
    """(module, interpreter and its options, module arguments) for ``python [options] -m
    module ...``; None for a script, ``-c`` code, stdin or no Python at all."""
    if not argv or not _PYTHON.fullmatch(program(argv)):
        return None
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "-m":
            return (argv[index + 1], list(argv[:index]), list(argv[index + 2:])) if index + 1 < len(argv) else None
        if arg.startswith("-m"):  # "-mpytest"
            return arg[2:], list(argv[:index]), list(argv[index + 1:])
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            index += 2
        elif arg.startswith("-") and not arg.startswith(("-c", "--")) and arg != "-":
            index += 1
        else:
            return None
    return None


def script_run(argv: Sequence[str]) -> tuple[list[str], str, list[str]] | None:
    """(interpreter and its options, script, its arguments) for ``python [options] script.py
    ...`` or ``./script.py ...``; None otherwise."""
    if not argv:
        return None
    if argv[0].endswith(".py"):
        return ["python"], argv[0], list(argv[1:])
    if not _PYTHON.fullmatch(program(argv)):
        return None
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            index += 2
        elif arg.startswith("-"):
            if arg.startswith(("-m", "-c")) or arg == "-":
                return None
            index += 1
        else:
            return (list(argv[:index]), arg, list(argv[index + 1:])) if arg.endswith(".py") else None
    return None


def tool_args(argv: Sequence[str], names: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """(the words that start the tool, its arguments) when ``argv`` runs one of the Node tools
    ``names`` directly (``jest``, ``node_modules/.bin/jest``) or through ``npx [--no-install]``;
    else None."""
    if not argv:
        return None
    if program(argv) in _WRAPPERS:  # nyc tape test/*.js: the wrapper's options, then the command
        index = 1
        while index < len(argv) and argv[index].startswith("-"):
            index += 1
        found = tool_args(argv[index:], names)
        return (list(argv[:index]) + found[0], found[1]) if found else None
    if program(argv) in names:
        return [argv[0]], list(argv[1:])
    if program(argv) == "npx":
        index = 1
        while index < len(argv) and argv[index].startswith("-"):
            index += 1
        if index < len(argv) and argv[index] in names:
            return list(argv[:index + 1]), list(argv[index + 1:])
    return None


_SCRIPT_RUNNERS = {("npm", "test"): "test", ("npm", "t"): "test", ("npm", "tst"): "test"}
_OPERATORS = frozenset(";&|<>()")
# Coverage wrappers that run the command after their own options, its output passed through.
_WRAPPERS = ("nyc", "c8")


def _tokens(script: str) -> list[str] | None:
    """``script``'s words and shell operators as the shell reads them (quotes removed); None
    with a substitution or variable outside quotes, or quotes that do not close."""
    import shlex

    if "`" in script or "$(" in script or "${" in script:
        return None
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        return None


def scripts(tree: "os.PathLike[str] | str") -> dict:
    """The ``scripts`` of the package.json at ``tree`` ({} when there is none to read)."""
    import json

    try:
        with open(os.path.join(tree, "package.json"), encoding="utf-8") as handle:
            scripts = json.load(handle).get("scripts") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return scripts if isinstance(scripts, dict) else {}


def _plain_words(script: str) -> list[str] | None:
    """The words of ``script`` when it is one command: no shell operator (``&&``, ``|``, ``;``,
    redirections), substitution or variable outside quotes; globs are the program's business."""
    import shlex

    tokens = _tokens(script)
    if tokens is None or any(token and set(token) <= _OPERATORS for token in tokens):
        return None
    return shlex.split(script)


def _script_name(argv: Sequence[str]) -> str | None:
    if program(argv) != "npm" or len(argv) < 2:
        return None
    rest = list(argv[1:argv.index("--")] if "--" in argv else argv[1:])
    name = _SCRIPT_RUNNERS.get(("npm", rest[0])) if rest else None
    if name is None and rest[:1] in (["run"], ["run-script"]) and len(rest) >= 2:
        name = rest[1]
    return None if name is None or any(word.startswith("-") for word in rest) else name


def script_command(argv: Sequence[str], tree: "os.PathLike[str] | str | None", *,
                   follow: bool = False) -> list[str] | None:
    """The words of the package.json script that ``argv`` runs (``npm test``, ``npm run NAME``,
    ``npm run-script NAME``), read from the tree under test, when that script is one plain
    command (no shell operators or substitutions: mesh may append its own arguments to it after
    ``--``); else None. With ``follow``, a script that is itself ``npm run OTHER`` is followed
    (up to three deep): for readers that append nothing (arguments after ``--`` would reach the
    inner npm, not the runner)."""
    if tree is None:
        return None
    found = scripts(tree)
    words: list[str] | None = list(argv)
    for _depth in range(3 if follow else 1):
        name = _script_name(words or [])
        script = found.get(name) if name is not None else None
        words = _plain_words(script) if isinstance(script, str) else None
        if not words or _script_name(words) is None:
            return words or None
    return None


def script_chain(argv: Sequence[str], tree: "os.PathLike[str] | str | None") -> list[list[str]] | None:
    """The commands of the package.json script ``argv`` runs (``npm test``, ``npm run NAME``, no
    arguments of its own) when that script is a chain of plain commands joined by ``&&`` alone
    (``node --test && npm run check:type:ts``), in order; else None (one command, another
    operator, a substitution, or arguments that npm would give to the chain's last command)."""
    import shlex

    if tree is None or _script_name(argv) is None or "--" in argv:
        return None
    script = scripts(tree).get(_script_name(argv))
    tokens = _tokens(script) if isinstance(script, str) and "&&" in script else None
    if tokens is None:
        return None
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token == "&&":
            parts.append([])
        elif token and set(token) <= _OPERATORS:
            return None
        else:
            parts[-1].append(token)
    if len(parts) < 2 or not all(parts) or any("=" in part[0] for part in parts):
        return None  # an empty part, or one setting a variable for its program (the shell's business)
    # The words as the shell splits them (quotes removed), part by part.
    return [shlex.split(shlex.join(part)) for part in parts]


def node_tool(argv: Sequence[str], tree: "os.PathLike[str] | str | None", names: Sequence[str], *,
              follow: bool = False) -> tuple[list[str], list[str], bool] | None:
    """(the words that start the tool, its arguments, whether it runs as an npm script) when
    ``argv`` runs one of the Node tools ``names``: directly, through ``npx`` or a coverage wrapper
    (``nyc``, ``c8``), or as the plain package.json script ``npm test`` runs (with ``follow``,
    through ``npm run`` scripts it calls); else None."""
    direct = tool_args(argv, names)
    if direct is not None:
        return direct[0], direct[1], False
    script = script_command(argv, tree, follow=follow)
    found = tool_args(script, names) if script else None
    return (found[0], found[1], True) if found else None


def with_tool_args(argv: Sequence[str], tree: "os.PathLike[str] | str | None", names: Sequence[str],
                   extra: Sequence[str]) -> list[str]:
    """``argv`` with ``extra`` given to the tool ``names`` it runs: after the tool's own
    arguments, or after ``--`` for an npm script."""
    found = node_tool(argv, tree, names)
    if found is None:
        return list(argv)
    start, args, scripted = found
    if scripted:
        return [*argv, *([] if "--" in argv else ["--"]), *extra]
    return [*start, *args, *extra]
