"""Benchmark: a task's whole validation in mesh against one direct run of the project's check
(issue 48, item 3), on real projects' suites, with a fresh install of mesh, in one invocation.

For each project (an sdist from PyPI, or a mirrored repository, set up as its developer would:
a virtualenv with its test dependencies, ``npm ci``) the script lays a git repository with
``mesh init``'s configuration and, per repetition, a new base commit (a line added to a file no
test reads, so no tree's results are reused from an earlier repetition) and a new task. Then:

- direct: the project's check command (the one ``mesh init`` wrote) run in a shell in the
  checkout, on the task's tree (the task's patch applied), as a person runs it before pushing;
- mesh: ``mesh run`` of the task, a whole process of the installed ``mesh``, with the replay
  backend: the synthesizer's patch (one line in a library function, one new test) and a subset
  command (``python -m pytest tests/test_x.py``, ``go test ./cmp``, ``npx jest tests/x.test.js``)
  that the check covers. mesh runs the base check, the task's validation (the check in the
  subset's place, with the forgery controls, as by default) and its comparison with the base.

A second task is then cut from the same base with another patch: its base check and the base's
results are kept from the first (as for the tasks of a drain after the first), so its
validation is the task's tree alone.

Printed per repetition, with the load average: direct; for the first task the base check and
the task's validation (their commands' durations, from the kept base check and the proof
checkpoint), the whole ``mesh run`` wall and their ratios to direct; the same for the second
task; ``floor``, ``run_validation`` of ``true`` on the task's commit (the tree copy and bwrap),
and ``no ctrl``, the check validated on that commit with the controls (twins, control tests)
off; ``twins``, the tests pytest collected beyond those it reported. Each repetition's figures,
with the phases by the checkpoints' clock, are written to ``rep-N.json`` in the scratch folder
(``--keep``). Repetitions run one after the other, never two measurements at once.

Needs: the project's toolchains (Python, go, npm), bubblewrap, PyPI and the npm registry the
first time (kept in ``--cache``); mesh installed non-editable, named by ``--mesh``:
``python3 -m venv /tmp/vb && /tmp/vb/bin/pip install . && python3 bench/validation_budget.py
--mesh /tmp/vb/bin/mesh``.

Usage: python bench/validation_budget.py --mesh PATH [--runs N] [--cache DIR] [--only NAME] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

PY = sys.executable
GIT_ID = ["-c", "user.name=bench", "-c", "user.email=bench@bench.invalid"]
LABEL = "plan:budget"


@dataclass
class Project:
    name: str
    source: tuple[str, ...]  # ("pypi", "name==version"), ("mirror", git dir), ("dir", folder): then a fallback
    library: tuple[str, str, str]  # file, the text a line goes after, the line (a task's change)
    test: tuple[str, str]  # the test file, the test appended to it
    subset: str  # the synthesizer's validation command: a part of the check
    setup: Callable[[Path], None]  # the developer's environment (untracked), in the checkout
    ignore: str  # what the setup leaves untracked, for .gitignore
    env: dict[str, str]  # for the direct run and mesh alike


def _python_env(packages: list[str]) -> Callable[[Path], None]:
    def setup(repo: Path) -> None:
        subprocess.run([PY, "-m", "venv", str(repo / ".venv")], check=True)
        if packages:
            subprocess.run([str(repo / ".venv/bin/pip"), "install", "-q", *packages], check=True, capture_output=True)
    return setup


def _npm_ci(repo: Path) -> None:
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=repo, check=True,
                   capture_output=True)


PROJECTS = [
    Project("python-multipart", ("pypi", "python-multipart==0.0.34"),
            ("python_multipart/multipart.py", "def parse_options_header(",
             "    # a task's change: nothing to parse in an empty header"),
            ("tests/test_multipart.py",
             "\n\ndef test_budget_empty_header() -> None:\n"
             "    assert parse_options_header(None) == (b\"\", {})\n"),
            "python -m pytest tests/test_multipart.py", _python_env(["pytest", "pyyaml"]), ".venv/", {}),
    Project("more-itertools", ("pypi", "more-itertools==11.2.1"),
            ("more_itertools/more.py", "def chunked(", "    # a task's change: n names the size of each chunk"),
            ("tests/test_more.py",
             "\n\nclass BudgetChunkedTests(TestCase):\n    def test_budget_chunked(self):\n"
             "        self.assertEqual(list(mi.chunked([1, 2, 3], 2)), [[1, 2], [3]])\n"),
            "python -m unittest tests.test_more", _python_env([]), ".venv/", {}),
    # The mirror's go-cmp needs Go 1.21: on an older go, Debian's (golang-github-google-go-cmp-dev, 0.5.9).
    Project("go-cmp", ("mirror", "/work/.mirror/google+go-cmp/repo", "dir", "/usr/share/gocode/src/github.com/google/go-cmp"),
            ("cmp/compare.go", "func Equal(",
             "\t// a task's change: x and y are compared with opts"),
            ("cmp/compare_test.go",
             "\n\nfunc TestBudgetEqual(t *testing.T) {\n\tif !cmp.Equal(1, 1) {\n\t\tt.Fatal(\"1 != 1\")\n\t}\n}\n"),
            "go test ./cmp", lambda repo: None, "",
            {"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "GOPROXY": "off"}),
    Project("commander.js", ("mirror", "/work/.mirror/tj+commander.js/repo"),
            ("lib/command.js", "  alias(alias) {", "    // a task's change: an alias names the command too"),
            ("tests/command.alias.test.js",
             "\n\ntest('budget: an alias is listed', () => {\n  const program = new commander.Command();\n"
             "  const cmd = program.command('budget').alias('bdg');\n  assert.deepEqual(cmd.aliases(), ['bdg']);\n});\n"),
            "node --test tests/command.alias.test.js", _npm_ci, "node_modules/", {}),
]


def run(args: list[str], cwd: Path, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, text=True, capture_output=True, **kw)


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return run(["git", *GIT_ID, *args], repo, env, check=True).stdout


def unpack(project: Project, cache: Path, dest: Path) -> Path:
    """The project's source in ``dest``: a folder without git."""
    kind, where = project.source[:2]
    if kind == "mirror" and project.name == "go-cmp" and len(project.source) > 2:
        mod = run(["git", "--git-dir", where, "show", "HEAD:go.mod"], Path("/")).stdout
        wanted = next((x.split()[1] for x in mod.splitlines() if x.startswith("go ")), "1.0")
        have = run(["go", "env", "GOVERSION"], Path("/")).stdout.strip().removeprefix("go")
        if tuple(map(int, have.split(".")[:2])) < tuple(map(int, wanted.split(".")[:2])):
            print(f"go-cmp: the mirror needs go {wanted}, go {have} here: {project.source[3]} instead")
            kind, where = project.source[2:4]
    if kind == "dir":
        top = dest / project.name
        shutil.copytree(where, top, symlinks=True)
        return top
    if kind == "mirror":
        top = dest / project.name
        subprocess.run(["git", "clone", "-q", where, str(top)], check=True)
        shutil.rmtree(top / ".git")
        return top
    cache.mkdir(parents=True, exist_ok=True)
    stem = where.split("==")[0].replace("-", "_")
    have = [p for p in cache.iterdir() if p.name.startswith(stem) and p.name.endswith(".tar.gz")]
    if not have:
        subprocess.run([PY, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", where, "-d",
                        str(cache)], check=True)
        have = [p for p in cache.iterdir() if p.name.startswith(stem) and p.name.endswith(".tar.gz")]
    with tarfile.open(have[0]) as tar:
        tar.extractall(dest, filter="data")
    return dest / have[0].name[: -len(".tar.gz")]


def lay_out(project: Project, top: Path, mesh: str, env: dict) -> str:
    """``top`` made a mesh project: git, the developer's environment, ``mesh init``. Returns the check."""
    if project.ignore:
        with (top / ".gitignore").open("a") as ignore:
            ignore.write(f"\n{project.ignore}\n")
    project.setup(top)
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-qm", "the project as released")
    init = run([mesh, "init", "--prefix", "bud"], top, env)
    if init.returncode:
        raise SystemExit(f"{project.name}: mesh init: {init.stdout}{init.stderr}")
    git(top, "add", "mesh.toml", ".gitignore")
    git(top, "commit", "-qm", "mesh configuration")
    config = (top / "mesh.toml").read_text()
    line = next(x for x in config.splitlines() if x.startswith("check = "))
    [check] = json.loads(line.split("=", 1)[1])
    # The subset admitted by an exact entry of its own (harmless where a pattern admits it too).
    if f'"{project.subset}"' not in config:
        config = config.replace("allow = [", f'allow = [\n    "{project.subset}",', 1)
        (top / "mesh.toml").write_text(config)
        git(top, "commit", "-qam", "the subset admitted")
    return check


def task_patch(project: Project, top: Path, variant: str, lines: int = 1) -> str:
    """The synthesizer's patch: a line in a library function (``lines`` times), one test appended.
    ``variant`` makes each task's tree differ from every other's, and ``lines`` its compiled code:
    go's build and test caches would otherwise answer a direct run from an earlier repetition's
    compile of a change differing in a comment only (line numbers are in the object code)."""
    path, after, line = project.library
    text = (top / path).read_text()
    start = text.index(after)
    end = text.index("\n", start) + 1
    if text[end:].lstrip().startswith('"""'):  # past a docstring that opens the function's body
        opened = text.index('"""', end)
        end = text.index("\n", text.index('"""', opened + 3)) + 1
    (top / path).write_text(text[:end] + (line + variant + "\n") * lines + text[end:])
    test_path, test = project.test
    with (top / test_path).open("a") as handle:
        handle.write(test.replace("budget", "budget_" + "".join(c for c in variant if c.isalnum())))
    patch = git(top, "diff")
    git(top, "checkout", "--", path, test_path)
    return patch


def replay(patch: str, subset: str) -> dict:
    def r(round_name: str, artifact: dict) -> dict:
        return {"round": round_name, "text": json.dumps(artifact)}

    vote = {"vote": "agree", "reason": "agree"}
    critique = {"findings": ["fine"], "must_fix": [], "vote_flip_conditions": [], "risk": "low"}
    return {
        "proposer": [r("proposal", {"plan": ["change", "test it"], "assumptions": [], "risk": "low"}),
                     r("vote", vote)],
        "critic_a": [r("critique", critique), r("vote", vote)],
        "critic_b": [r("critique", critique), r("vote", vote)],
        "skeptic": [r("critique", critique), r("vote", vote)],
        "synthesizer": [r("synthesis", {"decision_log": [{"point": "p", "decision": "accepted", "reason": "r"}],
                                        "patch": patch, "validation_commands": [subset]}), r("vote", vote)],
        "reviewer": [r("review", {"decision": "approve", "findings": [], "summary": "No material issues found."})],
    }


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def new_task(mesh: str, top: Path, env: dict, title: str) -> str:
    made = run([mesh, "tracker", "create", title, "--type", "task", "--label", LABEL, "--acceptance",
                "the change, tested", "--design", "one line and a test", "--notes", "a bench's task", "--json"],
               top, env, check=True)
    return json.loads(made.stdout)["id"]


def mesh_run(project: Project, mesh: str, top: Path, env: dict, task: str, patch: str, scratch: Path) -> dict:
    """``mesh run`` of ``task`` (the scope's only ready task): its wall, and where its time went."""
    script = scratch / f"script-{task}.json"
    script.write_text(json.dumps(replay(patch, project.subset)))
    load = loadavg()
    clock = time.time()
    started = time.perf_counter()
    done = run([mesh, "run", "--label", LABEL, "--backend", "replay", "--script", str(script), "--repo", str(top),
                "--json", "--no-land"], top, env)
    wall = time.perf_counter() - started
    report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    (scratch / f"run-{task}.txt").write_text(done.stdout + "\n" + done.stderr)
    if report.get("outcome") != "closed":
        raise SystemExit(f"{project.name}: mesh run: {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    shown = json.loads(run([mesh, "show", task, "--json"], top, env, check=True).stdout)
    [proof] = [step for r in shown["runs"] for step in r["steps"] if step["kind"] == "proof"]
    results = proof["artifact"]["results"]
    steps = [step for r in shown["runs"] for step in r["steps"]]

    def at(kind: str, last: bool = False) -> float:
        found = [step["created_at"] for step in steps if step["kind"] == kind]
        stamp = found[-1] if last else found[0]
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    # The phases by the checkpoints' clock: the process's start and the base check up to the
    # preflight checkpoint; the last vote to the proof: the task's validation (worktree commit,
    # tree copy, twins planted, the commands, their reports read, the base comparison).
    phases = {"to_preflight": at("preflight") - clock, "validation_phase": at("proof") - at("vote", last=True)}
    judged = sum(1 for x in results if x.get("judged_from"))
    ran = [x for x in results if not x.get("judged_from") and (x.get("duration_s") or 0) > 0]
    return {"wall": wall, "load": load, **phases, "proof_s": sum(x.get("duration_s") or 0 for x in results),
            "commands_run": len(ran), "judged": judged, "base_read": "read from its earlier run" in proof["summary"],
            "tests": [x.get("tests", {}).get("ran") for x in results], "stdout": [x.get("stdout_tail", "") for x in results]}


def base_check_s(top: Path, env: dict, commit: str) -> float | None:
    """The base check's command time on ``commit``, from its kept pass (None: not run here)."""
    root = Path(env["XDG_CACHE_HOME"]) / "mesh-build"
    total = None
    for kept in root.glob("*/base-checks/*.json"):
        data = json.loads(kept.read_text())
        if data.get("commit") == commit:
            total = sum(x.get("duration_s") or 0 for x in data.get("results", []))
    return total


BREAKDOWN = """
import json, sys, time
from pathlib import Path
from orchestrator.mutants import planting
from orchestrator.sandbox import canaries
from orchestrator.sandbox.validation import run_validation
from orchestrator.toolchains.view import inspect
repo, commit, check = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
view = inspect(repo).view
def timed(command):
    started = time.perf_counter()
    [result] = run_validation([command], cwd=repo, commit=commit, allow=[command], timeout_s=1800, environment=view)
    assert result.passed, result.stdout_tail[-2000:]
    return time.perf_counter() - started
floor = timed("true")
planting.plant = canaries.plant = lambda *a, **k: None
print(json.dumps({"floor": floor, "no_controls": timed(check)}))
"""


def breakdown(mesh: str, top: Path, env: dict, commit: str, check: str) -> dict:
    """In the installed mesh's interpreter: ``run_validation`` of ``true`` (the tree copy and bwrap)
    and of the check with the controls turned off, on the task's commit."""
    python = str(Path(mesh).parent / "python")
    got = run([python, "-c", BREAKDOWN, str(top), commit, check], top, env)
    if got.returncode:
        raise SystemExit(f"breakdown: {got.stdout}{got.stderr}")
    return json.loads(got.stdout)


def repetition(project: Project, top: Path, check: str, mesh: str, env: dict, rep: int, scratch: Path) -> dict:
    # A new base commit: a tree no earlier repetition ran.
    with (top / "mesh.toml").open("a") as config:
        config.write(f"# repetition {rep}\n")
    git(top, "commit", "-qam", f"repetition {rep}")
    base = git(top, "rev-parse", "HEAD").strip()
    first, second = task_patch(project, top, f" ({rep}a)", 2 * rep + 1), task_patch(project, top, f" ({rep}b)", 2 * rep + 2)

    # direct: the check in a shell, on the first task's tree (its patch applied in the checkout)
    run(["git", "apply"], top, env, input=first, check=True)
    load = loadavg()
    started = time.perf_counter()
    direct = subprocess.run(check, shell=True, cwd=top, env=env, capture_output=True, text=True)
    direct_s = time.perf_counter() - started
    git(top, "checkout", "--", ".")
    if direct.returncode:
        raise SystemExit(f"{project.name}: direct {check} failed:\n{direct.stdout[-3000:]}{direct.stderr[-2000:]}")

    # the first task on this base: the base check, then the task's validation
    task = new_task(mesh, top, env, f"budget task {rep}a")
    one = mesh_run(project, mesh, top, env, task, first, scratch)
    one["base_s"] = base_check_s(top, env, base)
    commit = git(top, "rev-parse", f"mesh/{task}").strip()
    # a second task on the same base: its base check and base results kept from the first's
    task = new_task(mesh, top, env, f"budget task {rep}b")
    two = mesh_run(project, mesh, top, env, task, second, scratch)
    parts = breakdown(mesh, top, env, commit, check)
    return {"direct": direct_s, "load": load, "first": one, "second": two, **parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", default=shutil.which("mesh"), help="the installed mesh (a fresh non-editable install)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "mesh-bench-budget")
    parser.add_argument("--only", action="append", help="a project's name (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folders (printed)")
    args = parser.parse_args()
    if not args.mesh:
        raise SystemExit("--mesh: the mesh of a fresh install")
    for project in PROJECTS:
        if args.only and project.name not in args.only:
            continue
        if project.name == "go-cmp" and not shutil.which("go"):
            print("go-cmp: skipped, no go on PATH")
            continue
        scratch = Path(tempfile.mkdtemp(prefix=f"mesh-budget-{project.name}-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "VIRTUAL_ENV"))}
        env.update(project.env, XDG_CACHE_HOME=str(scratch / "cache"))
        try:
            top = unpack(project, args.cache, scratch / "src")
            if project.ignore == ".venv/":
                env["PATH"] = f"{top / '.venv/bin'}:{env['PATH']}"
            check = lay_out(project, top, args.mesh, env)
            print(f"\n{project.name}: check {check!r} (mesh init's), the synthesizer's {project.subset!r}", flush=True)
            print(f"{'rep':>3} {'load':>5} {'direct s':>9} | {'base chk':>8} {'task val':>8} {'run wall':>8}"
                  f" {'(b+v)/d':>7} {'wall/d':>6} | {'2nd val':>7} {'2nd wall':>8} {'val/d':>6} {'wall/d':>6} |"
                  f" {'floor':>5} {'no ctrl':>7} {'twins':>5}", flush=True)
            for rep in range(args.runs):
                got = repetition(project, top, check, args.mesh, env, rep, scratch)
                d, one, two = got["direct"], got["first"], got["second"]
                base_s = one["base_s"] or 0.0
                twins = "-"  # pytest's collection line only
                for text in one["stdout"]:
                    found = [line for line in text.splitlines() if line.startswith("collected ")]
                    if found and one["tests"][-1]:
                        twins = str(int(found[0].split()[1]) - one["tests"][-1])
                print(f"{rep:3d} {got['load']:>5} {d:9.2f} | {base_s:8.2f} {one['proof_s']:8.2f} {one['wall']:8.2f}"
                      f" {(base_s + one['proof_s']) / d:6.2f}x {one['wall'] / d:5.2f}x | {two['proof_s']:7.2f}"
                      f" {two['wall']:8.2f} {two['proof_s'] / d:5.2f}x {two['wall'] / d:5.2f}x |"
                      f" {got['floor']:5.2f} {got['no_controls']:7.2f} {twins:>5}"
                      f"   (load at runs {one['load']}, {two['load']}; run {one['commands_run']} command(s),"
                      f" {one['judged']} judged; 2nd: base read {two['base_read']})", flush=True)
                (scratch / f"rep-{rep}.json").write_text(json.dumps(got, indent=1))
        finally:
            if args.keep:
                print(f"kept: {scratch}")
            else:
                shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
