"""Shared kit of the eval tests: a Python library with a dozen commits of history (functions added
with their tests, a bug fixed later, a docs-only and a tests-only commit), and a scripted command
worker that solves the cases a table names and answers NO_DIFF on the others.

Every hidden test file carries ``HIDDEN_MARK``: a worker that finds it anywhere has seen a hidden test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HIDDEN_MARK = "hidden-test-mark-5d81c"
CHECK = "python3 -m unittest discover -s tests -t ."
MESH = [sys.executable, "-c", "from orchestrator.cli.main import main; main()"]

_FUNCTIONS = [
    ("double", "def double(x):\n    return 2 * x\n", "self.assertEqual(m.double(4), 8)"),
    ("square", "def square(x):\n    return x * x\n", "self.assertEqual(m.square(5), 25)"),
    ("negate", "def negate(x):\n    return -x\n", "self.assertEqual(m.negate(3), -3)"),
    ("halve", "def halve(x):\n    return x / 2\n", "self.assertEqual(m.halve(9), 4.5)"),
    ("clamp", "def clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n", "self.assertEqual(m.clamp(12, 0, 10), 10)"),
    ("mean", "def mean(xs):\n    return sum(xs) / len(xs)\n", "self.assertEqual(m.mean([1, 2, 3]), 2)"),
    ("cube", "def cube(x):\n    return x ** 3\n", "self.assertEqual(m.cube(3), 27)"),
    ("sign", "def sign(x):\n    return (x > 0) - (x < 0)\n", "self.assertEqual(m.sign(-7), -1)"),
]

WORKER = r'''
import json, os, stat, sys

table = json.load(open(sys.argv[1]))
prompt = sys.stdin.read()
round_name, role = os.environ["MESH_ROUND"], os.environ["MESH_ROLE"]
case, profile = os.environ.get("MESH_EVAL_CASE", ""), os.environ.get("MESH_EVAL_PROFILE", "")
check = table["check"]
seen = []
if table.get("search"):
    # Everything this worker can see: the prompt, its environment, every file it may read; the
    # marks: a hidden test's, the reference commit's id (whole, 12 and 7 characters).
    marks = table["search"] if isinstance(table["search"], list) else [table["search"]]
    SYSTEM = {"/proc", "/sys", "/dev", "/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/boot",
              "/var/lib", "/var/cache", "/snap", "/opt", sys.prefix, sys.base_prefix}
    seen += [f"prompt:{mark}" for mark in marks if mark in prompt]
    seen += [f"env:{k}:{mark}" for k, v in os.environ.items() for mark in marks if mark in v]
    # Bounded by count, not by time: a slow machine searches as far as a fast one. The files are
    # walked in a run's first and last rounds (before any work, and with the validated tree and
    # every earlier case graded); the rounds between see the same folders.
    budget = table.get("search_files", 200_000)
    rounds = table.get("search_rounds") or [round_name]
    for top in ("/",) if round_name in rounds else ():
        for folder, dirs, files in os.walk(top):
            budget -= len(files)
            if budget < 0:
                seen.append(f"(search cut at {folder})")
                break
            # The system's own files (programs, libraries) are left out: they hold no test of a project.
            dirs[:] = [d for d in dirs if os.path.join(folder, d) not in SYSTEM]
            for name in files:
                path = os.path.join(folder, name)
                if path == os.path.abspath(sys.argv[1]):
                    continue  # this worker's own script table (it names the mark it looks for)
                try:
                    info = os.lstat(path)
                    # Regular files only: a FIFO would block the read (the HOME's way back is one).
                    if not stat.S_ISREG(info.st_mode) or info.st_size > 2_000_000:
                        continue
                    with open(path, "rb") as fh:
                        data = fh.read()
                    seen += [f"{path}:{mark}" for mark in marks if mark.encode() in data]
                except OSError:
                    pass
# Solved per arm (a --profile P arm is named P): a list of cases, or case -> the trials it solves.
arm, trial = os.environ.get("MESH_EVAL_ARM") or profile, int(os.environ.get("MESH_EVAL_TRIAL") or 1)
solved = table["solve"].get(arm, [])
solves = trial in solved.get(case, []) if isinstance(solved, dict) else case in solved
# A reviewer that never approves: the run ends blocked with whatever tree it wrote.
rejects = case in table.get("reject", {}).get(arm, [])
finding = {"finding_id": "F1", "location": "README.md:1", "severity": "High", "label": "MUST_FIX",
           "issue": "not convinced", "evidence": "none", "minimal_fix": "convince me", "code_context": "x"}
patch = table["patches"][case] if solves else "NO_DIFF: nothing to change"
note = "seen: " + (", ".join(seen) if seen else "nothing")
answers = {
    "hydration": {"acceptance": "the new function works", "design": "", "notes": note},
    "proposal": {"plan": ["write it"], "assumptions": [note], "risk": "low"},
    "critique": {"findings": [note], "must_fix": [], "vote_flip_conditions": [], "risk": "low"},
    "synthesis": {"decision_log": [{"point": note, "decision": "accepted", "reason": "r"}], "patch": patch,
                  "validation_commands": [check]},
    "revision": {"decision_log": [{"point": note, "decision": "accepted", "reason": "r"}],
                 "patch": "NO_DIFF: done", "validation_commands": [check]},
    "revision-plan": {"summary": note, "steps": [{"finding_id": "VALIDATION", "change": "make it pass"}]},
    "vote": {"vote": "agree", "reason": note},
    "review": ({"decision": "request_changes", "findings": [finding], "summary": note} if rejects
               else {"decision": "approve", "findings": [], "summary": note}),
    "choice": {"choice": "synthesizer", "reason": note},
}
print(json.dumps(answers[round_name]))
'''


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="Ada", GIT_AUTHOR_EMAIL="ada@example.org", GIT_COMMITTER_NAME="Ada",
               GIT_COMMITTER_EMAIL="ada@example.org")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def _commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def _test_file(name: str, assertion: str) -> str:
    return (f"# {HIDDEN_MARK}\nimport unittest\n\nimport mathlib as m\n\n\nclass T(unittest.TestCase):\n"
            f"    def test_{name}(self):\n        {assertion}\n")


def make_library(root: Path) -> Path:
    """The library's repository (12 commits on main) with its mesh.toml; returns its path."""
    repo = root / "mathlib"
    (repo / "tests").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "mathlib.py").write_text('"""Small maths."""\n')
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_import.py").write_text(
        "import unittest\n\nimport mathlib\n\n\nclass T(unittest.TestCase):\n"
        "    def test_import(self):\n        self.assertTrue(mathlib.__doc__)\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    (repo / "mesh.toml").write_text(
        # The worker's network namespace is not what these tests are about: the host's.
        f'worker_env = ["MESH_EVAL_CASE", "MESH_EVAL_PROFILE", "MESH_EVAL_ARM", "MESH_EVAL_TRIAL"]\n'
        f'worker_timeout_s = 120\nworker_network = "host"\n\n'
        f'[validation]\nallow = ["{CHECK}"]\ntimeout_s = 60\n')
    _commit(repo, "Start the library")
    for index, (name, body, assertion) in enumerate(_FUNCTIONS):
        with (repo / "mathlib.py").open("a") as out:
            out.write("\n\n" + body)
        (repo / "tests" / f"test_{name}.py").write_text(_test_file(name, assertion))
        _commit(repo, f"Add {name}\n\n{name} of a number, with its test.")
        if index == 2:
            (repo / "README.md").write_text("# mathlib\n")
            _commit(repo, "Write a README")
        if index == 4:
            (repo / "tests" / "test_import.py").write_text((repo / "tests" / "test_import.py").read_text()
                                                           + "\n\nif __name__ == '__main__':\n    unittest.main()\n")
            _commit(repo, "Let the import test run alone")
    # A bug fixed later: mean of an empty list raised ZeroDivisionError.
    text = (repo / "mathlib.py").read_text().replace("    return sum(xs) / len(xs)\n",
                                                       "    return sum(xs) / len(xs) if xs else 0.0\n")
    (repo / "mathlib.py").write_text(text)
    (repo / "tests" / "test_mean.py").write_text(_test_file("mean", "self.assertEqual(m.mean([1, 2, 3]), 2)")
                                                 + "\n    def test_empty(self):\n"
                                                   "        self.assertEqual(m.mean([]), 0.0)\n")
    _commit(repo, "Fix mean of an empty list")
    return repo


def reference_patch(repo: Path, base: str, reference: str, tests: str = "tests") -> str:
    """The source part of a reference commit, as the patch a solving worker writes."""
    return git(repo, "diff", base, reference, "--", ".", f":(exclude){tests}")


def write_worker(root: Path, repo: Path, cases: list, solve: dict[str, list[str]], *,
                 search: str | list[str] | None = None, check: str = CHECK, tests: str = "tests",
                 reject: dict[str, list[str]] | None = None, search_rounds: list[str] | None = None) -> str:
    """The scripted worker and its table (``search``: the marks it looks for everywhere it can, in
    its prompt and environment every time and in the files in ``search_rounds`` (default: every
    round); ``reject``: the cases whose reviewer never approves, per profile); returns the
    --worker-cmd."""
    table = {"check": check, "solve": solve, "search": search, "search_rounds": search_rounds, "reject": reject or {},
             "patches": {case.id: reference_patch(repo, case.base, case.reference, tests) for case in cases}}
    folder = root / "worker"
    folder.mkdir(exist_ok=True)
    (folder / "table.json").write_text(json.dumps(table))
    (folder / "worker.py").write_text(WORKER)
    return f"python3 {folder / 'worker.py'} {folder / 'table.json'}"


def mesh(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    return subprocess.run([*MESH, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def library_suite(root: Path, limit: int, name: str = "suite.jsonl"):
    """The kit's library in ``root`` and a suite of its ``limit`` newest cases (one run each):
    (repository, suite file, cases). RuntimeError with mesh's message when the suite fails."""
    from orchestrator.evals.suite import read_suite

    repo = make_library(root)
    suite = root / name
    built = mesh("eval", "suite", "--from-git", "--runs", "1", "--limit", str(limit), "--command",
                 "python3 -m unittest {tests}", "-o", str(suite), cwd=repo)
    if built.returncode:
        raise RuntimeError(built.stderr)
    return repo, suite, read_suite(suite)


class Loopback:
    """A server on a loopback port that hands each connection to ``handle`` in a thread of its own
    (the scripted workers share the host's network and reach it)."""

    def __init__(self):
        import socket
        import threading

        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._server.close()


# The worker's gate: it connects to the test's port and waits for a byte, then becomes the worker.
GATE = """
import os, socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as gate:
    gate.recv(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


class Gate(Loopback):
    """A loopback port whose connections wait until ``open()``."""

    def __init__(self):
        import threading

        self._opened = threading.Event()
        self.reached = threading.Event()  # a worker waits at the gate
        super().__init__()

    def handle(self, conn) -> None:
        self.reached.set()
        self._opened.wait()
        with conn:
            conn.sendall(b"x")

    def open(self) -> None:
        self._opened.set()
