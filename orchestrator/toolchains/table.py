"""The table of toolchains, in the order preflight lists them. Adding one is a module and a row."""

from __future__ import annotations

from orchestrator.toolchains import go, node, python, rust
from orchestrator.toolchains.base import Toolchain

__all__ = ["TOOLCHAINS"]

TOOLCHAINS: dict[str, Toolchain] = {
    "python": python.TOOLCHAIN,
    "node": node.TOOLCHAIN,
    "go": go.TOOLCHAIN,
    "rust": rust.TOOLCHAIN,
}
