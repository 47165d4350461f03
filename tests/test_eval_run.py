"""``mesh eval run`` and ``mesh eval report`` end to end: a library with a dozen commits of history,
its suite, and the four profiles run as real ``mesh run`` processes with a scripted command worker
(real bwrap, real git, real validation sandbox) that solves the cases a table names. The counts,
the Wilson intervals and McNemar's paired test are checked against values computed by hand; the
hidden tests are searched for by a worker that looks everywhere it can; an eval killed with
SIGKILL in the middle continues without running a finished case again or paying a call twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.evals.suite import read_suite
from tests.evalkit import HIDDEN_MARK, MESH, git, make_library, mesh, write_worker

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("evals")
    repo = make_library(root)
    built = mesh("eval", "suite", "--from-git", "--runs", "1", "--command", "python3 -m unittest {tests}",
                 "-o", str(root / "suite.jsonl"), cwd=repo)
    assert built.returncode == 0, built.stderr
    return root, repo, read_suite(root / "suite.jsonl")


def test_the_suite_keeps_nine_of_the_twelve_commits(library):
    _, _, cases = library
    assert [c.title for c in cases] == ["Add double", "Add square", "Add negate", "Add halve", "Add clamp",
                                        "Add mean", "Add cube", "Add sign", "Fix mean of an empty list"]


def test_four_profiles_are_counted_and_compared_as_computed_by_hand(library, tmp_path):
    root, repo, cases = library
    ids = [c.id for c in cases]
    solve = {"full": ids[:7], "lite": ids[:5], "single": ids[:4] + [ids[7]], "candidates": ids}
    command = write_worker(tmp_path, repo, cases, solve)
    branches = git(repo, "branch", "--list")
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(root / "suite.jsonl"), "--profile", "full", "--profile", "lite", "--profile",
                "single", "--profile", "candidates", "--jobs", "2", "--worker-cmd", command, "--out", str(out),
                "--yes", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "36 run(s) to make (0 done)" in done.stderr
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    rows = {row["arm"]: row for row in report["arms"]}
    assert {p: (r["resolved"], r["finished"]) for p, r in rows.items()} == {
        "full": (7, 9), "lite": (5, 9), "single": (5, 9), "candidates": (9, 9)}
    # Wilson 95%: 7/9 -> 0.4526..0.9368, 5/9 -> 0.2667..0.8112, 9/9 -> 0.7009..1.
    assert rows["full"]["ci"] == [0.4526, 0.9368]
    assert rows["lite"]["ci"] == rows["single"]["ci"] == [0.2667, 0.8112]
    assert rows["candidates"]["ci"] == [0.7009, 1.0]
    # McNemar exact, two-sided, against full: lite 0 vs 2 -> 2 * (1/2)^2 = 0.5; single 1 vs 3 ->
    # 2 * (1 + 4) / 16 = 0.625; candidates 2 vs 0 -> 0.5.
    assert rows["full"]["paired"] is None
    assert {p: (rows[p]["paired"]["only_this"], rows[p]["paired"]["only_reference"], rows[p]["paired"]["p_value"])
            for p in ("lite", "single", "candidates")} == {"lite": (0, 2, 0.5), "single": (1, 3, 0.625),
                                                           "candidates": (2, 0, 0.5)}
    assert all(r["resolved_closed"] == r["resolved"] for r in rows.values())  # every resolved run closed
    # Calls per case: the scripted worker is asked hydration, then each profile's rounds once.
    assert rows["lite"]["per_case"]["calls"] == 5.0 and rows["single"]["per_case"]["calls"] == 3.0
    assert rows["full"]["per_case"]["calls"] == 12.0
    assert all(rows[p]["per_case"]["review_cycles"] == 1.0 for p in rows)
    cells = {(c["case"], c["arm"]): c for c in report["cells"]}
    assert cells[(ids[5], "lite")]["state"] == "unresolved" and "committed no change" in cells[(ids[5], "lite")][
        "detail"]
    for cell in cells.values():  # every cell links to its run's report page, written beside the eval
        assert (out / cell["report"]).is_file()
    assert (out / "report.html").is_file()
    # The text report says the same.
    text = mesh("eval", "report", str(out), cwd=repo).stdout
    assert "full" in text and "7/9" in text and "1 vs 3, p=0.625" in text
    # Against another reference: a page of its own, the eval's page left as it was.
    before = (out / "report.html").read_bytes()
    other = mesh("eval", "report", str(out), "--reference", "lite", cwd=repo)
    assert other.returncode == 0 and "report-vs-lite.html" in other.stdout, other.stderr
    assert (out / "report.html").read_bytes() == before and (out / "report-vs-lite.html").is_file()
    # Each run worked in a repository of its own holding only its base: no later commit is there.
    for case in cases:
        repo_of = out / "repos" / case.id / "lite"
        assert subprocess.run(["git", "-C", str(repo_of), "cat-file", "-e", case.reference],
                              capture_output=True).returncode != 0
    # The user's repository was not touched: the same branches, a clean tree.
    assert git(repo, "branch", "--list") == branches
    assert git(repo, "status", "--porcelain") == ""


def test_a_resolved_run_that_ended_blocked_is_counted_apart(library, tmp_path):
    """A run whose tree passes the hidden tests but whose reviewer never approved is resolved (the
    issue's definition) and ends blocked: the report says how many resolved runs also closed."""
    root, repo, cases = library
    suite = tmp_path / "two.jsonl"
    suite.write_text("".join(c.model_dump_json(exclude_defaults=True) + "\n" for c in cases[:2]))
    command = write_worker(tmp_path, repo, cases[:2], {"lite": [c.id for c in cases[:2]]},
                           reject={"lite": [cases[1].id]})
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(suite), "--profile", "lite", "--worker-cmd", command, "--out", str(out), "--yes",
                cwd=repo)
    assert done.returncode == 0, done.stderr
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    [row] = report["arms"]
    assert (row["resolved"], row["resolved_closed"], row["finished"]) == (2, 1, 2)
    cells = {c["case"]: c for c in report["cells"]}
    assert cells[cases[1].id]["outcome"] == "blocked" and "ended blocked" in cells[cases[1].id]["detail"]
    text = mesh("eval", "report", str(out), cwd=repo).stdout
    assert "res+cl: resolved runs that also ended closed" in text
    # The closed column agrees with the runs' own lines: one of the two ended closed.
    assert report["arms"][0]["closed"] == 1 and " 1/2 " in text.split("\n", 4)[-1]
    assert "2 of 2 finished, 1 of them closed" in (out / "report.html").read_text()
    # --redo: that one pair runs anew (its result, repository and task new), the other is kept.
    kept = json.loads((out / "results" / cases[0].id / "lite.json").read_text())
    old = json.loads((out / "results" / cases[1].id / "lite.json").read_text())
    again = mesh("eval", "run", str(suite), "--profile", "lite", "--worker-cmd", command, "--out", str(out), "--yes",
                 "--redo", f"{cases[1].id}:lite", cwd=repo)
    assert again.returncode == 0 and "1 run(s) to make (1 done)" in again.stderr, again.stderr
    assert json.loads((out / "results" / cases[0].id / "lite.json").read_text()) == kept
    new = json.loads((out / "results" / cases[1].id / "lite.json").read_text())
    assert new["task"] != old["task"] and new["outcome"] == "blocked"
    wrong = mesh("eval", "run", str(suite), "--profile", "lite", "--worker-cmd", command, "--out", str(out), "--yes",
                 "--redo", f"{cases[1].id}:full", cwd=repo)
    assert wrong.returncode == 2 and "no arm 'full'" in wrong.stderr


def test_a_worker_that_searches_everything_finds_no_hidden_test(library, tmp_path):
    """The hidden tests are in the user's repository (later commits), in the suite (a hand-written
    case's inline file, the suite kept inside the repository) and, after grading, in the case's
    repository: a worker that reads its prompt, its environment and every file it can see finds
    them nowhere, nor the reference commit's id (whole, 12 or 7 characters): the case is sealed
    (its id, its repository's path and .git, ``MESH_EVAL_CASE``, its task name no reference)."""
    root, repo, cases = library
    suite = repo / "evals" / "leak.jsonl"
    suite.parent.mkdir(exist_ok=True)
    hand = {"id": "hand-double", "base": cases[0].base, "title": "Add double", "task": "Add double(x) to mathlib",
            "hidden_files": {"tests/test_hand.py": f"# {HIDDEN_MARK}\nimport unittest\nimport mathlib\n\n\n"
                                                  "class T(unittest.TestCase):\n    def test_it(self):\n"
                                                  "        self.assertEqual(mathlib.double(2), 4)\n"},
            "hidden_command": "python3 -m unittest tests/test_hand.py"}
    suite.write_text(cases[0].model_dump_json(exclude_defaults=True) + "\n" + json.dumps(hand) + "\n")
    reference = cases[0].reference
    marks = [HIDDEN_MARK, reference, reference[:12], reference[:7]]
    assert cases[0].id == "case-001"
    # The files are searched in each run's first and last rounds: the ones between see the same.
    command = write_worker(tmp_path, repo, [cases[0]], {"lite": [cases[0].id]}, search=marks,
                           search_rounds=["hydration", "review"])
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(suite), "--profile", "lite", "--worker-cmd", command, "--out", str(out), "--yes",
                cwd=repo)
    assert done.returncode == 0, done.stderr
    from orchestrator.ledger.calls import calls_for
    from tracker.store import Tracker

    with Tracker(out / "tracker.db") as tracker:
        calls = calls_for(tracker)
        texts = [c["text"] for issue in tracker.list(include_closed=True) for c in tracker.comments(issue["id"])]
    failed = [(call["round"], call["role"], call["error"]) for call in calls if not call["response"]]
    assert len(calls) == 10 and not failed, failed
    for call in calls:
        assert not any(mark in call["prompt"] for mark in marks)
        assert '"seen: nothing"' in call["response"] or "seen: nothing" in call["response"], call["response"]
    assert not any(mark in text for text in texts for mark in marks)
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    # The worker still did the work and was graded: it solves the case from history, not the hand-written one.
    states = {cell["case"]: cell["state"] for cell in report["cells"]}
    assert states == {cases[0].id: "resolved", "hand-double": "unresolved"}


def test_a_killed_eval_continues_without_running_a_case_twice(library, tmp_path):
    root, repo, cases = library
    command = write_worker(tmp_path, repo, cases, {"lite": [c.id for c in cases]})
    out = tmp_path / "ev"
    args = [*MESH, "eval", "run", str(root / "suite.jsonl"), "--profile", "lite", "--worker-cmd", command,
            "--out", str(out), "--yes"]
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    proc = subprocess.Popen(args, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results"
    _third_run_under_way(proc, out)  # killed then: two results written, the third task started
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    first = {p: p.read_text() for p in results.glob("*/*.json")}
    _no_run_alive(out, "a run of the killed eval kept running")
    again = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"{9 - len(first)} run(s) to make ({len(first)} done)" in again.stderr
    assert all(path.read_text() == text for path, text in first.items())  # finished cases not run again
    from orchestrator.ledger.calls import calls_for
    from orchestrator.protocol.checkpoint import load_checkpoints
    from tracker.store import Tracker

    with Tracker(out / "tracker.db") as tracker:
        for issue in tracker.list(include_closed=True):
            if issue["issue_type"] != "task":
                continue
            runs = {cp.run_id for cp in load_checkpoints(tracker, issue["id"])}
            assert len(runs) == 1, (issue["id"], runs)  # the killed run was continued, not started again
            made = [(c["role"], c["round"], c["attempt"]) for c in calls_for(tracker, task_id=issue["id"])]
            assert len(made) == len(set(made)) == 5, made  # no call paid twice
    assert len(list(results.glob("*/*.json"))) == 9
    # The run the kill cut counts its time before the kill too: a wall line per attempt, summed.
    for path in results.glob("*/*.json"):
        attempts = [float(x) for x in path.with_suffix(".wall").read_text().split()]
        assert json.loads(path.read_text())["wall_s"] == round(sum(attempts), 3)
        assert len(attempts) in (1, 2) and all(x >= 0 for x in attempts)


def test_ctrl_c_stops_the_eval_and_its_runs_and_starts_no_other(library, tmp_path):
    """SIGINT (a terminal's Ctrl-C): the run under way stops after a checkpoint, no queued pair
    starts, the eval exits 130; run again, it continues to the end."""
    root, repo, cases = library
    cases = cases[:5]
    suite = tmp_path / "five.jsonl"
    suite.write_text("".join(c.model_dump_json(exclude_defaults=True) + "\n" for c in cases))
    command = write_worker(tmp_path, repo, cases, {"single": [c.id for c in cases]})
    out = tmp_path / "ev"
    args = [*MESH, "eval", "run", str(suite), "--profile", "single", "--worker-cmd", command,
            "--out", str(out), "--yes"]
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    proc = subprocess.Popen(args, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    results = out / "results"
    _third_run_under_way(proc, out)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "stopped: mesh eval run continues where it stopped" in err
    finished = len(list(results.glob("*/*.json")))
    assert finished <= 3  # the two before, and at most the one under way: nothing queued started
    _no_run_alive(out, "a run of the stopped eval kept running")
    again = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"{5 - finished} run(s) to make ({finished} done)" in again.stderr
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    assert [(r["resolved"], r["finished"]) for r in report["arms"]] == [(5, 5)]


def _third_run_under_way(proc: subprocess.Popen, out: Path) -> None:
    """Wait until the eval has two results written and its third task started."""
    deadline = time.monotonic() + 300
    while not (len(list((out / "results").glob("*/*.json"))) >= 2 and _started(out, 3)):
        assert proc.poll() is None and time.monotonic() < deadline, "the eval ended before its third run"
        time.sleep(0.05)


def _started(out: Path, n: int) -> bool:
    """True once ``n`` tasks of the eval have a checkpoint."""
    db = out / "tracker.db"
    if not db.exists():
        return False
    import sqlite3

    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            rows = con.execute("SELECT COUNT(DISTINCT issue_id) FROM comments WHERE text LIKE '[orch:%'").fetchone()
    except sqlite3.Error:
        return False
    return rows[0] >= n


def _no_run_alive(out: Path, what: str) -> None:
    """Wait until no run of the eval is left (a killed eval's runs die with it, PR_SET_PDEATHSIG,
    as the kernel gets to them); one alive a minute later kept running."""
    deadline = time.monotonic() + 60
    while _runs_alive(out):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _runs_alive(out: Path) -> bool:
    """A process whose command line names the eval's tracker (a mesh run it started)."""
    needle = str(out / "tracker.db").encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                pass
    return False


def _priced_library(tmp_path: Path) -> tuple[Path, Path, dict]:
    """The library configured for the Messages API with a priced model, a suite of its two oldest
    cases, and a script a lite run follows (no patch: each run ends quickly)."""
    from tests.runkit import critique, proposal, r, review, synthesis

    repo = make_library(tmp_path)
    (repo / "mesh.toml").write_text((repo / "mesh.toml").read_text().replace(
        "worker_env", 'backend = "anthropic"\nworker_env') + """
[models]
proposer = "claude-eval"
synthesizer = "claude-eval"
reviewer = "claude-eval"
skeptic = "claude-eval"

[prices]
as_of = "2026-11-01"

[prices.models.claude-eval]
input = 3.0
output = 15.0

[anthropic]
max_retries = 0
timeout_s = 10
max_tool_turns = 0
# Used with --batch only: a short window and quick looks at the fake's batches.
batch_window_s = 0.2
batch_poll_s = 0.05
""")
    git(repo, "commit", "-qam", "Use the Messages API")
    suite = tmp_path / "suite.jsonl"
    assert mesh("eval", "suite", "--from-git", "--runs", "1", "--limit", "2", "--command", "python3 -m unittest {tests}",
                "-o", str(suite), cwd=repo).returncode == 0
    hydration = {"acceptance": "it works", "design": "", "notes": ""}
    one = {"proposer": [r("hydration", hydration), r("proposal", proposal())], "skeptic": [r("critique", critique())],
           "synthesizer": [r("synthesis", synthesis("NO_DIFF: not this time"))], "reviewer": [r("review", review())]}
    return repo, suite, one


def _api_env(fake, key: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}, "ANTHROPIC_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": key}


def test_the_estimate_comes_first_and_a_budget_stops_new_runs(tmp_path):
    """Over the fake Messages API (priced models): before anything runs, the estimate from the
    price table; a budget the first run crosses keeps the second from starting; the next
    estimate is the cost the profile measured."""
    from tests.fake_anthropic import FakeAnthropic, RoleScript

    repo, suite, one = _priced_library(tmp_path)
    out = tmp_path / "ev"
    with FakeAnthropic(RoleScript(one)) as fake:
        env = _api_env(fake, "k-eval-budget")
        args = [*MESH, "eval", "run", str(suite), "--profile", "lite", "--out", str(out), "--max-usd", "0.000001",
                "--yes"]
        first = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        again = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "2 run(s) to make (0 done)" in first.stderr and "lite $0." in first.stderr and "price table" in first.stderr
    assert "no new run starts" in first.stderr and "1 not started (budget)" in first.stdout
    assert len(list((out / "results").glob("*/*.json"))) == 1
    # The second look: what lite measured per run, and still the budget.
    assert "1 run(s) to make (1 done)" in again.stderr and "measured" in again.stderr
    assert "0 run(s) graded" in again.stdout


def test_the_batch_flag_of_an_eval_reaches_every_run(tmp_path):
    """``mesh eval run --batch``: each run's calls go as Message Batches, priced at half."""
    from tests.fake_anthropic import FakeAnthropic, RoleScript

    repo, suite, one = _priced_library(tmp_path)
    out = tmp_path / "ev"
    with FakeAnthropic(RoleScript(one)) as fake:
        done = subprocess.run([*MESH, "eval", "run", str(suite), "--profile", "lite", "--out", str(out), "--batch",
                               "--yes"], cwd=repo, env=_api_env(fake, "k-eval-batch"), capture_output=True, text=True,
                              timeout=300)
    assert done.returncode == 0, done.stderr
    results = [json.loads(p.read_text()) for p in (out / "results").glob("*/*.json")]
    assert len(results) == 2 and all(r["state"] == "unresolved" for r in results)
    assert fake.message_requests == [] and len(fake.batched_requests) == sum(r["calls"] for r in results) > 0


def test_an_eval_keeps_its_runs_in_postgresql(library, tmp_path, pg_url):
    """``--db`` names a PostgreSQL tracker: every run and its calls go there, and the report reads them."""
    root, repo, cases = library
    suite = tmp_path / "two.jsonl"
    suite.write_text("".join(c.model_dump_json(exclude_defaults=True) + "\n" for c in cases[:2]))
    command = write_worker(tmp_path, repo, cases[:2], {"single": [cases[0].id]})
    out = tmp_path / "ev"
    done = mesh("--db", pg_url, "eval", "run", str(suite), "--profile", "single", "--worker-cmd", command,
                "--out", str(out), "--yes", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert not (out / "tracker.db").exists()
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    assert [(r["resolved"], r["finished"], r["calls"]) for r in report["arms"]] == [(1, 2, 6)]
    from tracker.store import Tracker

    with Tracker(pg_url) as tracker:
        labels = sorted(label for issue in tracker.list(include_closed=True) for label in issue.get("labels", [])
                        if label.startswith("plan:"))
    # A shared eval's labels name it: one database may hold several evals' runs.
    assert labels == sorted(f"plan:ev-ev-{c.id}-single" for c in cases[:2])
    rows = tracker_rows(pg_url, "SELECT case_id, slot, state FROM mesh_eval_pairs WHERE eval = 'ev-ev'")
    assert sorted(tuple(r) for r in rows) == [(c.id, "single", "resolved" if c.id == cases[0].id else "unresolved")
                                              for c in cases[:2]]


def tracker_rows(db: str, sql: str) -> list:
    from tracker.store import Tracker

    with Tracker(db) as tracker:
        return tracker.db.read(sql)


def test_a_node_project_is_evaluated_with_its_installed_node_modules(tmp_path_factory, tmp_path):
    """A case's repository gets the checkout's node_modules (hard links, nothing copied), so
    ``node --test`` resolves the project's dependency in validation and grading alike."""
    from tests.toolchainkit import commit_all, node_project

    repo = node_project(tmp_path_factory.mktemp("node-templates"), tmp_path)
    (repo / "mesh.toml").write_text('worker_env = ["MESH_EVAL_CASE", "MESH_EVAL_PROFILE"]\nworker_network = "host"\n'
                                    '\n[validation]\nallow = ["node --test"]\n')
    commit_all(repo, "Configure mesh")
    with (repo / "index.js").open("a") as out:
        out.write("exports.minutes = (text) => ms(text) / 60000;\n")
    (repo / "test" / "minutes.test.js").write_text(
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        "const { minutes } = require('../index.js');\n"
        "test('minutes', () => { assert.strictEqual(minutes('2h'), 120); });\n")
    commit_all(repo, "Add minutes")
    suite = tmp_path / "node.jsonl"
    built = mesh("eval", "suite", "--from-git", "--runs", "1", "-o", str(suite), cwd=repo)
    assert built.returncode == 0, built.stderr
    cases = read_suite(suite)
    assert [c.title for c in cases] == ["Add minutes"]
    command = write_worker(tmp_path, repo, cases, {"single": [cases[0].id]}, check="node --test", tests="test")
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(suite), "--profile", "single", "--worker-cmd", command, "--out", str(out), "--yes",
                cwd=repo)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "results" / cases[0].id / "single.json").read_text())
    assert result["state"] == "resolved", result
    linked = out / "repos" / cases[0].id / "single" / "node_modules" / "ms" / "index.js"
    assert linked.stat().st_ino == (repo / "node_modules" / "ms" / "index.js").stat().st_ino
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize("python", [None, ".venv/bin/python"])
def test_a_src_layout_package_installed_editable_is_graded_on_the_case_tree(tmp_path, python):
    """A src-layout package installed editable into the checkout's virtualenv (``setup.py develop``,
    like ``pip install -e .``): the install's ``.pth`` names the checkout's path, so validation and
    grading show a case's tree there; the case solved is resolved, the case left alone is not. The
    environment is found (``.venv``), or named in the config by a path relative to the checkout,
    which a case's repository, standing for the checkout, resolves there too."""
    import sys

    repo = tmp_path / "srcpkg"
    (repo / "src" / "srcpkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "setup.py").write_text('from setuptools import find_packages, setup\n\nsetup(name="srcpkg", version="0.1", '
                                   'package_dir={"": "src"}, packages=find_packages("src"))\n')
    (repo / "src" / "srcpkg" / "__init__.py").write_text('"""Words."""\n')
    (repo / "tests" / "__init__.py").write_text("")
    (repo / ".gitignore").write_text(".venv/\n__pycache__/\n*.egg-info/\nbuild/\n")
    check = "python -m unittest discover -s tests -t ."
    (repo / "mesh.toml").write_text(
        'worker_env = ["MESH_EVAL_CASE", "MESH_EVAL_PROFILE"]\nworker_timeout_s = 120\nworker_network = "host"\n\n'
        f'[validation]\nallow = ["{check}", "python -m unittest {{tests}}"]\ntimeout_s = 60\n'
        + (f'python = "{python}"\n' if python else ""))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "Start srcpkg")
    for name, body in (("shout", "return text.upper() + '!'"), ("whisper", "return text.lower() + '...'")):
        with (repo / "src" / "srcpkg" / "__init__.py").open("a") as out:
            out.write(f"\n\ndef {name}(text):\n    {body}\n")
        (repo / "tests" / f"test_{name}.py").write_text(
            f"# {HIDDEN_MARK}\nimport unittest\n\nimport srcpkg\n\n\nclass T(unittest.TestCase):\n"
            f"    def test_{name}(self):\n        self.assertTrue(srcpkg.{name}('Hi').startswith(''))\n"
            f"        self.assertEqual(len(srcpkg.{name}('Hi')), len(srcpkg.{name}('Ho')))\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"Add {name}")
    venv = repo / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    # setuptools' own editable install, offline (pip's needs the wheel package): a .pth naming src/.
    subprocess.run([str(venv / "bin" / "python"), "setup.py", "-q", "develop"], check=True, capture_output=True,
                   cwd=repo)
    git(repo, "clean", "-qfdX", "-e", "!.venv")  # the egg-info it leaves
    assert any(str(repo) in p.read_text() for p in venv.glob("lib/python*/site-packages/*.pth"))
    suite = tmp_path / "suite.jsonl"
    built = mesh("eval", "suite", "--from-git", "--runs", "1", "--command", "python -m unittest {tests}", "-o", str(suite), cwd=repo)
    assert built.returncode == 0, built.stderr
    cases = read_suite(suite)
    assert [c.title for c in cases] == ["Add shout", "Add whisper"], built.stdout
    command = write_worker(tmp_path, repo, cases, {"single": [cases[0].id]}, check=check)
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(suite), "--profile", "single", "--worker-cmd", command, "--out", str(out), "--yes",
                cwd=repo)
    assert done.returncode == 0, done.stderr
    solved, left = (json.loads((out / "results" / c.id / "single.json").read_text()) for c in cases)
    assert (solved["state"], solved["outcome"]) == ("resolved", "closed"), solved
    assert left["state"] == "unresolved", left
    # The user's checkout is as it was, and still what its virtualenv imports.
    assert git(repo, "status", "--porcelain") == ""
    imported = subprocess.run([str(venv / "bin" / "python"), "-c", "import srcpkg; print(srcpkg.__file__)"],
                              capture_output=True, text=True, cwd=tmp_path).stdout
    assert imported.startswith(str(repo / "src"))
