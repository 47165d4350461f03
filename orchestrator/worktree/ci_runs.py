"""The files a CI configuration of the repository runs: the scripts its commands name.

CI runs what a repository's CI files say, with CI's secrets in reach, and those files are
protected (``protected_paths``). But a workflow's ``run: bash scripts/release.sh`` makes
``scripts/release.sh`` part of the workflow too: a patch adding one line to it runs that line
in CI, secrets and all (the signing-key leak of issue 43 went through such a script).
``ci_run_files`` reads the repository's CI files and lists every file their commands run;
``orchestrator.worktree.policy`` refuses a patch touching one unless ``patch.allow`` names it.

What counts as run:

- the files of ``CI_FILES``: one table, a row per CI system (GitHub Actions and composite
  actions, GitLab CI and its ``include: local``, CircleCI, Travis, Azure Pipelines and its
  ``template:`` files, Bitbucket, Drone, Woodpecker, Buildkite, AppVeyor, Cirrus, Cloud
  Build, CodeBuild, Semaphore, Forgejo and Gitea Actions, sourcehut, Jenkins); YAML files are
  parsed and the strings under their command keys (``COMMAND_KEYS``: ``run``, ``script``,
  ``before_script``, ``commands``, ``command``...) read as shell; a Jenkinsfile or Starlark file
  is read whole;
- in each command, what runs as code: the command word when it is a path (``./ci/x.sh``,
  ``scripts/check``), the script an interpreter is given (``bash x.sh``, ``python3 tools/y.py``,
  ``node z.js``, ``source env.sh``, ``python -m tools.release``: a module of the tree), through
  wrappers (``sudo``, ``env``, ``uv run``, ``npx``...), a makefile (``make`` with its ``-f``
  and ``-C``), relative to the step's ``working-directory`` and any ``cd`` before it; a path
  the tree does not hold yet counts as well (a patch creating it would be run);
- then, recursively, what those run: a shell script's and a makefile's own commands.

Only files CI executes are listed, not every file its commands mention (``pip install -r
requirements.txt`` reads a file: content rules cover such files). A file read by a program
that the table does not know (a task runner's ``Taskfile.yml``) is not followed: list it in
``patch.protected`` if CI runs it with secrets.

Imports the standard library and PyYAML (its safe loader) only.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["CI_FILES", "COMMAND_KEYS", "CiFile", "ci_config_files", "ci_run_files", "commands_run", "read_regular"]


class CiFile(NamedTuple):
    """Where one CI system keeps its configuration: folders to look in (``""``: the root),
    a regex its file names match there, and whether the folder is walked below."""

    system: str
    folder: str
    names: str
    deep: bool = False


_YAML = r"[^/]+\.ya?ml"
CI_FILES: tuple[CiFile, ...] = (
    CiFile("GitHub Actions", ".github/workflows", _YAML),
    CiFile("GitHub Actions (composite actions)", ".github", r"action\.ya?ml", deep=True),
    CiFile("GitHub Actions (composite action)", "", r"action\.ya?ml"),
    CiFile("GitLab CI", "", r"\.gitlab-ci\.ya?ml"),
    CiFile("GitLab CI", ".gitlab", _YAML, deep=True),
    CiFile("CircleCI", ".circleci", _YAML, deep=True),
    CiFile("Travis CI", "", r"\.travis\.ya?ml"),
    CiFile("Azure Pipelines", "", r"azure-pipelines\.ya?ml"),
    CiFile("Azure Pipelines", ".azure-pipelines", _YAML, deep=True),
    CiFile("Azure Pipelines", ".azuredevops", _YAML, deep=True),
    CiFile("Bitbucket Pipelines", "", r"bitbucket-pipelines\.ya?ml"),
    CiFile("Drone", "", r"\.drone\.(ya?ml|star)"),
    CiFile("Woodpecker", "", r"\.woodpecker\.ya?ml"),
    CiFile("Woodpecker", ".woodpecker", _YAML, deep=True),
    CiFile("Buildkite", ".buildkite", r"[^/]+\.(ya?ml|json|sh)", deep=True),
    CiFile("AppVeyor", "", r"\.?appveyor\.ya?ml"),
    CiFile("Cirrus CI", "", r"\.cirrus\.(ya?ml|star)"),
    CiFile("Cloud Build", "", r"cloudbuild\.ya?ml"),
    CiFile("CodeBuild", "", r"buildspec\.ya?ml"),
    CiFile("Semaphore", ".semaphore", _YAML, deep=True),
    CiFile("Codefresh", "", r"codefresh\.ya?ml"),
    CiFile("Forgejo Actions", ".forgejo/workflows", _YAML),
    CiFile("Gitea Actions", ".gitea/workflows", _YAML),
    CiFile("sourcehut builds", ".builds", _YAML),
    CiFile("sourcehut builds", "", r"\.build\.ya?ml"),
    CiFile("Jenkins", "", r"jenkinsfile(\..+)?|.+\.jenkinsfile"),
    CiFile("Zuul", "", r"\.?zuul\.ya?ml"),
    CiFile("Zuul", "zuul.d", _YAML),
    CiFile("Zuul", ".zuul.d", _YAML),
)

# Keys whose strings (at any depth below them) are shell commands, compared in lower case.
COMMAND_KEYS = frozenset({
    "run", "script", "scripts", "before_script", "after_script", "command", "commands", "cmd", "bash", "sh",
    "pwsh", "powershell", "install", "before_install", "after_success", "after_failure", "before_deploy",
    "after_deploy", "before_cache", "before_build", "build_script", "after_build", "before_test", "test_script",
    "after_test", "on_success", "on_failure", "on_finish", "init", "prologue", "epilogue", "entrypoint", "args",
    "tasks", "steps_script", "pre_build", "build", "post_build", "inline", "inlinescript",
})
# Keys whose strings name further CI files of the repository (GitLab include, Azure template).
_INCLUDE_KEYS = frozenset({"include", "local", "template", "extends_file"})
_WORKDIR_KEYS = frozenset({"working-directory", "working_directory", "workingdirectory", "dir", "cwd", "workdir"})

_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "fish", "ash", "busybox", "source", "."})
_INTERPRETERS = _SHELLS | frozenset({
    "python", "python2", "python3", "pypy", "pypy3", "node", "nodejs", "ruby", "perl", "php", "pwsh",
    "powershell", "rscript", "lua", "tsx", "ts-node", "deno", "bun", "groovy", "julia", "tclsh", "osascript",
})
_PYTHON = re.compile(r"(python[0-9.]*|pypy[0-9.]*)")
# Words that run the command after them (their own options skipped).
_PREFIXES = frozenset({"sudo", "env", "time", "nice", "nohup", "exec", "command", "builtin", "stdbuf", "xvfb-run",
                       "doas", "chronic", "unbuffer", "npx", "pnpx", "bunx", "timeout"})
# Tools whose ``run`` (or ``exec``) subcommand runs the command after it.
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye", "pixi", "conda", "mamba", "micromamba",
                      "pnpm", "yarn", "npm", "bundle", "cargo", "deno", "bun", "nix", "devbox"})
_MAKES = frozenset({"make", "gmake", "bmake"})
_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_SCRIPT_SUFFIX = re.compile(r"\.(sh|bash|zsh|ksh|py|js|mjs|cjs|ts|rb|pl|php|ps1|r|lua|groovy|mk)$", re.IGNORECASE)
_LITERAL = re.compile(r"'''(.*?)'''|\"\"\"(.*?)\"\"\"|['\"]([^'\"\n]+)['\"]", re.DOTALL)
_SEPARATORS = re.compile(r"&&|\|\||[;|&()\n]")
_MAX_FILES = 400
_MAX_READ = 4 << 20
_MAX_DEPTH = 4


def _regular(root: Path, rel: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(os.path.join(root, rel)).st_mode)
    except (OSError, ValueError):
        return False


def read_regular(root: Path | None, rel: str) -> str | None:
    """The text of ``rel`` in ``root`` when it is a plain regular file there, else None (the
    policy reads the worktree's files through it too).

    Never follows a symlink at the last component, never reads a hard-linked file (a worker may
    link one from outside the tree) and never blocks on a FIFO: the worktree may hold what a
    worker planted (gitops refuses to apply over it, after this look).
    """
    if root is None:
        return None
    try:
        fd = os.open(os.path.join(root, rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1 or info.st_size > _MAX_READ:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(_MAX_READ).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def _walk(root: Path, folder: str, deep: bool) -> Iterator[str]:
    """Regular files in ``folder`` (and below it when ``deep``), repository-relative, bounded."""
    stack, seen = [folder], 0
    while stack and seen < _MAX_FILES:
        current = stack.pop()
        try:
            entries = sorted(os.scandir(os.path.join(root, current) if current else root), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            rel = f"{current}/{entry.name}" if current else entry.name
            if entry.name == ".git":
                continue
            if entry.is_dir(follow_symlinks=False):
                if deep and rel.count("/") < 8:
                    stack.append(rel)
            elif entry.is_file(follow_symlinks=False):
                seen += 1
                yield rel


def ci_config_files(root: Path) -> dict[str, str]:
    """The CI files ``root`` holds, each with its system's name."""
    found: dict[str, str] = {}
    for row in CI_FILES:
        pattern = re.compile(row.names, re.IGNORECASE)
        for rel in _walk(root, row.folder, row.deep):
            if pattern.fullmatch(rel.rpartition("/")[2]):
                found.setdefault(rel, row.system)
    return found


def _clean(rel: str, base: str = "") -> str | None:
    """``rel`` (relative to ``base``) as a repository path, or None when it cannot be one."""
    if not rel or "$" in rel or "`" in rel or "*" in rel or rel.startswith(("/", "~", "-")) or "://" in rel:
        return None
    joined = posixpath.normpath(posixpath.join(base, rel)) if base else posixpath.normpath(rel)
    if joined in (".", "") or joined.startswith("../") or joined == "..":
        return None
    return joined


def _strings(value: Any, under: bool, out: dict[str, list[str]], key: str = "") -> None:
    """Collect the strings of ``value`` by role: ``commands``, ``includes``, ``workdirs``."""
    if isinstance(value, dict):
        for name, child in value.items():
            low = str(name).lower()
            if low in _INCLUDE_KEYS:
                _strings(child, False, out, "includes")
            elif low in _WORKDIR_KEYS and isinstance(child, str):
                out["workdirs"].append(child)
            elif low == "uses" and isinstance(child, str) and child.startswith("./"):
                out["uses"].append(child)
            else:
                # A command key's own strings, its lists' and its command-keyed children's
                # (CircleCI's run: {command: ...}); not a job that happens to be called build.
                _strings(child, low in COMMAND_KEYS, out, key)
    elif isinstance(value, list):
        for child in value:
            _strings(child, under, out, key)
    elif isinstance(value, str):
        if key == "includes":
            out["includes"].append(value)
        elif under:
            out["commands"].append(value)


def _yaml_roles(text: str) -> dict[str, list[str]] | None:
    import yaml

    out: dict[str, list[str]] = {"commands": [], "includes": [], "workdirs": [], "uses": []}
    try:
        documents = list(yaml.safe_load_all(text))
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    for document in documents:
        _strings(document, False, out)
    return out


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True, posix=True)
    except ValueError:
        return line.split()


def _module_files(module: str, base: str) -> list[str]:
    if not re.fullmatch(r"[A-Za-z_][\w.]*", module):
        return []
    path = module.replace(".", "/")
    return [p for p in (_clean(f"{path}.py", base), _clean(f"{path}/__main__.py", base),
                        _clean(f"{path}/__init__.py", base)) if p]


def commands_run(text: str, bases: Iterable[str] = ("",)) -> tuple[list[str], list[str]]:
    """(files, makefiles) that the shell text ``text`` runs, as repository paths tried against
    each of ``bases`` (folders the commands may run in; ``cd DIR`` adds one)."""
    files: list[str] = []
    makefiles: list[str] = []
    folders = list(dict.fromkeys(bases))
    joined = re.sub(r"\\\n", " ", text)
    for piece in _SEPARATORS.split(joined):
        words = _split(piece)
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]
        while words:
            head = words[0].rpartition("/")[2].lower()
            if head in _PREFIXES:
                words = words[1:]
                while words and (words[0].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?|\w+=.*", words[0])):
                    words = words[1:]
            elif head in _RUNNERS and len(words) > 1 and words[1] in ("run", "exec", "x", "dlx"):
                words = words[2:]
                while words and words[0].startswith("-"):
                    words = words[1:]
            else:
                break
        if not words:
            continue
        word, rest = words[0], words[1:]
        name = word.rpartition("/")[2].lower()
        if name == "cd" and rest:
            folders += [c for base in list(folders) if (c := _clean(rest[0], base))]
            continue
        if "/" in word or _SCRIPT_SUFFIX.search(word):
            files += [c for base in folders if (c := _clean(word, base))]
            continue
        if name in _MAKES:
            where, named = [""], []
            for index, arg in enumerate(rest):
                if arg in ("-f", "--file", "--makefile") and index + 1 < len(rest):
                    named.append(rest[index + 1])
                elif arg.startswith(("--file=", "--makefile=")):
                    named.append(arg.partition("=")[2])
                elif arg == "-C" and index + 1 < len(rest):
                    where = [rest[index + 1]]
            for base in folders:
                for sub in where:
                    folder = _clean(sub, base) if sub else base
                    if folder is None:
                        continue
                    for candidate in named or _MAKEFILES:
                        if (c := _clean(candidate, folder)):
                            makefiles.append(c)
            continue
        if name in _INTERPRETERS or _PYTHON.fullmatch(name):
            index = 0
            while index < len(rest):
                arg = rest[index]
                if arg == "-m" and index + 1 < len(rest):
                    files += [f for base in folders for f in _module_files(rest[index + 1], base)]
                    break
                if arg in ("-c", "-e", "--eval", "-Command", "-command"):
                    break
                if arg.startswith("-"):
                    index += 1
                    continue
                if name in ("deno", "bun") and arg in ("run", "test"):
                    index += 1
                    continue
                files += [c for base in folders if (c := _clean(arg, base))]
                break
    return list(dict.fromkeys(files)), list(dict.fromkeys(makefiles))


def _is_shell_script(rel: str, text: str) -> bool:
    if re.search(r"\.(sh|bash|zsh|ksh)$", rel, re.IGNORECASE):
        return True
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and bool(re.search(r"\b(ba|z|k|da)?sh\b", first))


def _recipes(text: str) -> str:
    """A makefile's recipe lines, as shell."""
    lines = [line[1:].lstrip("@-+ ") for line in text.split("\n") if line.startswith("\t")]
    return "\n".join(lines)


def ci_run_files(root: Path) -> dict[str, str]:
    """Every file of ``root`` (or that a patch could create there) that its CI runs, by
    repository path, each with where it is named (``.github/workflows/ci.yml``, or the script
    that runs it). The CI files themselves are not listed: ``protected_paths`` holds them, and
    the files they include are listed (with ``includes``)."""
    root = Path(root)
    found: dict[str, str] = {}
    queue: list[tuple[str, str, int, str]] = []  # (path, named in, depth, kind)
    configs = ci_config_files(root)
    for rel in configs:
        queue.append((rel, rel, 0, "config"))
    seen: set[str] = set()
    while queue and len(seen) < _MAX_FILES:
        rel, where, depth, kind = queue.pop(0)
        if rel in seen:
            continue
        seen.add(rel)
        if rel not in configs:
            found.setdefault(rel, where)
        if depth > _MAX_DEPTH:
            continue
        text = read_regular(root, rel)
        if text is None:
            continue
        folder = rel.rpartition("/")[0]
        if kind == "config":
            roles = _yaml_roles(text) if re.search(r"\.ya?ml$", rel, re.IGNORECASE) else None
            if roles is None:
                # A Jenkinsfile, a Starlark file: the text, and each string literal of it, as shell.
                literals = [a or b or c for a, b, c in _LITERAL.findall(text)]
                roles = {"commands": [text, *literals], "includes": [], "workdirs": [], "uses": []}
            bases = ["", *(c for w in roles["workdirs"] if (c := _clean(w)))]
            for include in roles["includes"]:
                target = _clean(include.lstrip("/"))
                if target and target not in configs and re.search(r"\.ya?ml$", target, re.IGNORECASE):
                    queue.append((target, rel, depth + 1, "config"))
            for uses in roles["uses"]:
                action = _clean(uses[2:].partition("@")[0])
                for name in ("action.yml", "action.yaml"):
                    if action and _regular(root, f"{action}/{name}"):
                        queue.append((f"{action}/{name}", rel, depth + 1, "config"))
            commands = roles["commands"]
        elif kind == "make":
            commands, bases = [_recipes(text)], [folder, ""]
        elif _is_shell_script(rel, text):
            commands, bases = [text], ["", folder] if folder else [""]
        else:
            continue
        for command in commands:
            files, makefiles = commands_run(command, bases)
            for path in files:
                queue.append((path, rel, depth + 1, "script"))
            for path in makefiles:
                queue.append((path, rel, depth + 1, "make"))
    return found
