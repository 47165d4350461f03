"""Node workspaces: pnpm (``pnpm-workspace.yaml``), npm and Yarn (``workspaces`` in the root
``package.json``): their packages, which depend on which, and the commands that run every
package's tests (``pnpm -r test``, ``npm test --workspaces``, ``yarn workspaces run test``, or the
root ``test`` script that is one of them).

A workspace command runs each package's own ``test`` script, whose runner mesh reads (Vitest,
Jest, node --test, mocha, tape) only when it is asked for a report of its own, one per package.
So validation runs such a command as its packages' scripts, one after the other in the order the
workspace runs them (dependencies first), each in its package's folder with the package
manager's own script runner, instrumented as a package's ``npm test`` is; each test's id is
prefixed by its package's name (``@scope/core: test/a.test.ts > adds``). With what the commit
under test changed, only the packages it changed and those depending on them (transitively) run;
a change outside every package (the lockfile, a shared config) runs them all.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from orchestrator.testruns.commands import program, script_command

__all__ = ["Package", "Workspace", "WorkspaceRun", "affected", "package_argv", "prefix", "workspace_of", "workspace_run"]

_DEPENDENCY_KEYS = ("dependencies", "devDependencies", "optionalDependencies", "peerDependencies")
_MAX_PACKAGES = 500


@dataclass(frozen=True)
class Package:
    """One package of a workspace: its ``name``, its ``folder`` (relative to the root), the names
    of the workspace packages it depends on (``needs``) and whether it has a test script."""

    name: str
    folder: str
    needs: frozenset[str]
    tested: bool


@dataclass(frozen=True)
class Workspace:
    """A workspace: its ``manager`` (``pnpm``, ``npm``, ``yarn``, ``yarn-berry``) and its
    ``packages`` in the order the manager runs them (dependencies first, then by folder)."""

    manager: str
    packages: tuple[Package, ...]


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pnpm_globs(text: str) -> list[str]:
    """The ``packages:`` globs of a ``pnpm-workspace.yaml`` (its list form, flow or block)."""
    found = re.search(r"^packages:[ \t]*(\[.*?\])?[ \t]*$", text, re.M | re.S)
    if found is None:
        return []
    if found.group(1):
        return [item.strip().strip("'\"") for item in found.group(1)[1:-1].split(",") if item.strip()]
    globs = []
    for line in text[found.end():].splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        item = re.match(r"^\s+-\s*(.+?)\s*(#.*)?$", line)
        if item is None:
            break
        globs.append(item.group(1).strip("'\""))
    return globs


def _folders(root: Path, globs: Iterable[str]) -> list[str]:
    """The folders holding a ``package.json`` that ``globs`` name (``!glob`` excludes)."""
    included: list[str] = []
    excluded = [glob[1:].strip("/") for glob in globs if glob.startswith("!")]
    for glob in globs:
        if glob.startswith("!"):
            continue
        glob = glob.strip("/").removeprefix("./")
        depth = None if "**" in glob else glob.count("/") + 1
        for folder, dirs, files in os.walk(root):
            rel = os.path.relpath(folder, root)
            dirs[:] = sorted(d for d in dirs if d != "node_modules" and not d.startswith("."))
            if rel == ".":
                continue
            if depth is not None and rel.count("/") + 1 >= depth:
                dirs[:] = []
            if "package.json" in files and fnmatch.fnmatch(rel, glob) and \
                    not any(fnmatch.fnmatch(rel, ex) for ex in excluded) and rel not in included:
                included.append(rel)
            if len(included) >= _MAX_PACKAGES:
                return included
    return included


def _manager(root: Path) -> str:
    if (root / "pnpm-lock.yaml").is_file() or (root / "pnpm-workspace.yaml").is_file():
        return "pnpm"
    if (root / "yarn.lock").is_file():
        try:
            berry = "__metadata:" in (root / "yarn.lock").read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            berry = False
        return "yarn-berry" if berry or (root / ".yarnrc.yml").is_file() else "yarn"
    return "npm"


def workspace_of(root: Path | str | None) -> Workspace | None:
    """The workspace whose root is ``root``; None when it is none."""
    if root is None:
        return None
    root = Path(root)
    manifest = _json(root / "package.json")
    if (root / "pnpm-workspace.yaml").is_file():
        try:
            globs = _pnpm_globs((root / "pnpm-workspace.yaml").read_text(encoding="utf-8", errors="replace"))
        except OSError:
            globs = []
    else:
        declared = manifest.get("workspaces")
        declared = declared.get("packages") if isinstance(declared, dict) else declared
        globs = [glob for glob in declared if isinstance(glob, str)] if isinstance(declared, list) else []
    if not globs:
        return None
    folders = _folders(root, globs)
    raw = {}
    for folder in folders:
        data = _json(root / folder / "package.json")
        name = data.get("name") if isinstance(data.get("name"), str) else folder
        raw[name] = (folder, data)
    packages = []
    for name, (folder, data) in raw.items():
        needs = {dep for key in _DEPENDENCY_KEYS if isinstance(data.get(key), dict)
                 for dep in data[key] if dep in raw and dep != name}
        scripts = data.get("scripts") if isinstance(data.get("scripts"), dict) else {}
        packages.append(Package(name, folder, frozenset(needs), isinstance(scripts.get("test"), str)))
    return Workspace(_manager(root), tuple(_ordered(packages)))


def _ordered(packages: list[Package]) -> list[Package]:
    """Dependencies before their dependents, else by folder (a cycle keeps folder order)."""
    left = sorted(packages, key=lambda package: package.folder)
    done: list[Package] = []
    names = {package.name for package in packages}
    while left:
        ready = [p for p in left if not (p.needs & names - {d.name for d in done})] or left[:1]
        done.append(ready[0])
        left.remove(ready[0])
    return done


def _filters(args: Sequence[str]) -> list[str]:
    """The package filters of a workspace command's options (``--filter X``, ``-F X``, ``-w X``,
    ``--workspace=X``); [] for all packages."""
    found: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        name, _, value = arg.partition("=")
        if name in ("--filter", "-F", "-w", "--workspace"):
            if not value:
                index += 1
                value = args[index] if index < len(args) else ""
            found.append(value)
        index += 1
    return found


_PNPM_RECURSIVE = ("-r", "--recursive")
_NPM_ALL = ("--workspaces", "-ws")


def _is_test(words: Sequence[str]) -> bool:
    plain = [word for word in words if not word.startswith("-")]
    return plain in (["test"], ["t"], ["run", "test"], ["run-script", "test"])


def _recognised(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """(the manager, its package filters) when ``argv`` runs every (or the filtered) package's
    ``test`` script."""
    if not argv:
        return None
    tool, args = program(argv), list(argv[1:])
    options = [arg for arg in args if arg.startswith("-")]
    words = [arg for arg in args if not arg.startswith("-")]
    filters = _filters(args)
    filter_values = set(filters)
    words = [word for word in words if word not in filter_values]
    if tool == "yarn" and words[:1] == ["workspace"]:
        words = [arg for arg in args if not arg.startswith("-")]
    if tool == "pnpm" and (any(opt in _PNPM_RECURSIVE for opt in options) or filters) and _is_test(words):
        return "pnpm", filters
    if tool == "npm" and (any(opt.split("=")[0] in _NPM_ALL for opt in options) or filters) and _is_test(words):
        return "npm", filters
    if tool == "yarn" and words[:1] == ["workspace"] and len(words) >= 3 and _is_test(words[2:]):
        return "yarn", [words[1]]  # yarn workspace NAME test: one package
    if tool == "yarn" and words[:1] == ["workspaces"]:
        rest = words[1:]
        if rest in (["run", "test"],) or (rest[:1] == ["foreach"] and rest[1:] == ["run", "test"]):
            return "yarn", filters
    return None


@dataclass(frozen=True)
class WorkspaceRun:
    """What a workspace command runs: its ``workspace``, the packages with a test script it runs
    (``chosen``, in order), and ``before``: the root's ``pretest`` script, run first (at the root,
    in each package's sandbox) when the command is the root ``test`` script that has one (a build
    the packages' tests import from)."""

    workspace: Workspace
    chosen: tuple[Package, ...]
    before: tuple[str, ...] = ()


def workspace_run(argv: Sequence[str], tree: Path | str | None) -> WorkspaceRun | None:
    """What ``argv`` runs when it runs the workspace's packages' tests, directly or as the root
    ``test`` script (``pnpm test``, ``npm test``, ``yarn test``); None otherwise."""
    workspace = workspace_of(tree)
    if workspace is None:
        return None
    found = _recognised(argv)
    before: tuple[str, ...] = ()
    if found is None and program(argv) in ("pnpm", "npm", "yarn") and _is_test(list(argv[1:])):
        script = script_command(["npm", "test"], tree)
        found = _recognised(script) if script else None
        scripts = _json(Path(tree) / "package.json").get("scripts")
        if found is not None and isinstance(scripts, dict) and isinstance(scripts.get("pretest"), str):
            before = ("npm", "run", "pretest")
    if found is None:
        return None
    _manager, filters = found
    chosen = tuple(package for package in workspace.packages if package.tested and
                   (not filters or any(_matches(package, f) for f in filters)))
    return WorkspaceRun(workspace, chosen, before)


def _matches(package: Package, selector: str) -> bool:
    selector = selector.removeprefix("./")
    return fnmatch.fnmatch(package.name, selector) or fnmatch.fnmatch(package.folder, selector.rstrip("/"))


_SOURCES = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx", ".vue", ".svelte", ".json")
_SCAN_BYTES = 4 << 20


def _mentions(root: Path, package: Package, targets: Sequence[Package]) -> str | None:
    """The first of ``targets`` that ``package``'s own source files import without declaring it
    (by name, or by a relative path into its folder); None."""
    marks = []
    for target in targets:
        relative = os.path.relpath(root / target.folder, root / package.folder).replace(os.sep, "/")
        marks.append((target.name, re.compile(
            r"""['"`](?:%s)(?:/[^'"`]*)?['"`]|['"`](?:\./)?%s(?:/[^'"`]*)?['"`]"""
            % (re.escape(target.name), re.escape(relative)))))
    read = 0
    for folder, dirs, files in os.walk(root / package.folder):
        dirs[:] = sorted(d for d in dirs if d != "node_modules" and not d.startswith("."))
        for name in sorted(files):
            if not name.endswith(_SOURCES) or name == "package.json":
                continue
            try:
                text = (Path(folder) / name).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            read += len(text)
            for target, mark in marks:
                if mark.search(text):
                    return target
            if read > _SCAN_BYTES:
                return None
    return None


def affected(workspace: Workspace, chosen: Sequence[Package], changed: Iterable[str] | None,
             root: Path | str | None = None) -> tuple[list[Package], dict[str, str]]:
    """The packages of ``chosen`` to run for a change of the paths ``changed`` (None or empty: no
    change known, all of them), and why each runs (``changed``, ``depends on NAME``, ``imports
    NAME``: a package whose sources under ``root`` import a reached one without declaring it); a
    changed path outside every package runs them all."""
    paths = list(changed or ())
    if not paths:
        return list(chosen), {}
    owner: dict[str, str] = {}
    for path in paths:
        holder = max((p for p in workspace.packages if path.startswith(p.folder.rstrip("/") + "/")),
                     key=lambda p: len(p.folder), default=None)
        if holder is None:
            return list(chosen), {package.name: f"{path} is outside every package" for package in chosen}
        owner.setdefault(holder.name, "changed")
    why = dict(owner)
    grew = True
    while grew:
        grew = False
        for package in workspace.packages:
            if package.name in why:
                continue
            reached = sorted(package.needs & set(why))
            if reached:
                why[package.name] = f"depends on {reached[0]}"
                grew = True
            elif root is not None:
                found = _mentions(Path(root), package, [p for p in workspace.packages if p.name in why])
                if found is not None:
                    why[package.name] = f"imports {found}"
                    grew = True
    return [package for package in chosen if package.name in why], {name: why[name] for name in why}


def package_argv(workspace: Workspace) -> list[str]:
    """How one package's ``test`` script is run in its folder: npm's script runner (it puts the
    package's and its parents' ``node_modules/.bin`` on PATH as every manager does), Yarn's for
    Plug'n'Play (whose loader only Yarn gives)."""
    return ["yarn", "test"] if workspace.manager == "yarn-berry" else ["npm", "test"]


def prefix(package: Package) -> str:
    """What a package's tests' ids start with."""
    return f"{package.name}: "
