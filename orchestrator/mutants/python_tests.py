"""Twins of Python tests, for pytest, unittest and Django's runner.

A test can be twinned when its last statement is an equality assertion against a literal
(``assert f(x) == 3``, ``self.assertEqual(f(x), "a")``, ``assert [1, 2] == g()``) outside any
block, and nothing before it can return: when the original passes, that assertion held, and
the twin, the same function under another name whose literal is changed (an integer or float
moved by a few units, a character added to a string, written as the source writes it), must
fail at its very end, after the same side effects. Tests marked as expected failures, and
generator tests, are left alone. The twin goes right after its original, with its decorators
(a parametrized test's twin is parametrized the same).

May import the standard library, ``orchestrator.mutants`` and ``orchestrator.testruns``.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import random
import re
from collections.abc import Sequence
from pathlib import Path

from orchestrator.mutants.model import Candidate, Collected, Twin, edited_text, fresh_name, moved_integer, name_words
from orchestrator.testruns.commands import module_run, program
from orchestrator.testruns.django_reader import unittest_args

__all__ = ["MUTATOR"]

_SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "env", "node_modules", "__pycache__", "build", "dist",
                        ".tox", ".nox", "site-packages", ".eggs"})
# Options after which which tests run (or how many) cannot be known, or a first failure stops the run.
_PYTEST_STOPPING = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--sw", "--stepwise", "--collect-only",
                    "--co", "-x", "--exitfirst", "--maxfail", "--ff", "--failed-first", "--nf", "--new-first")
_UNITTEST_STOPPING = ("-k", "-f", "--failfast")
_EQUAL_METHODS = frozenset({"assertEqual", "assertEquals", "failUnlessEqual", "assertListEqual", "assertTupleEqual",
                            "assertSequenceEqual", "assertMultiLineEqual", "assertAlmostEqual",
                            "assertAlmostEquals"})
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _is_test_file(name: str, pattern: str | None = None) -> bool:
    if pattern is not None:
        return name.endswith(".py") and fnmatch.fnmatch(name, pattern)
    return name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py"))


def _walk(root: Path, start: Path, *, packages_only: bool, pattern: str | None = None) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(start):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")
                         and (not packages_only or os.path.isfile(os.path.join(folder, d, "__init__.py"))))
        for name in sorted(files):
            path = Path(folder) / name
            if _is_test_file(name, pattern) and not path.is_symlink() and path.is_file():
                found.append(path.relative_to(root).as_posix())
    return found


def _inside(root: Path, rel: str) -> Path | None:
    path = (root / rel).resolve()
    top = root.resolve()
    return path if path == top or top in path.parents else None


def _stops(args: Sequence[str], options: Sequence[str]) -> bool:
    return any(arg.split("=", 1)[0] in options for arg in args)


def _pytest_collected(args: Sequence[str], root: Path) -> Collected | None:
    if _stops(args, _PYTEST_STOPPING):
        return None
    named: dict[str, set[tuple[str, str]]] = {}
    files: list[str] = []
    explicit = True
    for arg in args:
        if arg.startswith("-"):
            continue
        if "::" in arg:
            path, *parts = arg.split("::")
            where = _inside(root, path)
            if where is None or not where.is_file() or not parts:
                continue
            rel = where.relative_to(root.resolve()).as_posix()
            name = re.sub(r"\[.*$", "", parts[-1])
            named.setdefault(rel, set()).add((parts[-2] if len(parts) > 1 else "", name))
            continue
        where = _inside(root, arg) if (root / arg).exists() else None
        if where is None:
            continue
        if where.is_file():
            if where.suffix == ".py":
                files.append(where.relative_to(root.resolve()).as_posix())
        else:
            explicit = False
            files.extend(_walk(root.resolve(), where, packages_only=False))
    if named:
        return Collected(tuple(named), {rel: frozenset(names) for rel, names in named.items()})
    if not files and not any(not a.startswith("-") and (root / a).exists() for a in args):
        return Collected(tuple(_walk(root.resolve(), root.resolve(), packages_only=False)))
    return Collected(tuple(dict.fromkeys(files)), explicit=explicit and bool(files))


def _unittest_collected(args: Sequence[str], root: Path) -> Collected | None:
    if _stops(args, _UNITTEST_STOPPING):
        return None
    args = list(args)
    if (args and args[0] == "discover") or not [a for a in args if not a.startswith("-")]:
        rest = args[1:] if args and args[0] == "discover" else args
        start, pattern = ".", "test*.py"
        positional = []
        index = 0
        while index < len(rest):
            arg = rest[index]
            if arg in ("-s", "--start-directory", "-p", "--pattern", "-t", "--top-level-directory") \
                    and index + 1 < len(rest):
                if arg in ("-s", "--start-directory"):
                    start = rest[index + 1]
                elif arg in ("-p", "--pattern"):
                    pattern = rest[index + 1]
                index += 2
                continue
            if not arg.startswith("-"):
                positional.append(arg)
            index += 1
        start = positional[0] if positional else start
        pattern = positional[1] if len(positional) > 1 else pattern
        top = _inside(root, start)
        if top is None or not top.is_dir():
            return None
        return Collected(tuple(_walk(root.resolve(), top, packages_only=True, pattern=pattern)))
    named: dict[str, set[tuple[str, str]]] = {}
    files: list[str] = []
    for arg in args:
        if arg.startswith("-"):
            continue
        if arg.endswith(".py"):
            where = _inside(root, arg)
            if where is not None and where.is_file():
                files.append(where.relative_to(root.resolve()).as_posix())
            continue
        if not _MODULE_NAME.match(arg):
            continue
        parts = arg.split(".")
        for cut in range(len(parts), 0, -1):
            where = _inside(root, "/".join(parts[:cut]) + ".py")
            if where is not None and where.is_file():
                rel = where.relative_to(root.resolve()).as_posix()
                rest = parts[cut:]
                if not rest:
                    files.append(rel)
                elif len(rest) == 2:
                    named.setdefault(rel, set()).add((rest[0], rest[1]))
                break
    if named:
        return Collected(tuple(named), {rel: frozenset(names) for rel, names in named.items()})
    return Collected(tuple(dict.fromkeys(files)), explicit=bool(files))


def _runner_args(argv: Sequence[str]) -> list[str]:
    """The runner's own arguments of a command (after ``pytest`` or ``python -m pytest``/``unittest``);
    arguments that start with neither are taken as the runner's already."""
    if argv and program(argv) in ("pytest", "py.test"):
        return list(argv[1:])
    found = module_run(argv)
    if found is not None:
        return found[2]
    return list(argv)


def _literal(node: ast.AST) -> list[ast.Constant]:
    """The constants of a literal that can be changed (numbers, strings, bytes; inside a list,
    tuple or a negation)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, str, bytes):
        if isinstance(node.value, float) and node.value != node.value:
            return []
        return [node]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _literal(node.operand)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [c for elt in node.elts for c in _literal(elt)]
    return []


def _final_assertion(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Constant]:
    """The constants of ``func``'s last statement when it is an equality assertion against a
    literal that is always reached when the test passes; [] otherwise."""
    last = func.body[-1]
    for node in ast.walk(func):
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)):
            return []
    if isinstance(last, ast.Assert) and isinstance(last.test, ast.Compare) and len(last.test.ops) == 1 \
            and isinstance(last.test.ops[0], ast.Eq):
        sides = [last.test.left, last.test.comparators[0]]
    elif isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) \
            and isinstance(last.value.func, ast.Attribute) and last.value.func.attr in _EQUAL_METHODS \
            and len(last.value.args) >= 2 and not last.value.keywords:
        sides = last.value.args[:2]
    else:
        return []
    # One side a literal, the other computed: a literal on both sides says nothing of the code.
    literal = [side for side in sides if _literal(side) and not (isinstance(side, (ast.List, ast.Tuple))
                                                                    and len(_literal(side)) != len(side.elts))]
    if len(literal) != 1:
        return []
    return _literal(literal[0])


def _changed_literal(segment: str, value: object, rng: random.Random) -> str | None:
    """The source of ``segment`` (a literal's text) with its value changed, in its own style: a
    letter added, removed or changed in a string, a number moved up or down."""
    if isinstance(value, (str, bytes)):
        simple = re.fullmatch(r"([rRbBuU]{0,2})('''|\"\"\"|'|\")(.*)\2", segment, re.S)
        if simple is not None:
            changed = simple.group(1) + simple.group(2) + edited_text(simple.group(3), rng) + simple.group(2)
        else:  # strings joined side by side: a letter before the last closing quote
            match = re.search(r"('''|\"\"\"|'|\")\s*$", segment)
            if match is None:
                return None
            changed = segment[:match.start()] + rng.choice("abcdefghkmnprstuvwxyz") + segment[match.start():]
    elif isinstance(value, int):
        moved = moved_integer(value, rng, typed=False)
        if re.fullmatch(r"[0-9_]+", segment):
            changed = str(moved) if moved >= 0 else f"({moved})"
        elif re.fullmatch(r"0[xX][0-9a-fA-F_]+", segment):
            changed = hex(moved) if moved >= 0 else f"(-{hex(-moved)})"
        else:
            return None
    else:
        changed = repr(value + rng.choice((-1, 1)) * rng.randint(1, 9))
    try:
        if ast.literal_eval(changed) == value:
            return None
    except (ValueError, SyntaxError):
        return None
    return changed


def _tests(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            out.append(("", node))
        elif isinstance(node, ast.ClassDef):
            out.extend((node.name, item) for item in node.body
                       if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"))
    return out


def _used_names(func: ast.AST) -> set[str]:
    """The names and attributes a test's code uses."""
    return {node.id if isinstance(node, ast.Name) else node.attr for node in ast.walk(func)
            if isinstance(node, (ast.Name, ast.Attribute))}


def _expected_failure(func: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[bytes]) -> bool:
    for deco in func.decorator_list:
        text = b"".join(lines[deco.lineno - 1:deco.end_lineno]).decode("utf-8", "replace")
        if "xfail" in text or "expectedFailure" in text:
            return True
    return False


class PythonTests:
    """pytest's and unittest's tests (``model.Mutator``)."""

    def collected(self, args: Sequence[str], runner: str, root: Path) -> Collected | None:
        if runner == "django":
            as_unittest = unittest_args(args, root)
            return None if as_unittest is None else _unittest_collected(as_unittest, root)
        args = _runner_args(args)
        return _pytest_collected(args, root) if runner == "pytest" else _unittest_collected(args, root)

    def candidates(self, rel: str, text: str) -> list[Candidate]:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return []
        lines = text.encode("utf-8").splitlines(keepends=True)
        return [Candidate(scope, func.name, frozenset(_used_names(func))) for scope, func in _tests(tree)
                if not _expected_failure(func, lines) and _final_assertion(func)]

    def twin(self, rel: str, text: str, rng: random.Random, chosen: frozenset[tuple[str, str]],
             taken: set[str]) -> tuple[str, list[Twin]]:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return text, []
        lines = text.encode("utf-8").splitlines(keepends=True)
        tests = _tests(tree)
        taken.update(re.findall(r"[A-Za-z_]\w*", text))
        words = name_words([func.name for _, func in tests])
        eligible = [(scope, func) for scope, func in tests if (scope, func.name) in chosen
                    and not _expected_failure(func, lines) and _final_assertion(func)]
        stem = Path(rel).stem
        inserts: list[tuple[int, bytes]] = []
        twins: list[Twin] = []
        for scope, func in eligible:
            constants = _final_assertion(func)
            const = rng.choice(constants)
            first = min([func.lineno, *(deco.lineno for deco in func.decorator_list)])
            copy = [bytearray(line) for line in lines[first - 1:func.end_lineno]]
            if const.lineno != const.end_lineno:
                continue
            row = copy[const.lineno - first]
            segment = bytes(row[const.col_offset:const.end_col_offset]).decode("utf-8", "replace")
            changed = _changed_literal(segment, const.value, rng)
            if changed is None:
                continue
            row[const.col_offset:const.end_col_offset] = changed.encode("utf-8")
            mutant = fresh_name(rng, func.name, words + name_words(sorted(_used_names(func))), taken)
            head = copy[func.lineno - first]
            renamed = re.sub(rb"\bdef(\s+)" + re.escape(func.name.encode()) + rb"\b",
                             lambda m: b"def" + m.group(1) + mutant.encode(), bytes(head), count=1)
            if renamed == bytes(head):
                continue
            copy[func.lineno - first] = bytearray(renamed)
            body = b"".join(bytes(line) for line in copy)
            if not body.endswith(b"\n"):
                body += b"\n"
            # Before or after its original, at random: the order tells nothing.
            if rng.random() < 0.5:
                inserts.append((first - 1, body + b"\n"))
                at = first - 1
            else:
                inserts.append((func.end_lineno, b"\n" + body))
                at = func.end_lineno
            twins.append(Twin(rel, scope, func.name, mutant, tuple(part for part in (stem, scope) if part),
                              at=at, size=body.count(b"\n") + 1))
        if not twins:
            return text, []
        out = list(lines)
        if out and not out[-1].endswith(b"\n"):
            out[-1] += b"\n"
        for after, body in sorted(inserts, reverse=True):
            out.insert(after, body)
        new = b"".join(out).decode("utf-8")
        try:
            ast.parse(new)
        except SyntaxError:
            return text, []
        return new, twins

    def reaches(self, rel: str, text: str, changed: Sequence[str]) -> int:
        if rel in changed:
            return 2
        modules = set()
        for path in changed:
            if not path.endswith(".py"):
                continue
            parts = path[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            for start in range(len(parts)):
                if parts[start:]:
                    modules.add(".".join(parts[start:]))
        if not modules:
            return 0
        imported: set[str] = set()
        for match in re.finditer(r"^\s*from\s+([\w.]+)\s+import\s+\(?([\w\s,*]+)", text, re.M):
            imported.add(match.group(1))
            imported.update(f"{match.group(1)}.{name.strip()}" for name in match.group(2).split(",") if name.strip())
        for match in re.finditer(r"^\s*import\s+([\w., ]+)", text, re.M):
            imported.update(name.strip().split(" as ")[0] for name in match.group(1).split(","))
        if imported & modules:
            return 2
        packages = {module.rsplit(".", cut)[0] for module in modules for cut in range(1, module.count(".") + 1)}
        return 1 if imported & packages else 0

    def selection_args(self, runner: str, twins: Sequence[Twin]) -> list[str]:
        if runner == "pytest":
            return [f"{twin.file}::{twin.scope}::{twin.mutant}" if twin.scope else f"{twin.file}::{twin.mutant}"
                    for twin in twins]
        return [f"{twin.file[:-3].replace('/', '.')}.{twin.scope}.{twin.mutant}" for twin in twins if twin.scope]


MUTATOR = PythonTests()
