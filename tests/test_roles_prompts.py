"""Prompt building: every round renders, the shared prefix is role-independent, inputs are checked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from jinja2 import StrictUndefined

import templates
from roles.definitions import CRITIC_ROLES, FULL_ROLES, ROUNDS
from roles.parsing import parse_response
from roles.prompts import Prompt, _environment, build_prompt
from roles.schemas import ARTIFACT_SCHEMAS, ProposalArtifact

TASK = {
    "id": "bd-7f3",
    "title": "Guard the average against empty input",
    "description": "average([]) raises ZeroDivisionError.",
    "design": "",
    "acceptance_criteria": "average([]) returns 0.0",
    "notes": None,
}
DIFF = "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
PROPOSAL = {"plan": ["add a guard", "add a test"], "assumptions": [], "risk": "low"}
CRITIQUE = {"findings": ["no test for []"], "must_fix": ["add the test"], "vote_flip_conditions": ["test added"], "risk": "medium"}
SYNTHESIS = {
    "decision_log": [{"point": "add the test", "decision": "accepted", "reason": "proves the fix"}],
    "patch": DIFF,
    "validation_commands": ["python -m pytest -q"],
}
FINDING = {
    "finding_id": "F1",
    "location": "app.py:1",
    "severity": "High",
    "label": "MUST_FIX",
    "issue": "wrong constant",
    "evidence": "spec says 3",
    "minimal_fix": "use 3",
    "code_context": "x = 2",
}
REVIEW = {"decision": "request_changes", "findings": [FINDING], "summary": "one issue"}
REVISION_PLAN = {"summary": "fix F1", "steps": [{"finding_id": "F1", "change": "use 3"}]}

# The least each round needs, with a role that answers it.
MINIMAL = {
    "hydration": ("proposer", {}),
    "proposal": ("proposer", {}),
    "critique": ("critic_a", {"proposal": PROPOSAL}),
    "synthesis": ("synthesizer", {"proposal": PROPOSAL, "critiques": {}}),
    "vote": ("skeptic", {"synthesis": SYNTHESIS}),
    "review": ("reviewer", {"synthesis": SYNTHESIS}),
    "revision-plan": ("synthesizer", {"review": REVIEW}),
    "revision": ("synthesizer", {"review": REVIEW, "revision_plan": REVISION_PLAN}),
    "choice": ("reviewer", {"candidates": {"synthesizer": {"patch": SYNTHESIS["patch"], "validation": []}}}),
}


def prompt(round, role=None, **kwargs) -> Prompt:
    default_role, inputs = MINIMAL[round]
    kwargs.setdefault("inputs", inputs)
    return build_prompt(round, role or default_role, task=TASK, **kwargs)


def test_templates_use_strict_undefined():
    assert _environment().undefined is StrictUndefined


def test_there_is_a_template_with_both_blocks_for_every_round():
    folder = Path(templates.__file__).parent
    for round in ROUNDS:
        source = (folder / f"{round}.j2").read_text()
        assert "{% block shared %}" in source and "{% block shape %}" in source
    assert (folder / "_shared.j2").exists() and (folder / "strict_followup.j2").exists()


@pytest.mark.parametrize("round", ROUNDS)
@pytest.mark.parametrize("strict", [False, True])
def test_every_round_renders_with_minimal_inputs_and_names_every_field(round, strict):
    built = prompt(round, strict=strict)
    assert built.text == built.shared + built.role_part
    assert f"# Round: {round}" in built.shared
    assert "# Task bd-7f3: Guard the average against empty input" in built.shared
    assert "average([]) returns 0.0" in built.shared
    for field in ARTIFACT_SCHEMAS[round].model_fields:
        assert f'"{field}"' in built.role_part
    assert ('"task_id": "bd-7f3"' in built.role_part) is strict
    assert "Correction" not in built.text


def test_empty_task_fields_leave_no_empty_headings():
    text = prompt("proposal").shared
    assert "## Design" not in text and "## Notes" not in text and "# Repository context" not in text
    assert "## Description\naverage([]) raises ZeroDivisionError.\n" in text


@pytest.mark.parametrize(
    "round, roles, inputs",
    [
        ("critique", CRITIC_ROLES, {"proposal": PROPOSAL, "prior_votes": {"critic_b": {"vote": "disagree", "reason": "no test"}}}),
        ("vote", FULL_ROLES, {"proposal": PROPOSAL, "synthesis": SYNTHESIS, "critiques": {"skeptic": CRITIQUE}}),
        ("vote", FULL_ROLES, {"subject": "revision_plan", "review": REVIEW, "revision_plan": REVISION_PLAN}),
    ],
)
def test_shared_prefix_is_identical_for_every_role_of_a_round(round, roles, inputs):
    built = [
        build_prompt(round, role, task=TASK, inputs=inputs, repo_context="app.py: x = 1", outbox=[{"from": "proposer", "message": f"hi {role}"}])
        for role in roles
    ]
    assert len({p.shared for p in built}) == 1
    assert len({p.role_part for p in built}) == len(roles)
    shared = built[0].shared
    assert "Your role" not in shared and "hi " not in shared
    for role, p in zip(roles, built):
        assert p.role_part.startswith(f"\n# Your role: {role}\n")
        assert f"- proposer: hi {role}" in p.role_part


def test_critique_order_does_not_depend_on_completion_order():
    forward = prompt("synthesis", inputs={"proposal": PROPOSAL, "critiques": {"critic_a": CRITIQUE, "skeptic": CRITIQUE}})
    backward = prompt("synthesis", inputs={"proposal": PROPOSAL, "critiques": {"skeptic": CRITIQUE, "critic_a": CRITIQUE}})
    assert forward == backward
    assert forward.shared.index("### critic_a") < forward.shared.index("### skeptic")


def test_models_accepted_as_inputs_render_like_dicts():
    as_model = prompt("critique", inputs={"proposal": ProposalArtifact.model_validate(PROPOSAL)})
    assert as_model == prompt("critique")


def test_model_output_is_data_never_template_code():
    proposal = {**PROPOSAL, "plan": ["{{ 7 * 7 }} {% if true %}x{% endif %}"]}
    text = prompt("critique", inputs={"proposal": proposal}).shared
    assert "1. {{ 7 * 7 }} {% if true %}x{% endif %}" in text
    assert "49" not in text


def test_patch_containing_a_fence_gets_a_longer_fence():
    patch = "--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n ```\n-old\n+new\n ```\n"
    text = prompt("vote", inputs={"synthesis": {**SYNTHESIS, "patch": patch}}).shared
    assert f"````diff\n{patch}````" in text


def test_review_shows_validation_diff_and_earlier_cycles():
    inputs = {
        "synthesis": SYNTHESIS,
        "validation": [
            {"command": "python -m pytest -q", "exit_code": 1, "passed": False, "output": "x" * 9000},
            {"command": ["ruff", "check", "a b.py"], "exit_code": 0, "passed": True},
            {"command": "rm -rf /", "exit_code": None, "passed": False, "rejected": True},
            {"command": "python -m unittest", "exit_code": 0, "passed": False, "reason": "no_tests_ran",
             "tests": {"runner": "unittest", "ran": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 4}},
        ],
        "diff": DIFF,
        "prior_reviews": [REVIEW],
        "review_cycle": 1,
    }
    text = prompt("review", inputs=inputs).shared
    assert "# Round: review (cycle 1)" in text
    assert "- python -m pytest -q: failed (exit code 1)" in text
    assert "- ruff check 'a b.py': passed" in text
    assert "- rm -rf /: rejected by the allowlist, not run" in text
    assert "- python -m unittest: failed (no_tests_ran, exit code 0); tests: 0 ran, 0 failed, 0 errors, 4 skipped" in text
    assert "[...]\n" + "x" * 6000 + "\n```" in text and "x" * 6001 not in text
    assert f"```diff\n{DIFF}```" in text
    assert "### Cycle 0\nDecision: request_changes" in text
    assert "- F1 [High, MUST_FIX] app.py:1: wrong constant" in text


def test_no_diff_synthesis_is_shown_without_a_fence():
    text = prompt("vote", inputs={"synthesis": {**SYNTHESIS, "patch": "NO_DIFF: nothing to change"}}).shared
    assert "Patch: NO_DIFF: nothing to change" in text


def test_critique_and_vote_of_a_revision_plan():
    inputs = {"subject": "revision_plan", "review": REVIEW, "revision_plan": REVISION_PLAN}
    critique = prompt("critique", "skeptic", inputs=inputs).shared
    assert "## Revision plan\nSummary: fix F1\nSteps:\n- F1: use 3" in critique
    assert "## Proposal" not in critique
    vote = prompt("vote", "proposer", inputs=inputs).shared
    assert "vote on the synthesizer's revision plan" in vote and "## Synthesis" not in vote


def test_strict_follow_up_is_appended_only_with_a_parse_error():
    followup = prompt("proposal", strict=True, attempt=2, parse_error="invalid proposal artifact: risk: Field required")
    assert followup.shared == prompt("proposal", strict=True).shared
    correction = followup.role_part.split("## Correction (attempt 2)\n", 1)[1]
    assert correction.startswith("Your previous answer was rejected: invalid proposal artifact: risk: Field required\n")
    assert '{"role": "proposer", "task_id": "bd-7f3", "artifact": ARTIFACT}' in correction
    assert '"risk": "low|medium|high"' in correction
    retry = prompt("proposal", attempt=2)
    assert "Correction" not in retry.text and retry == prompt("proposal")


def test_tolerant_synthesis_allows_a_diff_block_and_strict_does_not():
    assert "one ```diff block" in prompt("synthesis").role_part
    assert "```diff" not in prompt("synthesis", strict=True).role_part


def test_outbox_offered_only_in_planning_rounds():
    assert '"outbox"' in prompt("proposal").role_part and '"outbox"' in prompt("critique").role_part
    assert '"outbox"' not in prompt("vote").role_part and '"outbox"' not in prompt("review", strict=True).role_part


def test_the_answer_format_example_of_the_strict_envelope_is_json_shaped():
    role_part = prompt("vote", strict=True).role_part
    line = next(line for line in role_part.splitlines() if line.startswith('{"role"'))
    shape = line.replace("ARTIFACT", json.dumps({"vote": "agree", "reason": "fine"}))
    parsed = parse_response(shape, "vote", role="skeptic", task_id="bd-7f3", strict=True)
    assert parsed.artifact.vote == "agree"


@pytest.mark.parametrize(
    "round, role, inputs, message",
    [
        ("proposal", "critic_a", {}, "does not answer the proposal round"),
        ("critique", "synthesizer", {"proposal": PROPOSAL}, "does not answer"),
        ("vote", "reviewer", {"synthesis": SYNTHESIS}, "does not answer"),
        ("proposal", "intern", {}, "unknown role"),
        ("implementation", "proposer", {}, "unknown round"),
        ("critique", "critic_a", {}, "needs input(s) proposal"),
        ("critique", "critic_a", {"subject": "revision_plan", "revision_plan": REVISION_PLAN}, "needs input(s) review"),
        ("vote", "critic_a", {"subject": "proposal", "proposal": PROPOSAL}, "subject must be one of"),
        ("choice", "reviewer", {}, "needs input(s) candidates"),
        ("choice", "synthesizer", {"candidates": {}}, "does not answer"),
        ("proposal", "proposer", {"findings": []}, "unknown prompt input(s) findings"),
    ],
)
def test_bad_calls_are_value_errors(round, role, inputs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_prompt(round, role, task=TASK, inputs=inputs)


def test_malformed_inputs_task_and_outbox_are_rejected():
    with pytest.raises(ValueError):
        prompt("critique", inputs={"proposal": {"plan": []}})
    with pytest.raises(ValueError, match="task needs an 'id'"):
        build_prompt("proposal", "proposer", task={"title": "x"}, inputs={})
    with pytest.raises(ValueError, match="needs a 'message'"):
        prompt("proposal", outbox=[{"from": "skeptic"}])
    with pytest.raises(ValueError, match="attempt"):
        prompt("proposal", attempt=0)


def test_review_shows_each_failing_test_with_its_message_before_the_output():
    """Issue 35 item 3: the failing tests, each with its own message, come before any raw output."""
    panic = ("thread 'tests::breaks' panicked at src/lib.rs:9:22:\nassertion `left == right` failed: two and two\n"
             "  left: 4\n right: 5")
    result = {"command": "cargo test", "exit_code": 101, "passed": False,
              "stdout_tail": "test tests::adds ... ok\n" * 50 + "test result: FAILED. 1 passed; 1 failed",
              "stderr_tail": "warning: unused variable\nerror: test failed, to rerun pass `--lib`",
              "tests": {"runner": "cargo test", "ran": 2, "passed": 1, "failed": 1, "errors": 0, "skipped": 0},
              "failures": [{"id": "tests::breaks", "status": "failed", "message": panic}]}
    text = prompt("review", inputs={"synthesis": SYNTHESIS, "validation": [result], "diff": DIFF,
                                    "review_cycle": 0}).shared
    failing = text.index("Failing tests:")
    assert failing < text.index("Last lines of output:") < text.index("error: test failed")
    assert "- tests::breaks: failed\n    thread 'tests::breaks' panicked at src/lib.rs:9:22:" in text
    assert "      left: 4\n     right: 5" in text
