"""A package's names imported from their modules on first use (PEP 562 ``__getattr__``).

``roles`` and ``roles.backends`` re-export their modules' names with it, so importing one light
module of the package (``roles.usage``, ``roles.definitions``) does not load pydantic, jinja2
and every backend. May import: the standard library only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``exports`` maps each name to its module (relative
    to the package); a name is imported once, then kept in the package's namespace."""
    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
