"""One eval, many runners (issue 37, item 1): ``mesh --db postgresql://... eval run`` processes share
an eval through a throwaway PostgreSQL server, each in a folder of its own (as on another machine:
case repositories of its own, built from the eval's git remote).

Two runners with a scripted worker that tells a loopback ledger of every answer it gives: every pair
is run exactly once; the runner whose run waits at a gate is SIGKILLed there, and the other takes
its pair over and continues it from its checkpoints (the answers already given are not asked
again, and no process of the killed runner is left); the report reads the same numbers from
either folder, and from a third that never ran anything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.evalkit import MESH, Loopback, git, library_suite, mesh, write_worker

pytestmark = pytest.mark.slow

# The worker's wrapper: it asks the ledger before it works (the gate may hold it there) and tells
# it each answer it gives, keyed by case, arm, trial, round and role.
LEDGER = """
import os, socket, subprocess, sys
port, command = int(sys.argv[1]), sys.argv[2:]
key = "|".join(os.environ.get(k, "") for k in ("MESH_EVAL_CASE", "MESH_EVAL_ARM", "MESH_EVAL_TRIAL",
                                               "MESH_ROUND", "MESH_ROLE"))
def say(word):
    with socket.create_connection(("127.0.0.1", port)) as ledger:
        ledger.sendall(f"{word} {key}\\n".encode())
        if not ledger.recv(1):
            sys.exit(9)  # the ledger closed without an answer: say nothing
prompt = sys.stdin.read()
say("WAIT")
done = subprocess.run(command, input=prompt, capture_output=True, text=True)
say("DONE")
sys.stdout.write(done.stdout)
sys.exit(done.returncode)
"""


class Ledger(Loopback):
    """A loopback port: ``WAIT key`` answers at once, but for the first ``gated`` key, held until the
    test ends; ``DONE key`` is written down (an answer a worker gave: a call paid)."""

    def __init__(self, gated: str):
        self.gated, self.answered, self.held = gated, [], threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        super().__init__()

    def handle(self, conn) -> None:
        with conn:
            word, key = conn.makefile().readline().strip().split(" ", 1)
            with self._lock:
                hold = word == "WAIT" and key == self.gated and not self.held.is_set()
                if hold:
                    self.held.set()
                if word == "DONE":
                    self.answered.append(key)
            if hold:
                self._closing.wait()
                return
            conn.sendall(b"k")

    def close(self) -> None:
        self._closing.set()
        self.stop()


def _suite(tmp_path: Path, n: int = 4):
    return library_suite(tmp_path, n, "shared.jsonl")


def _rows(db: str, sql: str, params: tuple = ()) -> list:
    from tracker.store import Tracker

    with Tracker(db) as tracker:
        return [tuple(r) for r in tracker.db.read(sql, params)]


def _runner(db: str, suite: Path, out: Path, command: str, repo: Path, remote: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    return subprocess.Popen([*MESH, "--db", db, "eval", "run", str(suite), "--arm", "team: profile=single",
                             "--worker-cmd", command, "--remote", str(remote), "--out", str(out), "--yes"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(what, *, procs=(), limit: int = 3000) -> None:
    """Wait for ``what()`` (bounded by a count of looks, not by a time); a runner that ended fails it."""
    for _ in range(limit):
        if what():
            return
        for proc in procs:
            assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def _holders(db: str, case_id: str) -> list[int]:
    return [pid for (pid,) in _rows(db, "SELECT pid FROM mesh_eval_pairs WHERE eval = 'ev-shared' AND case_id = ?"
                                        " AND token IS NOT NULL", (case_id,))]


def test_two_runners_share_an_eval_and_one_killed_is_continued_by_the_other(tmp_path, pg_url):
    repo, suite, cases = _suite(tmp_path)
    # The eval's remote: a bare repository the checkout pushed to (every runner builds its cases from it).
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "push", "-q", str(remote), "main")
    gated = f"{cases[2].id}|team|1|review|reviewer"
    ledger = Ledger(gated)
    command = write_worker(tmp_path, repo, cases, {"team": [c.id for c in cases]})
    (tmp_path / "worker" / "ledger.py").write_text(LEDGER)
    wrapped = f"python3 {tmp_path / 'worker' / 'ledger.py'} {ledger.port} {command}"
    first = tmp_path / "machine-a" / "shared"
    second = tmp_path / "machine-b" / "shared"
    runners = []
    try:
        runners.append(_runner(pg_url, suite, first, wrapped, repo, remote))
        # The second runner starts once the first holds a pair: each has one to work from the start.
        _wait(lambda: _rows(pg_url, "SELECT 1 FROM mesh_eval_pairs WHERE token IS NOT NULL") if _tables(pg_url)
              else False, procs=runners)
        runners.append(_runner(pg_url, suite, second, wrapped, repo, remote))
        _wait(ledger.held.is_set, procs=runners)
        # A folder of the user's repository copies the eval while it runs (mesh serve lists it).
        served = repo / ".mesh" / "evals" / "shared"
        early = json.loads(mesh("--db", pg_url, "eval", "status", str(served), "--json", cwd=repo).stdout)
        assert early["state"] == "running" and early["done"] < len(cases) and f"{cases[2].id} team" in early["running"]
        assert git(repo, "status", "--porcelain") == ""  # the folder is mesh's own: out of git
        [holder] = _holders(pg_url, cases[2].id)
        killed = next(r for r in runners if r.pid == holder)
        survivor = next(r for r in runners if r is not killed)
        left = _descendants(killed.pid)  # its mesh run, the worker waiting at the gate
        assert left & _processes_with(str(tmp_path / "worker" / "ledger.py"))  # the worker at the gate is one
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
        # Nothing of the killed runner is left: its mesh run and its worker went with it.
        _wait(lambda: not any(Path(f"/proc/{pid}").exists() for pid in left))
        out, err = survivor.communicate(timeout=900)
        assert survivor.returncode == 0, err
    finally:
        ledger.close()
        for runner in runners:
            if runner.poll() is None:
                runner.kill()
    # Every pair ran exactly once: one result each, and no answer was given twice (the synthesis of
    # the killed run's pair was read back from its calls log by the runner that continued it).
    states = _rows(pg_url, "SELECT case_id, state, takeovers, result FROM mesh_eval_pairs WHERE eval = 'ev-shared'")
    assert sorted((c, s) for c, s, _, _ in states) == sorted((c.id, "resolved") for c in cases)
    repeated = [key for key, n in Counter(ledger.answered).items() if n > 1]
    assert repeated == [] and len(ledger.answered) == 3 * len(cases)  # hydration, synthesis, review
    taken = {c: json.loads(r) for c, _, t, r in states if t}
    assert list(taken) == [cases[2].id]
    # Both runners worked the eval; the pair taken over counts the time of both of its starts.
    runners_seen = {json.loads(r)["runner"] for _, _, _, r in states}
    assert len(runners_seen) == 2
    walls = _rows(pg_url, "SELECT wall_s FROM mesh_eval_walls WHERE eval = 'ev-shared' AND case_id = ?",
                  (cases[2].id,))
    assert len(walls) == 2 and taken[cases[2].id]["wall_s"] == pytest.approx(sum(w for (w,) in walls), abs=0.01)
    # The report is the same from either folder, and from a third machine's that never ran a pair.
    third = tmp_path / "machine-c" / "shared"
    reports = [json.loads(mesh("--db", pg_url, "eval", "report", str(folder), "--json", cwd=repo).stdout)
               for folder in (first, second, third)]
    figures = [(r["arms"], r["cells"]) for r in reports]
    assert figures[0] == figures[1] == figures[2]
    assert [(a["resolved"], a["finished"]) for a in reports[0]["arms"]] == [(len(cases), len(cases))]
    # Each run's page is there on every machine (written again from the tracker where it did not run).
    assert all((third / cell["trials"][0]["report"]).is_file() for cell in reports[2]["cells"])
    # The folder remembers its database (not its password): a report there needs no --db.
    again = json.loads(mesh("eval", "report", str(third), "--json", cwd=repo).stdout)
    assert again["arms"] == reports[0]["arms"]
    status = json.loads(mesh("eval", "status", str(third), "--json", cwd=repo).stdout)
    assert (status["state"], status["done"], status["running"]) == ("finished", len(cases), {})
    # mesh serve's Evals page brings the folder it lists up to the rows: finished, every pair done.
    from orchestrator.web.evals import eval_list

    [listed] = eval_list(served.parent)
    assert (listed["state"], listed["progress"].split(" ")[0]) == ("finished", f"[{len(cases)}/{len(cases)}")
    # The export on the machine that never ran a pair: every run's patch, from its result.
    exported = json.loads(mesh("eval", "export", str(third), "--json", cwd=repo).stdout)
    lines = Path(exported["predictions"]["team"]).read_text().splitlines()
    assert len(lines) == len(cases) and all(json.loads(line)["model_patch"].startswith("diff --git")
                                            for line in lines)


def _tables(db: str) -> bool:
    from tracker.errors import WorkspaceError

    try:  # before the first runner made the tracker, its database is empty
        return bool(_rows(db, "SELECT 1 FROM information_schema.tables WHERE table_name = 'mesh_eval_pairs'"))
    except WorkspaceError:
        return False


def _processes_with(text: str) -> set[int]:
    """The processes whose command line holds ``text``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                pass
    return found


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (its children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def test_a_runner_joining_with_another_suite_or_remote_is_refused(tmp_path, pg_url):
    repo, suite, cases = _suite(tmp_path, n=2)
    command = write_worker(tmp_path, repo, cases, {"team": []})
    common = ["--arm", "team: profile=single", "--worker-cmd", command, "--yes"]
    done = mesh("--db", pg_url, "eval", "run", str(suite), *common, "--out", str(tmp_path / "a" / "shared"),
                cwd=repo)
    assert done.returncode == 0, done.stderr
    other = tmp_path / "other" / "shared.jsonl"
    other.parent.mkdir()
    other.write_text(suite.read_text().splitlines()[0] + "\n")
    refused = mesh("--db", pg_url, "eval", "run", str(other), *common, "--out", str(tmp_path / "b" / "shared"),
                   cwd=repo)
    assert refused.returncode == 2 and "changed since this eval began (the eval in its database)" in refused.stderr
    elsewhere = mesh("--db", pg_url, "eval", "run", str(suite), *common, "--remote", "https://example.invalid/x.git",
                     "--out", str(tmp_path / "c" / "shared"), cwd=repo)
    assert elsewhere.returncode == 2 and "this eval builds its cases from" in elsewhere.stderr
    # Nothing left to run: a runner joining a finished eval ends at once with its summary.
    joined = mesh("--db", pg_url, "eval", "run", str(suite), *common, "--out", str(tmp_path / "d" / "shared"),
                  "--json", cwd=repo)
    assert joined.returncode == 0, joined.stderr
    assert json.loads(joined.stdout)["ran"] == 0
    assert f"shared eval ev-shared in {pg_url}: every runner claims the runs left" in joined.stderr
    # The copy of a shared eval is not run as an eval of this machine alone (its own tracker, its files).
    alone = mesh("eval", "run", str(suite), *common, "--out", str(tmp_path / "d" / "shared"), cwd=repo)
    assert alone.returncode == 2 and f"holds a copy of the eval shared through {pg_url}" in alone.stderr


def test_evals_of_one_database_are_told_apart_by_their_names(tmp_path, pg_url):
    """Issue 46, item 5: --eval NAME. Two evals whose folders share a name (and so the default
    ev-<folder name>) were one eval to the database: the second was refused as a changed suite."""
    repo, suite, cases = _suite(tmp_path, n=2)
    command = write_worker(tmp_path, repo, cases, {"team": []})
    common = ["--arm", "team: profile=single", "--worker-cmd", command, "--yes"]
    other = tmp_path / "other" / "shared.jsonl"
    other.parent.mkdir()
    other.write_text(suite.read_text().splitlines()[0] + "\n")
    for name, which, folder in (("first", suite, "a"), ("second", other, "b")):
        done = mesh("--db", pg_url, "eval", "run", str(which), *common, "--out", str(tmp_path / folder / "shared"),
                    "--eval", name, "--json", cwd=repo)
        assert done.returncode == 0, done.stderr
        assert f"shared eval {name} in {pg_url}" in done.stderr and json.loads(done.stdout)["ran"] == len(
            which.read_text().splitlines())
    assert sorted(_rows(pg_url, "SELECT eval, count(*) FROM mesh_eval_pairs GROUP BY eval")) == [
        ("first", 2), ("second", 1)]
    # A runner naming the eval joins it from any folder; a report reads it into a new one.
    joined = mesh("--db", pg_url, "eval", "run", str(suite), *common, "--out", str(tmp_path / "c" / "elsewhere"),
                  "--eval", "first", "--json", cwd=repo)
    assert joined.returncode == 0 and json.loads(joined.stdout)["ran"] == 0, joined.stderr
    fresh = tmp_path / "d" / "copy"
    status = mesh("--db", pg_url, "eval", "status", str(fresh), "--eval", "second", "--json", cwd=repo)
    assert status.returncode == 0, status.stderr
    assert json.loads((fresh / "eval.json").read_text())["eval"] == "second"
    assert sum(1 for _ in (fresh / "results").rglob("*.json")) == 1
    # A name the database does not hold is said with those it holds; a folder keeps its eval.
    missing = mesh("--db", pg_url, "eval", "report", str(tmp_path / "e" / "x"), "--eval", "third", cwd=repo)
    assert missing.returncode == 2 and "holds no eval third (it holds: first, second" in missing.stderr
    mixed = mesh("--db", pg_url, "eval", "status", str(fresh), "--eval", "first", cwd=repo)
    assert mixed.returncode == 2 and "holds the eval second: --eval first names another" in mixed.stderr
    again = mesh("--db", pg_url, "eval", "run", str(suite), *common, "--out", str(tmp_path / "a" / "shared"),
                 "--eval", "other", cwd=repo)
    assert again.returncode == 2 and "holds the eval first" in again.stderr
    bad = mesh("--db", pg_url, "eval", "run", str(suite), *common, "--out", str(tmp_path / "f" / "x"),
               "--eval", "../up", cwd=repo)
    assert bad.returncode == 2 and "an eval's name is letters, digits" in bad.stderr
    alone = mesh("eval", "status", str(fresh), "--eval", "second", cwd=repo)
    assert alone.returncode == 0, alone.stderr  # the folder's recorded database is read


def test_the_databases_password_reaches_no_worker_no_process_argument_and_no_file(tmp_path):
    """A shared eval's URL holds a password: the worker looks for it everywhere it can (its prompt,
    its environment, every file it may read), and finds nothing; while the run waits at the gate
    no process on the machine has it among its arguments (any user reads those); nothing the eval
    wrote holds it (its folder, its rows, the tracker's comments)."""
    import secrets as random

    from tests.evalkit import GATE, Gate

    password = "pw-" + random.token_hex(12)
    server = _own_server(password=password)
    gate = Gate()
    proc = None
    try:
        db = server.create_database("evals")
        repo, suite, cases = _suite(tmp_path, n=1)
        command = write_worker(tmp_path, repo, cases, {"team": [cases[0].id]}, search=[password],
                               search_rounds=["hydration", "review"])
        (tmp_path / "worker" / "gate.py").write_text(GATE)
        gated = f"python3 {tmp_path / 'worker' / 'gate.py'} {gate.port} {command}"
        out = tmp_path / "machine" / "shared"
        env = {**{k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}, "MESH_DB": db}
        proc = subprocess.Popen([*MESH, "eval", "run", str(suite), "--arm", "team: profile=single", "--worker-cmd",
                                 gated, "--out", str(out), "--yes"], cwd=repo, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        _wait(gate.reached.is_set, procs=[proc])  # the run's first worker waits: its mesh run is alive
        assert _processes_with("--worker-cmd") and _processes_with(password) == set()
        gate.open()
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr
        assert password not in stdout + stderr
        from orchestrator.ledger.calls import calls_for
        from tracker.store import Tracker

        with Tracker(db) as tracker:
            calls = calls_for(tracker)
            texts = [c["text"] for issue in tracker.list(include_closed=True) for c in tracker.comments(issue["id"])]
            rows = [json.dumps([tuple(r) for r in tracker.db.read(f"SELECT * FROM {table}")])
                    for table in ("mesh_eval_meta", "mesh_eval_pairs", "mesh_eval_walls")]
        assert len(calls) == 3 and all("seen: nothing" in call["response"] for call in calls), calls
        assert not any(password in text for text in [*texts, *rows])
        written = [p for p in out.rglob("*") if p.is_file() and password.encode() in p.read_bytes()]
        assert written == []
        assert json.loads((out / "eval.json").read_text())["db"] == server.url("evals", password="")
    finally:
        gate.open()
        if proc is not None and proc.poll() is None:
            proc.kill()
        server.stop()


def test_a_runner_whose_database_goes_away_stops_with_its_reason_and_no_traceback(tmp_path):
    """The shared eval's server stops while a run waits at the gate: the runner ends with exit 4 and
    says what happened (mesh eval run continues later), not a Python traceback."""
    from tests.evalkit import GATE, Gate

    server = _own_server()
    gate = Gate()
    proc = None
    try:
        db = server.create_database("evals")
        repo, suite, cases = _suite(tmp_path, n=1)
        command = write_worker(tmp_path, repo, cases, {"team": [cases[0].id]})
        (tmp_path / "worker" / "gate.py").write_text(GATE)
        gated = f"python3 {tmp_path / 'worker' / 'gate.py'} {gate.port} {command}"
        proc = subprocess.Popen([*MESH, "--db", db, "eval", "run", str(suite), "--arm", "team: profile=single",
                                 "--worker-cmd", gated, "--out", str(tmp_path / "m" / "shared"), "--yes"], cwd=repo,
                                env={k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait(gate.reached.is_set, procs=[proc])
        server.stop()
        gate.open()
        _, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 4, stderr
        assert "Traceback" not in stderr and "the eval's tracker" in stderr and "continues where it stopped" in stderr
    finally:
        gate.open()
        if proc is not None and proc.poll() is None:
            proc.kill()
        server.stop()


def _own_server(**options):
    """A throwaway PostgreSQL server of the test's own (it is stopped, or asks a password); a skip
    without one, a failure where PostgreSQL is required (MESH_REQUIRE_POSTGRES=1)."""
    from tests.pgserver import start_server

    server, why = start_server(max_connections=40, **options)
    if server is None:
        if os.environ.get("MESH_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here (MESH_REQUIRE_POSTGRES=1): {why}")
        pytest.skip(why)
    return server



@pytest.mark.parametrize("shared", [True, False], ids=["branch shared", "branch lost"])
def test_a_run_whose_runner_died_before_grading_it_is_graded_elsewhere_on_the_commits_it_shared(
        tmp_path, pg_url, shared):
    """The runner is killed between its run's end (closed) and the grade: another runner finds the
    task closed, fetches the branch the dead one shared, and grades those very commits; without
    them (the bundle gone) it says so, an error of the eval's own, rather than grade an empty tree."""
    repo, suite, cases = _suite(tmp_path, n=1)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "push", "-q", str(remote), "main")
    command = write_worker(tmp_path, repo, cases, {"team": [cases[0].id]})
    common = ["--db", pg_url, "eval", "run", str(suite), "--arm", "team: profile=single", "--worker-cmd", command,
              "--remote", str(remote), "--yes"]
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    dead = subprocess.run([*MESH, *common, "--out", str(tmp_path / "a" / "shared")], cwd=repo, capture_output=True,
                          text=True, env={**env, "MESH_CRASH_AT": "eval_grade"}, timeout=600)
    assert dead.returncode == -signal.SIGKILL, dead.stderr
    [(task, head)] = _rows(pg_url, "SELECT task_id, head FROM mesh_eval_branches WHERE eval = 'ev-shared'")
    assert _rows(pg_url, "SELECT status FROM issues WHERE id = ?", (task,)) == [("closed",)]
    if not shared:
        _rows(pg_url, "DELETE FROM mesh_eval_branches WHERE eval = 'ev-shared' RETURNING task_id")
    done = mesh(*common, "--out", str(tmp_path / "b" / "shared"), "--json", cwd=repo)
    [(state, result)] = _rows(pg_url, "SELECT state, result FROM mesh_eval_pairs WHERE eval = 'ev-shared'")
    result = json.loads(result)
    if shared:
        assert done.returncode == 0, done.stderr
        assert (state, result["head"], result["task"]) == ("resolved", head, task)
    else:
        assert done.returncode == 1
        assert state == "error" and result["error"]["kind"] == "eval"
        assert "stopped before it shared that commit" in result["error"]["reason"]
