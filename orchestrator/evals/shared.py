"""Where an eval's plan, claims, results and wall times are kept: its folder, or its database.

An eval on one machine keeps them in its folder (``FolderBoard``): ``eval.json``, a result file
per (case, arm, trial), a ``.wall`` file per run, and the folder's lock, which one eval process
holds. An eval whose tracker is a PostgreSQL server (``mesh --db postgresql://... eval run``) is
shared (``SharedBoard``): any number of ``mesh eval run`` processes, on one machine or several,
work it at once, and its state is rows of that database:

- ``mesh_eval_meta``: the eval's plan (its arms, their order, the reference, the trials, the
  git remote its case repositories are built from) and its suite's text: a runner that joins
  checks its suite and arms against them, and a report on any machine reads them;
- ``mesh_eval_pairs``: a row per (case, arm, trial): the claim of the runner working it (a
  token, the holder, its host and pid, and an expiry on the server's clock, renewed by a
  heartbeat), then its graded result. A claim is taken by one compare-and-set statement, so a
  pair is worked by one runner at a time; a claim whose runner died (its expiry passed, or its
  process is gone from this host) is taken over by another runner, which continues the pair's
  ``mesh run`` from its checkpoints (``mesh resume --force``: the calls already answered are
  read back from the calls log, never paid again). A result is written only by the claim's
  holder: a runner whose claim was taken over writes nothing;
- ``mesh_eval_walls``: the wall time of every start of every run, noted every few seconds;
- ``mesh_eval_branches``: each run's task branch as a git bundle (its commits above the case's
  base), shared every few seconds while the run goes on and when it ends: a runner that takes
  over a run that had ended (closed or blocked) grades those commits. A run in progress needs
  none: its resume applies again, from its checkpoints, the patches its commits lack.

Each machine's folder is a copy of the rows (``sync``): the result files, ``eval.json`` with
this machine's own suite and source paths, and the page of each run (written again from the
tracker where this machine did not run it), so ``mesh eval report``, ``status`` and ``export``
read a shared eval the way they read a local one.

May import ``tracker`` and ``orchestrator.evals.cases`` (files written whole), and
``orchestrator.protocol.lease`` (its heartbeat thread, and whether a holder's process is gone).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from orchestrator.evals.cases import write_json, write_text
from orchestrator.protocol.lease import process_gone

__all__ = ["Board", "FolderBoard", "SharedBoard", "board_for", "eval_name", "folder_eval", "is_shared", "live_claims",
           "keep_private", "meta_url", "recorded_db", "sync_folder"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS mesh_eval_meta (eval TEXT PRIMARY KEY, meta TEXT NOT NULL, suite TEXT NOT NULL,"
    " updated_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS mesh_eval_pairs (eval TEXT NOT NULL, case_id TEXT NOT NULL, slot TEXT NOT NULL,"
    " token TEXT, holder TEXT, host TEXT, pid INTEGER, claimed_at REAL, expires_at REAL,"
    " takeovers INTEGER NOT NULL DEFAULT 0, state TEXT, result TEXT, finished_at REAL,"
    " PRIMARY KEY (eval, case_id, slot))",
    "CREATE TABLE IF NOT EXISTS mesh_eval_walls (eval TEXT NOT NULL, case_id TEXT NOT NULL, run_slot TEXT NOT NULL,"
    " start TEXT NOT NULL, started_at REAL NOT NULL, wall_s REAL NOT NULL,"
    " PRIMARY KEY (eval, case_id, run_slot, start))",
    "CREATE TABLE IF NOT EXISTS mesh_eval_branches (eval TEXT NOT NULL, task_id TEXT NOT NULL, head TEXT NOT NULL,"
    " bundle TEXT NOT NULL, PRIMARY KEY (eval, task_id))",
)


def is_shared(db: str | None) -> bool:
    """Whether an eval whose tracker is ``db`` is shared by runners (a PostgreSQL server)."""
    return bool(db) and str(db).startswith(("postgres://", "postgresql://"))


def meta_url(db: str) -> str:
    """``db`` without its password: what a folder records of the database its eval lives in."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(db)
    if parts.password is None:
        return db
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[1]}"))


class Board:
    """What an eval run asks of where its state is kept."""

    shared = False

    def result(self, case_id: str, run_slot: str) -> dict | None:
        raise NotImplementedError

    def claim(self, key: tuple[str, str], *, again: bool = False) -> bool:
        """Take the pair ``key`` (case, slot) for this runner; False while another runner works it
        or it has a result (``again``: a result in error may be taken, for ``--retry-errors``)."""
        raise NotImplementedError

    def put(self, key: tuple[str, str], result: dict) -> bool:
        """Write the pair's result; False when this runner no longer holds its claim (nothing written)."""
        raise NotImplementedError

    def release(self, key: tuple[str, str]) -> None:
        """Give the pair back unfinished (the eval was stopped): another runner may take it at once."""

    def walls(self, case_id: str, run_slot: str) -> list[float]:
        raise NotImplementedError

    def wall_note(self, case_id: str, run_slot: str) -> Callable[[float], None]:
        """A function noting the wall time so far of a new start of run ``run_slot`` of ``case_id``."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class FolderBoard(Board):
    """An eval on one machine: files in its folder, which one eval process holds (its lock)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def _path(self, case_id: str, run_slot: str, suffix: str) -> Path:
        return self.folder / "results" / case_id / f"{run_slot}{suffix}"

    def result(self, case_id: str, run_slot: str) -> dict | None:
        path = self._path(case_id, run_slot, ".json")
        return json.loads(path.read_text()) if path.exists() else None

    def claim(self, key: tuple[str, str], *, again: bool = False) -> bool:
        return True  # the folder's lock: no other process works this eval

    def put(self, key: tuple[str, str], result: dict) -> bool:
        write_json(self._path(*key, ".json"), result)
        return True

    def walls(self, case_id: str, run_slot: str) -> list[float]:
        """The wall times of a run's starts (a line each; a killed eval's last line is its last note)."""
        try:
            return [float(x) for x in self._path(case_id, run_slot, ".wall").read_text().split()]
        except (OSError, ValueError):
            return []

    def wall_note(self, case_id: str, run_slot: str) -> Callable[[float], None]:
        path, before = self._path(case_id, run_slot, ".wall"), self.walls(case_id, run_slot)
        return lambda seconds: write_text(path, "".join(f"{x:.3f}\n" for x in [*before, seconds]))


class SharedBoard(Board):
    """An eval shared by runners through its PostgreSQL tracker (the module's docstring)."""

    shared = True

    def __init__(self, db: str, eval_id: str, folder: Path, *, ttl_s: float, actor: str):
        from tracker.store import Tracker

        self.db, self.eval, self.folder, self.ttl_s, self.actor = db, eval_id, folder, ttl_s, actor
        self.host, self.pid = socket.gethostname(), os.getpid()
        self._tracker = Tracker(db, actor=actor, create=True)
        self._lock = threading.Lock()  # one connection, several threads
        self._tokens: dict[tuple[str, str], str] = {}
        with self._tracker.transaction() as c:
            for statement in _SCHEMA:
                c.execute(statement)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._shared_heads: dict[str, str] = {}

    # ------------------------------------------------------------------ the plan

    def plan(self, merge: Callable[[dict | None], dict], suite_text: str) -> dict:
        """The eval's plan after ``merge`` (given the plan in the database, None for a new eval)
        made this runner's part of it; written back in the same transaction, so runners joining
        at once each see the other's arms."""
        with self._lock, self._tracker.transaction() as c:
            row = c.execute("SELECT meta FROM mesh_eval_meta WHERE eval = ?" + self._for_update(),
                            (self.eval,)).fetchone()
            meta = merge(json.loads(row[0]) if row else None)
            c.execute("INSERT INTO mesh_eval_meta(eval, meta, suite, updated_at) VALUES (?, ?, ?, ?)"
                      " ON CONFLICT(eval) DO UPDATE SET meta = excluded.meta, updated_at = excluded.updated_at",
                      (self.eval, json.dumps(meta, sort_keys=True), suite_text, time.time()))
        return meta

    def _for_update(self) -> str:
        return " FOR UPDATE" if self._tracker.db.now_sql else ""

    # ------------------------------------------------------------------ claims

    def _read(self, sql: str, params: tuple) -> list:
        with self._lock:
            return self._tracker.db.read(sql, params)

    def result(self, case_id: str, run_slot: str) -> dict | None:
        rows = self._read("SELECT result FROM mesh_eval_pairs WHERE eval = ? AND case_id = ? AND slot = ?"
                          " AND result IS NOT NULL", (self.eval, case_id, run_slot))
        return json.loads(rows[0][0]) if rows else None

    def claim(self, key: tuple[str, str], *, again: bool = False) -> bool:
        rows = self._read("SELECT token, host, pid, state FROM mesh_eval_pairs"
                          " WHERE eval = ? AND case_id = ? AND slot = ?", (self.eval, *key))
        seen = rows[0] if rows else None
        if seen is not None and seen["state"] is not None and not (again and seen["state"] == "error"):
            return False
        # A holder that is a dead process of this host is taken over at once; else when its claim lapsed.
        dead = seen is not None and seen["token"] is not None and process_gone(seen["host"], seen["pid"])
        token = secrets.token_hex(8)
        clock = self._tracker.db.now_sql or "?"
        moment = () if self._tracker.db.now_sql else (self._tracker.db.now(),)
        with self._lock, self._tracker.transaction(exclusive=False) as c:
            won = c.execute(
                "INSERT INTO mesh_eval_pairs(eval, case_id, slot, token, holder, host, pid, claimed_at, expires_at)"
                f" SELECT ?, ?, ?, ?, ?, ?, ?, t.m, t.m + ? FROM (SELECT {clock} AS m) AS t WHERE true"
                " ON CONFLICT(eval, case_id, slot) DO UPDATE SET token = excluded.token, holder = excluded.holder,"
                " host = excluded.host, pid = excluded.pid, claimed_at = excluded.claimed_at,"
                " expires_at = excluded.expires_at, takeovers = mesh_eval_pairs.takeovers"
                " + (CASE WHEN mesh_eval_pairs.token IS NULL THEN 0 ELSE 1 END)"
                " WHERE (mesh_eval_pairs.state IS NULL OR (? = 1 AND mesh_eval_pairs.state = 'error'))"
                " AND (mesh_eval_pairs.token IS NULL OR mesh_eval_pairs.expires_at <= excluded.claimed_at"
                " OR (? = 1 AND mesh_eval_pairs.token = ?))"
                " RETURNING token",
                (self.eval, *key, token, self.actor, self.host, self.pid, self.ttl_s, *moment, int(again),
                 int(dead), seen["token"] if dead else ""),
            ).fetchone()
        if won is None or won[0] != token:
            return False
        self._tokens[key] = token
        self._start_heartbeat()
        return True

    def put(self, key: tuple[str, str], result: dict) -> bool:
        token = self._tokens.pop(key, None)
        if token is None:
            return False
        result["runner"] = f"{self.host} pid {self.pid}"  # which runner graded it
        with self._lock, self._tracker.transaction(exclusive=False) as c:
            moment = self._tracker.db.now()
            n = c.execute("UPDATE mesh_eval_pairs SET result = ?, state = ?, finished_at = ?, token = NULL,"
                          " expires_at = NULL WHERE eval = ? AND case_id = ? AND slot = ? AND token = ?",
                          (json.dumps(result, sort_keys=True), result.get("state") or "error", moment, self.eval,
                           *key, token)).rowcount
        if n == 1:
            write_json(self.folder / "results" / key[0] / f"{key[1]}.json", result)
        return n == 1

    def release(self, key: tuple[str, str]) -> None:
        token = self._tokens.pop(key, None)
        if token is None:
            return
        with self._lock, self._tracker.transaction(exclusive=False) as c:
            c.execute("UPDATE mesh_eval_pairs SET token = NULL, expires_at = NULL WHERE eval = ? AND case_id = ?"
                      " AND slot = ? AND token = ?", (self.eval, *key, token))

    def _start_heartbeat(self) -> None:
        from orchestrator.protocol.lease import keep_alive

        if self._beat is None:
            self._beat = keep_alive(self.db, self.actor, self.ttl_s / 3, self._renew, self._stop,
                                    name=f"eval-claims-{self.eval}")

    def _renew(self, tracker) -> bool:
        """Extend every claim this runner holds (its own connection: the heartbeat's thread)."""
        tokens = list(self._tokens.items())
        if not tokens:
            return True
        with tracker.transaction(exclusive=False) as c:
            moment = tracker.db.now()
            for (case_id, run_slot), token in tokens:
                if c.execute("UPDATE mesh_eval_pairs SET expires_at = ? WHERE eval = ? AND case_id = ? AND slot = ?"
                             " AND token = ?", (moment + self.ttl_s, self.eval, case_id, run_slot, token)).rowcount:
                    continue
                self._tokens.pop((case_id, run_slot), None)  # taken over: this runner's result will not count
        return True

    # ------------------------------------------------------------------ task branches

    def share_branch(self, task_id: str, repo: Path) -> None:
        """Write the task branch of ``repo`` as a bundle, when its head moved since last written."""
        from orchestrator.evals.cases import _git

        try:
            head = _git(repo, "rev-parse", "--verify", "-q", f"refs/heads/mesh/{task_id}").strip()
        except ValueError:
            return  # no commit yet
        if self._shared_heads.get(task_id) == head:
            return
        try:
            bundle = _bundle(repo, task_id)
        except ValueError:
            return  # no commit above main
        with self._lock, self._tracker.transaction(exclusive=False) as c:
            c.execute("INSERT INTO mesh_eval_branches(eval, task_id, head, bundle) VALUES (?, ?, ?, ?)"
                      " ON CONFLICT(eval, task_id) DO UPDATE SET head = excluded.head, bundle = excluded.bundle",
                      (self.eval, task_id, head, bundle))
        self._shared_heads[task_id] = head

    def take_branch(self, task_id: str, repo: Path) -> None:
        """Fetch the task branch another runner shared into ``repo``, when ``repo`` lacks it."""
        import base64
        import tempfile

        from orchestrator.evals.cases import _git

        try:
            _git(repo, "rev-parse", "--verify", "-q", f"refs/heads/mesh/{task_id}")
            return
        except ValueError:
            pass
        rows = self._read("SELECT bundle FROM mesh_eval_branches WHERE eval = ? AND task_id = ?", (self.eval, task_id))
        if not rows:
            return
        with tempfile.TemporaryDirectory(prefix="mesh-eval-bundle-") as scratch:
            path = Path(scratch) / "branch.bundle"
            path.write_bytes(base64.b64decode(rows[0][0]))
            _git(repo, "fetch", "-q", "--no-tags", str(path), f"refs/heads/mesh/{task_id}:refs/heads/mesh/{task_id}")

    # ------------------------------------------------------------------ figures

    def walls(self, case_id: str, run_slot: str) -> list[float]:
        rows = self._read("SELECT wall_s FROM mesh_eval_walls WHERE eval = ? AND case_id = ? AND run_slot = ?"
                          " ORDER BY started_at, start", (self.eval, case_id, run_slot))
        return [float(r[0]) for r in rows]

    def wall_note(self, case_id: str, run_slot: str) -> Callable[[float], None]:
        start, started = f"{self.host}:{self.pid}:{secrets.token_hex(4)}", time.time()

        def note(seconds: float) -> None:
            with self._lock, self._tracker.transaction(exclusive=False) as c:
                c.execute("INSERT INTO mesh_eval_walls(eval, case_id, run_slot, start, started_at, wall_s)"
                          " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(eval, case_id, run_slot, start) DO UPDATE"
                          " SET wall_s = excluded.wall_s", (self.eval, case_id, run_slot, start, started, seconds))
        return note

    def pending_keys(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """Of ``keys``, those without a result: ``free`` (no live claim) or ``held`` (another runner's
        live claim, or this runner's)."""
        rows = self._read("SELECT case_id, slot, token, host, pid, state, expires_at, "
                          f"{self._tracker.db.now_sql or '?'} AS m FROM mesh_eval_pairs WHERE eval = ?",
                          ((self._tracker.db.now(),) if not self._tracker.db.now_sql else ()) + (self.eval,))
        seen = {(r["case_id"], r["slot"]): r for r in rows}
        out = {}
        for key in keys:
            row = seen.get(key)
            if row is not None and row["state"] is not None:
                continue
            live = row is not None and row["token"] is not None and row["expires_at"] > row["m"] \
                and not process_gone(row["host"], row["pid"])
            out[key] = "held" if live else "free"
        return out

    def close(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        with self._lock:
            self._tracker.close()


def board_for(folder: Path, db: str | None, eval_id: str, *, ttl_s: float, actor: str) -> Board:
    return SharedBoard(db, eval_id, folder, ttl_s=ttl_s, actor=actor) if is_shared(db) else FolderBoard(folder)


# ---------------------------------------------------------------------- a machine's copy of the rows


def live_claims(db: str, eval_id: str) -> dict[str, str]:
    """The pairs runners work now: ``"case slot"`` -> ``"<UTC time claimed> (<host> pid <pid>)"``."""
    from datetime import datetime, timezone

    from tracker.store import Tracker

    with Tracker(db, actor="mesh-eval") as tracker:
        rows = tracker.db.read("SELECT case_id, slot, host, pid, claimed_at FROM mesh_eval_pairs"
                               "  WHERE eval = ? AND token IS NOT NULL AND state IS NULL"
                               " AND expires_at > " + tracker.db.now_sql, (eval_id,))
    return {f"{r['case_id']} {r['slot']}": datetime.fromtimestamp(r["claimed_at"], timezone.utc)
            .isoformat(timespec="seconds") + f" ({r['host']} pid {r['pid']})" for r in rows}


def sync_folder(folder: Path, db: str, *, eval_id: str | None = None) -> dict[str, Any]:
    """Copy the shared eval's rows into ``folder`` (its plan, suite, results and the pages of its
    runs); returns what a status adds: the pairs running now on any machine. ``eval_id`` defaults
    to the folder's eval (``ev-<folder name>``). ``LookupError`` when the database holds no such eval."""
    from tracker.store import Tracker

    folder = Path(folder)
    eval_id = eval_name(folder, eval_id)
    with Tracker(db, actor="mesh-eval") as tracker:
        try:
            row = tracker.db.read("SELECT meta, suite FROM mesh_eval_meta WHERE eval = ?", (eval_id,))
            held = [] if row else [r["eval"] for r in tracker.db.read("SELECT eval FROM mesh_eval_meta ORDER BY eval")]
        except Exception as exc:  # no table: no eval was ever shared there
            if "mesh_eval_meta" not in str(exc) and "no such table" not in str(exc):
                raise
            row, held = [], []
        if not row:
            raise LookupError(f"{meta_url(db)} holds no eval {eval_id}"
                              + (f" (it holds: {', '.join(held[:20])}; name one with --eval NAME)" if held else ""))
        meta, suite_text = json.loads(row[0]["meta"]), row[0]["suite"]
        results = tracker.db.read("SELECT case_id, slot, result FROM mesh_eval_pairs WHERE eval = ?"
                                  " AND result IS NOT NULL", (eval_id,))
        folder.mkdir(parents=True, exist_ok=True)
        keep_private(folder)
        with _folder_lock(folder):
            local = folder / "eval.json"
            here = json.loads(local.read_text()) if local.is_file() else {}
            suite = Path(here.get("suite") or "")
            if not suite.is_file() or _digest(suite) != meta.get("suite_sha256"):
                suite = folder / "suite.jsonl"
                write_text(suite, suite_text)
            write_json(local, {**meta, "suite": str(suite), "source": here.get("source", meta.get("source")),
                               "db": meta_url(db)})
            for r in results:
                result = json.loads(r["result"])
                path = folder / "results" / r["case_id"] / f"{r['slot']}.json"
                if not path.is_file() or json.loads(path.read_text()) != result:
                    write_json(path, result)
                _page(tracker, folder, result)
    return {"running": live_claims(db, eval_id)}


def recorded_db(folder: Path) -> str | None:
    """The database of the shared eval ``folder`` holds a copy of (its ``eval.json``), else None."""
    try:
        db = json.loads((Path(folder) / "eval.json").read_text(encoding="utf-8")).get("db")
    except (OSError, ValueError, AttributeError):
        return None
    return db if is_shared(db) else None


def _bundle(repo: Path, task_id: str) -> str:
    """The commits of ``mesh/<task_id>`` above ``main`` as a git bundle, in base64; ValueError when none."""
    import base64
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "bundle", "create", "-q", "-",
                           f"refs/heads/mesh/{task_id}", "^main"], cwd=repo, capture_output=True, env=env,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ValueError(done.stderr.decode("utf-8", "replace")[-300:])
    return base64.b64encode(done.stdout).decode()


def keep_private(folder: Path) -> None:
    """An eval folder in a repository's ``.mesh/`` keeps that folder out of git (its evals hold
    repositories): a ``.gitignore`` there ignoring everything, written once."""
    private = next((p for p in Path(folder).resolve().parents if p.name == ".mesh"), None)
    if private is not None and private.is_dir() and not (private / ".gitignore").exists():
        (private / ".gitignore").write_text("# mesh's own files (evals, jobs): never committed\n*\n")


def _page(tracker, folder: Path, result: dict) -> None:
    """The page of a graded run, written from the tracker when this machine has none."""
    if not result.get("report") or not result.get("task"):
        return
    page = folder / result["report"]
    if page.is_file():
        return
    from orchestrator.views.report_html import write_report

    page.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_report(tracker, result["task"], page)
    except (OSError, KeyError, ValueError):
        pass


def folder_eval(folder: Path) -> str:
    """The eval's name: the one its folder recorded, else ``ev-<folder name>``."""
    try:
        return json.loads((folder / "eval.json").read_text())["eval"]
    except (OSError, ValueError, KeyError):
        return f"ev-{folder.name}"


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def eval_name(folder: Path, given: str | None) -> str:
    """The eval's name in its database: ``given`` (``--eval NAME``), else the one ``folder``
    recorded, else ``ev-<folder name>``. ValueError when ``given`` is no name, or names another
    eval than the one the folder holds (its results would be mixed with another's)."""
    recorded = folder_eval(folder)
    if given is None:
        return recorded
    if not _NAME.fullmatch(given):
        raise ValueError(f"--eval {given!r}: an eval's name is letters, digits, '.', '_' and '-' (at most 64),"
                         " starting with a letter or digit")
    if (folder / "eval.json").is_file() and recorded != given:
        raise ValueError(f"{folder} holds the eval {recorded}: --eval {given} names another; give it another folder")
    return given


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


class _folder_lock:
    """The folder's sync lock (a file lock: runners of one machine sharing a folder write it in turn)."""

    def __init__(self, folder: Path):
        self.path = folder / ".sync.lock"

    def __enter__(self):
        self.handle = self.path.open("a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
