"""Issue 21's figures on SQLite, each beside its baseline measured in the same run: whole-process
starts against the bare interpreter, import and export against plain sqlite3 code over the same
rows, the plan label's ready work at 100,000 issues against 10,000, and mesh's views.

Every figure is a ratio (or a time with its target), the median over several runs; the machine
is shared, so a baseline is always measured in the same run, interleaved with what it is a
baseline of (A B A B ...), and each ratio is the median of the pairs'.

    .venv/bin/python bench/tracker_speed.py                     # every section
    .venv/bin/python bench/tracker_speed.py --only process --runs 21
    .venv/bin/python bench/tracker_speed.py --only io,ready --root /path/to/another/checkout
    .venv/bin/python bench/tracker_speed.py --only process --installed   # a fresh `pip install .`, as users run it
    .venv/bin/python bench/tracker_speed.py --only io --installed --runs 5   # the import, the command too
    .venv/bin/python bench/tracker_speed.py --only real --installed          # the hot reads on the real exports

``--root`` measures another checkout of mesh (its ``.venv``, its ``tracker``) with this script:
the "before" figures of docs/benchmarks-tracker.md are this script run on the commit before issue 21.
The checkout's modules are byte-compiled first (``compileall``), as an installed package is:
a session with PYTHONDONTWRITEBYTECODE would otherwise compile every module at every start.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gen_workspace import PLAN_LABEL, PLAN_SIZE, generate, write_jsonl  # noqa: E402

SECTIONS = ("process", "io", "ready", "views", "real")


def _median_pairs(a: Callable[[], float], b: Callable[[], float], runs: int) -> tuple[float, float, float]:
    """Medians of ``a`` and ``b`` (each returns its own measure) run alternately ``runs`` times after
    a warm-up of each, and the median of the ratios a/b pair by pair."""
    a(), b()
    pairs = [(a(), b()) for _ in range(runs)]
    return (statistics.median(x for x, _ in pairs), statistics.median(y for _, y in pairs),
            statistics.median(x / y for x, y in pairs))


def _figure(name: str, value: float, unit: str, baseline: float | None = None, ratio: float | None = None,
            target: str = "") -> None:
    shown = f"{value:9.1f} {unit}"
    base = f"  baseline {baseline:9.1f} {unit}  ratio {ratio:5.2f}x" if baseline is not None else ""
    print(f"  {name:<52} {shown}{base}{'  target ' + target if target else ''}")


# ----------------------------------------------------------------------------- whole process

def _process_cpu(cmd: list[str], env: dict, cwd: Path) -> float:
    """CPU seconds (user + sys) of one run of ``cmd``, from the kernel's accounting of the child."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime


def _process_wall(cmd: list[str], env: dict, cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def fresh_install(root: Path, workdir: Path) -> Path:
    """A throwaway virtual environment in ``workdir`` with ``root`` installed as a user installs
    it (``pip install ROOT``, not editable: no finder of the source tree on every import), by a
    current pip; its ``bin`` folder. The pip that ``venv`` brings (23.x) writes console scripts
    that import ``re`` before mesh runs, 40% of ``python -c pass`` again: measured with it, the
    figures would be its and not mesh's."""
    venv = workdir / "fresh-venv"
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([*pip, str(root)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return venv / "bin"


def bench_process(root: Path, workdir: Path, runs: int, bin_dir: Path | None = None) -> None:
    """Whole-process start of the hot commands on a 10,000-issue workspace, against
    ``python -c pass`` of the same interpreter, CPU time and wall time (``bin_dir``: the
    installation measured, by default ``root``'s own ``.venv``)."""
    bin_dir = bin_dir or root / ".venv" / "bin"
    python = str(bin_dir / "python")
    db = _workspace(root, workdir, 10_000)
    show_id = subprocess.run([python, "-c", "import sys, sqlite3; print(sqlite3.connect(sys.argv[1]).execute("
                              "\"SELECT id FROM issues WHERE status = 'open' ORDER BY id LIMIT 1\").fetchone()[0])", db],
                             capture_output=True, text=True, check=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BEADS_", "BD_", "MESH_"))}
    env["MESH_DB"] = db
    bare = [python, "-c", "pass"]
    mesh, bd = str(bin_dir / "mesh"), str(bin_dir / "bd")
    commands = [("mesh tracker ready --json", [mesh, "tracker", "ready", "--json"], "1.5x"),
                ("bd ready --json", [bd, "ready", "--json"], "1.5x"),
                ("mesh tracker show ID --json", [mesh, "tracker", "show", show_id, "--json"], "1.5x"),
                ("bd show ID --json", [bd, "show", show_id, "--json"], "1.5x"),
                ("mesh tracker list --json (50 issues)", [mesh, "tracker", "list", "--json"], "1.5x"),
                ("bd list --json (bd's default: 50 issues)", [bd, "list", "--json"], "1.5x"),
                ("bd list --json --limit 0 (6,949 issues, 4.8 MB)", [bd, "list", "--json",
                                                                     "--limit", "0"], ""),
                ("bd ready --json --label plan-300 --type task", [bd, "ready", "--json", "--label",
                                                                  PLAN_LABEL, "--type", "task"], "1.5x"),
                ("mesh tracker stats --json", [mesh, "tracker", "stats", "--json"], "1.5x"),
                ("bd stats --json", [bd, "stats", "--json"], "1.5x"),
                ("mesh tracker blocked --json (1,987 issues, 1 MB)", [mesh, "tracker", "blocked", "--json"], "1.5x"),
                ("bd blocked --json (1,987 issues, 1 MB)", [bd, "blocked", "--json"], "1.5x"),
                ("mesh --help", [mesh, "--help"], "2x"),
                ("mesh --help, 60 columns (click's own)", [mesh, "--help"], "", {"COLUMNS": "60"})]
    print(f"\n== whole process, 10,000 issues (median of {runs} alternating runs; baseline: python -c pass)")
    env["COLUMNS"] = "120"  # a wide terminal (the benchmark's output is not one)
    for name, cmd, target, *extra in commands:
        its_env = {**env, **(extra[0] if extra else {})}
        for measure, unit in ((_process_cpu, "cpu"), (_process_wall, "wall")):
            a, b, ratio = _median_pairs(lambda: measure(cmd, its_env, workdir), lambda: measure(bare, env, workdir),
                                        runs)
            _figure(f"{name}, {unit}", a * 1000, "ms", b * 1000, ratio,
                    f"<= {target}" if unit == "cpu" and target else "")
    shim, direct = commands[1][1], commands[0][1]  # bd ready, mesh tracker ready
    a, b, ratio = _median_pairs(lambda: _process_cpu(shim, env, workdir), lambda: _process_cpu(direct, env, workdir), runs)
    _figure("bd ready --json against mesh tracker ready --json, cpu", a * 1000, "ms", b * 1000, ratio, "1x")


def bench_real(root: Path, workdir: Path, runs: int, bin_dir: Path | None, real_dir: Path) -> None:
    """The hot reads on each real beads export in ``real_dir`` (``../shared/data/beads-real``): a
    workspace made of each file by the mesh measured, each read's whole process against
    ``python -c pass``, CPU time, the median of pairs. Real files hold what generated ones do not:
    kept fields, long texts, accents, few or many blocked issues."""
    bin_dir = bin_dir or root / ".venv" / "bin"
    python, bd, mesh = str(bin_dir / "python"), str(bin_dir / "bd"), str(bin_dir / "mesh")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BEADS_", "BD_", "MESH_"))}
    bare = [python, "-c", "pass"]
    reads = ("ready", "list", "show ID", "stats", "blocked")
    print(f"\n== hot reads on the real beads exports of {real_dir} (CPU, median of {runs} pairs;"
          " baseline: python -c pass)")
    print(f"  {'export':<20} {'listed':>7} " + " ".join(f"{r:>8}" for r in reads))
    for source in sorted(real_dir.glob("*.jsonl")):
        ws = workdir / f"real-{root.name}-{source.stem}"
        if not ws.exists():
            ws.mkdir(parents=True)
            subprocess.run([mesh, "tracker", "init", "--prefix", "rx"], cwd=ws, env=env, check=True,
                           capture_output=True)
            subprocess.run([mesh, "tracker", "import", str(source)], cwd=ws, env=env, check=True,
                           capture_output=True)
        listed = json.loads(subprocess.run([bd, "list", "--json", "--all", "--limit", "0"], cwd=ws, env=env,
                                           check=True, capture_output=True).stdout)
        ratios = []
        for read in reads:
            cmd = [bd, *read.replace("ID", listed[0]["id"]).split(), "--json"]
            ratios.append(_median_pairs(lambda: _process_cpu(cmd, env, ws), lambda: _process_cpu(bare, env, ws),
                                        runs)[2])
        print(f"  {source.stem:<20} {len(listed):>7} " + " ".join(f"{r:>7.2f}x" for r in ratios))


def _workspace(root: Path, workdir: Path, n: int) -> str:
    """A SQLite tracker of ``n`` generated issues made by ``root``'s mesh; its file."""
    folder = workdir / f"ws-{root.name}-{n}"
    db = folder / ".beads" / "mesh.db"
    if not db.exists():
        source = workdir / f"ws-{n}.jsonl"
        if not source.exists():
            write_jsonl(generate(n), source)
        code = ("import sys; from pathlib import Path; from tracker.store import Tracker; from tracker.jsonl import"
                " import_jsonl; t = Tracker.init(Path(sys.argv[1]), prefix='bm'); import_jsonl(t, sys.argv[2])")
        subprocess.run([str(root / ".venv" / "bin" / "python"), "-c", code, str(folder), str(source)], check=True,
                       cwd=root)
    return str(db)


# ----------------------------------------------------------------------------- import and export

_PLAIN_ISSUE_COLUMNS = ("id", "title", "description", "design", "acceptance_criteria", "notes", "status", "priority",
                        "issue_type", "assignee", "owner", "created_at", "created_by", "updated_at", "closed_at",
                        "close_reason", "defer_until", "external_ref", "metadata")
_PLAIN_SCHEMA = f"""
CREATE TABLE issues (seq INTEGER PRIMARY KEY, {', '.join(c + ' TEXT' for c in _PLAIN_ISSUE_COLUMNS)}, UNIQUE (id));
CREATE TABLE labels (issue_id TEXT NOT NULL, label TEXT NOT NULL, UNIQUE (issue_id, label));
CREATE TABLE dependencies (issue_id TEXT NOT NULL, depends_on_id TEXT NOT NULL, type TEXT NOT NULL,
                           created_at TEXT, created_by TEXT, UNIQUE (issue_id, depends_on_id, type));
CREATE TABLE comments (id INTEGER PRIMARY KEY, issue_id TEXT NOT NULL, author TEXT, text TEXT, created_at TEXT);
"""
_PLAIN_INDEXES = ("CREATE INDEX issues_by_status ON issues(status, priority, id)",
                  "CREATE INDEX labels_by_label ON labels(label, issue_id)",
                  "CREATE INDEX deps_by_target ON dependencies(depends_on_id, type, issue_id)")


def plain_rows(source: Path) -> tuple[list, list, list, list]:
    """Each line of ``source`` parsed into rows of the plain issues, labels, dependencies and
    comments tables (the plain imports' baseline parse: ``_PLAIN_ISSUE_COLUMNS``, metadata as JSON)."""
    issues, labels, deps, comments = [], [], [], []
    with open(source, encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            issue_id = obj["id"]
            row = [obj.get(c) for c in _PLAIN_ISSUE_COLUMNS]
            row[-1] = json.dumps(row[-1]) if row[-1] is not None else None
            issues.append(row)
            labels.extend((issue_id, label) for label in obj.get("labels", ()))
            deps.extend((issue_id, d["depends_on_id"], d["type"], d.get("created_at"), d.get("created_by"))
                        for d in obj.get("dependencies", ()))
            comments.extend((issue_id, c.get("author"), c["text"], c.get("created_at"))
                            for c in obj.get("comments", ()))
    return issues, labels, deps, comments


def plain_import(source: Path, db: Path) -> None:
    """The baseline import: each line parsed, the issues, labels, dependencies and comments
    inserted with four executemany and three indexes built, in one transaction (WAL,
    synchronous=NORMAL, as the tracker runs)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(_PLAIN_SCHEMA)
    issues, labels, deps, comments = plain_rows(source)
    conn.execute("BEGIN")
    conn.executemany(f"INSERT INTO issues({','.join(_PLAIN_ISSUE_COLUMNS)}) VALUES"
                     f" ({','.join('?' * len(_PLAIN_ISSUE_COLUMNS))})", issues)
    conn.executemany("INSERT INTO labels VALUES (?, ?)", labels)
    conn.executemany("INSERT INTO dependencies VALUES (?, ?, ?, ?, ?)", deps)
    conn.executemany("INSERT INTO comments(issue_id, author, text, created_at) VALUES (?, ?, ?, ?)", comments)
    for statement in _PLAIN_INDEXES:
        conn.execute(statement)
    conn.execute("COMMIT")
    conn.close()


def plain_export(db: Path, out: io.StringIO) -> None:
    """The baseline export: every issue with its labels, dependencies and comments, read by
    plain queries and written as one compact JSON line each."""
    conn = sqlite3.connect(db)
    labels: dict[str, list] = {}
    for issue_id, label in conn.execute("SELECT issue_id, label FROM labels ORDER BY rowid"):
        labels.setdefault(issue_id, []).append(label)
    deps: dict[str, list] = {}
    for row in conn.execute("SELECT issue_id, depends_on_id, type, created_at, created_by FROM dependencies"):
        deps.setdefault(row[0], []).append(dict(zip(("issue_id", "depends_on_id", "type", "created_at",
                                                     "created_by"), row)))
    comments: dict[str, list] = {}
    for row in conn.execute("SELECT id, issue_id, author, text, created_at FROM comments ORDER BY id"):
        comments.setdefault(row[1], []).append(dict(zip(("id", "issue_id", "author", "text", "created_at"), row)))
    columns = _PLAIN_ISSUE_COLUMNS
    for row in conn.execute(f"SELECT {','.join(columns)} FROM issues ORDER BY id"):
        obj = {k: v for k, v in zip(columns, row) if v is not None}
        issue_id = obj["id"]
        for key, found in (("labels", labels), ("dependencies", deps), ("comments", comments)):
            if issue_id in found:
                obj[key] = found[issue_id]
        out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
        out.write("\n")
    conn.close()


def bench_io(root: Path, workdir: Path, n: int, runs: int, bin_dir: Path | None = None) -> None:
    """Import and export of ``n`` issues by ``root``'s tracker against the plain sqlite3 code,
    each measured in its own fresh process, alternately (``bin_dir``: the installation measured,
    by default ``root``'s own ``.venv``; with one, also ``mesh tracker import`` as a whole process
    against the plain import's whole process)."""
    source = workdir / f"ws-{n}.jsonl"
    if not source.exists():
        write_jsonl(generate(n), source)
    python = str((bin_dir or root / ".venv" / "bin") / "python")
    # An installation's code, not the checkout's: a ``python -c`` run in ``root`` would import it.
    cwd = workdir if bin_dir else root

    def fresh(target: Path) -> str:
        subprocess.run(["rm", "-rf", str(target), f"{target}-wal", f"{target}-shm"], check=True)
        return str(target)

    def timed(code: str, *args: str) -> float:
        done = subprocess.run([python, "-c", code, *args], cwd=cwd, check=True, capture_output=True, text=True)
        return float(done.stdout.split()[-1])

    ours_import = ("import sys, time; from pathlib import Path; from tracker.store import Tracker;"
                   " from tracker.jsonl import import_jsonl; t = Tracker.init(Path(sys.argv[1]), prefix='bm');"
                   " s = time.perf_counter(); r = import_jsonl(t, sys.argv[2]); e = time.perf_counter();"
                   " assert r.created == int(sys.argv[3]) and not r.warnings; t.close(); print(e - s)")
    plain = (f"import sys, time; sys.path.insert(0, {str(HERE)!r}); from pathlib import Path;"
             " from tracker_speed import plain_import; s = time.perf_counter();"
             " plain_import(Path(sys.argv[2]), Path(sys.argv[1])); print(time.perf_counter() - s)")
    print(f"\n== import and export, {n:,} issues (median of {runs} alternating runs, each in a fresh process)")
    a, b, ratio = _median_pairs(
        lambda: timed(ours_import, fresh(workdir / "imp-0"), str(source), str(n)),
        lambda: timed(plain, fresh(workdir / "plain-0.db"), str(source)), runs)
    _figure("import (tracker.jsonl.import_jsonl)", a, "s", b, ratio, "<= 2x")
    ours_db, plain_db = workdir / "imp-0", workdir / "plain-0.db"  # what the last pair wrote
    ours_export = ("import io, sys, time; from tracker.store import Tracker; from tracker.jsonl import export_jsonl;"
                   " t = Tracker(sys.argv[1]); out = io.StringIO(); s = time.perf_counter(); export_jsonl(t, out);"
                   " print(time.perf_counter() - s)")
    plain_exp = (f"import io, sys, time; sys.path.insert(0, {str(HERE)!r}); from pathlib import Path;"
                 " from tracker_speed import plain_export; out = io.StringIO(); s = time.perf_counter();"
                 " plain_export(Path(sys.argv[1]), out); print(time.perf_counter() - s)")
    a, b, ratio = _median_pairs(lambda: timed(ours_export, str(ours_db / ".beads" / "mesh.db")),
                                lambda: timed(plain_exp, str(plain_db)), runs)
    _figure("export (tracker.jsonl.export_jsonl, to memory)", a, "s", b, ratio, "<= 2x")
    if bin_dir is not None:
        bench_import_command(bin_dir, workdir, source, runs)


def bench_import_command(bin_dir: Path, workdir: Path, source: Path, runs: int) -> None:
    """``mesh tracker import FILE`` into a new workspace as a user runs it (a process of the
    installation in ``bin_dir``, from its start to its exit) against a process of the same
    interpreter running ``plain_import`` on the same file; CPU time and wall time."""
    python, env = str(bin_dir / "python"), {k: v for k, v in os.environ.items()
                                            if not k.startswith(("BEADS_", "BD_", "MESH_"))}
    folder, plain_db = workdir / "cmd-import", workdir / "cmd-plain.db"
    plain = [python, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); from pathlib import Path;"
             " from tracker_speed import plain_import; plain_import(Path(sys.argv[1]), Path(sys.argv[2]))",
             str(source), str(plain_db)]
    ours = [str(bin_dir / "mesh"), "tracker", "import", str(source)]

    def fresh_workspace() -> None:
        subprocess.run(["rm", "-rf", str(folder)], check=True)
        folder.mkdir()
        subprocess.run([str(bin_dir / "mesh"), "tracker", "init", "--prefix", "bm"], cwd=folder, env=env, check=True,
                       stdout=subprocess.DEVNULL)

    def fresh_plain() -> None:
        subprocess.run(["rm", "-f", str(plain_db), f"{plain_db}-wal", f"{plain_db}-shm"], check=True)

    print(f"\n== mesh tracker import of {source.name}, whole process (median of {runs} alternating runs;"
          " baseline: plain_import in a process of the same interpreter)")
    for measure, unit in ((_process_cpu, "cpu"), (_process_wall, "wall")):
        def a() -> float:
            fresh_workspace()
            return measure(ours, env, folder)

        def b() -> float:
            fresh_plain()
            return measure(plain, env, workdir)

        x, y, ratio = _median_pairs(a, b, runs)
        _figure(f"mesh tracker import, {unit}", x, "s", y, ratio, "<= 2x")


# ----------------------------------------------------------------------------- ready at scale

_READY_CODE = """
import gc, statistics, sys, time
from tracker.store import Tracker
t = Tracker(sys.argv[1]); label = sys.argv[2]; reps = int(sys.argv[3])
found = len(t.ready(labels=[label], issue_type="task"))
gc.collect()
times = []
for _ in range(reps):
    s = time.perf_counter(); t.ready(labels=[label], issue_type="task"); times.append(time.perf_counter() - s)
print(found, statistics.median(times))
"""


def bench_ready(root: Path, workdir: Path, runs: int) -> None:
    """A 300-issue plan's ready work (``ready(labels=[plan], issue_type="task")``, issue objects
    built) at 100,000 issues against the same call at 10,000: each the median of 50 calls in
    a process of its own, the two processes alternated ``runs`` times."""
    python = str(root / ".venv" / "bin" / "python")
    small, large = _workspace(root, workdir, 10_000), _workspace(root, workdir, 100_000)
    found: dict[str, str] = {}

    def call(db: str) -> float:
        out = subprocess.run([python, "-c", _READY_CODE, db, PLAN_LABEL, "50"], cwd=root, check=True,
                             capture_output=True, text=True).stdout.split()
        found[db] = out[0]
        return float(out[1])

    print(f"\n== ready --label {PLAN_LABEL} --type task ({PLAN_SIZE} issues in the plan), library call"
          f" (median of {runs} alternating processes)")
    a, b, ratio = _median_pairs(lambda: call(large), lambda: call(small), runs)
    _figure(f"at 100,000 issues ({found[large]} found; baseline 10,000, {found[small]} found)", a * 1000, "ms",
            b * 1000, ratio, "<= 3 ms and <= 2x")


def main(argv: list[str] | None = None) -> None:
    """Command line: ``--only``, ``--runs``, ``--root``, ``--io-size``, ``--workdir``, ``--real-dir``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"sections, comma-separated ({', '.join(SECTIONS)})")
    parser.add_argument("--runs", type=int, default=0, help="alternating runs per figure (default: 21 for process"
                                                           " starts, 5 for the rest)")
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the checkout of mesh to measure")
    parser.add_argument("--io-size", type=int, default=100_000, help="issues imported and exported (100,000)")
    parser.add_argument("--workdir", type=Path, help="keep the generated workspaces here (default: a temporary folder)")
    parser.add_argument("--real-dir", type=Path, default=HERE.parent.parent / "shared" / "data" / "beads-real",
                        help="the real beads exports the real section reads (../shared/data/beads-real)")
    parser.add_argument("--installed", action="store_true",
                        help="measure the whole-process, import and export figures on a fresh non-editable"
                             " install of --root (pip install into a throwaway virtual environment), as users run"
                             " mesh; with it, io also times the whole mesh tracker import command")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    python = root / ".venv" / "bin" / "python"
    subprocess.run([str(python), "-m", "compileall", "-q", "tracker", "orchestrator", "roles", "redact"], cwd=root,
                   check=True, stdout=subprocess.DEVNULL)
    version = subprocess.run([str(python), "-c", "import sys, sqlite3; print(sys.version.split()[0], sqlite3.sqlite_version)"],
                             capture_output=True, text=True, check=True).stdout.split()
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"tracker_speed: {root} at {commit}, python {version[0]}, SQLite {version[1]}, {os.cpu_count()} cpu(s),"
          f" load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="mesh-speed-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        bin_dir = None
        if "process" in sections:
            bin_dir = fresh_install(root, workdir) if args.installed else None
            print(f"(commands of {bin_dir or root / '.venv' / 'bin'})")
            bench_process(root, workdir, args.runs or 21, bin_dir)
        if "io" in sections:
            bin_dir = (bin_dir or fresh_install(root, workdir)) if args.installed else None
            bench_io(root, workdir, args.io_size, args.runs or 5, bin_dir)
        if "ready" in sections:
            bench_ready(root, workdir, args.runs or 5)
        if "real" in sections:
            bin_dir = (bin_dir or fresh_install(root, workdir)) if args.installed else None
            bench_real(root, workdir, args.runs or 15, bin_dir, args.real_dir)
        if "views" in sections:
            from views_speed import bench_views

            bench_views(root, workdir, args.runs or 5)
    print(f"(load {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
