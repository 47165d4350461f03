"""Run a program inside a bubblewrap (``bwrap``) sandbox.

Validation commands and ``command`` workers run code that model output controls. Inside
the sandbox they get new user, pid, ipc and uts namespaces (and, for validation, a new
network namespace with nothing in it), a read-only view of the system and of the Python
installation, a fresh ``/proc`` that shows only the sandbox's own processes, an empty
``/tmp``, and only the folders a caller binds in. The user's repository, its ``.git``, the
tracker, the home folder and mesh's own files are not there unless a caller binds them.

bwrap is started with the already cleaned environment: inside the sandbox
``/proc/1/environ`` is bwrap's own environment, so ``--clearenv`` alone would still leave
the parent's whole environment readable there. Values are never put on bwrap's command
line either (``--setenv``), because every local user can read a command line with ``ps``.

Limits (CPU time, memory written, file size) are set with ``setrlimit`` in the child before
bwrap is executed, so they hold for bwrap and everything it starts; the whole tree's memory
and process count are capped by a control group where the machine allows one
(``orchestrator.sandbox.cgroups``), and every tmpfs a sandbox writes to has a size.

The sandbox sees a minimal ``/etc`` (``ETC_ENTRIES``: what Python, TLS and common test
suites need, with ``passwd``/``group`` written for the sandbox's own user), never the
host's ``shadow``, keys or configuration. When mesh runs as root, a sandbox does not run as
root: bwrap (privileged, no user namespace) drops the command to ``SANDBOX_UID`` with
``setpriv``, so files of root that a bind shows stay as unreadable as for any other user.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ETC_ENTRIES",
    "SANDBOX_HOME",
    "SANDBOX_UID",
    "SANDBOX_TREE",
    "SIGNING_KEY_ENV",
    "Launcher",
    "Limits",
    "SandboxUnavailable",
    "bwrap_argv",
    "covered",
    "minimal_env",
    "probe",
    "python_roots",
    "require_bwrap",
    "sandbox_path",
    "tracker_paths",
    "visible_roots",
]

SIGNING_KEY_ENV = "MESH_SIGNING_KEY"
# Where a validation sandbox shows the tree under test, and the empty HOME it gets.
SANDBOX_TREE = "/mesh/tree"
SANDBOX_HOME = "/mesh/home"
Launcher = Callable[[Sequence[str], Mapping[str, str], "str | None"], tuple[list[str], dict[str, str]]]

_INSTALL_FIX = ("install it with 'apt-get install bubblewrap', or set validation.sandbox = \"none\" "
                "in mesh.toml to run without a sandbox knowingly")
_NAMESPACE_FIX = ("allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or "
                  "kernel.apparmor_restrict_unprivileged_userns=0), or set validation.sandbox = \"none\" "
                  "in mesh.toml to run without a sandbox knowingly")
_PROBE_TIMEOUT_S = 20.0
# The system, read-only. A name that is a symlink on this host (/bin -> usr/bin on merged-/usr
# systems) is recreated as the same symlink, so paths resolve inside as they do outside.
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
_RESOLV_CONF = "/etc/resolv.conf"
# What a sandbox sees of /etc: the dynamic loader's cache, name service, time zone, TLS roots,
# MIME and service tables, Debian's alternatives symlinks and Python's site configuration.
# Not shadow, not sudoers, not ssh keys, not any tool's configuration.
ETC_ENTRIES = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "host.conf", "hosts", "gai.conf",
    "localtime", "timezone", "ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies",
    "mime.types", "protocols", "services", "alternatives", "os-release", "debian_version",
    "locale.alias", "locale.conf", "default/locale", "fonts", "magic", "papersize",
    "python3", "python3.9", "python3.10", "python3.11", "python3.12", "python3.13", "python3.14",
)
# The user a sandbox runs as when mesh is root: no account of the host has it.
SANDBOX_UID = 2_000_000_000


class SandboxUnavailable(Exception):
    """bwrap is missing or cannot create the namespaces; the message is one line with the fix."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of a sandboxed command; None or 0 means no limit.

    ``cpu_s`` is CPU seconds per process (SIGXCPU, then SIGKILL a second later),
    ``file_size_mb`` the largest file a process may write. ``memory_mb`` caps the memory of
    the whole process tree, its ``/tmp`` and HOME included, where a control group can be
    made (else each process's written memory, RLIMIT_DATA) and is the
    size of the sandbox's ``/tmp``. ``max_processes`` caps the tree's processes (a control
    group; without one, RLIMIT_NPROC where the sandbox has a user of its own).
    ``tree_growth_mb`` is how much the copy of the tree under test may grow.
    """

    cpu_s: float | None = 600
    memory_mb: int | None = 8192
    file_size_mb: int | None = 1024
    max_processes: int | None = 512
    tree_growth_mb: int | None = 1024

    def apply(self, *, per_process_memory: bool = True) -> None:
        """Set the limits on the calling process (meant to run in a child before exec).

        Memory per process is ``RLIMIT_DATA`` (what a process writes: heap and private
        mappings), not ``RLIMIT_AS``: V8's WebAssembly, Go and the JVM reserve address space
        far beyond what they use, and an address-space cap breaks them (Vitest's parser runs in
        WebAssembly). Without ``per_process_memory`` (a control group caps the whole tree's
        memory) none is set."""
        if self.cpu_s:
            seconds = max(1, int(self.cpu_s + 0.999))
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
        if self.memory_mb and per_process_memory:
            size = int(self.memory_mb) << 20
            resource.setrlimit(resource.RLIMIT_DATA, (size, size))
        if self.file_size_mb:
            size = int(self.file_size_mb) << 20
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


_probe_lock = threading.Lock()
_probed: dict[str, str | None] = {}


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:200] if lines else "no message"


def _try_namespaces(bwrap: str) -> str | None:
    """None when ``bwrap`` can run ``true`` with every namespace mesh asks for, else why not."""
    true = shutil.which("true", path="/usr/bin:/bin")
    if true is None:
        return "no 'true' program in /usr/bin or /bin to test with"
    argv = bwrap_argv(bwrap, [true], network=False, chdir="/", user=sandbox_user())
    try:
        proc = subprocess.run(argv, env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"bwrap did not finish within {_PROBE_TIMEOUT_S:g}s"
    except OSError as exc:
        return f"cannot run {bwrap}: {exc.strerror or exc}"
    if proc.returncode != 0:
        return _first_line(proc.stderr.decode("utf-8", errors="replace")) or f"exit status {proc.returncode}"
    return None


def probe() -> str:
    """The path of a ``bwrap`` on PATH that can create the sandbox's namespaces.

    Raises SandboxUnavailable (one line: why, and the fix) when there is none. The
    namespace test runs once per bwrap binary per process; the answer is cached.
    """
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(f"sandbox unavailable: bwrap (bubblewrap) is not on PATH; {_INSTALL_FIX}")
    bwrap = os.path.realpath(found)
    with _probe_lock:
        if bwrap not in _probed:
            _probed[bwrap] = _try_namespaces(bwrap)
        problem = _probed[bwrap]
    if problem is not None:
        raise SandboxUnavailable(
            f"sandbox unavailable: {bwrap} cannot create user, pid, network, ipc and uts namespaces "
            f"({problem}); {_NAMESPACE_FIX}")
    return bwrap


def covered(path: str, roots: Iterable[str]) -> bool:
    """True when ``path`` is one of ``roots`` or lies below one of them."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def python_roots() -> list[str]:
    """The installation prefixes of the running interpreter (a virtualenv and its base)."""
    roots = []
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        if prefix and os.path.isabs(prefix) and os.path.isdir(prefix) and prefix not in roots:
            roots.append(prefix)
    return roots


def _system_args(network: bool, etc_dir: str | None) -> list[str]:
    args: list[str] = []
    for path in _SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += _etc_args(network, etc_dir)
    return args


def _etc_args(network: bool, etc_dir: str | None) -> list[str]:
    """The minimal /etc: ``ETC_ENTRIES`` of the host read-only, ``passwd`` and ``group`` from
    ``etc_dir`` (written by ``write_identity``), and for a networked sandbox the resolver."""
    args = ["--dir", "/etc"]
    entries = [*ETC_ENTRIES, *(["resolv.conf"] if network else [])]
    for name in entries:
        path = os.path.join("/etc", name)
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            args += ["--ro-bind", path, path]
    if network and os.path.islink(_RESOLV_CONF):
        # A resolver file kept outside /etc (systemd-resolved's stub under /run) must come
        # along, or a networked worker cannot resolve names.
        target = os.path.realpath(_RESOLV_CONF)
        if os.path.isfile(target) and not covered(target, _SYSTEM_PATHS):
            args += ["--ro-bind", target, target]
    if etc_dir is not None:
        for name in ("passwd", "group"):
            args += ["--ro-bind", os.path.join(etc_dir, name), f"/etc/{name}"]
    return args


def sandbox_user() -> int | None:
    """The uid a sandbox drops to: ``SANDBOX_UID`` when mesh runs as root, else None (the
    sandbox keeps the user's own uid in a user namespace of its own)."""
    return SANDBOX_UID if os.geteuid() == 0 else None


def write_identity(folder: str | Path, home: str) -> str:
    """Write the sandbox's ``passwd`` and ``group`` into ``folder``; returns it (for ``etc_dir``).

    They name root, nobody and the user the sandbox runs as (``mesh``, with ``home``), so
    ``getpass.getuser()`` and ``pwd`` lookups work as in a normal account.
    """
    uid = sandbox_user()
    uid, gid = (uid, uid) if uid is not None else (os.getuid(), os.getgid())
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    users = {0: "root:x:0:0:root:/root:/bin/sh", 65534: "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"}
    users.setdefault(uid, f"mesh:x:{uid}:{gid}:mesh:{home}:/bin/sh")
    groups = {0: "root:x:0:", 65534: "nogroup:x:65534:"}
    groups.setdefault(gid, f"mesh:x:{gid}:")
    for name, lines in (("passwd", users.values()), ("group", groups.values())):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        os.chmod(os.path.join(folder, name), 0o644)
    os.chmod(folder, 0o755)
    return folder


def _depth(path: str) -> int:
    return len(Path(path).parts)


def tracker_paths(tracker: object) -> list[str]:
    """The files of an open SQLite tracker (the database, its journal, WAL and shared memory,
    and its ``.beads`` folder) that no sandbox may show; none for a server's tracker."""
    db = getattr(tracker, "db", None)
    path = getattr(tracker, "path", None)
    if getattr(db, "engine", "sqlite") != "sqlite" or not path:
        return []
    path = os.path.realpath(str(path))
    found = [path] + [path + suffix for suffix in ("-wal", "-shm", "-journal")]
    if os.path.basename(os.path.dirname(path)) == ".beads":
        found.append(os.path.dirname(path))
    return found


def require_bwrap() -> str:
    """The bwrap to use; SandboxUnavailable (one line: why, and the fix) when there is none."""
    return probe()


def visible_roots() -> list[str]:
    """The folders every sandbox shows read-only: the system and the running Python."""
    return [*_SYSTEM_PATHS, *python_roots()]


def sandbox_path(path: str | None) -> str:
    """``path`` (a PATH value) cut to the absolute entries a sandbox can see, in order."""
    shown = visible_roots()
    kept: list[str] = []
    for entry in (path or os.defpath).split(os.pathsep):
        if os.path.isabs(entry) and covered(entry, shown) and entry not in kept:
            kept.append(entry)
    return os.pathsep.join(kept)


# Names that would send a test suite's git calls to a repository other than the tree under test.
_GIT_LOCATION_ENV = frozenset({
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
})


def minimal_env(source: Mapping[str, str], names: Sequence[str], *, home: str, path: str) -> dict[str, str]:
    """The whole environment of a validation command.

    PATH (``path``), LANG (from ``source``, else C.UTF-8), HOME (``home``),
    ``PYTHONDONTWRITEBYTECODE=1``,
    and the variables of ``source`` named in ``names``; never the signing key or git's
    location overrides, even when named.
    """
    env = {"PATH": path, "LANG": source.get("LANG") or "C.UTF-8", "HOME": home,
           "PYTHONDONTWRITEBYTECODE": "1"}
    for name in names:
        if name in source and name != SIGNING_KEY_ENV and name.upper() not in _GIT_LOCATION_ENV:
            env[name] = source[name]
    return env


def bwrap_argv(
    bwrap: str,
    command: Sequence[str],
    *,
    network: bool,
    chdir: str,
    binds: Sequence[tuple[str, str]] = (),
    ro_binds: Sequence[tuple[str, str]] = (),
    etc_dir: str | None = None,
    user: int | None = None,
    tmp_bytes: int | None = None,
    tmpfs: Sequence[tuple[str, int | None]] = (),
    hidden: Sequence[str] = (),
    resolver: bool | None = None,
) -> list[str]:
    """The argv that runs ``command`` in a sandbox.

    The system and the running Python are read-only, ``/etc`` is minimal (``_etc_args``),
    ``/proc`` shows only the sandbox, ``/tmp`` and ``/dev/shm`` are empty (``tmp_bytes`` large at most each),
    ``SANDBOX_HOME`` exists (empty, writable, as large as ``/tmp``); ``binds`` (source,
    target) are writable, ``ro_binds`` read-only and ``tmpfs`` (target, size) empty and
    writable, mounted parents first. ``hidden`` paths that a bind would show are covered:
    a folder by an empty read-only one, a file by ``/dev/null``. Without ``network`` the
    sandbox has its own network namespace (empty, unless a caller connects it: then pass
    ``resolver=True`` to show the resolver configuration; by default only with ``network``).

    With ``user`` (mesh runs as root) bwrap runs privileged without a user namespace and
    ``setpriv`` drops the command to that uid with no capability left, so it is an ordinary
    user to the kernel; otherwise the sandbox is a user namespace of the caller's uid with
    every capability dropped. The environment is not set here: start bwrap with exactly
    the environment the command must have (see the module docstring).
    """
    argv = [bwrap, *([] if user is not None else ["--unshare-user"]), "--unshare-pid", "--unshare-ipc",
            "--unshare-uts"]
    if not network:
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--new-session", "--hostname", "mesh-sandbox", "--cap-drop", "ALL"]
    if user is not None:
        # Just what setpriv needs to become ``user``; changing to a non-zero uid clears them all.
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    argv += _system_args(network if resolver is None else resolver, etc_dir)
    size = ["--size", str(tmp_bytes)] if tmp_bytes else []
    # /dev/shm: POSIX shared memory and multiprocessing's arenas (Django's --parallel, a pool's
    # shared values) need it writable; empty, the sandbox's own.
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", *size, "--tmpfs", "/dev/shm",
             "--perms", "1777", *size, "--tmpfs", "/tmp", "--perms", "1777", *size, "--tmpfs", SANDBOX_HOME]
    mounts: dict[str, tuple[str, ...]] = {}
    for root in python_roots():
        if not covered(root, _SYSTEM_PATHS):
            mounts[root] = ("--ro-bind", root)
    for kind, pairs in (("--ro-bind", ro_binds), ("--bind", binds)):
        for source, target in pairs:
            if os.path.exists(source):
                mounts[os.path.abspath(target)] = (kind, os.path.abspath(source))
    for target, limit in tmpfs:
        mounts[target] = ("--perms", "1777", *(["--size", str(limit)] if limit else []), "--tmpfs")
    shown = list(mounts)
    covers = {os.path.abspath(path) for path in hidden}
    for path in covers:
        inside_another = covered(os.path.dirname(path), [c for c in covers if c != path])
        if os.path.lexists(path) and covered(path, shown) and path not in mounts and not inside_another:
            mounts[path] = ("--ro-bind", "/dev/null") if not os.path.isdir(path) else ("--perms", "0555", "--tmpfs")
    for target in sorted(mounts, key=_depth):
        argv += [*mounts[target], target]
        if mounts[target][-1] == "--tmpfs" and target in covers:
            argv += ["--remount-ro", target]
    if user is not None:
        # bwrap makes the folders above a mount with the modes of the host's (/root is 0700):
        # the sandbox's user must be able to pass through them to reach what is mounted.
        # Only folders bwrap made itself are changed, never a host folder a bind shows.
        above = {str(parent) for target in mounts for parent in Path(target).parents
                 if str(parent) != "/" and str(parent) not in mounts}
        binds = [target for target, how in mounts.items() if how[-1] != "--tmpfs"]
        # A folder bwrap made inside a writable tmpfs (a tree copy with a workspace package's
        # node_modules bound below it) must stay writable for the user that fills the tmpfs.
        writable = [target for target, how in mounts.items() if how[-1] == "--tmpfs" and target not in covers]
        # /tmp and HOME keep their sticky, world-writable mode (a checkout under /tmp puts the
        # running Python's virtualenv below /tmp).
        argv += [arg for folder in sorted(above, key=_depth)
                 if not covered(folder, [*binds, *_SYSTEM_PATHS, "/etc", "/proc", "/dev"])
                 and folder not in ("/tmp", SANDBOX_HOME)
                 for arg in ("--chmod", "0777" if covered(folder, writable) and folder not in writable
                             else "0755", folder)]
    argv += ["--chdir", chdir, "--"]
    if user is not None:
        argv += [shutil.which("setpriv", path="/usr/bin:/bin") or "/usr/bin/setpriv", f"--reuid={user}",
                 f"--regid={user}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
                 "--no-new-privs", "--"]
    return [*argv, *command]
