"""Rust: cargo projects, their registry and git checkouts, vendored sources, and a target folder.

Validation runs the project's own toolchain (``rustc --print sysroot`` in the repository, so a
``rust-toolchain.toml`` and rustup's choice hold; its ``bin`` first on PATH, read-only), offline
(``CARGO_NET_OFFLINE``), with a ``CARGO_HOME`` of its own whose ``registry/`` and ``git/`` are the
user's, read-only, and whose ``config.toml`` is the user's when it names no token or credential
(a directory source, Debian's packaged crates, a vendor folder). Sources vendored by the
project's ``.cargo/config.toml`` are in the tree (the patch policy keeps that file out of
patches). ``CARGO_TARGET_DIR`` (and the rest of that ``CARGO_HOME``, where a test could write a
``config`` naming a runner) is a writable build cache of the project's own (``caches``): the base
check's, copied for each validation, so a validation rebuilds only the project's crates, not its
dependencies, and no test binary or fingerprint a tested tree wrote reaches another. An ignored
``Cargo.lock`` is carried from the checkout, so validation resolves the versions the checkout
built with. A project whose dependencies do not resolve offline (``cargo metadata --offline``)
is refused with ``cargo fetch``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from orchestrator.sandbox.bwrap import covered, visible_roots
from orchestrator.sandbox.project_view import Mount
from orchestrator.toolchains.base import DependenciesMissing, Found, Project, ToolchainMissing, run_tool
from orchestrator.toolchains.caches import cache_mount

__all__ = ["CARGO_HOME_INSIDE", "TARGET_INSIDE", "TOOLCHAIN"]

CARGO_HOME_INSIDE = "/mesh/cargo-home"
TARGET_INSIDE = "/mesh/cache/cargo-target"
_SECRET_KEY = re.compile(r"(?im)^\s*(token|credential-provider|global-credential-providers|secret[-_]key)\s*=")
_UNRESOLVED = ("offline", "failed to download", "no matching package", "failed to load source", "attempting to make"
               " an HTTP request", "failed to get", "failed to fetch")


class Rust:
    """The Rust toolchain (see the module docstring)."""

    name = "rust"

    def detect(self, project: Project) -> list[Found]:
        """One ``Found`` for a repository with a root ``Cargo.toml``."""
        if not project.has("Cargo.toml"):
            return []
        cargo, rustc = project.which("cargo"), project.which("rustc")
        if cargo is None or rustc is None:
            raise ToolchainMissing("the repository is a cargo project, but cargo or rustc is not on PATH; install"
                                   " Rust (apt-get install cargo, or rustup) and run mesh again")
        status, out = run_tool([rustc, "--print", "sysroot"], project.root, project.environ)
        sysroot = out.splitlines()[-1].strip() if status == 0 and out else ""
        if not sysroot or not os.path.isdir(sysroot):
            raise ToolchainMissing(f"rustc --print sysroot failed in {project.root}: {out[-300:]}")
        found = Found("rust", "rust (cargo)", gitignore=["target/"])
        real_cargo = Path(sysroot) / "bin" / "cargo"
        if not covered(os.path.realpath(sysroot), visible_roots()):
            found.mounts.append(Mount(sysroot, sysroot))
        found.path.append(str(Path(sysroot) / "bin"))
        cargo_home = Path(project.environ.get("CARGO_HOME") or Path(project.environ.get("HOME") or "~").expanduser()
                          / ".cargo")
        if project.check_installed:
            self._resolves(project, str(real_cargo) if real_cargo.exists() else cargo)
        found.mounts += [cache_mount("rust", "cargo-home", CARGO_HOME_INSIDE),
                         cache_mount("rust", "target", TARGET_INSIDE)]
        shown = []
        for name in ("registry", "git"):
            if (cargo_home / name).is_dir():
                found.mounts.append(Mount(str(cargo_home / name), f"{CARGO_HOME_INSIDE}/{name}"))
                shown.append(f"{name}/")
        for name in ("config.toml", "config"):
            config = cargo_home / name
            if config.is_file() and not _SECRET_KEY.search(config.read_text(encoding="utf-8", errors="replace")):
                found.mounts.append(Mount(str(config), f"{CARGO_HOME_INSIDE}/config.toml"))
                shown.append(name)
                break
        if project.ignored_present("Cargo.lock"):
            found.carried.append("Cargo.lock")
        found.env = {"CARGO_HOME": CARGO_HOME_INSIDE, "CARGO_NET_OFFLINE": "true", "CARGO_TARGET_DIR": TARGET_INSIDE,
                     "CARGO_TERM_COLOR": "never", "CARGO_TERM_PROGRESS_WHEN": "never"}
        found.sees += [f"toolchain {sysroot}",
                       f"{cargo_home}'s {', '.join(shown)} read-only" if shown else "no cargo registry",
                       "offline", "target folder: the base check's, copied for each validation"]
        found.check = "cargo test"
        found.allow = ["cargo test", "cargo test {args...}", "cargo build", "cargo check"]
        return [found]

    def _resolves(self, project: Project, cargo: str) -> None:
        status, out = run_tool([cargo, "metadata", "--offline", "--format-version", "1", "--quiet"], project.root,
                               project.environ)
        if status != 0 and any(marker in out for marker in _UNRESOLVED):
            last = next((line for line in reversed(out.splitlines()) if line.strip()), "")
            raise DependenciesMissing(f"the crate's dependencies are not available offline ({last.strip()[:200]});"
                                      " download them with: cargo fetch")


TOOLCHAIN = Rust()
