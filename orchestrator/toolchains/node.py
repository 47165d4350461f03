"""Node (JavaScript and TypeScript): npm, pnpm, Yarn (classic and Plug'n'Play) and Bun projects.

A project is a set of tracked ``package.json`` files; each belongs to the install root above it
that holds a lockfile (``package-lock.json``, ``pnpm-lock.yaml``, ``yarn.lock``, ``bun.lock``),
which names its package manager; a workspace's packages share their root's. Validation shows,
read-only and at their own places in the tree copy:

- every git-ignored ``node_modules/`` of the checkout (the root's, nested workspace packages',
  pnpm's ``.pnpm`` store of hard links inside it, whose relative links then resolve as they do
  in the checkout);
- Yarn Plug'n'Play's ``.pnp.cjs`` / ``.pnp.loader.mjs``, ``.yarn/cache`` and ``.yarn/unplugged``
  when not committed, and Yarn's global cache when the project uses it;
- the project's own Node (the first ``node`` on PATH: a version manager's included) and
  package manager.

Tools that write caches into ``node_modules/.cache`` (Babel, ESLint, Terser) or
``node_modules/.vite`` (Vite, Vitest) get writable build caches bound there (``caches``), never
the tree: the base check's, copied for each validation, so a compiled output or transform a
tested tree rewrote reaches no other tree. Package managers are told they are offline.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from orchestrator.sandbox.project_view import Mount
from orchestrator.toolchains.base import DependenciesMissing, Found, Project, ToolchainMissing, run_tool, shown_program
from orchestrator.testruns.table import reader_for
from orchestrator.testruns.workspaces import workspace_of
from orchestrator.toolchains.caches import cache_mount

__all__ = ["LOCKFILES", "TOOLCHAIN"]

LOCKFILES = (("pnpm-lock.yaml", "pnpm"), ("yarn.lock", "yarn"), ("bun.lock", "bun"), ("bun.lockb", "bun"),
             ("package-lock.json", "npm"), ("npm-shrinkwrap.json", "npm"))
_INSTALL = {"npm": "npm ci", "pnpm": "pnpm install --frozen-lockfile", "yarn": "yarn install --frozen-lockfile",
            "yarn-berry": "yarn install --immutable", "bun": "bun install --frozen-lockfile"}
_FOLDER_FLAG = {"npm": "--prefix", "pnpm": "--dir", "yarn": "--cwd", "bun": "--cwd"}
_PNP = (".pnp.cjs", ".pnp.loader.mjs", ".pnp.data.json", ".yarn/cache", ".yarn/unplugged", ".yarn/install-state.gz")
# Folders tools write into node_modules: Babel's, ESLint's and Terser's caches, Vite's and Vitest's,
# and the bundled config files Vite writes there before loading them (``.vite-temp``).
_WRITABLE = (".cache", ".vite", ".vite-temp")
# The command that runs one workspace package's tests, by package manager.
_ONE_PACKAGE = {"pnpm": "pnpm --filter {name} test", "npm": "npm test -w {folder}", "yarn": "yarn workspace {name} test"}
_DEPENDENCY_KEYS = ("dependencies", "devDependencies", "optionalDependencies")
_NPM_DEFAULT_TEST = "no test specified"
_OFFLINE = {"npm_config_offline": "true", "npm_config_update_notifier": "false", "npm_config_fund": "false",
            "npm_config_audit": "false", "YARN_ENABLE_NETWORK": "0", "YARN_ENABLE_TELEMETRY": "0",
            "COREPACK_ENABLE_NETWORK": "0", "COREPACK_ENABLE_DOWNLOAD_PROMPT": "0", "NEXT_TELEMETRY_DISABLED": "1",
            # A ``packageManager`` pin other than the installed pnpm makes pnpm download the pinned
            # one before running anything (it cannot offline): the installed one runs, as corepack's
            # shims do without strict pinning.
            "npm_config_manage_package_manager_versions": "false",
            "pnpm_config_manage_package_manager_versions": "false", "COREPACK_ENABLE_STRICT": "0"}


def _manifest(project: Project, folder: str) -> dict:
    try:
        data = json.loads((project.root / folder / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _install_root(project: Project, folder: str) -> tuple[str, str]:
    """(the folder holding the lockfile that covers ``folder``, its manager); ``folder`` itself
    with npm when none does."""
    parts = folder.split("/") if folder else []
    for depth in range(len(parts), -1, -1):
        probe = "/".join(parts[:depth])
        for name, manager in LOCKFILES:
            if project.has(f"{probe}/{name}".lstrip("/")):
                return probe, manager
    return folder, "npm"


def _yarn_flavour(project: Project, folder: str) -> str:
    lock = project.root / folder / "yarn.lock"
    try:
        berry = "__metadata:" in lock.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        berry = False
    return "yarn-berry" if berry or project.has(f"{folder}/.yarnrc.yml".lstrip("/")) else "yarn"


_VERSION = re.compile(r"v?\d+(\.\d+){0,2}")


def _pinned_node(project: Project, folder: str) -> tuple[str, str] | None:
    """(the Node version the project pins, where) from ``.nvmrc``, ``.node-version`` or
    ``package.json``'s ``volta.node``; None when it pins none (an alias such as ``lts/*`` neither)."""
    prefix = f"{folder}/" if folder else ""
    for name in (".nvmrc", ".node-version"):
        try:
            text = (project.root / prefix / name).read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if _VERSION.fullmatch(text):
            return text, name
    volta = _manifest(project, folder).get("volta")
    node = volta.get("node") if isinstance(volta, dict) else None
    return (node, "package.json volta.node") if isinstance(node, str) and _VERSION.fullmatch(node) else None


def _slug(folder: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", folder.rstrip("/")) or "root"


class Node:
    """The Node toolchain (see the module docstring)."""

    name = "node"

    def detect(self, project: Project) -> list[Found]:
        """One ``Found`` per install root of the project's ``package.json`` files."""
        groups: dict[str, tuple[str, list[str]]] = {}
        for manifest in project.tracked_named("package.json"):
            folder = _parent(manifest)
            root, manager = _install_root(project, folder)
            groups.setdefault(root, (manager, []))[1].append(folder)
        return [self._group(project, root, manager, folders) for root, (manager, folders) in sorted(groups.items())]

    def _group(self, project: Project, folder: str, manager: str, folders: list[str]) -> Found:
        flavour = _yarn_flavour(project, folder) if manager == "yarn" else manager
        prefix = f"{folder}/" if folder else ""
        declares = any(_manifest(project, f).get(key) for f in folders for key in _DEPENDENCY_KEYS)
        pnp = project.ignored_present(f"{prefix}.pnp.cjs") or project.has(f"{prefix}.pnp.cjs")
        installed = (project.root / prefix / "node_modules").is_dir() or pnp
        where = f"{folder}/" if folder else "the repository"
        if declares and not installed and project.check_installed:
            cd = f"cd {folder} && " if folder else ""
            raise DependenciesMissing(
                f"{where} declares Node dependencies that are not installed (no node_modules/); install them"
                f" with: {cd}{_INSTALL[flavour]}")
        found = Found("node", f"node ({manager})", folder=folder, env=dict(_OFFLINE), gitignore=["node_modules/"])
        node = project.which("node")
        if node is None:
            if declares or folders:
                raise ToolchainMissing(f"{where} is a Node project, but node is not on PATH; install Node.js"
                                       " (apt-get install nodejs npm, or a version manager) and run mesh again")
        else:
            mounts, path = shown_program(node)
            found.mounts += mounts
            found.path += path
            found.sees.append(f"Node {os.path.realpath(node)}")
            pinned = _pinned_node(project, folder)
            if pinned is not None:
                status, version = run_tool([node, "--version"], project.root, project.environ, timeout_s=10)
                major = version.strip().lstrip("v").split(".")[0] if status == 0 else ""
                if major and pinned[0].lstrip("v").split(".")[0] != major:
                    found.sees.append(f"the project pins Node {pinned[0]} ({pinned[1]}); validation runs the"
                                      f" installed Node {version.strip()}: a difference in output (snapshots,"
                                      " colours) can fail tests that pass under the pinned one")
        tool = project.which(manager)
        if tool is not None and manager != "npm":
            mounts, path = shown_program(tool)
            found.mounts += [m for m in mounts if m not in found.mounts]
            found.path += [p for p in path if p not in found.path]
        self._dependencies(project, found, prefix, pnp)
        runner = manager if tool is not None else "npm"
        manifest = _manifest(project, folder)
        test = (manifest.get("scripts") or {}).get("test") if isinstance(manifest.get("scripts"), dict) else None
        flag = f" {_FOLDER_FLAG[runner]} {folder}" if folder else ""
        run = "run test" if runner == "bun" else "test"
        if isinstance(test, str) and _NPM_DEFAULT_TEST not in test:
            found.check = f"{runner}{flag} {run}"
            found.allow.append(found.check)
        self._workspace(project, found, folder, runner, manifest)
        found.allow.append(f"{runner}{flag} run {{args...}}")
        if any("typescript" in (_manifest(project, f).get(key) or {}) for f in folders for key in _DEPENDENCY_KEYS):
            found.allow.append("npx tsc --noEmit" + (f" -p {folder}" if folder else ""))
        found.allow.append("node --test")
        return found

    def _workspace(self, project: Project, found: Found, folder: str, runner: str, manifest: dict) -> None:
        """A workspace's packages named, each with its runner and the workspace packages it
        depends on, an entry running one package's tests each, and the pinned package manager."""
        pinned = manifest.get("packageManager")
        if isinstance(pinned, str) and pinned.split("@", 1)[0] == runner:
            found.sees.append(f"packageManager pins {pinned}: validation runs the installed {runner}, offline"
                              " (no download of the pinned one)")
        workspace = workspace_of(project.root / folder)
        if workspace is None:
            return
        found.label = f"node ({found.label[6:-1]} workspace)"
        described = []
        for package in workspace.packages:
            reader = reader_for(["npm", "test"], project.root / folder / package.folder) if package.tested else None
            how = reader.name if reader else ("no test script" if not package.tested else "tests not read")
            needs = f", needs {', '.join(sorted(package.needs))}" if package.needs else ""
            described.append(f"{package.name} ({how}{needs})")
            if package.tested and runner in _ONE_PACKAGE:
                found.allow.append(_ONE_PACKAGE[runner].format(name=package.name, folder=package.folder))
        found.sees.append(f"{'an' if runner == 'npm' else 'a'} {runner} workspace of {len(workspace.packages)} package(s): " + "; ".join(described)
                          + ". Its tests run package by package, only those a change reaches")

    def _dependencies(self, project: Project, found: Found, prefix: str, pnp: bool) -> None:
        modules = [path.rstrip("/") for path in project.ignored
                   if path.endswith("node_modules/") and path.startswith(prefix)]
        for relative in modules:
            found.mounts.append(Mount(str(project.root / relative), relative, in_tree=True))
            for name in _WRITABLE:
                mount_point = project.root / relative / name
                try:
                    mount_point.mkdir(exist_ok=True)
                except OSError:
                    continue
                found.mounts.append(cache_mount("node", f"{_slug(relative)}{name}", f"{relative}/{name}", in_tree=True))
        if modules:
            found.sees.append(", ".join(f"{m}/" for m in modules) + " read-only (.cache and .vite writable: the base"
                              " check's, copied for each validation)")
        for name in _PNP:
            if project.ignored_present(f"{prefix}{name}"):
                found.mounts.append(Mount(str(project.root / prefix / name), f"{prefix}{name}", in_tree=True))
        global_cache = Path(project.environ.get("HOME") or "~").expanduser() / ".yarn" / "berry" / "cache"
        if pnp and global_cache.is_dir():
            found.mounts.append(Mount(str(global_cache), str(global_cache)))
        if pnp:
            found.sees.append("Yarn Plug'n'Play (.pnp.cjs and its caches) read-only")
        found.sees.append("offline")


TOOLCHAIN = Node()
