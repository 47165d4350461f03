"""One ``mesh run`` of an eval's attempt: started in a session of its own, its wall time noted
while it runs, and its ending told apart: closed or blocked by its workers, or an error that is
no outcome of its arm (``run_error``: a configuration mistake, a missing agent CLI, ...;
``blocked_error``: the API's rate limit or overload after every retry, a refused checkpoint).

May import ``orchestrator.ledger`` (the calls log), ``orchestrator.sandbox.lifetime`` and ``redact``.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from typing import Any, Callable

from orchestrator.sandbox.lifetime import die_with_parent

__all__ = ["blocked_error", "missing_workers", "run_error", "timed_run"]

# A failed call's detail that says the API (or an agent CLI's provider) was overloaded or limited.
_API_TROUBLE = re.compile(r"HTTP (429|5\d\d)\b|overloaded|rate.?limit|too many requests|connection failed|"
                          r"quota|usage limit", re.I)


def missing_workers(described: dict[str, dict], arms: list[str]) -> list[tuple[str, str]]:
    """The (arm, program) of each arm whose worker command (its effective one, as its description
    records it) is not installed: its runs will end in error (``missing_cli``), which the eval
    records apart rather than stopping the other arms."""
    import shlex
    import shutil

    out = []
    for arm in arms:
        command = described[arm].get("worker_cmd")
        try:
            program = shlex.split(command)[0] if command else None
        except (ValueError, IndexError):
            program = None
        if program and shutil.which(program) is None:
            out.append((arm, program))
    return out


def run_error(code: int, stderr: str) -> tuple[str, str]:
    """The (kind, reason) of a ``mesh run`` that exited ``code`` (not closed, blocked or interrupted)."""
    from redact import scrub

    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "no message"
    try:  # mesh run --json says its error as {"error": ..., "code": ...}
        said = json.loads(last)
        last = str(said["error"]) if isinstance(said, dict) and said.get("error") else last
    except ValueError:
        pass
    reason = f"mesh run exited {code}: " + scrub(last)[:300]
    text = stderr.lower()
    if code == 2 and any(words in text for words in ("not found or not executable", "not on path",
                                                     "cannot start worker command")):
        return "missing_cli", reason
    if code == 2 and ("in its sandbox" in text or "bwrap" in text or "bubblewrap" in text):
        return "sandbox", reason
    return {2: "configuration", 4: "tracker", 5: "base"}.get(code, "run"), reason


def blocked_error(tracker: Any, task_id: str, last: dict) -> tuple[str, str] | None:
    """A blocked run that is no outcome of its arm: its workers never answered because the API (or
    the agent CLI's provider) was rate-limited or overloaded after every retry, or the tracker
    refused a checkpoint; None for a run its workers blocked."""
    from orchestrator.ledger.calls import calls_for, failure_reason
    from redact import scrub

    reason = last.get("block_reason")
    if reason == "tampered_checkpoint":
        return "tracker", f"blocked: {reason}: {scrub(str(last.get('block_detail') or ''))[:300]}"
    if reason not in ("no_response", "review_no_response"):
        return None
    failed = [row["error"] for row in calls_for(tracker, task_id=task_id)
              if failure_reason(row.get("error")) in ("no_response", "timeout")]
    if failed and _API_TROUBLE.search(failed[-1]):
        return "api", f"blocked: {reason} after the retries: {scrub(failed[-1])[:300]}"
    return None


_WALL_EVERY_S = 2.0


def timed_run(command: list[str], *, cwd: Any, env: dict[str, str], wall: Callable[[float], None],
              children: tuple[set, threading.Lock]) -> subprocess.CompletedProcess:
    """Run ``command`` to its end (its output kept), telling ``wall`` its wall time so far every
    ``_WALL_EVERY_S`` seconds and when it ends; the process is in ``children`` (a set and its
    lock) while it runs."""
    import tempfile

    started = time.monotonic()

    def note() -> None:
        wall(time.monotonic() - started)

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # A session of its own: a terminal's Ctrl-C reaches the eval alone, which asks each run to
        # stop once (EvalRun.stop); a second signal to a run would end it at once.
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err, preexec_fn=die_with_parent,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        running, lock = children
        with lock:
            running.add(proc)
        try:
            while True:
                note()
                try:
                    proc.wait(timeout=_WALL_EVERY_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            with lock:
                running.discard(proc)
        note()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, proc.returncode, out.read().decode("utf-8", "replace"),
                                           err.read().decode("utf-8", "replace"))
