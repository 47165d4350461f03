"""Go: modules (``go.mod``), their module cache or vendor folder, and Go's build cache.

Validation sees the module cache (``go env GOMODCACHE``) read-only at its own path, with
``GOFLAGS=-mod=mod`` (``-mod`` left to Go's own default, the vendor folder, when a module vendors
its dependencies), ``GOPROXY=off`` and ``GOTOOLCHAIN=local``: nothing is downloaded, no other Go
is fetched. ``GOCACHE`` is a writable build cache of the project's own (``caches``): the base
check's, copied for each validation (Go takes what its cache index names, checked by size only,
so a cache a tested tree wrote must reach no other tree), so a validation compiles only what the
patch changed. A module whose requirements do not
resolve offline (``go list -deps -test ./...`` with ``GOPROXY=off``, run before any worker call)
is refused with ``go mod download``.
"""

from __future__ import annotations

import os

from orchestrator.sandbox.bwrap import covered, visible_roots
from orchestrator.sandbox.project_view import Mount
from orchestrator.toolchains.base import (DependenciesMissing, Found, Project, ToolchainMissing, run_tool,
                                          shown_program)
from orchestrator.toolchains.caches import cache_mount

__all__ = ["GOCACHE_INSIDE", "TOOLCHAIN"]

GOCACHE_INSIDE = "/mesh/cache/go-build"
_UNRESOLVED = ("GOPROXY=off", "missing go.sum entry", "cannot find module", "no required module provides",
               "updates to go.mod needed", "module lookup disabled")


class Go:
    """The Go toolchain (see the module docstring)."""

    name = "go"

    def detect(self, project: Project) -> list[Found]:
        """One ``Found`` for the repository's Go modules (their folders in ``sees``)."""
        modules = sorted(path.rsplit("/", 1)[0] if "/" in path else "" for path in project.tracked_named("go.mod")
                         if "vendor/" not in path and "testdata/" not in path)
        if not modules:
            return []
        go = project.which("go")
        if go is None:
            raise ToolchainMissing("the repository is a Go module, but go is not on PATH; install Go (apt-get install"
                                   " golang-go) and run mesh again")
        status, out = run_tool([go, "env", "GOMODCACHE", "GOROOT"], project.root, project.environ)
        lines = out.splitlines() if status == 0 else []
        if len(lines) < 2:
            raise ToolchainMissing(f"go env failed in {project.root}: {out[-300:]}")
        modcache, goroot = lines[0].strip(), lines[1].strip()
        found = Found("go", "go", gitignore=[])
        found.mounts, found.path = shown_program(go)
        if goroot and not covered(os.path.realpath(goroot), visible_roots()):
            found.mounts.append(Mount(goroot, goroot))
            found.path.append(os.path.join(goroot, "bin"))
        vendored = [m for m in modules if project.has(f"{m}/vendor/modules.txt".lstrip("/"))]
        for module in modules:
            if module not in vendored and project.check_installed:
                self._resolves(project, go, module)
        if modcache and os.path.isdir(modcache):
            found.mounts.append(Mount(modcache, modcache))
        found.mounts.append(cache_mount("go", "build", GOCACHE_INSIDE))
        found.env = {"GOMODCACHE": modcache, "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOCACHE": GOCACHE_INSIDE,
                     "GOTELEMETRY": "off", "GONOSUMDB": "", "GOWORK": "off" if not project.has("go.work") else ""}
        found.env = {name: value for name, value in found.env.items() if value}
        if not vendored:
            found.env["GOFLAGS"] = "-mod=mod"
        where = ", ".join(f"{m}/" if m else "the root" for m in modules)
        vendor_note = f"; vendored: {', '.join(vendored)}" if vendored else ""
        found.sees += [f"modules in {where}", f"module cache {modcache} read-only{vendor_note}",
                       "GOPROXY=off, GOTOOLCHAIN=local", "GOCACHE: the base check's, copied for each validation"]
        if "" in modules:
            found.check = "go test ./..."
        found.allow = ["go test ./...", "go test {args...}", "go vet ./...", "go build ./..."]
        return [found]

    def _resolves(self, project: Project, go: str, module: str) -> None:
        text = (project.root / module / "go.mod").read_text(encoding="utf-8", errors="replace")
        if "require" not in text:
            return
        status, out = run_tool([go, "list", "-deps", "-test", "./..."], project.root / module, project.environ,
                               {"GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"})
        if status != 0 and any(marker in out for marker in _UNRESOLVED):
            cd = f"cd {module} && " if module else ""
            raise DependenciesMissing(
                f"{module + '/' if module else 'the repository'}'s Go dependencies are not in the module cache"
                f" (go list offline: {out.splitlines()[-1][:200]}); download them with: {cd}go mod download")


TOOLCHAIN = Go()
