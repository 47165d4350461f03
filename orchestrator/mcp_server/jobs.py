"""Background runs and drains: detached ``mesh`` processes and the records that find them again.

A job is one ``mesh run`` or ``mesh drain`` command line started in a session of its own
(``start_new_session``): closing the MCP session, the client or the server does not end it.
Its stdout (``--json``: the report, or the drain's events) and stderr (progress lines) go to
files beside its record, ``<repo>/.mesh/jobs/<job id>.json``, written atomically, so any later
``mesh mcp`` session (another client, after a restart) reads the same jobs.

Whether a job still runs is asked of the process table, with the process's start time kept
in the record: a pid the system gave to another process since is not taken for the job.
Stopping a job is the first Ctrl-C: SIGINT to the job's process (a drain starts no new task;
a run stops after its next checkpoint, resumable: ``orchestrator.stopping``).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tracker.model import now_iso

from orchestrator.stopping import READY_ENV

__all__ = ["Job", "JobStore", "JobNotFound"]

JOBS_DIR = Path(".mesh") / "jobs"
READY_WAIT_S = 60.0  # how long a stop waits for a job still starting to install its handlers


class JobNotFound(Exception):
    """No job has this id (the message names the closest ones)."""


class Job(BaseModel):
    """The record of one background run or drain."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: Literal["run", "drain"]
    pid: int
    process_start: str | None  # the process's start time in clock ticks (/proc/<pid>/stat), against pid reuse
    command: list[str]
    started: str  # RFC 3339 UTC, the tracker's timestamp form
    scope: dict[str, str | None]
    task: str | None = None
    stdout: str
    log: str
    stop_requested: str | None = None
    exit_code: int | None = None  # known when the server that started it saw it end


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (field 22 of /proc/<pid>/stat), None when it is gone
    or a zombie (ended, not yet reaped by its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else fields[19]


class JobStore:
    """The jobs of one repository: ``<repo>/.mesh/jobs/``."""

    def __init__(self, repo: Path):
        self.folder = repo / JOBS_DIR
        self._lock = threading.Lock()  # one read-modify-write of a record at a time in this process

    def _path(self, job_id: str) -> Path:
        return self.folder / f"{job_id}.json"

    def _write(self, job: Job) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{job.id}-", suffix=".tmp", dir=self.folder)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(job.model_dump_json(indent=2))
        os.replace(tmp, self._path(job.id))

    def start(self, kind: Literal["run", "drain"], argv: list[str], *, scope: dict[str, str | None],
              task: str | None = None, cwd: Path | None = None) -> Job:
        """Start ``mesh ARGV`` detached and record it; returns the record."""
        self.folder.mkdir(parents=True, exist_ok=True)
        ignore = self.folder.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# mesh's own files (jobs, reports): never committed\n*\n")
        job_id = f"{kind}-{secrets.token_hex(4)}"
        stdout, log = self.folder / f"{job_id}.out", self.folder / f"{job_id}.log"
        command = [sys.executable, "-m", "orchestrator.cli.main", *argv]
        with open(stdout, "wb") as out, open(log, "wb") as err:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=cwd,
                                       start_new_session=True,
                                       env={**os.environ, READY_ENV: str(self._ready(job_id))})
        job = Job(id=job_id, kind=kind, pid=process.pid, process_start=_process_start(process.pid),
                  command=["mesh", *argv], started=now_iso(), scope=scope, task=task, stdout=str(stdout),
                  log=str(log))
        self._write(job)
        # Reap it when it ends (no zombie while this server lives) and keep its exit code.
        threading.Thread(target=self._reap, args=(process, job_id), daemon=True).start()
        return job

    def _reap(self, process: subprocess.Popen, job_id: str) -> None:
        code = process.wait()
        with self._lock:
            self._write(self.get(job_id).model_copy(update={"exit_code": code}))

    def get(self, job_id: str) -> Job:
        """The record of ``job_id``; JobNotFound names the closest ids."""
        try:
            return Job.model_validate_json(self._path(job_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            import difflib

            known = self.ids()
            close = difflib.get_close_matches(job_id, known, n=3, cutoff=0.4)
            hint = (f"; did you mean {' or '.join(close)}?" if close else
                    f"; the jobs of this repository: {', '.join(known[-10:])}" if known else
                    "; no job was started in this repository yet (start_run, start_drain)")
            raise JobNotFound(f"no job {job_id!r}{hint}") from None

    def ids(self) -> list[str]:
        """Every job id, oldest first."""
        if not self.folder.is_dir():
            return []
        paths = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        return [p.stem for p in paths if not p.name.startswith(".")]

    def alive(self, job: Job) -> bool:
        """Whether the job's process still runs (the same process: its start time matches)."""
        start = _process_start(job.pid)
        return start is not None and start == job.process_start

    def _ready(self, job_id: str) -> Path:
        return self.folder / f"{job_id}.ready"

    def stop(self, job: Job) -> Job:
        """The first Ctrl-C, sent to the job's process once it is ready for it (its stop handlers
        installed: a job just started is waited for); the record notes when it was asked."""
        deadline = time.monotonic() + READY_WAIT_S
        while self.alive(job) and not self._ready(job.id).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive(job):
            os.kill(job.pid, signal.SIGINT)
        with self._lock:
            job = self.get(job.id).model_copy(update={"stop_requested": now_iso()})
            self._write(job)
        return job

    def output(self, job: Job) -> list[dict[str, Any]]:
        """The JSON objects the job printed on stdout (a run: its report; a drain: its events)."""
        try:
            text = Path(job.stdout).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        objects = []
        decoder = json.JSONDecoder()
        index = 0
        while index < len(text):
            while index < len(text) and text[index].isspace():
                index += 1
            if index >= len(text):
                break
            try:
                value, index = decoder.raw_decode(text, index)
            except ValueError:
                break  # a line still being written
            if isinstance(value, dict):
                objects.append(value)
        return objects

    def log_tail(self, job: Job, lines: int = 20) -> list[str]:
        """The last lines of the job's progress log (stderr)."""
        try:
            text = Path(job.log).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]
