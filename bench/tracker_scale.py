"""How the tracker scales on each engine: ready work, single writes, claims under contention,
import/export, whole-process start.

For each size it generates a realistic workspace (bench/gen_workspace.py) and, on each
engine (SQLite, PostgreSQL), imports it into fresh databases and prints the median of
several repetitions of each operation, next to the target for this 2-core machine. Then
claim throughput: 1, 4 and 16 processes draining a pool of ready tasks with ``claim_next``,
in claims per second, with the count of double claims (which must be 0). On SQLite it also
compares our ready query with the fastest hand-written SQLite queries over the same data,
after checking they return the same issues in the same order. Last, both engines side by side.

PostgreSQL is a throwaway server (tests/pgserver.py: initdb + pg_ctl, fsync off) unless
``--pg-url`` names one where this user may create databases (one per workspace, dropped
at the end).

    .venv/bin/python bench/tracker_scale.py                  # both engines, 10,000 and 100,000 issues
    .venv/bin/python bench/tracker_scale.py --engine sqlite --sizes 10000 --quick
    .venv/bin/python bench/tracker_scale.py --engine postgresql --pg-url postgresql://me@host/postgres
"""

from __future__ import annotations

import argparse
import gc
import io
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gen_workspace import BENCH_LABEL, BROAD_LABEL, generate, write_jsonl  # noqa: E402

from tracker.jsonl import export_jsonl, import_jsonl  # noqa: E402
from tracker.model import BLOCKING_STATUSES, NON_WORK_TYPES, normalize_ts, now_iso  # noqa: E402
from tracker.store import Tracker  # noqa: E402

MESH = ROOT / ".venv" / "bin" / "mesh"
ENGINES = ("sqlite", "postgresql")
CLAIMERS = (1, 4, 16)

# Targets on this 2-core machine, in milliseconds (import in seconds).
TARGET_READY_MS = {10_000: 10.0, 100_000: 60.0}
TARGET_WRITE_MS = 2.0
TARGET_IMPORT_100K_S = 15.0
TARGET_PROCESS_MS = 250.0
TARGET_DOUBLE_CLAIMS = 0

_BLOCKING = "(" + ",".join(f"'{s}'" for s in BLOCKING_STATUSES) + ")"

# Hand-written ready queries. The first reads the blocked/deferred state the
# tracker keeps current; the second computes it from the dependency graph at
# query time (what a tracker without that state has to do), walking up from
# each candidate with a correlated recursive query. CROSS JOIN fixes the join
# order: left to itself, SQLite starts from all open tasks and is 60x slower.
HAND_CACHED = """
SELECT i.id FROM labels l JOIN issues i INDEXED BY issues_ready_by_id ON i.id = l.issue_id
WHERE l.label = :label AND i.status = 'open' AND i.blocked = 0 AND i.issue_type = 'task'
  AND (i.defer_eff IS NULL OR i.defer_eff <= :now)
  AND COALESCE(i.ephemeral, 0) = 0 AND COALESCE(i.pinned, 0) = 0
ORDER BY i.priority, i.created_sort, i.id
"""
HAND_GRAPH = f"""
SELECT c.id FROM labels l CROSS JOIN issues c ON c.id = l.issue_id
WHERE l.label = :label AND c.status = 'open' AND c.issue_type = 'task'
  AND COALESCE(c.ephemeral, 0) = 0 AND COALESCE(c.pinned, 0) = 0
  AND NOT EXISTS (
    WITH RECURSIVE up(id) AS (
      SELECT c.id UNION
      SELECT d.depends_on_id FROM up JOIN dependencies d ON d.issue_id = up.id AND d.type = 'parent-child')
    SELECT 1 FROM up WHERE
      EXISTS (SELECT 1 FROM issues a WHERE a.id = up.id AND a.defer_sort > :now)
      OR EXISTS (SELECT 1 FROM dependencies d JOIN issues b ON b.id = d.depends_on_id
                 WHERE d.issue_id = up.id AND d.type = 'blocks' AND b.status IN {_BLOCKING}))
ORDER BY c.priority, c.created_sort, c.id
"""
assert "task" not in NON_WORK_TYPES  # the hand-written queries filter on type 'task' only


def median_ms(fn: Callable[[], object], reps: int) -> float:
    """Median wall time of ``reps`` calls of ``fn``, in milliseconds (after one warm-up call)."""
    gc.collect()  # garbage of the previous measurement (an export, an import) is not this one's cost
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def median_each_ms(fn: Callable[[object], object], items: list) -> float:
    """Median wall time of ``fn(item)`` over ``items`` (each item used once), in milliseconds."""
    gc.collect()
    times = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


# Every figure printed, for the side-by-side table: {(size, figure): {engine: (value, unit)}}.
RESULTS: dict[tuple[int, str], dict[str, tuple[float, str]]] = {}
TARGETS: dict[str, dict[int, str]] = {}
_current: dict[str, object] = {"engine": "sqlite", "size": 0}


def row(name: str, value: float, unit: str, target: float | None = None, *, key: str | None = None) -> None:
    """Print one figure (with its verdict against ``target``) and keep it for the summary
    under ``key`` (default: ``name``)."""
    verdict = ""
    if target is not None:
        verdict = f"  target <= {target:g} {unit}: {'ok' if value <= target else 'MISSED'}"
        TARGETS.setdefault(key or name, {})[int(_current["size"])] = f"≤ {target:g} {unit}".strip()
    shown = f"{value:>10.0f}" if not unit else f"{value:>10.2f}"
    print(f"  {name:<44} {shown} {unit}{verdict}")
    RESULTS.setdefault((int(_current["size"]), key or name), {})[str(_current["engine"])] = (value, unit)


class Databases:
    """Fresh tracker databases of one engine: files under ``workdir``, or databases created on a
    PostgreSQL server (``admin_url`` names one where this user may CREATE DATABASE)."""

    def __init__(self, engine: str, workdir: Path, admin_url: str | None = None):
        self.engine = engine
        self.workdir = workdir
        self.admin_url = admin_url
        self.created: list[str] = []

    def fresh(self, name: str) -> tuple[Path, str | None]:
        """A workspace folder and the ``db_path`` to give ``Tracker.init`` (None: the folder's file)."""
        root = self.workdir / f"{self.engine}-{name}"
        if self.engine == "sqlite":
            return root, None
        database = f"mesh_bench_{name}".replace("-", "_")
        self._admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        self._admin(f'CREATE DATABASE "{database}"')
        self.created.append(database)
        return root, urlunsplit(urlsplit(self.admin_url)._replace(path="/" + database))

    def drop_all(self) -> None:
        for database in self.created:
            self._admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        self.created.clear()

    def server_version(self) -> str:
        return str(self._admin("SHOW server_version")[0][0])

    def _admin(self, sql: str) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []


def bench_size(n: int, source: Path, databases: Databases, quick: bool, claimers: list[int]) -> str:
    """Run every measurement on an ``n``-issue workspace of one engine; returns its database
    (a path or a URL)."""
    _current.update(engine=databases.engine, size=n)
    reps = 5 if quick else 15
    print(f"\n== {n:,} issues, {databases.engine}")
    import_reps = 1 if quick else 3
    import_times = []
    target: str = ""
    for k in range(import_reps):
        root, db_path = databases.fresh(f"{n}-{k}")
        tracker = Tracker.init(root, prefix="bm", db_path=db_path)
        start = time.perf_counter()
        report = import_jsonl(tracker, source)
        import_times.append(time.perf_counter() - start)
        assert report.created == n and not report.warnings, report.to_dict()
        target = str(tracker.path)
        tracker.close()
    import_s = statistics.median(import_times)
    row(f"import {n:,} issues (median of {import_reps})", import_s, "s",
        TARGET_IMPORT_100K_S if n >= 100_000 else None, key="import of the whole file")

    tracker = Tracker(target, actor="bench")
    if tracker.db.engine == "postgresql":
        # Fresh statistics, as autovacuum gathers them shortly after a bulk load.
        tracker.db.conn.execute("ANALYZE")
    export_ms = median_ms(lambda: export_jsonl(tracker, io.StringIO()), 1 if quick else 3)
    row("export (whole file, to memory)", export_ms / 1000, "s", key="export of the whole file")

    target_ms = TARGET_READY_MS.get(n)
    for label, what in ((BENCH_LABEL, "plan label, ~1%"), (BROAD_LABEL, "broad label, ~10%")):
        found = len(tracker.ready(labels=[label], issue_type="task"))
        ms = median_ms(lambda: tracker.ready(labels=[label], issue_type="task"), reps)
        row(f"ready --label {label} --type task ({found} found)", ms, "ms",
            target_ms if label == BENCH_LABEL else None, key=f"ready --label {label} --type task")
        print(f"    ({what})")
    ms = median_ms(lambda: tracker.ready(limit=10), reps)
    row("ready --limit 10 (no filter)", ms, "ms", target_ms)

    writes = 20 if quick else 50
    ready_ids = [i["id"] for i in tracker.ready(limit=writes * 3)]
    claim_ids, close_ids, other_ids = (ready_ids[:writes], ready_ids[writes:2 * writes],
                                       ready_ids[2 * writes:3 * writes])
    row("create", median_each_ms(lambda k: tracker.create(f"bench issue {k}", labels=["bench"]),
                                 list(range(writes))), "ms", TARGET_WRITE_MS)
    row("update (priority)", median_each_ms(lambda i: tracker.update(i, priority=1), other_ids), "ms",
        TARGET_WRITE_MS)
    row("comment add", median_each_ms(lambda i: tracker.add_comment(i, "bench comment"), other_ids), "ms",
        TARGET_WRITE_MS)
    row("claim", median_each_ms(lambda i: tracker.claim(i), claim_ids), "ms", TARGET_WRITE_MS)
    row("close", median_each_ms(lambda i: tracker.close_issue(i, reason="bench"), close_ids), "ms",
        TARGET_WRITE_MS)

    if tracker.db.engine == "sqlite":
        compare_with_hand_written(tracker, reps)
    tracker.close()
    bench_claims(target, claimers, 160 if quick else 640)
    return target


def _claimer(target: str, pool: str, name: str, start, results) -> None:
    """One runner: claim the pool's ready tasks with ``claim_next`` until none is left."""
    tracker = Tracker(target, actor=name)
    start.wait()
    began = time.time()
    claimed = []
    while (issue := tracker.claim_next(labels=[pool])) is not None:
        claimed.append(issue["id"])
    ended = time.time()
    tracker.close()
    results.put((name, began, ended, claimed))


def bench_claims(target: str, claimers: list[int], pool_size: int) -> None:
    """Claims per second with 1, 4, 16... processes draining one pool of ready tasks, and how
    many tasks two of them both believed they had claimed (checked against the database too)."""
    context = multiprocessing.get_context("spawn")  # each claimer opens its own connection
    for count in claimers:
        pool = f"claim-pool-{count}"
        with Tracker(target, actor="bench") as tracker, tracker.transaction():
            for k in range(pool_size):
                tracker.create(f"claim {count}/{k}", labels=[pool])
        start = context.Barrier(count)
        results = context.Queue()
        procs = [context.Process(target=_claimer, args=(target, pool, f"claimer-{k}", start, results))
                 for k in range(count)]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join(60)
        wall = max(o[2] for o in outcomes) - min(o[1] for o in outcomes)
        claimed = [(issue, name) for name, _, _, ids in outcomes for issue in ids]
        doubles = len(claimed) - len({issue for issue, _ in claimed})
        with Tracker(target) as tracker:
            held = {i["id"]: i["assignee"] for i in tracker.list(labels=[pool], include_closed=True)}
        wrong = sum(1 for issue, name in claimed if held.get(issue) != name)
        missed = pool_size - len({issue for issue, _ in claimed})
        if missed:
            raise SystemExit(f"{missed} task(s) of {pool} were never claimed")
        row(f"claim_next, {count:>2} process(es) ({pool_size} tasks)", pool_size / wall, "claims/s",
            key=f"claim_next throughput, {count} process(es)")
        row(f"  double claims ({count} process(es))", doubles + wrong, "", TARGET_DOUBLE_CLAIMS,
            key=f"double claims, {count} process(es)")


def compare_with_hand_written(tracker: Tracker, reps: int) -> None:
    """Ratio of our ready call to hand-written SQL returning the same ids in the same order (SQLite)."""
    params = {"label": BENCH_LABEL, "now": normalize_ts(now_iso())}
    conn = tracker.db.conn
    ours = [i["id"] for i in tracker.ready(labels=[BENCH_LABEL], issue_type="task", now=params["now"])]
    sql, sql_params = tracker._ready_sql(labels=[BENCH_LABEL], issue_type="task", parent=None, limit=None,
                                         now=params["now"])
    ours_sql = [r["id"] for r in conn.execute(sql, sql_params)]
    cached = [r[0] for r in conn.execute(HAND_CACHED, params)]
    graph = [r[0] for r in conn.execute(HAND_GRAPH, params)]
    assert ours == ours_sql == cached == graph, "hand-written queries disagree with Tracker.ready"
    library_ms = median_ms(lambda: tracker.ready(labels=[BENCH_LABEL], issue_type="task", now=params["now"]), reps)
    sql_ms = median_ms(lambda: conn.execute(sql, sql_params).fetchall(), reps)
    cached_ms = median_ms(lambda: conn.execute(HAND_CACHED, params).fetchall(), reps)
    graph_ms = median_ms(lambda: conn.execute(HAND_GRAPH, params).fetchall(), reps)
    fastest = min(cached_ms, graph_ms)
    print(f"  ready vs hand-written SQL (same {len(ours)} ids, same order; label {BENCH_LABEL}):")
    row("hand-written, kept blocked state", cached_ms, "ms")
    row("hand-written, graph walked at query time", graph_ms, "ms")
    row("our SQL (Tracker._ready_sql, all columns)", sql_ms, "ms")
    row("our library call (SQL + issue objects)", library_ms, "ms")
    print(f"  {'ratio our SQL / fastest hand-written':<44} {sql_ms / fastest:>10.2f} x")
    print(f"  {'ratio library call / fastest hand-written':<44} {library_ms / fastest:>10.2f} x")


def bench_process(target: str, runs: int) -> None:
    """Whole-process time of ``mesh tracker ready --json`` (a new interpreter each run)."""
    env = dict(os.environ, MESH_DB=target)
    cmd = [str(MESH), "tracker", "ready", "--json"]
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        times.append((time.perf_counter() - start) * 1000)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    print(f"\n== whole process: {' '.join(cmd[-3:])}, {_current['engine']}, {_current['size']:,} issues")
    row(f"mesh tracker ready --json (median of {runs})", statistics.median(times[1:]), "ms", TARGET_PROCESS_MS,
        key="`mesh tracker ready --json`, whole process")


def print_side_by_side(engines: list[str], sizes: list[int]) -> None:
    """Every figure of every engine and size in one Markdown table."""
    columns = [(n, e) for n in sizes for e in engines]
    print("\n== side by side\n")
    print("| operation | " + " | ".join(f"{e}, {n:,}" for n, e in columns) + " | target |")
    print("|---|" + "---:|" * len(columns) + "---|")
    names = list(dict.fromkeys(name for _, name in RESULTS))
    for name in names:
        cells = []
        for n, e in columns:
            value = RESULTS.get((n, name), {}).get(e)
            digits = 0 if value is not None and (value[0] >= 100 or not value[1]) else 2
            cells.append("" if value is None else f"{value[0]:,.{digits}f} {value[1]}".strip())
        targets = TARGETS.get(name, {})
        if len(set(targets.values())) > 1:
            target = " / ".join(f"{text} at {n:,}" for n, text in sorted(targets.items()))
        else:
            target = next(iter(targets.values()), "")
        if any(cells):
            print(f"| {name} | " + " | ".join(cells) + f" | {target} |")


def start_postgres(pg_url: str | None) -> tuple[str, object | None]:
    """The admin URL of the server to bench on, and the throwaway server started for it (or None)."""
    if pg_url:
        return pg_url, None
    sys.path.insert(0, str(ROOT))
    from tests.pgserver import start_server

    server, why = start_server(max_connections=100)
    if server is None:
        raise SystemExit(f"cannot start a PostgreSQL server: {why} (or give --pg-url)")
    return server.url("postgres"), server


def main(argv: list[str] | None = None) -> None:
    """Command line: ``--engine``, ``--pg-url``, ``--sizes``, ``--claimers`` and ``--quick``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="both",
                        help="which engine(s) to measure (default both)")
    parser.add_argument("--pg-url", help="a PostgreSQL server to create the benchmark's databases on"
                                         " (default: a throwaway server started here)")
    parser.add_argument("--sizes", default=None,
                        help="comma-separated workspace sizes (default 10000,100000; 10000 with --quick)")
    parser.add_argument("--claimers", default=",".join(map(str, CLAIMERS)),
                        help="comma-separated counts of concurrent claiming processes (default 1,4,16)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, not figures)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("10000" if args.quick else "10000,100000")).split(",")]
    engines = list(ENGINES) if args.engine == "both" else [args.engine]
    claimers = [int(c) for c in args.claimers.split(",")]
    print(f"tracker_scale: engines {engines}, sizes {sizes}, claimers {claimers},"
          f" {'quick' if args.quick else 'full'} run, python {sys.version.split()[0]}, {os.cpu_count()} cpu(s)")
    server = None
    with tempfile.TemporaryDirectory(prefix="mesh-bench-") as tmp:
        workdir = Path(tmp)
        pools = {"sqlite": Databases("sqlite", workdir)}
        try:
            if "postgresql" in engines:
                admin_url, server = start_postgres(args.pg_url)
                pools["postgresql"] = Databases("postgresql", workdir, admin_url)
                print(f"PostgreSQL {pools['postgresql'].server_version()}"
                      f"{' (a throwaway server, fsync off)' if server else ''}")
            dbs: dict[tuple[str, int], str] = {}
            for n in sizes:
                start = time.perf_counter()
                source = workdir / f"ws-{n}.jsonl"
                write_jsonl(generate(n), source)
                print(f"\n(generated {source.name} in {time.perf_counter() - start:.1f} s)")
                for engine in engines:
                    dbs[(engine, n)] = bench_size(n, source, pools[engine], args.quick, claimers)
            process_size = 10_000 if 10_000 in sizes else min(sizes)
            for engine in engines:
                _current.update(engine=engine, size=process_size)
                if MESH.exists():
                    bench_process(dbs[(engine, process_size)], 5 if args.quick else 10)
                else:
                    print(f"\n(skipped the whole-process figure: {MESH} is not installed)")
            print_side_by_side(engines, sizes)
        finally:
            if "postgresql" in pools:
                pools["postgresql"].drop_all()
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
