"""PostgreSQL claims and single writes, each beside its raw baseline measured in the same run.

- claims: N processes (default 16) take every task of a pool of ready tasks. Baseline: a raw,
  indexed claim loop over a plain table of the same size on the same server, one statement per
  claim (``UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING``), raced
  just before each ``claim_next`` race; ``--rounds`` pairs, their medians. The same races for
  ``mesh drain``'s way (``protocol.lease.claim_next_leased``: the claim and the task's lease in
  one transaction).
  Measured: ``Tracker.claim_next`` with a plan label, the way ``mesh drain`` and runners claim.
  Double claims are counted (they must be 0) from the claimers' answers and the database.
- single writes: ``create``, ``update``, ``add_comment``, ``claim`` and ``close_issue`` on a
  tracker of ``--issues`` issues, each the median of ``--reps`` calls, beside the median round
  trip of one raw autocommit ``INSERT`` of a row into a small indexed table, made just before each
  call (so that both see the same load); the ratio is the median of five rounds' (each round a
  block of calls of each write in turn). Beside it, where Linux's /proc says it, the server CPU
  time per call of the tracker's connection and of the raw one's.
- import: ``import_jsonl`` of ``--import-issues`` generated issues (bench/gen_workspace.py) into a
  new tracker, beside a plain ``COPY`` of the same rows into plain tables (four COPY, three
  indexes, one transaction), each made just after the other, medians of ``--import-rounds``.
- ``import psycopg``: the driver's import time in a fresh interpreter (what every PostgreSQL
  command pays once), beside ``python -c pass``.

The server is a throwaway one (tests/pgserver.py: initdb + pg_ctl, fsync off) unless
``--pg-url`` names one where this user may create databases.

    .venv/bin/python bench/pg_writes.py
    .venv/bin/python bench/pg_writes.py --claimers 1,4,16 --pool 1600 --reps 200
    .venv/bin/python bench/pg_writes.py --installed --import-issues 0   # a fresh ``pip install .``

``--installed`` measures mesh as users run it: this script is run again by the interpreter of a
throwaway virtual environment into which the checkout is installed, not editable
(``bench/tracker_speed.py``'s ``fresh_install``); the tracker and drain code is then the installed
package's, the benchmark's helpers (``tests/pgserver.py``, ``bench/``) the checkout's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
# After the installed packages: under --installed, ``tracker`` is the fresh install's; the helpers
# (``tests``, ``bench``) are found here either way.
sys.path.append(str(ROOT))

LABEL = "plan:bench"


def _admin(admin_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql)


def fresh_database(admin_url: str, name: str) -> str:
    _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(admin_url, f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(admin_url)._replace(path="/" + name))


# ---------------------------------------------------------------- the raw baselines

RAW_CLAIM = ("UPDATE raw_tasks SET status = 'in_progress', assignee = %s WHERE id = ("
             "SELECT id FROM raw_tasks WHERE status = 'open' AND label = %s ORDER BY priority, created, id"
             " FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id")


def raw_setup(url: str, pool: int, filler: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE raw_tasks (id text PRIMARY KEY, status text NOT NULL, assignee text,"
                     " label text NOT NULL, priority int NOT NULL, created text NOT NULL)")
        conn.execute("CREATE INDEX raw_ready ON raw_tasks (label, status, priority, created, id)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO raw_tasks VALUES (%s, 'open', NULL, %s, %s, %s)",
                            [(f"r-{k}", LABEL if k < pool else "other", k % 4, f"2026-01-01T{k:08d}")
                             for k in range(pool + filler)])
        conn.execute("CREATE TABLE raw_rows (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                     " issue_id text NOT NULL, text text NOT NULL, at text NOT NULL)")
        conn.execute("CREATE INDEX raw_rows_issue ON raw_rows (issue_id)")
        conn.execute("ANALYZE")


def _raw_claimer(url: str, name: str, start, results) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        got = []
        start.wait()
        began = time.perf_counter()
        while (row := conn.execute(RAW_CLAIM, (name, LABEL)).fetchone()) is not None:
            got.append(row[0])
        results.put((name, began, time.perf_counter(), got))


def _mesh_claimer(url: str, name: str, start, results) -> None:
    from tracker.store import Tracker

    tracker = Tracker(url, actor=name)
    got = []
    start.wait()
    began = time.perf_counter()
    while (issue := tracker.claim_next(labels=[LABEL], issue_type="task")) is not None:
        got.append(issue["id"])
    results.put((name, began, time.perf_counter(), got))
    tracker.close()


def _drain_claimer(url: str, name: str, start, results) -> None:
    """How ``mesh drain`` takes ready work: ``claim_next`` and the task's lease in one transaction."""
    from orchestrator.protocol.lease import claim_next_leased, ensure_lease_table
    from tracker.store import Tracker

    tracker = Tracker(url, actor=name)
    ensure_lease_table(tracker)  # once, as a drain does
    got = []
    start.wait()
    began = time.perf_counter()
    while (taken := claim_next_leased(tracker, labels=[LABEL], parent=None, skip=set(), run_id=name,
                                      ttl_s=60)) is not None:
        got.append(taken[0]["id"])
    results.put((name, began, time.perf_counter(), got))
    tracker.close()


def _race(target, url: str, count: int) -> tuple[float, int, list[tuple[str, str]]]:
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    procs = [context.Process(target=target, args=(url, f"claimer-{k}", start, results)) for k in range(count)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # every process connected and waiting
    start.set()
    outcomes = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    wall = max(o[2] for o in outcomes) - min(o[1] for o in outcomes)
    claimed = [(issue, name) for name, _, _, ids in outcomes for issue in ids]
    doubles = len(claimed) - len({issue for issue, _ in claimed})
    return wall, doubles, claimed


def bench_claims(admin_url: str, counts: list[int], pool: int, filler: int, rounds: int) -> list[tuple]:
    """For each claimer count, ``rounds`` pairs of races (the raw loop, then ``claim_next``, each on
    a fresh database): the median rate of each, the median of the pairs' ratios, and the double
    claims of all races (a busy moment of this shared machine weighs on one pair, not the figure)."""
    rows = []
    for count in counts:
        for label, claimer in (("claim_next", _mesh_claimer), ("drain", _drain_claimer)):
            raw_rates, rates, ratios, doubles = [], [], [], 0
            for _ in range(rounds):
                raw_rate, raw_doubles = _raw_race(admin_url, count, pool, filler)
                rate, mesh_doubles = _mesh_race(admin_url, count, pool, filler, claimer)
                raw_rates.append(raw_rate)
                rates.append(rate)
                ratios.append(rate / raw_rate)
                doubles += raw_doubles + mesh_doubles
            rows.append((label, count, statistics.median(raw_rates), statistics.median(rates),
                         statistics.median(ratios), doubles))
    return rows


def _raw_race(admin_url: str, count: int, pool: int, filler: int) -> tuple[float, int]:
    raw_url = fresh_database(admin_url, f"mesh_bench_raw_{count}")
    raw_setup(raw_url, pool, filler)
    raw_wall, raw_doubles, raw_claimed = _race(_raw_claimer, raw_url, count)
    assert len(raw_claimed) == pool, "the raw loop missed tasks"
    return pool / raw_wall, raw_doubles


def _mesh_race(admin_url: str, count: int, pool: int, filler: int, claimer) -> tuple[float, int]:
    from tracker.store import Tracker

    url = fresh_database(admin_url, f"mesh_bench_claims_{count}")
    with tempfile.TemporaryDirectory() as folder:
        tracker = Tracker.init(Path(folder), prefix="bench", db_path=url)
        with tracker.transaction():
            for k in range(pool + filler):
                tracker.create(f"task {k}", labels=[LABEL if k < pool else "other"], priority=k % 4)
        tracker.db.conn.execute("ANALYZE")
        wall, doubles, claimed = _race(claimer, url, count)
        held = {r["id"]: r["assignee"] for r in tracker.list(status="in_progress", labels=[LABEL])}
        tracker.close()
    wrong = sum(1 for issue, name in claimed if held.get(issue) != name)
    assert len({i for i, _ in claimed}) == pool, "claim_next missed tasks"
    return pool / wall, doubles + wrong


# ---------------------------------------------------------------- single writes

def _server_cpu_us(pid: int | None) -> float | None:
    """CPU time a server backend has used so far, in microseconds (Linux: /proc/PID/schedstat), or
    None where that cannot be read (another host, another system)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1000
    except (OSError, ValueError, IndexError, TypeError):
        return None


def _rounds_ms(calls: dict, items: dict, raw, rounds: int = 5,
               backends: tuple[int | None, int | None] = (None, None)) -> dict[str, tuple]:
    """For each write, the median of its calls and of the raw baseline call made just before each
    (both see the same load), and the median over ``rounds`` of the ratio of the two medians of a
    round. The writes take turns block by block (a block: a round's calls of one write, in a row,
    as a warm loop runs them), so a busy moment of this shared machine weighs on one block of one
    figure, not on the figure (one block of 200 calls moved a figure by as much as 0.5x between
    runs). With the server processes of the two connections (``backends``: the tracker's, the raw
    one's), also the server CPU time per call of each: a figure the machine's other work hardly
    moves (None where it cannot be read)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    raws: dict[str, list[float]] = {name: [] for name in calls}
    ratios: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, list[float]] = {name: [0.0, 0.0] for name in calls}
    count = min(len(v) for v in items.values())
    for r in range(rounds):
        block = range(r * count // rounds, (r + 1) * count // rounds)
        for name, fn in calls.items():
            mine, theirs = [], []
            before = [_server_cpu_us(pid) for pid in backends]
            for k in block:
                t0 = time.perf_counter()
                raw(k)
                t1 = time.perf_counter()
                fn(items[name][k])
                mine.append((time.perf_counter() - t1) * 1000)
                theirs.append((t1 - t0) * 1000)
            after = [_server_cpu_us(pid) for pid in backends]
            for side, (b, a) in enumerate(zip(before, after)):
                cpu[name][side] = None if b is None or a is None or cpu[name][side] is None else \
                    cpu[name][side] + a - b
            times[name] += mine
            raws[name] += theirs
            ratios[name].append(statistics.median(mine) / statistics.median(theirs))
    return {name: (statistics.median(times[name]), statistics.median(raws[name]), statistics.median(ratios[name]),
                   *(None if c is None else c / len(times[name]) for c in cpu[name]))
            for name in calls}


def bench_writes(admin_url: str, issues: int, reps: int, server_cpu: bool = False) -> dict[str, tuple]:
    """Each single write's median beside the median raw INSERT round trip measured between its calls,
    and the median of five rounds' ratios (``_rounds_ms``)."""
    import psycopg

    from tracker.store import Tracker

    raw_url = fresh_database(admin_url, "mesh_bench_raw_writes")
    raw_setup(raw_url, 10, 0)
    url = fresh_database(admin_url, "mesh_bench_writes")
    with psycopg.connect(raw_url, autocommit=True) as conn, tempfile.TemporaryDirectory() as folder:
        def raw(k: int) -> None:
            conn.execute("INSERT INTO raw_rows (issue_id, text, at) VALUES (%s, %s, %s)",
                         (f"r-{k % 10}", f"comment {k}", "2026-01-01T00:00:00Z"))

        for k in range(20):  # the raw statement prepared, as the tracker's are after their first calls
            raw(k)
        tracker = Tracker.init(Path(folder), prefix="bench", db_path=url)
        with tracker.transaction():
            ids = [tracker.create(f"issue {k}", labels=[LABEL])["id"] for k in range(issues)]
        tracker.db.conn.execute("ANALYZE")
        backends = (tracker.db.read("SELECT pg_backend_pid()")[0][0],  # this machine's server only
                    conn.execute("SELECT pg_backend_pid()").fetchone()[0]) if server_cpu else (None, None)
        figures = _rounds_ms(
            {"create": lambda k: tracker.create(f"new {k}", labels=[LABEL]),
             "update": lambda i: tracker.update(i, notes="a note"),
             "add_comment": lambda i: tracker.add_comment(i, "a comment"),
             "claim": lambda i: tracker.claim(i),
             "close_issue": lambda i: tracker.close_issue(i, reason="done")},
            {"create": range(reps), "update": ids[:reps], "add_comment": ids[:reps], "claim": ids[reps:2 * reps],
             "close_issue": ids[2 * reps:3 * reps]}, raw, backends=backends)
        tracker.close()
    return figures


# ---------------------------------------------------------------- import

def plain_copy(url: str, source: Path) -> None:
    """The baseline import: each line parsed, the issues, labels, dependencies and comments written
    with four ``COPY`` into plain tables (a primary key or unique key each) and three indexes built,
    in one transaction: what ``bench/tracker_speed.py``'s plain sqlite3 import does, with COPY."""
    import psycopg

    from bench.tracker_speed import _PLAIN_ISSUE_COLUMNS, plain_rows

    issues, labels, deps, comments = plain_rows(source)
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE issues (seq bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
                    f" {', '.join(c + ' text' for c in _PLAIN_ISSUE_COLUMNS)}, UNIQUE (id))")
        cur.execute("CREATE TABLE labels (issue_id text NOT NULL, label text NOT NULL, UNIQUE (issue_id, label))")
        cur.execute("CREATE TABLE dependencies (issue_id text NOT NULL, depends_on_id text NOT NULL, type text NOT NULL,"
                    " created_at text, created_by text, UNIQUE (issue_id, depends_on_id, type))")
        cur.execute("CREATE TABLE comments (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
                    " issue_id text NOT NULL, author text, text text, created_at text)")
        for table, columns, rows in (("issues", ", ".join(_PLAIN_ISSUE_COLUMNS), issues),
                                     ("labels", "issue_id, label", labels),
                                     ("dependencies", "issue_id, depends_on_id, type, created_at, created_by", deps),
                                     ("comments", "issue_id, author, text, created_at", comments)):
            with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        cur.execute("CREATE INDEX issues_by_status ON issues(status, priority, id)")
        cur.execute("CREATE INDEX labels_by_label ON labels(label, issue_id)")
        cur.execute("CREATE INDEX deps_by_target ON dependencies(depends_on_id, type, issue_id)")


def bench_import(admin_url: str, n: int, rounds: int) -> tuple[float, float]:
    """Medians of ``import_jsonl`` of ``n`` generated issues into a new PostgreSQL tracker and of
    the plain COPY of the same file, each made just after the other, on fresh databases."""
    from bench.gen_workspace import generate, write_jsonl
    from tracker.jsonl import import_jsonl
    from tracker.store import Tracker

    ours, plain = [], []
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "ws.jsonl"
        write_jsonl(generate(n), source)
        for k in range(rounds):
            url = fresh_database(admin_url, "mesh_bench_plain_copy")
            t0 = time.perf_counter()
            plain_copy(url, source)
            plain.append(time.perf_counter() - t0)
            url = fresh_database(admin_url, "mesh_bench_import")
            tracker = Tracker.init(Path(folder) / f"ws-{k}", prefix="bm", db_path=url)
            t0 = time.perf_counter()
            import_jsonl(tracker, source)
            ours.append(time.perf_counter() - t0)
            tracker.close()
    return statistics.median(ours), statistics.median(plain)


def import_cost(runs: int = 7) -> tuple[float, float]:
    def median_s(code: str) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000
    return median_s("pass"), median_s("import psycopg")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-url", help="a server where this user may create databases (else a throwaway one)")
    parser.add_argument("--claimers", default="16", help="comma-separated process counts (default 16)")
    parser.add_argument("--pool", type=int, default=1600, help="ready tasks to claim per race")
    parser.add_argument("--filler", type=int, default=2000, help="other issues in the tracker beside the pool")
    parser.add_argument("--import-issues", type=int, default=100_000, help="issues imported (0: no import figure)")
    parser.add_argument("--import-rounds", type=int, default=3, help="pairs of imports")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of claim races per claimer count")
    parser.add_argument("--issues", type=int, default=2000, help="issues in the single-write tracker")
    parser.add_argument("--reps", type=int, default=200, help="calls per single-write figure")
    parser.add_argument("--installed", action="store_true",
                        help="measure a fresh non-editable install of this checkout (pip install into a throwaway"
                             " virtual environment)")
    args = parser.parse_args()
    if args.installed:
        from bench.tracker_speed import fresh_install

        with tempfile.TemporaryDirectory(prefix="mesh-pg-bench-") as folder:
            python = fresh_install(ROOT, Path(folder)) / "python"
            rest = [a for a in sys.argv[1:] if a != "--installed"]
            print(f"(a fresh install: {python})", flush=True)
            raise SystemExit(subprocess.run([str(python), str(Path(__file__).resolve()), *rest]).returncode)
    server = None
    admin_url = args.pg_url
    if admin_url is None:
        from tests.pgserver import start_server

        server, why = start_server()
        if server is None:
            raise SystemExit(f"no PostgreSQL server: {why}")
        admin_url = server.url()
    try:
        bare, driver = import_cost()
        print(f"import psycopg: {driver:.0f} ms vs python -c pass {bare:.0f} ms")
        if args.import_issues:
            ours, plain = bench_import(admin_url, args.import_issues, args.import_rounds)
            print(f"import of {args.import_issues} issues: {ours:.2f} s vs a plain COPY of the same rows {plain:.2f} s:"
                  f" {ours / plain:.2f}x")
        figures = bench_writes(admin_url, args.issues, args.reps, server_cpu=server is not None)
        print(f"\nsingle writes ({args.issues} issues, medians of {args.reps} calls; x raw: median of 5 rounds);"
              " baseline: one raw INSERT round trip,"
              " made before each call")
        print(f"{'write':<14}{'ms':>9}{'raw ms':>9}{'x raw':>8}   server CPU per call:"
              f" {'us':>6}{'raw us':>8}{'x raw':>7}")
        for name, (ms, raw, ratio, ours_us, raw_us) in figures.items():
            cpu = (f"{ours_us:>6.0f}{raw_us:>8.0f}{ours_us / raw_us:>7.2f}" if ours_us and raw_us
                   else "  (not readable here)")
            print(f"{name:<14}{ms:>9.3f}{raw:>9.3f}{ratio:>8.2f}   {'':>20}{cpu}")
        print(f"\nclaims ({args.pool} ready tasks among {args.pool + args.filler}); baseline: the raw SKIP LOCKED loop;"
              f" medians of {args.rounds} pairs of races")
        print(f"{'path':<12}{'claimers':>8}{'raw/s':>10}{'claims/s':>10}{'ratio':>8}{'double':>8}")
        for label, count, raw_rate, rate, ratio, doubles in bench_claims(
                admin_url, [int(c) for c in args.claimers.split(",")], args.pool, args.filler, args.rounds):
            print(f"{label:<12}{count:>8}{raw_rate:>10.0f}{rate:>10.0f}{ratio:>8.2f}{doubles:>8}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
