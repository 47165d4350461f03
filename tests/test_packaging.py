"""What ``pip install .`` installs: every package folder of the source tree (a new one missing from
pyproject.toml's list made every ``mesh run`` of a non-editable install end in ModuleNotFoundError)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_in_the_installed_list():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for top in ("tracker", "orchestrator", "redact", "roles", "templates")
             for init in (ROOT / top).rglob("__init__.py") if "__pycache__" not in init.parts}
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
