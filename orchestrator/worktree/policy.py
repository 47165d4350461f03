"""Which paths and contents a model-written patch may not touch, even inside the worktree.

``orchestrator.worktree.patchcheck`` refuses what no configuration may permit (paths outside the
worktree, ``.git``, ``.beads/``, ``.mesh/``, ``mesh.toml``, symlinks, submodules, binaries).
This module holds the policy on top of it, refused with the block reason
``policy_violation`` and adjustable in ``mesh.toml`` (``patch.protected``, ``patch.allow``):

- protected paths (``DEFAULT_PROTECTED``, from the table in ``protected_paths``): files that
  run code on a developer's machine, in CI or on deploy (VCS and hook files, every common CI
  system's files, deploy and package-manager settings, ``.envrc``, editor folders, Python
  start-up hooks), what agent tools load as instructions, ``CODEOWNERS``, and test-runner
  configuration that can silence tests;
- configuration a developer tool runs as code inside files also edited for ordinary reasons
  (``CODE_CONFIGS``, from ``tool_configs``): the ``[tool.pytest...]``, ``[tool.tox]``,
  ``[tool.mesh]`` tables, pylint's ``init-hook``, mypy's, coverage's and flake8's plugins and
  the build backend in a ``pyproject.toml``, install-time lifecycle scripts and the package
  manager in a ``package.json``, the code of a test package's ``__init__.py``, and pytest
  hooks in any Python file (compared parsed when the patched text can be rebuilt, by the
  changed lines otherwise);
- a new dot-folder at the repository root (``new_dot_folders``): tools keep rules, hooks and
  settings in such folders and no table lists them all, so one the repository does not have
  yet needs ``patch.allow``;
- an embedded git repository: a directory given ``HEAD`` next to ``config``, ``objects/``,
  ``refs/`` (git run inside it would obey that ``config``: ``core.fsmonitor`` runs a program);
- a new module or regular package named like a standard-library module
  (``sys.stdlib_module_names``) or a test runner or a module it imports before any test
  (``pytest``, ``_pytest``, ``unittest``, ``pluggy``, ``iniconfig``, ``packaging``...: ``_RUNNERS``) in
  a directory on ``sys.path``: the repository root, ``src/``, or a directory pytest's default
  (``prepend``) import mode inserts, i.e. the first directory above a test file or
  ``conftest.py`` that is not a package;
- a secret value in the added text or in a file name (``redact`` is the
  detector); the detail names the file, never the value.

Patterns are globs matched without regard to case (and as a case-insensitive or
name-trimming file system would read the path): one without a ``/`` matches a path component
at any depth (``conftest.py``, ``.vscode``, ``*.pth``); one with a ``/`` is anchored at the
repository root (``docs/conf.py``, ``ci/**``). A pattern that matches a directory covers
everything below it. ``allow`` overrides the defaults and the structural checks, never
``protected``: a path the user listed there stays refused even if ``allow`` matches it too.
A secret is refused whatever ``allow`` says.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.worktree.ci_runs import ci_run_files
from orchestrator.worktree.ci_runs import read_regular as _read_regular
from orchestrator.worktree.patchcheck import _normalize_component
from orchestrator.worktree.protected_paths import DEFAULT_PROTECTED, PROTECTED_PATHS
from orchestrator.worktree.tool_configs import CODE_CONFIGS, CodeConfig, config_changed, pyproject_tables_changed

if TYPE_CHECKING:
    from orchestrator.worktree.patchcheck import FileChange, PatchSummary

__all__ = [
    "CODE_CONFIGS",
    "DEFAULT_PROTECTED",
    "PatchPolicy",
    "PolicyViolation",
    "check_pattern",
    "embedded_repositories",
    "new_dot_folders",
    "pyproject_tables_changed",
    "shadowing_modules",
]

# The test runners and what they import before any test: a module of the tree named like one
# of them, where it lands first on sys.path, replaces it (a new top-level ``pluggy/`` runs inside
# pytest itself).
_RUNNERS = frozenset({"pytest", "_pytest", "unittest", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli",
                      "colorama", "pygments", "py", "xdist", "execnet", "pytest_cov", "coverage", "hypothesis",
                      "_hypothesis_pytestplugin", "pytest_django", "django", "nose", "nose2", "green", "testtools",
                      "subunit", "stestr", "trial", "twisted", "ward", "typing_extensions"})
_SHADOWED = frozenset(sys.stdlib_module_names) | _RUNNERS
# What a directory needs besides HEAD for git to take it for a repository (lower case).
_GIT_DIR_PARTS = frozenset({"config", "objects", "refs", "packed-refs", "commondir"})
_MAX_LISTED = 8
_HIDDEN = "holds a secret value (not shown)"


class PolicyViolation(Exception):
    """The patch breaks the policy; ``problems`` says how, one entry per path or finding;
    ``admissible`` are the paths ``patch.allow`` could admit (the detail shows how)."""

    def __init__(self, problems: Sequence[str], admissible: Sequence[str] = ()) -> None:
        from redact import scrub

        self.problems = list(problems)
        self.admissible = list(dict.fromkeys(admissible))
        shown = "; ".join(self.problems[:_MAX_LISTED])
        if len(self.problems) > _MAX_LISTED:
            shown += f"; and {len(self.problems) - _MAX_LISTED} more"
        if self.admissible:
            # A bare name would admit that name at any depth: anchor a top-level one.
            named = ", ".join(json.dumps(p if "/" in p else "/" + p) for p in self.admissible[:3])
            shown += (f" (patch.allow in mesh.toml can permit a path the defaults refuse, knowingly:"
                      f" [patch] allow = [{named}{', ...' if len(self.admissible) > 3 else ''}])")
        # A path can hold a secret too: the detail is scrubbed like everything mesh prints.
        self.detail = scrub(shown)
        super().__init__(self.detail)


def check_pattern(pattern: str) -> str:
    """Validate one ``patch.protected``/``patch.allow`` glob; return it stripped.

    Raises ValueError for an empty pattern, one with control characters, a backslash or a
    ``..`` component (a pattern names paths inside the repository).
    """
    text = pattern.strip()
    if not text.strip("/"):
        raise ValueError("a pattern must name a path")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text) or "\\" in text:
        raise ValueError(f"pattern {pattern!r} holds a control character or a backslash")
    if ".." in text.split("/"):
        raise ValueError(f"pattern {pattern!r} leaves the repository")
    return text


def _normalize(path: str) -> str:
    return "/".join(_normalize_component(part) for part in path.split("/") if part)


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str) -> tuple[bool, re.Pattern[str]]:
    """(anchored, regex) of one glob; the regex matches a path or one of its directories."""
    stripped = pattern.strip()
    text = _normalize(stripped)
    anchored = "/" in text or stripped.startswith("/")
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if text.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
            continue
        if text.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := text.find("]", index + 2)) != -1:
            body = text[index + 1 : close]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            index = close + 1
            continue
        else:
            out.append(re.escape(char))
        index += 1
    return anchored, re.compile("".join(out) + r"(?:/.*)?")


def _matches(pattern: str, normalized: str) -> bool:
    anchored, regex = _compile(pattern)
    if anchored:
        return regex.fullmatch(normalized) is not None
    parts = normalized.split("/")
    # An unanchored pattern names one component: try it from each depth.
    return any(regex.fullmatch("/".join(parts[start:])) for start in range(len(parts)))


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _lexists(root: Path | None, rel: str) -> bool:
    return root is not None and os.path.lexists(os.path.join(root, rel) if rel else root)


def _listdir(root: Path | None, rel: str) -> list[str]:
    if root is None:
        return []
    path = os.path.join(root, rel) if rel else str(root)
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return []
        return os.listdir(path)
    except OSError:
        return []


# ---------------------------------------------------------------- structural checks


def embedded_repositories(files: Iterable[str], root: Path | None = None) -> list[str]:
    """Directories that ``files`` (paths a patch writes) would turn into a git repository.

    A directory is one when it holds ``HEAD`` and one of ``config``, ``objects``, ``refs``,
    ``packed-refs``, ``commondir`` (what ``root``, the worktree, already has counts) and the
    patch writes one of those names, or below ``objects/`` or ``refs/``, in it.
    """
    names = [name for name in dict.fromkeys(files) if name]
    candidates: dict[str, None] = {}
    for name in names:
        parts = name.split("/")
        for depth, part in enumerate(parts):
            low = part.lower()
            last = depth == len(parts) - 1
            if (last and (low == "head" or low in _GIT_DIR_PARTS)) or (not last and low in ("objects", "refs")):
                candidates.setdefault("/".join(parts[:depth]))
    found = []
    for directory in candidates:
        prefix = directory + "/" if directory else ""
        listed = {name[len(prefix):].split("/")[0].lower() for name in names if name.startswith(prefix)}
        listed |= {entry.lower() for entry in _listdir(root, directory)}
        if "head" in listed and listed & _GIT_DIR_PARTS:
            found.append(directory or ".")
    return found


def _module_of(path: str) -> tuple[str, str] | None:
    """(directory it is importable from, module name) when ``path`` makes a module or a
    regular package; None for anything else (a namespace portion never shadows a module)."""
    parts = path.split("/")
    if len(parts) >= 2 and re.fullmatch(r"__init__\.pyw?", parts[-1]):
        return "/".join(parts[:-2]), parts[-2]
    match = re.fullmatch(r"([^.]+)\.pyw?", parts[-1])
    return ("/".join(parts[:-1]), match.group(1)) if match else None


def _is_test_file(name: str) -> bool:
    # pytest's default python_files and conftest.py, plus unittest discover's "test*.py".
    return name == "conftest.py" or (name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py")))


class _Tree:
    """The worktree as the patch will leave it, as far as module lookup cares."""

    def __init__(self, files: Sequence[str], root: Path | None) -> None:
        self.files = set(files)
        self.root = root

    def has(self, rel: str) -> bool:
        return rel in self.files or _lexists(self.root, rel)

    def entries(self, directory: str) -> set[str]:
        prefix = directory + "/" if directory else ""
        listed = {name[len(prefix):].split("/")[0] for name in self.files if name.startswith(prefix)}
        return listed | set(_listdir(self.root, directory))

    def is_package(self, directory: str) -> bool:
        return bool(directory) and (self.has(_join(directory, "__init__.py")) or self.has(_join(directory, "__init__.pyw")))

    def holds_tests(self, directory: str, depth: int = 0) -> bool:
        """A test file sits in ``directory``, or below it in a chain of packages."""
        for entry in self.entries(directory):
            child = _join(directory, entry)
            if _is_test_file(entry) and not self.is_package(child):
                return True
            if depth < 8 and self.is_package(child) and self.holds_tests(child, depth + 1):
                return True
        return False


def new_dot_folders(created: Iterable[str], root: Path | None = None) -> dict[str, str]:
    """The dot-folders at the repository root that ``created`` files would make (``.x/`` not in
    ``root``), each with the first such file.

    A new one needs ``patch.allow``: agent tools, editors and build tools keep their rules,
    hooks and settings in such folders, new ones appear every month, and ordinary code
    changes seldom add one. A dot-folder the repository already has stays editable (minus
    the protected table).
    """
    found: dict[str, str] = {}
    for path in created:
        head, slash, _ = path.partition("/")
        if slash and head.startswith(".") and head not in (".", "..") and not _lexists(root, head):
            found.setdefault(head, path)
    return found


def shadowing_modules(created: Iterable[str], files: Sequence[str], root: Path | None = None) -> list[str]:
    """The paths in ``created`` that add a module or a regular package named like a
    standard-library module or a test runner where it lands on ``sys.path``: the root,
    ``src/``, or a non-package directory holding tests (pytest's prepend import mode puts
    it first on ``sys.path``). ``files`` are all the paths the patch writes."""
    tree = _Tree(files, root)
    found = []
    for path in created:
        located = _module_of(path)
        if located is None or located[1] not in _SHADOWED:
            continue
        directory = located[0]
        if directory in ("", "src") or (not tree.is_package(directory) and tree.holds_tests(directory)):
            found.append(path)
    return found


# ---------------------------------------------------------------- the policy


@dataclass(frozen=True)
class PatchPolicy:
    """The protected-path policy: the defaults, plus ``protected``, minus ``allow``."""

    protected: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: object) -> "PatchPolicy":
        """The policy of a ``PatchConfig`` (its ``protected`` and ``allow`` lists)."""
        return cls(protected=tuple(getattr(config, "protected", ())), allow=tuple(getattr(config, "allow", ())))

    def allowed(self, path: str) -> bool:
        """True when ``allow`` explicitly permits ``path`` and ``protected`` does not name it."""
        normalized = _normalize(path)
        if any(_matches(pattern, normalized) for pattern in self.protected):
            return False
        return any(_matches(pattern, normalized) for pattern in self.allow)

    def protected_by(self, path: str) -> str | None:
        """The pattern that protects ``path`` (a repository-relative name), or None."""
        normalized = _normalize(path)
        for pattern in self.protected:
            if _matches(pattern, normalized):
                return pattern
        if any(_matches(pattern, normalized) for pattern in self.allow):
            return None
        return next((pattern for pattern in DEFAULT_PROTECTED if _matches(pattern, normalized)), None)

    def violations(self, summary: "PatchSummary", root: Path | None = None) -> list[str]:
        """What in a patch that passed ``check_patch`` breaks the policy, one line each.

        ``root`` is the worktree the patch will be applied to: what it already holds decides
        which files are new, what a directory will contain, and the text of the files whose
        watched configuration (``CODE_CONFIGS``) the hunks change. Without it every file
        counts as new and every change is read from the patch alone, which can only refuse
        more.
        """
        return list(dict.fromkeys(problem for problem, _ in self._findings(summary, root)))

    def check(self, summary: "PatchSummary", root: Path | None = None) -> None:
        """Raise PolicyViolation when ``violations`` finds anything."""
        findings = self._findings(summary, root)
        if findings:
            raise PolicyViolation(list(dict.fromkeys(problem for problem, _ in findings)),
                                  [path for _, path in findings if path is not None])

    def _findings(self, summary: "PatchSummary", root: Path | None) -> list[tuple[str, str | None]]:
        """Each problem, with the path ``patch.allow`` could admit (None: nothing can)."""
        from redact import scrub

        found: list[tuple[str, str | None]] = []
        changes = list(summary.changes)
        readings = list(dict.fromkeys([*summary.files, *(p for change in changes for p in change.paths)]))
        # Every name any reading of a header could mean: git sees no name this did not.
        for path in readings:
            pattern = self.protected_by(path)
            if pattern in self.protected:
                found.append((f"{path} is protected ({pattern})", None))
            elif pattern is not None:
                found.append((f"{path} is protected ({pattern}: {_LOADED_BY[pattern]})", path))
        run_by_ci = {_normalize(path): where for path, where in ci_run_files(root).items()} if root else {}
        for path in readings:
            where = run_by_ci.get(_normalize(path))
            if where is not None and self.protected_by(path) is None and not self.allowed(path):
                found.append((f"{path} is run by CI (named in {where}): CI would run the patched file with its"
                              " secrets", path))
        if any(scrub(path) != path for path in readings):
            found.append((f"a file name {_HIDDEN}", None))
        files = list(summary.files)
        for directory in embedded_repositories(files, root):
            head = _join("" if directory == "." else directory, "HEAD")
            if not self.allowed(head):
                found.append((f"{directory}/ would be an embedded git repository", head))
        created = [path for path in files if _created(path, changes, root)]
        for folder, path in new_dot_folders(created, root).items():
            if self.protected_by(path) is None and not self.allowed(path):
                found.append((f"{path} makes a new dot-folder {folder}/ at the repository root (tools load such"
                               f" folders as configuration: admit it with patch.allow)", folder))
        for path in shadowing_modules(created, files, root):
            if not self.allowed(path):
                found.append((f"{path} shadows a standard-library or test-runner module", path))
        tree = _Tree(files, root)
        for change in changes:
            found.extend(self._content_problems(change, root, tree))
        return found

    def _content_problems(self, change: "FileChange", root: Path | None, tree: "_Tree") -> list[tuple[str, str | None]]:
        from redact import scrub

        found: list[tuple[str, str | None]] = []
        name = change.paths[-1] if change.paths else "?"
        hunks = [(hunk.old_start, hunk.lines) for hunk in change.hunks]
        added = "\n".join(line[1:] for hunk in change.hunks for line in hunk.lines if line[:1] == "+")
        if added and scrub(added) != added:
            found.append((f"the text added to {name} {_HIDDEN}", None))
        for path in change.paths:
            if self.allowed(path):
                continue
            for row in CODE_CONFIGS:
                if not _applies(row, path, tree):
                    continue
                changed = next((what for before, source, deleted in _versions(change, path, root)
                                if (what := config_changed(row, hunks, before, source, deleted=deleted)) is not None),
                               None)
                if changed is not None:
                    found.append((f"{path} changes {row.label}{f' ({changed})' if changed else ''}"
                                  f" ({row.loaded_by}: {row.why})", path))
                    break  # one class named per path is enough
        return found


def _created(path: str, changes: Sequence["FileChange"], root: Path | None) -> bool:
    if root is not None:
        return not _lexists(root, path)
    return any(change.created and path in change.paths for change in changes)


def _applies(row: CodeConfig, path: str, tree: "_Tree") -> bool:
    """Whether ``row`` of ``CODE_CONFIGS`` watches ``path`` (the tree as the patch leaves it)."""
    normalized = _normalize(path)
    if any(_matches(glob, normalized) for glob in row.files):
        return True
    name = normalized.rpartition("/")[2]
    return row.test_packages and name in ("__init__.py", "__init__.pyw") and any(
        _is_pytest_file(entry.lower()) for entry in tree.entries(path.rpartition("/")[0]))


def _is_pytest_file(name: str) -> bool:
    # pytest's default python_files, and conftest.py.
    return name == "conftest.py" or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))


def _versions(change: "FileChange", path: str, root: Path | None) -> Iterator[tuple[str | None, str | None, bool]]:
    """(text now, text the hunks apply to, deleted) for each way ``change`` could leave ``path``
    (None: unknown). A rename's or copy's source loses its file (judged as deleted, which a
    copy does not do: stricter); its target gets the source's text."""
    if not change.moved:
        # A file the tree lacks is one git will not patch: judged as empty, which refuses no less.
        absent = change.created or (root is not None and not _lexists(root, path))
        text = "" if absent else _read_regular(root, path)
        yield text, text, change.deleted
        return
    if _lexists(root, path):
        text = _read_regular(root, path)
        yield text, text, True
        return
    sources = [text for other in change.paths if other != path and (text := _read_regular(root, other)) is not None]
    for source in sources or [None]:
        yield "", source, False


_LOADED_BY = {pattern: row.loaded_by if len(row.loaded_by) <= 60 else row.loaded_by[:60].rpartition(", ")[0] + ", ..."
              for row in PROTECTED_PATHS for pattern in row.patterns}
