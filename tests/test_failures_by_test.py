"""What workers read of a failure (issue 35, item 3), end to end on real projects: ``mesh run``
with scripted workers, the real sandbox and real runners. A failing ``cargo test`` puts the
panic, with its left and right values (libtest prints them on stdout), in the review's
validation results, the VALIDATION finding and the revision prompts; a failing base names its
failing tests with their messages before any worker call."""

from __future__ import annotations

from orchestrator.ledger.calls import calls_for
from tests.test_toolchain_runs import Project, node, script_for, templates, with_revision  # noqa: F401
from tests.toolchainkit import commit_all, rust_project
from tracker.store import Tracker

TWICE = "\npub fn twice(n: u64) -> u64 { n * 2 }\n"
TWICE_TEST = ("\n#[cfg(test)]\nmod twice_tests {\n    #[test]\n    fn doubles() {\n"
              "        assert_eq!(super::twice(21), 42, \"twice 21\");\n    }\n}\n")


def test_a_cargo_panic_reaches_the_review_the_finding_and_the_revision(tmp_path):
    repo = rust_project(tmp_path)
    project = Project(tmp_path, repo, ["cargo test"])
    source = (repo / "src" / "lib.rs").read_text()
    broken = project.patch({"src/lib.rs": source + TWICE.replace("n * 2", "n * 3") + TWICE_TEST})
    fixed = project.patch({"src/lib.rs": source + TWICE + TWICE_TEST},
                          on={"src/lib.rs": source + TWICE.replace("n * 2", "n * 3") + TWICE_TEST})
    code, report, result = project.run(with_revision(script_for(broken, ["cargo test"]), fixed, ["cargo test"]))
    assert code == 0 and report["outcome"] == "closed", result.output
    with Tracker(project.db, actor="tester") as tracker:
        prompts = {c["round"]: c["prompt"] for c in calls_for(tracker, task_id=project.task)
                   if c["round"] in ("review", "revision-plan", "revision") and "left: 63" in c["prompt"]}
    # The first review read the failing test with its panic and values, before the raw output.
    review = prompts["review"]
    section = review[review.index("## Validation results"):]
    assert section.index("- twice_tests::doubles: failed") < section.index("Last lines of output:")
    assert "panicked at src/lib.rs:" in section and "left: 63" in section and "right: 42" in section
    assert "twice 21" in section
    # The revision rounds read the VALIDATION finding: the failing test named, its panic as evidence.
    for round_name in ("revision-plan", "revision"):
        text = prompts[round_name]
        assert "failing: twice_tests::doubles" in text and "right: 42" in text, round_name
        assert "src/lib.rs:" in text


def test_a_failing_base_names_its_failing_tests_with_their_messages(node):  # noqa: F811
    (node.repo / "index.js").write_text("const ms = require('ms');\nexports.seconds = (text) => ms(text);\n")
    commit_all(node.repo, "a bug on the base")
    code, report, result = node.run({})
    assert code == 5
    out = result.output
    assert "Failing tests:" in out and "- seconds: failed" in out
    assert "2000 !== 2" in out[out.index("- seconds: failed"):]
