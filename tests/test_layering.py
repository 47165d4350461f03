"""The house's layering, read from the packages' own docstrings and checked against every import.

``orchestrator/__init__.py`` lists each room of the orchestrator and what it may import; every
package's ``__init__`` says the same in a ``May import:`` sentence (``tracker``, ``redact`` and
``roles`` list theirs there). This test parses those sentences, then checks every import in the
code, at module level, inside functions and under ``TYPE_CHECKING`` alike, so a new arrow that
runs the wrong way, a new circle between modules or between rooms, or a room whose docstring
disagrees with the table fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tracker", "redact", "roles", "orchestrator")
_NAME = re.compile(r"``([a-z_.]+)``")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every project module ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def unit(module: str) -> str:
    """The room a module belongs to: a top-level package, or a subpackage or module of ``orchestrator``."""
    parts = module.split(".")
    return parts[0] if parts[0] != "orchestrator" or len(parts) == 1 else f"orchestrator.{parts[1]}"


def _may_import_sentence(text: str) -> set[str]:
    match = re.search(r"May import:(.*?)(?:\.\s|\.$)", text, re.S)
    assert match, "no 'May import:' sentence"
    return set(_NAME.findall(match.group(1)))


def declared() -> dict[str, set[str] | None]:
    """Room -> the rooms it may import (None: anything), from the docstrings."""
    table: dict[str, set[str] | None] = {}
    for package in ("tracker", "redact", "roles"):
        table[package] = _may_import_sentence(ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text())))
    doc = ast.get_docstring(ast.parse((ROOT / "orchestrator" / "__init__.py").read_text()))
    entries = re.findall(r"^- ``([a-z_]+)``[^:]*:(.*?)(?=^- |^\S|\Z)", doc, re.S | re.M)
    for name, rule in entries:
        room = f"orchestrator.{name}"
        if "anything" in rule:
            table[room] = None
            continue
        names = set(_NAME.findall(rule))
        for other in re.findall(r"what ``([a-z_]+)`` may", rule):
            names.discard(other)
            names |= table[f"orchestrator.{other}"]
        table[room] = names
    return table


TABLE = declared()


def test_every_room_is_in_the_table_and_says_the_same_in_its_own_docstring():
    rooms = {unit(m) for m in MODULES} - {"orchestrator"}
    assert rooms == set(TABLE), "a room without a line in orchestrator/__init__.py, or a line without a room"
    for room, allowed in TABLE.items():
        init = ROOT / room.replace(".", "/") / "__init__.py"
        if room.startswith("orchestrator.") and init.exists() and allowed is not None:
            assert _may_import_sentence(ast.get_docstring(ast.parse(init.read_text()))) == allowed, room


def test_every_import_runs_the_way_the_table_allows():
    wrong = sorted(f"{module} -> {target}" for module, targets in GRAPH.items() for target in targets
                   if unit(target) != unit(module) and unit(module) != "orchestrator"
                   and TABLE[unit(module)] is not None and unit(target) not in TABLE[unit(module)])
    assert wrong == []


def test_the_table_itself_has_no_circle():
    seen: dict[str, int] = {}

    def visit(room: str, path: tuple[str, ...]) -> None:
        assert room not in path, f"circle in the table: {' -> '.join(path + (room,))}"
        if seen.get(room):
            return
        for other in TABLE.get(room) or ():
            visit(other, path + (room,))
        seen[room] = 1

    for room, allowed in TABLE.items():
        if allowed is not None:
            visit(room, ())


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_no_module_imports_itself_back_through_a_circle():
    assert _circles(GRAPH) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_file_is_past_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 800}
    assert long == {}


def test_at_most_twelve_modules_stay_directly_in_orchestrator():
    assert len(list((ROOT / "orchestrator").glob("*.py"))) <= 12


def test_every_package_is_in_the_distribution():
    """A package left out of pyproject's list works in the editable dev install and is missing
    from ``pip install .``, as users have mesh."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(path.parent.relative_to(ROOT).parts) for package in PACKAGES
             for path in (ROOT / package).rglob("__init__.py")}
    assert found - listed == set()
