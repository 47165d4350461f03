"""``mesh run`` end to end on real Node, Go, Rust and hatch-vcs projects (scripted workers, the real
sandbox, real git): a passing patch closes and lands, a failing one gets a revision, a base that
fails stops the run before any worker call with the task left open (exit 5), a missing install is
refused with its command (exit 2), and a patch writing into ``node_modules/`` never lands."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.runkit import critique, happy_script, r, review, revision_plan, synthesis, vote
from tests.toolchainkit import commit_all, git, go_project, hatch_project, node_project, rust_project, tool_env
from tracker.store import Tracker

TASK_TITLE = "Add the feature"


@pytest.fixture(scope="session")
def templates(tmp_path_factory):
    return tmp_path_factory.mktemp("toolchain-run-templates")


class Project:
    """A project's repository with a tracker beside it and one task in scope ``plan:t``."""

    def __init__(self, tmp_path: Path, repo: Path, allow: list[str], env: dict[str, str] | None = None):
        self.root, self.repo, self.env = tmp_path, repo, {**(env or tool_env()),
                                                            "XDG_CACHE_HOME": str(tmp_path / "cache")}
        allow_toml = ", ".join(json.dumps(entry) for entry in allow)
        (repo / "mesh.toml").write_text(f"review_max_cycles = 2\n\n[validation]\nallow = [{allow_toml}]\n"
                                        "timeout_s = 300\n")
        commit_all(repo, "mesh configuration")
        self.db = tmp_path / "tracker" / "mesh.db"
        self.db.parent.mkdir()
        with Tracker.init(self.db.parent, prefix="tc", actor="tester", db_path=self.db) as tracker:
            self.task = tracker.create(TASK_TITLE, labels=["plan:t"], description="Add it.",
                                       acceptance_criteria="the tests pass", design="a small change",
                                       notes="none")["id"]

    def patch(self, files: dict[str, str], on: dict[str, str] | None = None) -> str:
        """The unified diff that turns the committed tree (with ``on`` written: an earlier patch's
        result, for a revision) into one with ``files`` written."""
        def write(contents: dict[str, str]) -> None:
            for path, text in contents.items():
                (self.repo / path).parent.mkdir(parents=True, exist_ok=True)
                (self.repo / path).write_text(text)

        write(on or {})
        git(self.repo, "add", "-A")
        write(files)
        git(self.repo, "add", "-N", "--", *files)
        diff = git(self.repo, "diff")
        git(self.repo, "reset", "-q", "--hard")
        git(self.repo, "clean", "-fdq")
        return diff

    def run(self, script: dict, *extra: str):
        path = self.root / "script.json"
        path.write_text(json.dumps(script))
        result = CliRunner().invoke(cli, ["--db", str(self.db), "--actor", "tester", "run", "--label", "plan:t",
                                          "--backend", "replay", "--script", str(path), "--repo", str(self.repo),
                                          "--json", *extra], env=self.env, catch_exceptions=False)
        report = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
        return result.exit_code, report, result

    def status(self) -> str:
        with Tracker(self.db, actor="tester") as tracker:
            return tracker.get(self.task)["status"]

    def comments(self) -> int:
        with Tracker(self.db, actor="tester") as tracker:
            return len(tracker.comments(self.task))

    def landed_files(self) -> list[str]:
        return git(self.repo, "ls-tree", "-r", "--name-only", "mesh/land/plan-t").split()


def script_for(patch: str, commands: list[str]) -> dict:
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(patch, commands))
    return script


def with_revision(script: dict, fix: str, commands: list[str]) -> dict:
    script["synthesizer"] += [r("revision-plan", revision_plan(["VALIDATION"])), r("vote", vote()),
                              r("revision", synthesis(fix, commands))]
    for role in ("critic_a", "critic_b", "skeptic"):
        script[role] += [r("critique", critique()), r("vote", vote())]
    script["proposer"].append(r("vote", vote()))
    script["reviewer"].append(r("review", review()))
    return script


MINUTES = ("const ms = require('ms');\nexports.seconds = (text) => ms(text) / 1000;\n"
           "exports.minutes = (text) => ms(text) / 60000;\n")
MINUTES_BROKEN = MINUTES.replace("60000", "6000")
MINUTES_TEST = """const test = require('node:test');
const assert = require('node:assert');
const { minutes } = require('../index.js');
test('minutes', () => { assert.strictEqual(minutes('2m'), 2); });
"""


@pytest.fixture
def node(templates, tmp_path):
    return Project(tmp_path, node_project(templates, tmp_path), ["npm test"])


def test_a_node_task_closes_and_lands_with_its_dependency(node):
    patch = node.patch({"index.js": MINUTES, "test/minutes.test.js": MINUTES_TEST})
    code, report, result = node.run(script_for(patch, ["npm test"]))
    assert code == 0 and report["outcome"] == "closed", result.output
    assert "toolchain node (npm)" in report["preflight"] + result.output or any(
        "toolchain node" in line for line in result.output.splitlines())
    assert "test/minutes.test.js" in node.landed_files()
    assert not any(path.startswith("node_modules") for path in node.landed_files())


def test_a_failing_node_patch_gets_a_revision(node):
    broken = node.patch({"index.js": MINUTES_BROKEN, "test/minutes.test.js": MINUTES_TEST})
    fixed = node.patch({"index.js": MINUTES}, on={"index.js": MINUTES_BROKEN, "test/minutes.test.js": MINUTES_TEST})
    code, report, result = node.run(with_revision(script_for(broken, ["npm test"]), fixed, ["npm test"]))
    assert code == 0 and report["outcome"] == "closed", result.output
    assert report["validation"][0]["passed"] is True


def test_a_failing_base_stops_before_any_worker_call_and_leaves_the_task_open(node):
    (node.repo / "index.js").write_text("const ms = require('ms');\nexports.seconds = (text) => ms(text);\n")
    commit_all(node.repo, "a bug on the base")
    code, report, result = node.run({})  # any worker call would fail: there is no answer to give
    assert code == 5 and report is None
    assert "fails its check before any worker was called" in result.output and "npm test" in result.output
    assert "seconds" in result.output  # the failing output is shown
    assert node.status() == "open" and node.comments() == 0


def test_allow_failing_base_counts_only_new_failures(node):
    (node.repo / "index.js").write_text("const ms = require('ms');\nexports.seconds = (text) => ms(text);\n")
    commit_all(node.repo, "a bug on the base")
    patch = node.patch({"README.md": "notes\n"})
    code, report, result = node.run(script_for(patch, ["npm test"]), "--allow-failing-base")
    assert code == 0 and report["outcome"] == "closed", result.output
    assert report["validation"][0]["reason"] == "fails_on_base_too"


def test_a_node_project_without_its_install_is_refused_with_npm_ci(node):
    shutil.rmtree(node.repo / "node_modules")
    code, report, result = node.run({})
    assert code == 2 and "npm ci" in result.output
    assert node.status() == "open" and node.comments() == 0


def test_a_patch_writing_into_node_modules_never_lands(node):
    patch = ("diff --git a/node_modules/ms/index.js b/node_modules/ms/index.js\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/node_modules/ms/index.js\n@@ -0,0 +1 @@\n+module.exports = () => 0;\n")
    before = (node.repo / "node_modules" / "ms" / "index.js").read_text()
    code, report, result = node.run(script_for(patch, ["npm test"]))
    assert code == 3 and report["block_reason"] == "policy_violation", result.output
    assert "node_modules/ms/index.js" in report["block_detail"]
    assert (node.repo / "node_modules" / "ms" / "index.js").read_text() == before


def test_a_go_task_closes_offline(tmp_path):
    repo, env = go_project(tmp_path)
    project = Project(tmp_path, repo, ["go test ./..."], env)
    source = (repo / "gop.go").read_text() + ("\n// Differ tells whether two slices differ.\n"
                                              "func Differ(a, b []int) bool { return !Same(a, b) }\n")
    patch = project.patch({"gop.go": source})
    code, report, result = project.run(script_for(patch, ["go test ./..."]))
    assert code == 0 and report["outcome"] == "closed", result.output


def test_a_rust_task_closes_offline_and_its_target_folder_stays_out_of_the_commit(tmp_path):
    repo = rust_project(tmp_path)
    project = Project(tmp_path, repo, ["cargo test"])
    source = (repo / "src" / "lib.rs").read_text() + "\npub fn twice(n: u64) -> u64 { n * 2 }\n"
    patch = project.patch({"src/lib.rs": source})
    code, report, result = project.run(script_for(patch, ["cargo test"]))
    assert code == 0 and report["outcome"] == "closed", result.output
    assert not any(path.startswith("target/") or path == "Cargo.lock" for path in project.landed_files())


def test_a_hatch_vcs_task_closes_without_committing_its_generated_files(tmp_path):
    repo = hatch_project(tmp_path)
    command = "python -m unittest discover -s tests -t ."
    project = Project(tmp_path, repo, [command])
    patch = project.patch({"src/stamped/double.py": "def double(n):\n    return 2 * n\n",
                           "tests/test_double.py": "import unittest\n\nfrom stamped.double import double\n\n\n"
                                                   "class D(unittest.TestCase):\n    def test_double(self):\n"
                                                   "        self.assertEqual(double(2), 4)\n"})
    code, report, result = project.run(script_for(patch, [command]))
    assert code == 0 and report["outcome"] == "closed", result.output
    landed = project.landed_files()
    assert "src/stamped/double.py" in landed and "src/stamped/_version.py" not in landed
    assert not any(path.endswith(".mo") for path in landed)
