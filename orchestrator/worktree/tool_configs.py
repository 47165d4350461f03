"""Configuration a developer tool runs as code: which keys of which files, and how a patch's
change to them is found.

``CODE_CONFIGS`` is one table. Each row names the files it applies to (the policy's globs),
how their watched values are read, the watched keys, and who runs what they name.
``orchestrator.worktree.policy`` refuses, with block reason ``policy_violation``, a patch that
adds, changes or removes a watched value, unless ``patch.allow`` names the path:

- ``toml``/``json`` rows watch keys of a file that is also edited for ordinary reasons
  (``pyproject.toml``, ``package.json``): an install-time lifecycle script, an ``init-hook``,
  a plugin list, the build backend, a package index. The text before and after the patch is
  parsed and the watched values compared; when that cannot be done (a hunk that does not fit,
  a file that does not parse) the changed lines decide, conservatively;
- the ``module`` row watches a test package's ``__init__.py`` (the runner imports it while
  collecting, before any test, as it does ``conftest.py``): its code, compared as a syntax
  tree without comments and a docstring, so an empty new ``tests/__init__.py`` passes;
- the ``hooks`` row watches every Python file's module-level ``pytest_*`` names (hook
  implementations, ``pytest_plugins``): a module defining them is a pytest plugin once
  anything loads it.

Whole files that only configure such a tool (``.pylintrc``, ``.coveragerc``, ``fly.toml``...)
are in ``protected_paths`` instead. Key patterns are dotted paths compared without regard to
case or to ``_`` versus ``-``; a component may be a glob (``pre-*``), ``*`` is one level, ``**``
any number, and a list's items are one level. A pattern naming a table watches all of it.

This module holds data and pure functions of text: it imports the standard library only
(``policy`` imports it and matches the rows' file globs itself).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import json
import re
import tomllib
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

__all__ = ["CODE_CONFIGS", "CodeConfig", "config_changed", "markdown_table", "pyproject_tables_changed",
           "rebuild"]

Hunks = Sequence[tuple[int, Sequence[str]]]


class CodeConfig(NamedTuple):
    """One class of configuration that runs code.

    ``label`` is what a refusal says the patch changes, ``files`` the policy globs of the files
    it applies to, ``reader`` how their watched values are read (``toml``, ``json``,
    ``module``, ``hooks``), ``keys`` the watched key patterns (``toml``/``json``), ``loaded_by``
    who runs them and ``why`` what that does. ``test_packages`` extends ``files`` to every
    ``__init__.py`` of a folder that directly holds a pytest test module or ``conftest.py``.
    """

    label: str
    files: tuple[str, ...]
    reader: str
    keys: tuple[str, ...]
    loaded_by: str
    why: str
    test_packages: bool = False


_PYPROJECT = ("pyproject.toml",)
_PACKAGE_JSON = ("package.json",)
_TEST_PACKAGES = tuple(f"**/{folder}/{init}" for folder in ("test", "tests", "testing", "test_*", "*_test", "*_tests")
                       for init in ("__init__.py", "__init__.pyw"))

CODE_CONFIGS: tuple[CodeConfig, ...] = (
    # pyproject.toml: tables of tools that run what they name
    CodeConfig("[tool.pytest], [tool.tox] or [tool.mesh]", _PYPROJECT, "toml",
               ("tool.pytest", "tool.tox", "tool.mesh"), "pytest, tox, mesh",
               "they choose what the tests run and how (addopts -p loads a plugin), and what validation allows"),
    CodeConfig("pylint's init-hook, plugins or extensions", _PYPROJECT, "toml",
               tuple(f"tool.pylint.**.{key}" for key in ("init-hook", "load-plugins", "extension-pkg-allow-list",
                                                         "extension-pkg-whitelist", "unsafe-load-any-extension",
                                                         "output-format")),
               "pylint",
               "init-hook is Python run on every pylint; plugins, extensions and reporter classes are imported"),
    CodeConfig("mypy's plugins or interpreter", _PYPROJECT, "toml",
               ("tool.mypy.plugins", "tool.mypy.python-executable"), "mypy", "plugins are imported, and the interpreter run, on every type check"),
    CodeConfig("coverage.py's plugins", _PYPROJECT, "toml", ("tool.coverage.**.plugins",), "coverage.py",
               "plugins are imported on every coverage run"),
    CodeConfig("flake8's local plugins", _PYPROJECT, "toml",
               ("tool.flake8.**.local-plugins", "tool.flake8:local-plugins"),
               "flake8 (Flake8-pyproject)", "local plugins are imported on every lint"),
    CodeConfig("the build backend or its requirements", _PYPROJECT, "toml",
               ("build-system.build-backend", "build-system.backend-path", "build-system.requires"),
               "pip, uv, build and every PEP 517 frontend",
               "the backend (from the tree itself with backend-path) runs on every install and build"),
    CodeConfig("build hooks or install commands", _PYPROJECT, "toml",
               ("tool.setuptools.cmdclass", "tool.hatch.**.hooks", "tool.hatch.envs.*.pre-install-commands",
                "tool.hatch.envs.*.post-install-commands", "tool.pdm.scripts.pre-*", "tool.pdm.scripts.post-*",
                "tool.poetry.build", "tool.poetry.requires-plugins", "tool.pixi.**.activation",
                "tool.cibuildwheel.**.before-*", "tool.cibuildwheel.**.test-command",
                "tool.cibuildwheel.**.repair-wheel-command", "tool.cibuildwheel.**.environment"),
               "setuptools, Hatch, PDM, Poetry, pixi, cibuildwheel",
               "commands and in-tree hooks run on build, install, environment creation or in CI"),
    CodeConfig("a package index or source", _PYPROJECT, "toml",
               ("tool.uv.**.index", "tool.uv.**.index-url", "tool.uv.**.extra-index-url", "tool.uv.**.find-links",
                "tool.uv.python-install-mirror", "tool.uv.pypy-install-mirror", "tool.uv.python-downloads-json-url",
                "tool.poetry.source", "tool.pdm.source", "tool.pixi.**.channels"),
               "uv, Poetry, PDM, pixi", "where packages and interpreters are downloaded from"),
    # package.json
    CodeConfig("an install or publish lifecycle script", _PACKAGE_JSON, "json",
               tuple(f"scripts.{name}" for name in (
                   "preinstall", "install", "postinstall", "preprepare", "prepare", "postprepare", "prepublish",
                   "prepublishOnly", "prepack", "postpack", "publish", "postpublish", "preversion", "version",
                   "postversion", "dependencies", "pnpm:devPreinstall")) + ("gypfile",),
               "npm, pnpm, Yarn, Bun", "run on every install (prepack to postversion: on publishing, with the"
               " registry's token); scripts.test and the rest run only when asked for, as before"),
    CodeConfig("the package manager or whose install scripts run", _PACKAGE_JSON, "json",
               ("packageManager", "devEngines", "trustedDependencies", "dependenciesMeta", "patchedDependencies",
                "pnpm.onlyBuiltDependencies", "pnpm.onlyBuiltDependenciesFile", "pnpm.neverBuiltDependencies",
                "pnpm.ignoredBuiltDependencies", "pnpm.dangerouslyAllowAllBuilds", "pnpm.configDependencies",
                "pnpm.executionEnv", "pnpm.patchedDependencies"),
               "Corepack, pnpm, Yarn, Bun",
               "the package-manager binary fetched and run, dependencies allowed to run install scripts, patches"
               " applied to installed code"),
    CodeConfig("test-runner, transpiler or linter settings", _PACKAGE_JSON, "json",
               ("jest", "vitest", "mocha", "ava", "c8", "nyc", "tap", "babel", "eslintConfig"),
               "Jest, Vitest, Mocha, AVA, c8, nyc, tap, Babel, ESLint",
               "which tests run, setup files and reporters loaded into every test run, transforms and plugins"),
    CodeConfig("what cargo test runs", ("Cargo.toml",), "toml",
               ("lib.test", "lib.harness", "lib.doctest", "lib.proc-macro", "package.autotests", "package.autobins",
                "package.autoexamples", "package.autobenches", "package.build", "package.links", "test", "bin.*.test",
                "bin.*.harness", "example.*.test", "bench.*.test", "profile.*.panic", "profile.*.overflow-checks",
                "profile.*.debug-assertions", "workspace.members", "workspace.exclude", "workspace.default-members",
                "patch", "replace"),
               "cargo test", "test = false, harness = false and autotests take the real tests out of the run (a"
               " target of the patch's then prints their names as passed); a build script runs on every build;"
               " [patch] and [replace] swap dependencies' code"),
    CodeConfig("a pytest plugin entry point", _PYPROJECT, "toml",
               ("project.entry-points.pytest11", "tool.poetry.plugins.pytest11"), "pytest",
               "once the project is installed, pytest loads every pytest11 entry point in each run: its hooks can"
               " deselect, skip or pass any test"),
    CodeConfig("a Composer script, plugin or repository", ("composer.json",), "json",
               ("scripts.pre-*", "scripts.post-*", "config.allow-plugins", "repositories", "config.secure-http",
                "config.disable-tls"),
               "Composer", "install and update events run commands, allowed plugins run code, repositories decide"
               " where packages come from"),
    CodeConfig("a package index, source or option", ("*requirements*.txt", "*requirements*.in", "constraints*.txt",
                                                     "**/requirements/*.txt", "**/requirements/*.in"),
               "requirements", (), "pip, uv pip, pip-tools",
               "--index-url, --extra-index-url, --find-links, -r includes and direct URLs decide where the packages"
               " installed (in CI, with its secrets) come from"),
    CodeConfig("JVM options, the JDK or system properties", ("gradle.properties",), "properties",
               ("org.gradle.jvmargs", "org.gradle.java.home", "org.gradle.java.installations.*", "kotlin.daemon.jvmargs",
                "systemProp.*"), "Gradle",
               "a -javaagent in the daemon's options runs code in every build; proxies and the JDK run are chosen here"),
    CodeConfig("the Go toolchain", ("go.mod",), "gomod", ("toolchain", "go", "godebug"), "the go command",
               "a toolchain directive, or a go line newer than the installed go, makes go download and run that"
               " toolchain (GOTOOLCHAIN=auto)"),
    # Python files the test runner loads besides the tests
    CodeConfig("the code of a test package's __init__.py", _TEST_PACKAGES, "module", (), "pytest, unittest",
               "imported while collecting, before any test, like conftest.py: it can patch the runner"
               " (unittest.TestCase.assertEqual) or end the process", test_packages=True),
    CodeConfig("pytest hooks or pytest_plugins", ("*.py", "*.pyw"), "hooks", (), "pytest",
               "a module defining them is a plugin once loaded (pytest_plugins, -p, an entry point): its hooks can"
               " deselect, skip or pass any test"),
)


# ---------------------------------------------------------------- rebuilding the patched text


def _spots(old_lines: Sequence[str], side: Sequence[str]) -> list[int]:
    width = len(side)
    return [i for i in range(len(old_lines) - width + 1) if old_lines[i : i + width] == list(side)]


def rebuild(base: Sequence[str], hunks: Hunks) -> list[str] | None:
    """``base`` with ``hunks`` applied as git would (each hunk at the match nearest its stated
    line, after the previous one), or None when a hunk's old side is not found."""
    out: list[str] = []
    position = 0
    shift = 0
    for start, lines in hunks:
        old_side = [line[1:] for line in lines if line[:1] in (" ", "-")]
        new_side = [line[1:] for line in lines if line[:1] in (" ", "+")]
        if old_side:
            spots = [spot for spot in _spots(base, old_side) if spot >= position]
            if not spots:
                return None
            wanted = start - 1 + shift
            spot = min(spots, key=lambda s: abs(s - wanted))
        else:
            spot = start + shift  # a pure insertion goes after line ``start``
            if not position <= spot <= len(base):
                return None
        out.extend(base[position:spot])
        out.extend(new_side)
        position = spot + len(old_side)
        shift = spot - (start - 1 if old_side else start)
    out.extend(base[position:])
    return out


# ---------------------------------------------------------------- key patterns


_GONE = object()


class _Unreadable(Exception):
    """The text cannot be read as its format: the changed lines decide."""


def _norm(key: object) -> str:
    return str(key).lower().replace("_", "-")


@functools.lru_cache(maxsize=256)
def _pattern(key: str) -> tuple[str, ...]:
    return tuple(_norm(part) for part in key.split("."))


def _match(path: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    if not pattern:
        return not path
    if pattern[0] == "**":
        return _match(path, pattern[1:]) or (bool(path) and _match(path[1:], pattern))
    return bool(path) and fnmatch.fnmatchcase(path[0], pattern[0]) and _match(path[1:], pattern[1:])


def _leads(path: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """Whether some longer path starting with ``path`` could match ``pattern``."""
    if not path:
        return True
    if not pattern:
        return False
    if pattern[0] == "**":
        return _leads(path, pattern[1:]) or _leads(path[1:], pattern)
    return fnmatch.fnmatchcase(path[0], pattern[0]) and _leads(path[1:], pattern[1:])


def _within(path: tuple[str, ...], patterns: Iterable[tuple[str, ...]]) -> bool:
    """A table at ``path`` holds a watched key, or is itself inside a watched table."""
    return bool(path) and any(_leads(path, p) or any(_match(path[:i], p) for i in range(1, len(path) + 1))
                              for p in patterns)


def _watched(data: Any, keys: Sequence[str]) -> dict[str, Any]:
    """The values of ``data`` (parsed TOML or JSON) at the keys ``keys`` match, by dotted path."""
    patterns = [_pattern(key) for key in keys]
    found: dict[str, Any] = {}

    def walk(value: Any, raw: tuple[str, ...], path: tuple[str, ...]) -> None:
        if any(_match(path, p) for p in patterns):
            found[".".join(raw)] = value
            return
        if isinstance(value, dict):
            items = [(str(k), _norm(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"[{i}]", "[]", v) for i, v in enumerate(value)]
        else:
            return
        for name, part, child in items:
            if any(_leads(path + (part,), p) for p in patterns):
                walk(child, raw + (name,), path + (part,))

    walk(data, (), ())
    return found


# ---------------------------------------------------------------- readers


def _toml(text: str, row: CodeConfig) -> dict[str, Any]:
    try:
        return _watched(tomllib.loads(text), row.keys)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise _Unreadable from exc


def _json(text: str, row: CodeConfig) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        return _watched(json.loads(text), row.keys)
    except (ValueError, RecursionError) as exc:
        raise _Unreadable from exc


def _parse(text: str) -> ast.Module:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise _Unreadable from exc


def _module(text: str, row: CodeConfig) -> dict[str, Any]:
    body = _parse(text).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # a docstring runs nothing
    return {"": ast.dump(ast.Module(body=body, type_ignores=[]))} if body else {}


def _bound(node: ast.AST) -> Iterable[str]:
    """The names ``node`` binds in its own scope (a def's or class's body is another)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child.name
            continue
        if isinstance(child, ast.Lambda):
            continue
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            yield child.id
        elif isinstance(child, ast.alias):
            yield child.asname or child.name.partition(".")[0]
        elif isinstance(child, (ast.MatchAs, ast.MatchStar)) and child.name:
            yield child.name
        elif isinstance(child, ast.MatchMapping) and child.rest:
            yield child.rest
        yield from _bound(child)


def _hooks(text: str, row: CodeConfig) -> dict[str, Any]:
    # Python reads identifiers NFKC-normalised: "ｐytest_configure" is pytest_configure.
    if "pytest_" not in unicodedata.normalize("NFKC", text):
        return {}
    found: dict[str, Any] = {}
    for statement in _parse(text).body:
        names = [name for name in _bound(ast.Module(body=[statement], type_ignores=[]))
                 if name == "*" or (name.startswith("pytest_") and name != "pytest_generate_tests")]
        if names:
            key = names[0]
            while key in found:
                key += "'"
            found[key] = ast.dump(statement)
    return found


def _requirement_options(text: str) -> Iterable[str]:
    for line in text.split("\n"):
        stripped = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
        if stripped and (stripped.startswith("-") or "://" in stripped or re.search(r"\s@\s|^[^\s]+@\s", stripped)):
            yield stripped


def _requirements(text: str, row: CodeConfig) -> dict[str, Any]:
    """A requirements file's option lines and URL references, each by its text."""
    return dict.fromkeys(_requirement_options(text), True)


def _properties(text: str, row: CodeConfig) -> dict[str, Any]:
    """The watched keys of a Java properties file (``key=value``, ``key: value``, ``key value``)."""
    patterns = [key.lower() for key in row.keys]
    found: dict[str, Any] = {}
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        match = re.match(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]?\s*(.*)$", stripped)
        if match and any(fnmatch.fnmatchcase(match.group(1).lower(), p) for p in patterns):
            found[match.group(1)] = match.group(2)
    return found


def _gomod(text: str, row: CodeConfig) -> dict[str, Any]:
    """The watched one-line directives of a go.mod (``toolchain go1.22.1``, ``go 1.22``)."""
    found: dict[str, Any] = {}
    for line in text.split("\n"):
        words = line.split("//", 1)[0].split()
        if words and words[0] in row.keys:
            found[words[0] + "'" * sum(key.rstrip("'") == words[0] for key in found)] = " ".join(words[1:])
    return found


_READERS: dict[str, Callable[[str, CodeConfig], dict[str, Any]]] = {
    "toml": _toml, "json": _json, "module": _module, "hooks": _hooks, "requirements": _requirements,
    "properties": _properties, "gomod": _gomod}


# ---------------------------------------------------------------- when the texts cannot be compared

_TABLE_RE = re.compile(r"^\s*\[\[?\s*([^\]]*?)\s*\]\]?\s*(?:#.*)?$")


def _words(row: CodeConfig) -> re.Pattern[str] | None:
    """The literal key names of ``row``'s patterns, as one regex (``-`` and ``_`` alike)."""
    parts = {part for key in row.keys for part in _pattern(key)
             if part != "tool" and not any(ch in part for ch in "*?[")}
    if not parts:
        return None
    alternatives = sorted("[-_]".join(re.escape(piece) for piece in part.split("-")) for part in parts)
    return re.compile(r"(?<![\w-])(?:" + "|".join(alternatives) + r")(?![\w-])", re.IGNORECASE)


def _table_path(name: str) -> tuple[str, ...]:
    return tuple(_norm(part) for part in re.sub(r"[\s\"']", "", name).split(".") if part)


def _tables(lines: Sequence[str]) -> list[str]:
    """The table each line of a TOML file belongs to (a header line belongs to its own)."""
    current, out = "", []
    for line in lines:
        match = _TABLE_RE.match(line)
        if match:
            current = match.group(1)
        out.append(current)
    return out


def _changed_lines(hunks: Hunks) -> list[str]:
    return [line[1:] for _, lines in hunks for line in lines if line[:1] in ("+", "-")]


def _by_lines(row: CodeConfig, hunks: Hunks, base: Sequence[str]) -> bool:
    """Conservative reading from the changed lines alone: a changed line naming a watched key or
    holding an escape, for TOML also an added header of a watched table or a change inside
    one at any place its hunk fits; for Python any changed code (``module``), or ``pytest_``
    anywhere in the text or the changed lines (``hooks``)."""
    changed = _changed_lines(hunks)
    if row.reader == "module":
        return any(line.strip() and not line.strip().startswith("#") for line in changed)
    if row.reader == "hooks":
        return "pytest_" in unicodedata.normalize("NFKC", "\n".join([*base, *changed]))
    if row.reader == "requirements":
        return any(True for _ in _requirement_options("\n".join(changed)))
    words = _words(row)
    if any((words is not None and words.search(line)) or "\\u" in line.lower() for line in changed):
        return True
    if row.reader != "toml":
        return False
    patterns = [_pattern(key) for key in row.keys]
    added = [line[1:] for _, lines in hunks for line in lines if line[:1] == "+"]
    if any(_within(_table_path(table), patterns) for table in _tables(added)):
        return True
    tables = [_within(_table_path(table), patterns) for table in _tables(base)]
    for start, lines in hunks:
        old_side = [line[1:] for line in lines if line[:1] in (" ", "-")]
        for spot in (_spots(base, old_side) if old_side else [start]):
            position = spot
            for line in lines:
                marker = line[:1]
                if marker == "+":
                    # An inserted line joins the table of the line before it.
                    if 0 < position <= len(tables) and tables[position - 1]:
                        return True
                elif marker == "-":
                    if position < len(tables) and tables[position]:
                        return True
                    position += 1
                else:
                    position += 1
    return False


# ---------------------------------------------------------------- the check


def config_changed(row: CodeConfig, hunks: Hunks, before: str | None, source: str | None, *,
                   deleted: bool = False) -> str | None:
    """What of ``row`` the hunks change in one file, or None when they change nothing it watches.

    ``hunks`` are ``(old_start, lines with their ' '/'+'/'-' markers)``; ``before`` is the
    file's text now (``""`` when there is none), ``source`` the text the hunks apply to (the
    same, or a rename's or copy's source); None for either means unknown, which counts as a
    change. ``deleted``: the patch removes the file. The answer names the first changed key
    (a dotted path, a hook's name), or is ``""`` when that is not known.
    """
    if before is None or source is None:
        return ""
    source_lines = source.split("\n") if source else []
    after = [] if deleted else rebuild(source_lines, hunks)
    if after is not None:
        read = _READERS[row.reader]
        try:
            old, new = read(before, row), read("\n".join(after), row)
        except _Unreadable:
            pass
        else:
            differing = sorted(key for key in old.keys() | new.keys() if old.get(key, _GONE) != new.get(key, _GONE))
            return differing[0] if differing else None
    return "" if _by_lines(row, hunks, source_lines) else None


def pyproject_tables_changed(hunks: Hunks, base: str | None, *, deleted: bool = False) -> bool:
    """Whether ``hunks`` change the ``[tool.pytest...]``, ``[tool.tox]`` or ``[tool.mesh]``
    tables of a ``pyproject.toml`` whose text was ``base`` (``""`` for a new file; None when it
    cannot be read, which counts as a change)."""
    return config_changed(CODE_CONFIGS[0], hunks, base, base, deleted=deleted) is not None


_WATCHES = {"requirements": "option lines (`-i`, `--index-url`, `--extra-index-url`, `-f`, `-r`, ...) and URL or"
                            " `name @ url` references",
            "module": "its code (compared without comments and a docstring)",
            "hooks": "module-level `pytest_*` names but `pytest_generate_tests` (hook implementations,"
                     " `pytest_plugins`)"}


def markdown_table() -> str:
    """``CODE_CONFIGS`` as the Markdown table docs/security.md prints."""
    lines = ["| files | a patch may not change | run by | why |", "|---|---|---|---|"]
    for row in CODE_CONFIGS:
        files = ", ".join(f"`{glob}`" for glob in row.files if not glob.endswith(".pyw"))
        if row.test_packages:
            files += ", any `__init__.py` beside a `test_*.py`, `*_test.py` or `conftest.py`"
        keys = ", ".join(f"`{key}`" for key in row.keys) or _WATCHES[row.reader]
        lines.append(f"| {files} | {keys} | {row.loaded_by} | {row.why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
