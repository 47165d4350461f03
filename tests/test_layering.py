"""The library layering the guide asks for: ``roles/`` never imports ``orchestrator/`` (only a
type-checking import of the config is allowed), and the scrubber lives in its own package."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _runtime_imports(path: Path) -> list[str]:
    """Modules imported by ``path`` outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    names = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_roles_never_import_the_orchestrator():
    offenders = {str(p.relative_to(ROOT)): name for p in (ROOT / "roles").rglob("*.py")
                 for name in _runtime_imports(p) if name.split(".")[0] == "orchestrator"}
    assert offenders == {}


def test_redact_and_tracker_stand_alone():
    for package in ("redact", "tracker"):
        for path in (ROOT / package).rglob("*.py"):
            assert not [n for n in _runtime_imports(path) if n.split(".")[0] in {"orchestrator", "roles"}], path
