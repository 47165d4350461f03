"""A throwaway PostgreSQL server for the tests and benchmarks: ``initdb`` + ``pg_ctl``.

The server runs as an unprivileged user (``postgres`` when the tests run as root, the
current user otherwise) from a temporary folder, listening on 127.0.0.1 at a free port
and on a socket in that folder, with trust authentication for that one user (``mesh``),
or with ``password=`` password authentication (SCRAM) for every user, ``mesh`` included;
``stop()`` shuts it down and removes the folder. Durability settings are relaxed
(``fsync=off``): the server lives for one test session.

``find_binaries()`` says where Debian's ``postgresql`` package put ``initdb`` and
``pg_ctl``, or why no server can be started here; the tests skip with that reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PgServer", "find_binaries", "start_server"]

USER = "mesh"
INSTALL_HINT = "install PostgreSQL: sudo apt-get install postgresql (or run make test as root)"


def find_binaries() -> tuple[Path | None, str]:
    """The folder holding ``initdb``/``pg_ctl``/``postgres``, or None and why not."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for folder in candidates:
        if all((Path(folder) / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(folder), ""
    return None, f"no PostgreSQL server binaries (initdb, pg_ctl) found; {INSTALL_HINT}"


def _version_key(path: str) -> int:
    part = Path(path).parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    bindir: Path
    folder: Path
    port: int
    run_as: str | None
    databases: list[str] = field(default_factory=list)
    password: str | None = None

    @property
    def socket_dir(self) -> Path:
        return self.folder / "sock"

    def url(self, database: str = "postgres", *, user: str = USER, password: str | None = None) -> str:
        """The URL of ``database`` as ``user`` (the server's own user with its password, if any)."""
        secret = password if password is not None else (self.password if user == USER else None)
        return f"postgresql://{user}{':' + secret if secret else ''}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        self.psql("postgres", f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.psql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def psql(self, database: str, sql: str) -> str:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cur = conn.execute(sql)
            return str(cur.fetchall()) if cur.description else ""

    def stop(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop",
                  check=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        if self.run_as:
            argv = ("runuser", "-u", self.run_as, "--", *argv)
        return subprocess.run(argv, capture_output=True, text=True, check=check, cwd="/",
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"})


def start_server(*, max_connections: int = 300, password: str | None = None) -> tuple[PgServer | None, str]:
    """A running server, or None and the reason it could not be started. With ``password``
    every connection must authenticate (SCRAM), ``mesh`` with that password."""
    bindir, why = find_binaries()
    if bindir is None:
        return None, why
    run_as = None
    if os.geteuid() == 0:
        # initdb refuses root: the package's own unprivileged user runs the server.
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return None, "running as root and there is no 'postgres' user to run the server as"
        run_as = "postgres"
    folder = Path(tempfile.mkdtemp(prefix="mesh-pg-"))
    server = PgServer(bindir=bindir, folder=folder, port=_free_port(), run_as=run_as, password=password)
    server.socket_dir.mkdir()
    auth = ["--auth=trust"]
    if password:
        pwfile = folder / "pwfile"
        pwfile.write_text(password + "\n")
        auth = ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
    if run_as:
        for path in folder.iterdir():
            shutil.chown(path, run_as)
        shutil.chown(folder, run_as)
    try:
        server._run(str(bindir / "initdb"), "-D", str(folder / "data"), "-U", USER, *auth,
                    "-E", "UTF8", "--locale=C", "--no-sync")
        options = (f"-p {server.port} -k {server.socket_dir} -c listen_addresses=127.0.0.1"
                   f" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
                   f" -c max_connections={max_connections} -c shared_buffers=64MB")
        server._run(str(bindir / "pg_ctl"), "-D", str(folder / "data"), "-l", str(folder / "server.log"),
                    "-o", options, "-w", "-t", "60", "start")
    except subprocess.CalledProcessError as exc:
        log = (folder / "server.log")
        detail = (exc.stderr or exc.stdout or "").strip().splitlines()[-1:] or [str(exc)]
        if log.exists():
            detail += log.read_text(errors="replace").strip().splitlines()[-2:]
        shutil.rmtree(folder, ignore_errors=True)
        return None, "PostgreSQL did not start: " + " | ".join(detail)
    return server, ""
