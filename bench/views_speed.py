"""The views' figures of issue 21: ``mesh show`` and ``mesh status`` of an epic of 1,000 tasks
with 20 checkpoints each (whole process, beside ``python -c pass``), and ``mesh logs -q`` over
100,000 logged calls (whole process beside ``python -c pass``; and ``list_calls`` with a search,
the library call, beside the same FTS5 query in plain sqlite3). Run by ``tracker_speed.py --only views``.

The workspace is deterministic: the 10,000 generated issues of ``gen_workspace``, then an epic
``bm-epic`` of 1,000 tasks, each with one run of 20 checkpoints written with
``format_checkpoint`` (preflight, hydration, proposal, three critiques, synthesis, five votes,
proof, review, a review cycle, a revision plan and revision, run head, land, outcome); a third of the tasks closed
and landed on ``mesh/land/bm-epic``, a tenth with a ``mesh/<task>`` branch in the git
repository beside it. The calls table holds 100,000 calls of 200-word prompts and 80-word
responses drawn from a 5,000-word vocabulary (Zipf-like), and two searches are timed: a word
in about 1 call in 1,000, and two words in about 1 call in 5.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import subprocess
from pathlib import Path

TASKS = 1_000
CALLS = 100_000
EPIC = "bm-epic"
_STEPS = (["preflight", "hydration", "proposal"] + ["critique"] * 3 + ["synthesis"] + ["vote"] * 5
          + ["proof", "review", "review-cycle", "revision-plan", "revision", "run-head", "land", "outcome"])

_BUILD = """
import json, sys
from pathlib import Path
from tracker.store import Tracker
from orchestrator.protocol.checkpoint import format_checkpoint
from orchestrator.ledger.calls import ensure_calls_table
db, tasks, steps, epic = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
t = Tracker(db, actor="bench")
with t.transaction() as c:
    t.create("An epic of many tasks", issue_type="epic", issue_id=epic)
    ids = [t.create(f"Task {k} of the epic", parent=epic, labels=["plan-views"])["id"] for k in range(tasks)]
    rows = []
    for k, task in enumerate(ids):
        run = f"run-{k:04d}"
        for seq, kind in enumerate(steps, start=1):
            artifact = {"plan": [f"step {j} of task {k}" for j in range(4)], "must_fix": ["one thing"],
                        "decision_log": [{"decision": "accept", "point": "the plan", "reason": "sound"}],
                        "results": [{"command": "pytest -q", "passed": True, "exit_code": 0}],
                        "findings": [], "summary": "fine", "vote": "approve"}
            if kind == "land":
                artifact = {"result": "landed" if k % 3 == 0 else "failed", "branch": f"mesh/land/{epic}",
                            "sha": f"{k:040x}", "onto": f"{k:040x}", "method": "fast-forward"}
            if kind == "run-head":
                artifact = {"outcome": "closed" if k % 3 == 0 else "blocked", "commit": f"{k:040x}", "attempt": 1}
            payload = {"v": 1, "kind": kind, "task_id": task, "run_id": run, "seq": seq, "role": "synthesizer",
                       "consensus_cycle": 1, "review_cycle": 0, "artifact": artifact}
            rows.append((task, "mesh", format_checkpoint(kind, f"{kind} of {task}", payload),
                         f"2026-01-01T00:{seq:02d}:00.000000Z", f"orch:{run}:{seq}"))
    c.executemany("INSERT INTO comments(issue_id, author, text, created_at, dedupe_key) VALUES (?,?,?,?,?)", rows)
    for k, task in enumerate(ids):
        if k % 3 == 0:
            c.execute("UPDATE issues SET status = 'closed', close_reason = 'done' WHERE id = ?", (task,))
        elif k % 7 == 1:
            t.add_dependency(task, ids[k - 1], "blocks")
print(json.dumps(ids[:: max(tasks // 100, 1)]))
"""


def _words(rng: random.Random, vocabulary: list[str], weights: list[float], count: int) -> str:
    return " ".join(rng.choices(vocabulary, weights, k=count))


def build(root: Path, workdir: Path, db: str) -> dict:
    """The epic, its checkpoints, the calls and the git repository, once per workdir; what the
    figures need (a task id, the repository, the search words)."""
    done = workdir / f"views-{root.name}.json"
    if done.exists():
        return json.loads(done.read_text())
    python = str(root / ".venv" / "bin" / "python")
    ids = json.loads(subprocess.run([python, "-c", _BUILD, db, str(TASKS), json.dumps(_STEPS), EPIC], cwd=root,
                                    check=True, capture_output=True, text=True).stdout)
    repo = workdir / f"repo-{root.name}"
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "start"], check=True)
    for task in ids[::10]:
        subprocess.run([*git, "branch", f"mesh/{task}"], check=True)
    rng = random.Random(11)
    vocabulary = [f"w{k}" for k in range(5_000)]
    weights = [1 / (k + 1) for k in range(5_000)]
    conn = sqlite3.connect(db)
    subprocess.run([python, "-c", "import sys; from tracker.store import Tracker; from orchestrator.ledger.calls import"
                    " ensure_calls_table; ensure_calls_table(Tracker(sys.argv[1]))", db], cwd=root, check=True)
    rows = [(f"run-{k // 20:05d}", f"bm-task{k // 20 % TASKS}", "critic_a", "critique", 1, "replay", "model-x",
             _words(rng, vocabulary, weights, 200) + (" needleword" if k % 1000 == 7 else ""),
             _words(rng, vocabulary, weights, 80), json.dumps({"input_tokens": 900, "output_tokens": 200}), 1.5, None,
             f"2026-01-01T00:00:{k % 60:02d}.000000Z") for k in range(CALLS)]
    with conn:
        conn.executemany("INSERT INTO mesh_calls(run_id, task_id, role, round, attempt, backend, model, prompt,"
                         " response, usage, duration_s, error, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.close()
    facts = {"task": ids[len(ids) // 2], "repo": str(repo), "rare": "needleword", "common": "w40 w41"}
    done.write_text(json.dumps(facts))
    return facts


_SEARCH = """
import sqlite3, statistics, sys, time
from tracker.store import Tracker
from orchestrator.ledger.logs import list_calls
db, query, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = Tracker(db)
found = len(list_calls(t, query=query))
times = []
for _ in range(reps):
    s = time.perf_counter(); list_calls(t, query=query); times.append(time.perf_counter() - s)
conn = sqlite3.connect(db)
match = " ".join('"' + w + '"' for w in query.split())
plain = []
for _ in range(reps):
    s = time.perf_counter()
    conn.execute("SELECT c.* FROM mesh_calls_fts JOIN mesh_calls c ON c.id = mesh_calls_fts.rowid"
                 " WHERE mesh_calls_fts MATCH ? ORDER BY mesh_calls_fts.rowid DESC LIMIT 20", (match,)).fetchall()
    plain.append(time.perf_counter() - s)
print(found, statistics.median(times), statistics.median(plain))
"""


def bench_views(root: Path, workdir: Path, runs: int) -> None:
    """The three views' figures (see the module doc)."""
    from tracker_speed import _figure, _median_pairs, _process_cpu, _process_wall

    db = _views_db(root, workdir)
    facts = build(root, workdir, db)
    bin_dir = root / ".venv" / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BEADS_", "BD_", "MESH_"))}
    env["MESH_DB"] = db
    bare = [str(bin_dir / "python"), "-c", "pass"]
    print(f"\n== views: an epic of {TASKS:,} tasks with {len(_STEPS)} checkpoints each, in 10,000 issues"
          f" (median of {runs} alternating runs; baseline python -c pass)")
    for name, cmd in (("mesh show TASK", [str(bin_dir / "mesh"), "show", facts["task"]]),
                      ("mesh status --parent EPIC", [str(bin_dir / "mesh"), "status", "--parent", EPIC,
                                                     "--repo", facts["repo"]])):
        for measure, unit in ((_process_wall, "wall"), (_process_cpu, "cpu")):
            a, b, ratio = _median_pairs(lambda: measure(cmd, env, Path(facts["repo"])),
                                        lambda: measure(bare, env, Path(facts["repo"])), runs)
            _figure(f"{name}, whole process, {unit}", a * 1000, "ms", b * 1000, ratio, "<= 200 ms")
    print(f"\n== mesh logs -q over {CALLS:,} logged calls, whole process (median of {runs} alternating runs;"
          " baseline python -c pass)")
    for label, query in (("rare word", facts["rare"]), ("two common words", facts["common"])):
        cmd = [str(bin_dir / "mesh"), "logs", "-q", query]
        for measure, unit in ((_process_wall, "wall"), (_process_cpu, "cpu")):
            a, b, ratio = _median_pairs(lambda: measure(cmd, env, Path(facts["repo"])),
                                        lambda: measure(bare, env, Path(facts["repo"])), runs)
            _figure(f"mesh logs -q ({label}), whole process, {unit}", a * 1000, "ms", b * 1000, ratio, "<= 50 ms")
    print(f"\n== mesh logs -q over {CALLS:,} logged calls: list_calls(query=...), library call, median of 30"
          " (baseline: the FTS5 query alone, plain sqlite3)")
    for label, query in (("rare word", facts["rare"]), ("two common words", facts["common"])):
        samples = []
        for _ in range(runs):
            out = subprocess.run([str(bin_dir / "python"), "-c", _SEARCH, db, query, "30"], cwd=root, check=True,
                                 capture_output=True, text=True).stdout.split()
            samples.append((int(out[0]), float(out[1]), float(out[2])))
        ours = statistics.median(s[1] for s in samples)
        plain = statistics.median(s[2] for s in samples)
        _figure(f"search, {label} ({samples[0][0]} shown)", ours * 1000, "ms", plain * 1000, ours / plain, "<= 50 ms")


def _views_db(root: Path, workdir: Path) -> str:
    """A copy of the 10,000-issue workspace of ``root`` for the views (the others stay as they are)."""
    from tracker_speed import _workspace

    source = Path(_workspace(root, workdir, 10_000))
    folder = workdir / f"views-{root.name}" / ".beads"
    target = folder / "mesh.db"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
    return str(target)
