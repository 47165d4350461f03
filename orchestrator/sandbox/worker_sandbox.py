"""The bwrap sandbox of ``command`` workers (custom worker commands and the agent CLI presets).

A worker is driven by model output, so it is given what it needs to answer and nothing it
could misuse: it only returns artifacts; mesh applies them.

- **HOME** is private by default: a folder of its own per repository, task, role and program
  (``worker_homes``: ``<cache>/mesh-worker-homes/<repository>/<task>/<role>/<program>``, kept for
  the task's later calls, owned by no other worker), carried onto a tmpfs of bounded size
  mounted where the real HOME was. A preset additionally sees its CLI's login file
  (``AGENT_LOGIN_FILES``) read-only, bound afresh on each call, and nothing else of the real
  HOME: not the CLI's settings, hooks, plugins or MCP servers, not ``~/.ssh``, other tools'
  keys or dotfiles. Its ``/etc/passwd`` and ``group`` are the call's own, written in the views
  folder for it and removed when it ends.
  ``worker_home = "real"`` (announced on every start) gives the real HOME, writable, still
  with the repository, mesh's own folders and the tracker out of reach.
- **The program**: only its own file (and, for a program that is a virtualenv's, an npm
  package's or an interpreter's, that installation), never the folder around it: a CLI in
  ``~/.local/bin`` does not bring ``~/.local``.
- **The code**: the call's worktree, read-only. git works there read-only: the repository's
  git directory is shown read-only with a configuration reduced to what reading needs
  (``_SAFE_GIT_CONFIG``): no ``http.extraheader``, credential helper, ``insteadOf`` rewrite,
  include, hook path or fsmonitor, and remote URLs without their userinfo; reflogs,
  ``FETCH_HEAD`` and submodules' git folders are hidden. The user's checkout itself is not
  shown.
- **The tracker**: never shown, however it was named.
- **Limits**: the whole tree of a call is capped in memory and processes by a control group
  (``cgroups``) where one can be made, its memory per process (``RLIMIT_DATA``) otherwise; a
  cap hit fails the call, named (``memory``, ``processes``, ``home_limit``).
- **The network**: with pasta (Debian's ``passt``) the worker gets a network namespace of its
  own that reaches the outside but not the host's loopback services or abstract unix sockets
  (X11, D-Bus, containerd); the loopback ports of the model endpoints it is configured for
  (URLs in the variables it is passed, ``worker_loopback_ports``) are forwarded. Without
  pasta it shares the host's network, and preflight says so.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.sandbox.lifetime import die_with_parent
from orchestrator.sandbox import cgroups, egress, worker_homes
from orchestrator.sandbox.bwrap import (
    SIGNING_KEY_ENV,
    Launcher,
    bwrap_argv,
    covered,
    visible_roots,
    write_identity,
)
from roles.backends.command import Launch

__all__ = [
    "AGENT_LOGIN_FILES",
    "WORKER_HOMES",
    "WorkerLimits",
    "WORKER_NETWORKS",
    "GitView",
    "loopback_ports",
    "network_problem",
    "program_binds",
    "worker_launcher",
]

WORKER_HOMES = ("private", "real", "auto")
WORKER_NETWORKS = ("auto", "isolated", "host")
# The login file each agent CLI reads under HOME; a preset sees this file of the real HOME
# (read-only) and nothing else of it. An API key passed in the environment needs none.
AGENT_LOGIN_FILES: dict[str, tuple[str, ...]] = {
    "claude": (".claude/.credentials.json",),
    "codex": (".codex/auth.json",),
    "opencode": (".local/share/opencode/auth.json",),
}
# git configuration a read-only worktree needs; everything else (credentials, extra headers,
# URL rewrites, includes, hooks, fsmonitor, aliases, pagers, editors) is left out.
_SAFE_GIT_CONFIG = re.compile(
    r"^(core\.(repositoryformatversion|bare|filemode|symlinks|ignorecase|precomposeunicode|logallrefupdates"
    r"|autocrlf|eol|quotepath)|extensions\.[a-z]+|remote\.[^\n]+\.(url|fetch)|branch\.[^\n]+\.(remote|merge)"
    r"|init\.defaultbranch)$")
_HIDDEN_GIT = ("logs", "FETCH_HEAD", "modules", "config.worktree", "hooks")
# git's credential stores and user configuration (which can hold extra headers and helpers):
# hidden from a worker even under the real HOME.
_GIT_CREDENTIAL_FILES = (".git-credentials", ".gitconfig", ".config/git/credentials", ".config/git/config")
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def _git_env() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}


def _git_dirs(path: str) -> tuple[str, str] | None:
    """(top level, common git dir) of the repository holding ``path``, or None."""
    done = subprocess.run(["git", "-C", path, "rev-parse", "--show-toplevel", "--git-common-dir"],
                          capture_output=True, text=True, env=_git_env(), stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return None
    top, common = done.stdout.splitlines()[:2]
    return os.path.realpath(top), os.path.realpath(os.path.join(path, common))


def _strip_userinfo(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


class GitView:
    """A repository's git directory as a worker may see it: read-only, with a safe config.

    The reduced configuration is written once per repository into ``scratch``; ``binds``
    gives the read-only mounts and ``hidden`` the paths to cover.
    """

    def __init__(self, repo: str | Path, scratch: Path):
        dirs = _git_dirs(str(repo))
        self.top, self.common = dirs if dirs else (None, None)
        self.config: str | None = None
        if self.common is not None:
            digest = hashlib.sha256(self.common.encode()).hexdigest()[:16]
            folder = scratch / f"git-{digest}"
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.config = str(folder / "config")
            self._write_config(self.config)

    def _write_config(self, target: str) -> None:
        done = subprocess.run(["git", "config", "--file", os.path.join(self.common, "config"), "--list", "-z"],
                              capture_output=True, env=_git_env(), stdin=subprocess.DEVNULL)
        lines: list[str] = []
        for record in done.stdout.decode("utf-8", "replace").split("\0"):
            key, _, value = record.partition("\n")
            if not key or not _SAFE_GIT_CONFIG.match(key.lower()):
                continue
            if key.lower().startswith("remote.") and key.lower().endswith(".url"):
                value = _strip_userinfo(value)
            section, _, name = key.rpartition(".")
            head, _, sub = section.partition(".")
            header = f'[{head} "{sub}"]' if sub else f"[{head}]"
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            lines += [header, f'\t{name} = "{escaped}"']
        with open(target, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        os.chmod(target, 0o644)

    def binds(self) -> list[tuple[str, str]]:
        """Read-only mounts: the common git dir, its config replaced by the reduced one."""
        if self.common is None or self.config is None:
            return []
        return [(self.common, self.common), (self.config, os.path.join(self.common, "config"))]

    def hidden(self) -> list[str]:
        """What a worker must not see of the repository: the checkout, reflogs, submodules' configs."""
        if self.common is None:
            return []
        found = [os.path.join(self.common, name) for name in _HIDDEN_GIT]
        worktrees = os.path.join(self.common, "worktrees")
        if os.path.isdir(worktrees):
            for entry in os.listdir(worktrees):
                found += [os.path.join(worktrees, entry, name) for name in _HIDDEN_GIT]
        return [path for path in found if os.path.lexists(path)]


def _venv_root(path: str) -> str | None:
    for parent in Path(path).parents:
        if (parent / "pyvenv.cfg").is_file():
            return str(parent)
    return None


def _npm_package(path: str) -> str | None:
    parts = Path(path).parts
    if "node_modules" not in parts:
        return None
    index = len(parts) - 1 - parts[::-1].index("node_modules")
    depth = 2 if len(parts) > index + 1 and parts[index + 1].startswith("@") else 1
    if len(parts) <= index + depth:
        return None
    return str(Path(*parts[:index + 1 + depth]))


def _python_prefix(path: str) -> str | None:
    """The installation prefix of an interpreter in ``<prefix>/bin`` (one with a standard library)."""
    folder = Path(path).parent
    if folder.name != "bin":
        return None
    prefix = folder.parent
    return str(prefix) if any(prefix.glob("lib/python3*/os.py")) else None


def _shim_root(path: str) -> str | None:
    """The version manager a shim belongs to (``~/.pyenv/shims/python3`` -> ``~/.pyenv``: pyenv,
    rbenv, nodenv, asdf, mise keep their shims in a ``shims`` folder of their root), whose
    scripts and installed versions the shim runs."""
    folder = Path(path).parent
    return str(folder.parent) if folder.name == "shims" and folder.parent != Path(folder.anchor) else None


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return os.fsdecode(words[0]) if words and os.path.isabs(os.fsdecode(words[0])) else None


def program_binds(program: str, _depth: int = 0) -> list[str]:
    """What must be visible to run ``program``: the file itself (and its link target), or
    the installation it belongs to (a virtualenv, an npm package, a Python prefix, a version
    manager's root for its shims), and a script's interpreter the same way; never the folder
    a loose binary sits in."""
    shown = visible_roots()
    found: list[str] = []
    for path in dict.fromkeys([os.path.abspath(program), os.path.realpath(program)]):
        if covered(path, shown):
            continue
        root = _venv_root(path) or _npm_package(path) or _python_prefix(path) or _shim_root(path)
        found.append(root or path)
        if root and _venv_root(path):
            cfg = Path(root) / "pyvenv.cfg"
            home = next((line.split("=", 1)[1].strip() for line in cfg.read_text().splitlines()
                         if line.split("=", 1)[0].strip() == "home"), None)
            if home:
                found += program_binds(os.path.join(home, "python3"), _depth + 1) if _depth < 2 else []
    interpreter = _shebang(os.path.realpath(program))
    if interpreter and _depth < 2:
        found += program_binds(interpreter, _depth + 1)
    return [path for path in dict.fromkeys(found) if os.path.lexists(path)]


def _may_show(path: str, guarded: Sequence[str], home: str) -> bool:
    """A folder a worker may see: not ``/``, not HOME, holding none of ``guarded``."""
    real = os.path.realpath(path)
    if real in ("/", os.path.realpath(home)) or path in ("/", home):
        return False
    return not any(covered(os.path.realpath(g), [real]) or covered(g, [path]) for g in guarded)


def _script_folders(argv: Sequence[str], guarded: Sequence[str], home: str) -> list[str]:
    """The folders of the worker's own script files (a loose program with a shebang line, a script
    named by absolute path among its arguments), when a worker may see them (``_may_show``)."""
    shown = visible_roots()
    # A script (a shebang line), not a binary: an installed CLI's folder is not its to read.
    loose = argv and os.path.abspath(argv[0]) in program_binds(argv[0]) and _shebang(os.path.realpath(argv[0]))
    files = [argv[0]] if loose else []
    files += [arg for arg in argv[1:] if os.path.isabs(arg) and os.path.isfile(arg)]
    folders = []
    for path in files:
        # Where the script really is (Python puts that folder on sys.path), not a link farm's.
        folder = os.path.dirname(os.path.realpath(path))
        if not covered(folder, shown) and _may_show(folder, guarded, home) and folder not in folders:
            folders.append(folder)
    return folders


def loopback_ports(env: Mapping[str, str]) -> list[int]:
    """The loopback ports named by URL values in ``env`` (a model endpoint on this machine)."""
    return sorted({port or (443 if scheme == "https" else 80) for host, port, scheme in egress.url_hosts(env)
                   if host in _LOOPBACK_HOSTS})


_net_lock = threading.Lock()
_net_probe: dict[str, str | None] = {}


def network_problem(bwrap: str) -> str | None:
    """None when workers can get a network namespace of their own (pasta works here), else why not."""
    with _net_lock:
        if bwrap not in _net_probe:
            pasta = shutil.which("pasta")
            if pasta is None:
                _net_probe[bwrap] = "pasta (Debian's passt package) is not installed"
            else:
                true = shutil.which("true", path="/usr/bin:/bin") or "/bin/true"
                argv = _netns_argv([*bwrap_argv(bwrap, [true], network=False, chdir="/")], [])
                try:
                    done = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                          env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL)
                    problem = None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]
                except (OSError, subprocess.TimeoutExpired) as exc:
                    problem = str(exc)
                _net_probe[bwrap] = None if problem is None else f"pasta cannot connect a sandbox: {problem[:200]}"
        return _net_probe[bwrap]


def _netns_argv(sandbox: list[str], ports: Sequence[int], *, closed: bool = False) -> list[str]:
    """``sandbox`` (a bwrap argv with its own network namespace) started by ``netjoin``, which
    connects that namespace to the outside with pasta before the command runs (``closed``: to
    the loopback ``ports`` alone, no route out)."""
    listed = ",".join(map(str, dict.fromkeys(ports))) or "none"
    return [sys.executable, "-I", "-m", "orchestrator.sandbox.netjoin", f"closed:{listed}" if closed else listed,
            "--", *sandbox]


@dataclass(frozen=True)
class WorkerLimits:
    """What one worker call may take: its tree's memory and processes, its HOME's growth (in
    bytes on disk and in entries: files, folders, links)."""

    memory_mb: int = 2048
    max_processes: int = 256
    home_growth_mb: int = 1024
    home_files: int = 20000

    def group(self) -> cgroups.TreeGroup | None:
        """A control group capping one call's tree, or None where none can be made."""
        if cgroups.probe() is not None:
            return None
        try:
            return cgroups.make_group(self.memory_mb << 20, self.max_processes)
        except OSError:
            return None

    def hit(self, usage: cgroups.TreeUsage) -> str | None:
        """The failure detail of a cap ``usage`` says was reached, or None."""
        if usage.memory:
            return (f"memory: the worker's process tree reached its memory cap ({self.memory_mb} MB,"
                    " worker_limits.memory_mb) and was killed")
        if usage.processes:
            return (f"processes: the worker's process tree reached its process cap ({self.max_processes},"
                    " worker_limits.max_processes)")
        return None

    def note(self) -> str:
        """One line for preflight: which of these limits hold for a worker call here."""
        problem = cgroups.probe()
        caps = (f"memory {self.memory_mb} MB and {self.max_processes} processes for the whole tree (control group)"
                if problem is None else
                f"memory {self.memory_mb} MB per process only (RLIMIT_DATA), no process cap; no control group"
                f" ({problem})")
        return (f"worker limits: {caps}, private HOME +{self.home_growth_mb} MB and {self.home_files} files"
                " per call")


def worker_launcher(bwrap: str, *, home: str = "private", private_root: Path | None = None,
                    repo: str | Path | None = None, hidden: Sequence[str | Path] = (),
                    shielded: Sequence[str | Path] = (), network: str = "auto",
                    extra_ports: Sequence[int] = (), limits: WorkerLimits = WorkerLimits(),
                    read_only: Sequence[str | Path] = (), egress_hosts: Sequence[str] = ()) -> Launcher:
    """A launcher for the ``command`` backend that runs each worker call inside bwrap (see the
    module docstring for what a worker sees).

    ``home`` is ``private`` (the default; ``auto`` is its old name) or ``real``;
    ``private_root`` holds the private HOMEs; ``repo`` is the repository whose git directory a
    worktree's git needs (shown read-only, reduced); ``hidden`` are paths never shown (the
    tracker's files); ``shielded`` are folders kept read-only even under a real HOME (the
    repository, mesh's worktrees); ``network`` is ``auto`` (an own namespace where pasta
    works), ``isolated`` (an own namespace or the call fails) or ``host``; ``extra_ports``
    are loopback ports forwarded besides those named in the worker's environment; ``limits``
    cap each call (its tree's memory and processes, its private HOME's growth); ``read_only``
    are folders or files shown read-only besides (``worker_read_only``: a model's weights, a
    tool's data), ValueError for one that is HOME or holds the repository or the tracker;
    ``egress_hosts`` (``worker_egress``) are the hosts a worker with a namespace of its own may
    reach besides its preset's model APIs and the hosts of URLs in its environment (``egress``:
    through mesh's proxy, with no route out otherwise; ``*`` is everything).

    A worker script may read the folder it lives in (the program's own, when it is a loose file,
    and that of a script named by absolute path among its arguments), read-only, unless that
    folder is HOME, or holds the repository, mesh's worktrees or the tracker.
    """
    if home not in WORKER_HOMES:
        raise ValueError(f"worker home must be one of {', '.join(WORKER_HOMES)}, not {home!r}")
    if network not in WORKER_NETWORKS:
        raise ValueError(f"worker network must be one of {', '.join(WORKER_NETWORKS)}, not {network!r}")
    root = private_root or Path(tempfile.gettempdir()) / f"mesh-worker-homes-{os.getuid()}"
    scratch = root.parent / (root.name + "-views")
    scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
    views: dict[str, GitView] = {}
    if repo is not None:
        view = GitView(repo, scratch)
        if view.common is not None:
            views[view.common] = view
    isolate = network == "isolated" or (network == "auto" and network_problem(bwrap) is None)
    fixed_hidden = [os.path.abspath(path) for path in hidden]
    fixed_shield = [os.path.abspath(path) for path in shielded]
    guarded = [*fixed_hidden, *fixed_shield, str(root)]
    extra = [os.path.abspath(path) for path in read_only]
    for path in extra:
        if not _may_show(path, guarded, os.path.expanduser("~")):
            raise ValueError(f"worker_read_only {path} is HOME or holds the repository, mesh's worktrees or the"
                             " tracker: a worker may not see it")

    def launch(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> Launch:
        run_env = {name: value for name, value in env.items() if name != SIGNING_KEY_ENV}
        real_home = run_env.get("HOME", "")
        usable = os.path.isabs(real_home) and real_home != "/" and os.path.isdir(real_home)
        program = os.path.basename(argv[0]) if argv else ""
        command = list(argv)
        writable: list[tuple[str, str]] = []
        read_only: list[tuple[str, str]] = []
        tmpfs: list[tuple[str, int | None]] = []
        covers = [*fixed_hidden, str(root), str(scratch)]
        dirs = _git_dirs(os.path.abspath(cwd)) if cwd is not None else None
        common = dirs[1] if dirs else next(iter(views), None)
        back: worker_homes.Return | None = None
        if usable and home == "real":
            writable.append((real_home, real_home))
            read_only += [(path, path) for path in fixed_shield]
            covers += [os.path.join(real_home, name) for name in _GIT_CREDENTIAL_FILES]
        elif usable:
            logins = [name for name in AGENT_LOGIN_FILES.get(program, ())
                      if os.path.isfile(os.path.join(real_home, name))]
            folder = worker_homes.home_folder(root, common, run_env.get("MESH_TASK_ID"), run_env.get("MESH_ROLE"),
                                              program)
            worker_homes.repair(folder, logins)
            growth = limits.home_growth_mb << 20
            size = worker_homes.fit(folder, growth, limits.home_files) + growth
            tmpfs.append((real_home, size))
            # The folder is read-only in the sandbox: the HOME comes back through ``back`` alone,
            # at most as large as the tmpfs, so a worker writes nothing to the host's disk itself.
            read_only.append((str(folder), worker_homes.KEEP_TARGET))
            back = worker_homes.Return(scratch, folder, size + (1 << 20), bwrap=bwrap, max_files=limits.home_files)
            writable.append((str(back.fifo), worker_homes.BACK_TARGET))
            read_only += [(os.path.join(real_home, name), os.path.join(real_home, name)) for name in logins]
            command = worker_homes.carried(argv, real_home, logins, limits.home_files)
        read_only += [(path, path) for path in program_binds(argv[0])]
        read_only += [(arg, arg) for arg in argv[1:] if os.path.isabs(arg) and os.path.exists(arg)
                      and not covered(arg, visible_roots())]
        home_dir = real_home if usable else os.path.expanduser("~")
        read_only += [(path, path) for path in _script_folders(argv, guarded, home_dir)]
        read_only += [(path, path) for path in extra if os.path.exists(path)]
        if cwd is not None:
            work = os.path.abspath(cwd)
            read_only.append((work, work))
            if dirs is not None:
                view = views.get(dirs[1]) or views.setdefault(dirs[1], GitView(work, scratch))
                read_only += view.binds()
                covers += view.hidden()
                if home == "real":
                    read_only += [(dirs[0], dirs[0])]
        for view in views.values():
            if home == "real" and view.top is not None:
                read_only += [(view.top, view.top), *view.binds()]
                covers += view.hidden()
        chdir = os.path.abspath(cwd) if cwd is not None else (real_home if usable else "/")
        # The call's own passwd and group, removed when it ends (``_capped``).
        etc = write_identity(worker_homes.call_folder(scratch, "etc"), real_home if usable else "/")
        sandboxed = bwrap_argv(bwrap, command, network=not isolate, resolver=True, chdir=chdir, binds=writable,
                               ro_binds=read_only, tmpfs=tmpfs, etc_dir=etc, hidden=covers)
        if isolate:
            ports = [*loopback_ports(run_env), *extra_ports]
            allowed = egress.allowlist_for(program, run_env, egress_hosts)
            if allowed.everything:
                sandboxed = _netns_argv(sandboxed, ports)
            else:
                # No route out: the worker reaches its loopback endpoints and, through mesh's
                # proxy, the hosts of its allowlist; nothing else.
                proxy = egress.EgressProxy(allowed)  # the call's own: what it refused is this call's
                run_env.update(egress.proxy_env(proxy.port))
                sandboxed = _netns_argv(sandboxed, [*ports, proxy.port], closed=True)
                return _capped(sandboxed, run_env, limits, back, etc, proxy)
        return _capped(sandboxed, run_env, limits, back, etc)

    return launch


# Why a call's HOME was emptied (``worker_homes.Return.finish``), as its ``home_limit`` detail says it.
_HOME_LIMITS = {
    "filled": lambda limits: (f"the worker filled its private HOME (+{limits.home_growth_mb} MB,"
                              " worker_limits.home_growth_mb)"),
    "files": lambda limits: (f"the worker's private HOME holds more than {limits.home_files} files and folders"
                             " (worker_limits.home_files)"),
    "time": lambda limits: "carrying the worker's HOME back ran past the call's timeout (worker_timeout_s)",
}


def _capped(argv: list[str], env: dict[str, str], limits: WorkerLimits, back: worker_homes.Return | None,
            etc: str, proxy: egress.EgressProxy | None = None) -> Launch:
    """The call, capped by ``limits``: its tree joins a control group made just before it starts
    (or gets a per-process memory limit) before bwrap runs; afterwards, however it ended, the
    group is emptied and removed, its ``/etc`` files (``etc``) and its proxy go, and the detail
    of a cap it hit (or of a HOME it filled) is returned."""
    made: list[cgroups.TreeGroup | None] = []
    memory = limits.memory_mb << 20

    def begin() -> None:
        made.append(limits.group())
        if back is not None:
            back.start()

    def prepare() -> None:
        die_with_parent()  # a mesh run killed outright takes its worker along
        if made and made[0] is not None:
            made[0].join()
        else:
            resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))

    def finish(seconds_left: float | None = None) -> str | None:
        hit = None
        group = made[0] if made else None
        try:
            if group is not None:
                try:
                    hit = limits.hit(group.usage())
                finally:
                    group.kill_and_remove()
            why = back.finish(seconds_left) if back is not None else None
            if why is not None:
                hit = hit or f"home_limit: {_HOME_LIMITS[why](limits)}; its HOME was emptied"
        finally:
            shutil.rmtree(etc, ignore_errors=True)
            if proxy is not None:
                proxy.close()
        return hit

    def notes() -> str | None:
        refused = list(dict.fromkeys(proxy.refused)) if proxy is not None else []
        if not refused:
            return None
        return (f"mesh egress: refused {', '.join(refused[:5])}{' ...' if len(refused) > 5 else ''}"
                " (not among the hosts workers may reach, or named in a request let through for another host:"
                " add a host to worker_egress in mesh.toml to allow it)")

    return Launch(argv, env, begin=begin, prepare=prepare, finish=finish, notes=notes)


def announce_real_home() -> str:
    """The line ``mesh run``/``drain`` print on every start under ``worker_home = "real"``."""
    return ('warning: worker_home = "real": command workers run with your real HOME, writable '
            "(~/.ssh, shell start-up files, other repositories); set worker_home = \"private\" to contain them")


def egress_note(hosts: Sequence[str]) -> str:
    """One line for preflight: which hosts command workers may reach."""
    if "*" in hosts:
        return ('warning: worker_egress = ["*"]: command workers reach every host of the internet (an agent can '
                "look up anything, send anything); remove \"*\" to keep them to their model APIs")
    extra = f", and {', '.join(hosts)} (worker_egress)" if hosts else " (more with worker_egress in mesh.toml)"
    return ("worker egress: no route out; through mesh's proxy, each preset's model APIs and the hosts of URLs in "
            f"the worker's environment{extra}")


def describe(home: str, network_issue: str | None, network: str) -> dict[str, str]:
    """What preflight records of the workers' sandbox."""
    return {"worker_home": "real" if home == "real" else "private",
            "worker_network": "host" if network == "host" or network_issue else "isolated",
            **({"worker_network_note": network_issue} if network_issue and network != "host" else {})}
