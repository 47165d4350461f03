"""Which validation commands run a subset of another's tests, and which of its tests they are.

A task's validation often holds the synthesizer's ``python -m pytest tests/test_x.py`` beside the
project's check ``python -m pytest``: the same runner, the same options, the second selecting
everything the first does. Running both runs those tests twice. Read so for pytest, unittest,
``go test`` (``./pkg`` inside ``./...``, by the module's import path), Jest and Vitest (paths, as
substrings of a test file's path, inside a run naming none) and ``cargo test`` (one filter inside
a run with none). ``covered_by`` tells, for two
commands, whether the larger one runs every test of the smaller (for pytest: the same program and
options, the smaller only naming paths, modules or node ids inside what the larger names; for
unittest: the larger discovering, or naming modules the smaller's are inside), and gives a
predicate picking the smaller's tests out of the larger's run by their ids. Options that select or
stop (``-k``, ``-m``, ``-x``, ``--lf``, ``--failfast``...) in either make it no subset: which tests
run is then not the paths' business alone.

The caller (``orchestrator.sandbox.validation``) still runs the smaller command when its tests
cannot be found in the larger's run (a path outside pytest's ``testpaths``, a module the ids do
not show): a subset is only ever judged from tests that really ran.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Sequence

from orchestrator.testruns.commands import module_run, node_tool, program

__all__ = ["covered_by"]

_PYTEST_SELECTING = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--sw", "--stepwise", "--collect-only", "--co",
                     "-x", "--exitfirst", "--maxfail", "--ff", "--failed-first", "--nf", "--new-first",
                     "--ignore", "--ignore-glob", "--pyargs")
_UNITTEST_SELECTING = ("-k", "-f", "--failfast")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _pytest_parts(argv: Sequence[str]) -> tuple[list[str], list[str], list[str]] | None:
    """(the program words, the options, the selectors) of a pytest command; None otherwise."""
    if program(argv) in ("pytest", "py.test"):
        start, args = [argv[0]], list(argv[1:])
    else:
        found = module_run(argv)
        if found is None or found[0] != "pytest":
            return None
        start, args = [*found[1], "-m", "pytest"], found[2]
    options = [arg for arg in args if arg.startswith("-")]
    selectors = [arg for arg in args if not arg.startswith("-")]
    return start, options, selectors


def _inside(path: str, folders: Sequence[str]) -> bool:
    norm = os.path.normpath(path.split("::", 1)[0])
    return any(norm == os.path.normpath(f) or norm.startswith(os.path.normpath(f).rstrip("/") + "/")
               or os.path.normpath(f) == "." for f in folders)


def _pytest_selects(selector: str) -> Callable[[str], bool] | None:
    """Whether a case id of pytest's reader (``module.Class::name``) is one ``selector`` (a path
    or a node id) selects."""
    path, _, rest = selector.partition("::")
    norm = os.path.normpath(path)
    if ".." in Path(norm).parts or os.path.isabs(norm):
        return None
    if norm.endswith(".py"):
        dotted = norm[:-3].replace("/", ".")
        if not _DOTTED.match(dotted):
            return None
        if rest:
            *owners, name = rest.split("::")
            owner = ".".join([dotted, *owners])
            exact = f"{owner}::{name}"
            return lambda case_id: case_id == exact or (("[" not in name) and case_id.startswith(exact + "["))
        return lambda case_id: case_id.split("::", 1)[0] == dotted or case_id.startswith(dotted + ".")
    dotted = norm.replace("/", ".").strip(".")
    if norm == ".":
        return lambda case_id: True
    if rest or not _DOTTED.match(dotted):
        return None
    return lambda case_id: case_id.startswith(dotted + ".")


def _unittest_parts(argv: Sequence[str]) -> tuple[list[str], list[str]] | None:
    found = module_run(argv)
    if found is None or found[0] != "unittest":
        return None
    return [*found[1], "-m", "unittest"], found[2]


def _discovery_start(args: Sequence[str]) -> str | None:
    """The dotted package ``unittest discover``'s options start from, with test ids named from
    the current folder (``-t .``, or no ``-s``); '' for the current folder; None when its ids are
    named from elsewhere or an option is not read here."""
    values: dict[str, str] = {}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("-v", "--verbose", "-q", "--quiet", "-b", "--buffer", "-c", "--catch"):
            continue
        if arg in ("-s", "--start-directory", "-t", "--top-level-directory", "-p", "--pattern") and rest:
            values[arg.lstrip("-")[0]] = rest.pop(0)
            continue
        return None
    start = os.path.normpath(values.get("s", "."))
    top = os.path.normpath(values.get("t", "." if "s" not in values else start))
    if top != "." or start.startswith(("..", "/")):
        return None
    return "" if start == "." else start.replace(os.sep, ".")


def _go_parts(argv: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """(the options, the package patterns) of ``go test``; None otherwise."""
    if program(argv) != "go" or list(argv[1:2]) != ["test"]:
        return None
    args = list(argv[2:])
    if "-run" in args or any(a.startswith(("-run=", "-skip", "-failfast", "-count", "-list")) for a in args):
        return None  # a selection, a stop or a repetition of their own
    return [a for a in args if a.startswith("-")], [a for a in args if not a.startswith("-")]


def _go_module(tree: Path | str | None) -> str | None:
    if tree is None:
        return None
    try:
        text = (Path(tree) / "go.mod").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.search(r"^module\s+(\S+)", text, re.M)
    return found.group(1) if found else None


def _go_pattern(module: str, pattern: str) -> tuple[str, bool] | None:
    """(the import path a ``./pkg`` or ``./pkg/...`` pattern names, whether it takes the packages
    below it)."""
    below = pattern.endswith("/...")
    path = pattern[:-4] if below else pattern
    if path in (".", "./"):
        return module, below
    if not path.startswith("./") or ".." in path.split("/"):
        return None
    return f"{module}/{path[2:].rstrip('/')}", below


def _go(small: Sequence[str], big: Sequence[str], tree: Path | str | None) -> Callable[[str], bool] | None:
    ours, theirs, module = _go_parts(small), _go_parts(big), _go_module(tree)
    if ours is None or theirs is None or module is None or ours[0] != theirs[0] or not ours[1]:
        return None
    wanted = [_go_pattern(module, p) for p in ours[1]]
    having = [_go_pattern(module, p) for p in (theirs[1] or ["."])]
    if any(w is None for w in [*wanted, *having]):
        return None

    def holds(pattern: tuple[str, bool], package: str, exact_only: bool = False) -> bool:
        path, below = pattern
        return package == path or (below and not exact_only and package.startswith(path + "/"))

    if not all(any(holds(h, w[0]) and (not w[1] or h[1]) for h in having) for w in wanted):
        return None
    return lambda case_id: any(holds(w, case_id.rsplit(".", 1)[0].split("/Test", 1)[0]) for w in wanted)


def _node(small: Sequence[str], big: Sequence[str], tree: Path | str | None) -> Callable[[str], bool] | None:
    """Jest's and Vitest's paths (substrings of a test file's path, as both match them)."""
    names = ("jest", "vitest")
    ours, theirs = node_tool(small, tree, names), node_tool(big, tree, names)
    if ours is None or theirs is None or ours[0] != theirs[0]:
        return None

    def args(argv: Sequence[str], found: tuple) -> list[str]:
        extra = list(argv[list(argv).index("--") + 1:]) if found[2] and "--" in argv else []
        return [a for a in [*found[1], *extra] if a not in ("run",)]

    small_args, big_args = args(small, ours), args(big, theirs)
    if [a for a in small_args if a.startswith("-")] != [a for a in big_args if a.startswith("-")]:
        return None
    if any(a.startswith(("-t", "--testNamePattern", "--bail", "-b", "--onlyChanged", "-o", "--changed"))
           for a in small_args):
        return None
    paths = [a for a in small_args if not a.startswith("-")]
    if not paths or [a for a in big_args if not a.startswith("-")]:
        return None
    return lambda case_id: any(path in case_id.split(" > ", 1)[0] for path in paths)


def _cargo(small: Sequence[str], big: Sequence[str]) -> Callable[[str], bool] | None:
    """``cargo test FILTER`` inside ``cargo test`` (the filter a substring of a test's path)."""
    if program(small) != "cargo" or program(big) != "cargo" or list(small[1:2]) != ["test"] \
            or list(big[1:2]) != ["test"] or "--" in small or "--" in big:
        return None
    small_args, big_args = list(small[2:]), list(big[2:])
    if [a for a in small_args if a.startswith("-")] != [a for a in big_args if a.startswith("-")] \
            or [a for a in big_args if not a.startswith("-")]:
        return None
    filters = [a for a in small_args if not a.startswith("-")]
    if len(filters) != 1 or not re.fullmatch(r"[\w:]+", filters[0]):
        return None
    return lambda case_id: filters[0] in case_id


def covered_by(small: Sequence[str], big: Sequence[str], tree: Path | str | None) -> Callable[[str], bool] | None:
    """A predicate picking, from the case ids of ``big``'s run, the tests ``small`` runs, when
    ``big`` runs every one of them; None when it does not, or when that cannot be told."""
    if list(small) == list(big):
        return None
    from orchestrator.testruns.table import read_chain  # the table imports every reader

    chain = read_chain(big, tree)
    if chain is not None:  # a script ``jest && eslint .``: its tests are its runner's part's
        big = chain[0][chain[1]]
    for other in (_go(small, big, tree), _node(small, big, tree), _cargo(small, big)):
        if other is not None:
            return other
    ours, theirs = _pytest_parts(small), _pytest_parts(big)
    if ours is not None and theirs is not None:
        if ours[0] != theirs[0] or ours[1] != theirs[1] or not ours[2]:
            return None
        if any(opt.split("=", 1)[0] in _PYTEST_SELECTING for opt in ours[1]):
            return None
        if theirs[2] and not all(_inside(sel, [t for t in theirs[2] if "::" not in t]) for sel in ours[2]):
            return None
        picks = [_pytest_selects(sel) for sel in ours[2]]
        if any(pick is None for pick in picks):
            return None
        return lambda case_id: any(pick(case_id) for pick in picks)
    ours_u, theirs_u = _unittest_parts(small), _unittest_parts(big)
    if ours_u is None or theirs_u is None or ours_u[0] != theirs_u[0]:
        return None
    small_args, big_args = ours_u[1], theirs_u[1]
    if any(arg in _UNITTEST_SELECTING for arg in [*small_args, *big_args]):
        return None
    names = [arg for arg in small_args if not arg.startswith("-")]
    if not names or not all(_DOTTED.match(name) for name in names) or any(a.startswith("-") for a in small_args):
        return None
    if big_args and big_args[0] == "discover" and big_args != ["discover"]:
        start = _discovery_start(big_args[1:])
        if start is None or not all(start == "" or name.startswith(start + ".") for name in names):
            return None  # ids relative to another top folder, or a start the names are not inside
    elif big_args and big_args != ["discover"]:
        if any(arg.startswith("-") or not _DOTTED.match(arg) for arg in big_args):
            return None  # discovery with options, or names the subset cannot be told inside
        if not all(any(name == b or name.startswith(b + ".") for b in big_args) for name in names):
            return None
    return lambda case_id: any(case_id == name or case_id.startswith(name + ".") for name in names)
