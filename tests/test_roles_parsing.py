"""Parsing worker answers: strict envelopes, tolerant JSON and markdown forms, and fuzzing."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roles.definitions import ROUNDS
from roles.parsing import PARSE_ERROR_KINDS, ParseError, parse_response
from roles.schemas import ARTIFACT_SCHEMAS, ProposalArtifact, ReviewArtifact, SynthesisArtifact, VoteArtifact

TASK = "bd-7f3"
DIFF = "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
PROPOSAL = {"plan": ["add a guard", "add a test"], "assumptions": ["count >= 0"], "risk": "low"}
FINDING = {
    "finding_id": "F1",
    "location": "src/app.py:12",
    "severity": "High",
    "label": "MUST_FIX",
    "issue": "division by zero",
    "evidence": "count may be 0",
    "minimal_fix": "guard count",
    "code_context": "return total / count",
}


def parse(text, round, *, role="proposer", strict=False):
    return parse_response(text, round, role=role, task_id=TASK, strict=strict)


def parse_error(text, round, *, role="proposer", strict=False) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text, round, role=role, strict=strict)
    assert "\n" not in info.value.message
    return info.value


def envelope(artifact, *, role="proposer", task_id=TASK, **extra):
    return json.dumps({"role": role, "task_id": task_id, "artifact": artifact, **extra})


# ------------------------------------------------------------------------- strict


def test_strict_envelope_with_outbox():
    text = envelope(PROPOSAL, outbox=[{"to": "skeptic", "message": "check the lock"}])
    parsed = parse(f"\n  {text}\n", "proposal", strict=True)
    assert isinstance(parsed.artifact, ProposalArtifact)
    assert parsed.artifact.plan == PROPOSAL["plan"]
    assert [(m.to, m.message) for m in parsed.outbox] == [("skeptic", "check the lock")]
    assert parsed.raw == f"\n  {text}\n"


def test_strict_tolerates_one_json_fence_around_the_envelope():
    parsed = parse(f"```json\n{envelope(PROPOSAL)}\n```", "proposal", strict=True)
    assert parsed.artifact.risk == "low"


def test_strict_takes_artifact_level_outbox_too():
    artifact = {**PROPOSAL, "outbox": [{"to": "critic_a", "message": "see step 2"}]}
    parsed = parse(envelope(artifact, outbox=[{"to": "skeptic", "message": "m"}]), "proposal", strict=True)
    assert [m.to for m in parsed.outbox] == ["skeptic", "critic_a"]


@pytest.mark.parametrize(
    "text",
    [
        f"Here you go:\n{envelope(PROPOSAL)}",
        f"{envelope(PROPOSAL)}\nThanks!",
        json.dumps(PROPOSAL).replace("{", "{{"),
        "## Plan\n- add a guard\nRisk: low",
    ],
)
def test_strict_rejects_anything_but_one_json_object(text):
    assert parse_error(text, "proposal", strict=True).kind == "unparsable"


@pytest.mark.parametrize(
    "text, fragment",
    [
        (json.dumps(PROPOSAL), "lacks role, task_id, artifact"),
        (json.dumps([PROPOSAL]), "got a JSON array"),
        (json.dumps({"role": "proposer", "task_id": TASK}), "lacks artifact"),
        (envelope("plan: x"), '"artifact" must be a JSON object'),
        (envelope(PROPOSAL, outbox={"to": "x", "message": "y"}), '"outbox" must be a list'),
        (envelope(PROPOSAL, outbox=[{"to": "skeptic"}]), "outbox entry"),
        (envelope({**PROPOSAL, "risk": "extreme"}), "risk"),
    ],
)
def test_strict_shape_errors(text, fragment):
    error = parse_error(text, "proposal", strict=True)
    assert error.kind == "invalid_shape"
    assert fragment in error.message


@pytest.mark.parametrize("role, task_id", [("critic_a", TASK), ("proposer", "bd-other"), ("proposer", 7)])
def test_strict_envelope_mismatch(role, task_id):
    error = parse_error(envelope(PROPOSAL, role=role, task_id=task_id), "proposal", strict=True)
    assert error.kind == "envelope_mismatch"
    assert "expected role 'proposer'" in error.message


def test_strict_does_not_read_a_diff_block_outside_the_json():
    artifact = {"decision_log": [], "validation_commands": ["pytest"]}
    error = parse_error(envelope(artifact, role="synthesizer") + f"\n```diff\n{DIFF}```", "synthesis", role="synthesizer", strict=True)
    assert error.kind == "unparsable"


# ------------------------------------------------------------------ tolerant JSON


def test_tolerant_reads_a_bare_artifact():
    assert parse(json.dumps(PROPOSAL), "proposal").artifact.plan == PROPOSAL["plan"]


def test_tolerant_reads_an_envelope_without_checking_role_or_task():
    parsed = parse(envelope(PROPOSAL, role="someone", task_id="other", outbox=[{"to": "skeptic", "message": "m"}]), "proposal")
    assert parsed.artifact.risk == "low"
    assert parsed.outbox[0].to == "skeptic"


def test_tolerant_reads_a_json_fence_inside_markdown():
    text = f"I looked at the code.\n\n```json\n{json.dumps(PROPOSAL, indent=2)}\n```\n\nLet me know."
    assert parse(text, "proposal").artifact.assumptions == ["count >= 0"]


def test_tolerant_reads_the_first_relevant_balanced_object_in_prose():
    text = f'Config is {{"debug": true}} here; my answer: {json.dumps(PROPOSAL)} done {{"x": 1}}'
    assert parse(text, "proposal").artifact.plan == PROPOSAL["plan"]


def test_tolerant_matches_keys_loosely_and_coerces_strings_to_lists():
    text = json.dumps({"Plan": "add a guard", "Assumptions": "none", "Risk": "MEDIUM"})
    proposal = parse(text, "proposal").artifact
    assert (proposal.plan, proposal.assumptions, proposal.risk) == (["add a guard"], [], "medium")
    critique = parse(
        json.dumps({"findings": [], "mustFix": ["x"], "vote-flip-conditions": [], "risk": "low"}), "critique", role="skeptic"
    ).artifact
    assert critique.must_fix == ["x"]


def test_tolerant_joins_a_list_given_for_a_text_field_and_reads_null_as_empty():
    text = json.dumps({"acceptance_criteria": ["tests pass", "no warnings"], "design": None, "notes": ""})
    hydration = parse(text, "hydration").artifact
    assert (hydration.acceptance, hydration.design) == ("- tests pass\n- no warnings", "")
    assert parse(json.dumps({**PROPOSAL, "assumptions": None}), "proposal").artifact.assumptions == []
    # Strict mode takes the artifact as written.
    assert parse_error(envelope({**PROPOSAL, "assumptions": None}), "proposal", strict=True).kind == "invalid_shape"


def test_tolerant_skips_malformed_outbox_entries():
    text = json.dumps({**PROPOSAL, "outbox": [{"to": "skeptic"}, "hello", {"role": "critic_b", "text": "hi"}]})
    assert [(m.to, m.message) for m in parse(text, "proposal").outbox] == [("critic_b", "hi")]


def test_irrelevant_json_is_an_invalid_shape_not_unparsable():
    error = parse_error('Result: {"status": "ok"}', "vote")
    assert error.kind == "invalid_shape"
    assert "vote: Field required" in error.message


def test_text_without_structure_is_unparsable():
    error = parse_error("I think the plan is fine, ship it.", "proposal")
    assert error.kind == "unparsable"
    assert "plan, assumptions, risk" in error.message


def test_validation_errors_list_the_bad_fields():
    error = parse_error(json.dumps({"plan": [], "assumptions": [], "risk": "huge"}), "proposal")
    assert error.kind == "invalid_shape"
    assert "plan:" in error.message and "risk:" in error.message


# -------------------------------------------------------------- tolerant markdown


def test_markdown_proposal_with_headings_bullets_and_key_line():
    text = (
        "# Proposal\n\n## Plan\n1. Add a guard\n   for zero counts\n2. Add a test\n   - covering 0\n\n"
        "## Assumptions\n- None\n\n**Risk:** medium — touches the hot path\n"
    )
    proposal = parse(text, "proposal").artifact
    assert proposal.plan == ["Add a guard for zero counts", "Add a test covering 0"]
    assert proposal.assumptions == []
    assert proposal.risk == "medium"


def test_markdown_list_bullet_that_looks_like_a_key_stays_an_item():
    text = "## Findings\n- Risk: the lock may stall writers\n- no test for 0\n## Must fix\n- add test\n## Vote flip conditions\n- test added\n## Risk\nhigh\n"
    critique = parse(text, "critique", role="skeptic").artifact
    assert critique.findings == ["Risk: the lock may stall writers", "no test for 0"]
    assert critique.risk == "high"


def test_markdown_vote_key_lines():
    vote = parse("Vote: **Agree**\nReason: the plan is small\nand more prose", "vote").artifact
    assert (vote.vote, vote.reason) == ("agree", "the plan is small")


def test_markdown_vote_that_opens_with_the_verdict():
    vote = parse("**Disagree** — the migration has no rollback.\n\nDetails follow.", "vote").artifact
    assert (vote.vote, vote.reason) == ("disagree", "the migration has no rollback")


def test_markdown_hydration_sections():
    text = "## Acceptance criteria\n- returns 0 for empty input\n\n## Design\nKeep the API.\n\n## Notes\n"
    hydration = parse(text, "hydration").artifact
    assert hydration.acceptance == "- returns 0 for empty input"
    assert (hydration.design, hydration.notes) == ("Keep the API.", "")


def test_markdown_revision_plan_steps():
    text = "Summary: fix both findings\n\nSteps:\n- F1: guard the division\n- [F2] add the missing test\n"
    plan = parse(text, "revision-plan", role="synthesizer").artifact
    assert [(s.finding_id, s.change) for s in plan.steps] == [("F1", "guard the division"), ("F2", "add the missing test")]


def test_markdown_outbox_section():
    text = json.dumps(PROPOSAL) + "\n\n## Outbox\n- skeptic: please check locking\n"
    assert [(m.to, m.message) for m in parse(text, "proposal").outbox] == [("skeptic", "please check locking")]


# -------------------------------------------------------------- synthesis patches


def test_diff_block_with_json_fields():
    fields = {"decision_log": [{"point": "guard", "decision": "accepted", "reason": "crash"}], "validation_commands": ["pytest -q"]}
    text = f"```json\n{json.dumps(fields)}\n```\n\nThe patch:\n\n```diff\n{DIFF}```\n"
    artifact = parse(text, "synthesis", role="synthesizer").artifact
    assert isinstance(artifact, SynthesisArtifact)
    assert artifact.patch == DIFF
    assert artifact.validation_commands == ["pytest -q"]


def test_patch_block_with_markdown_fields():
    text = (
        "## Decision log\n- Accepted: guard zero — prevents a crash\n- rename module (critic_b): rejected - churn\n\n"
        "## Validation commands\n- `python -m pytest -q` (unit tests)\n\n## Patch\n```patch\n" + DIFF + "```\n"
    )
    artifact = parse(text, "revision", role="synthesizer").artifact
    assert [(d.point, d.decision, d.reason) for d in artifact.decision_log] == [
        ("guard zero", "accepted", "prevents a crash"),
        ("rename module (critic_b)", "rejected", "churn"),
    ]
    assert artifact.validation_commands == ["python -m pytest -q"]
    assert artifact.patch == DIFF


def test_decision_log_table_and_shell_fence_commands():
    text = (
        "## Decision log\n| Point | Decision | Reason |\n|---|---|---|\n| guard zero | Accepted | crash |\n\n"
        "## Validation commands\n```sh\n# unit tests\n$ python -m pytest -q\n```\n\n```diff\n" + DIFF + "```\n"
    )
    artifact = parse(text, "synthesis", role="synthesizer").artifact
    assert artifact.decision_log[0].decision == "accepted"
    assert artifact.validation_commands == ["python -m pytest -q"]


def test_diff_context_line_with_a_fence_does_not_close_the_block():
    patch = "--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n ```\n-old\n+new\n ```\n"
    text = json.dumps({"decision_log": [], "validation_commands": ["true"]}) + f"\n```diff\n{patch}```\n"
    assert parse(text, "synthesis", role="synthesizer").artifact.patch == patch


def test_no_diff_line_counts_as_the_patch():
    text = json.dumps({"decision_log": [], "validation_commands": []}) + "\n\n**NO_DIFF:** the guard already exists\n"
    artifact = parse(text, "synthesis", role="synthesizer").artifact
    assert artifact.no_diff_reason == "the guard already exists"


def test_json_patch_wins_over_a_diff_block():
    fields = {"decision_log": [], "patch": "NO_DIFF: nothing to do", "validation_commands": []}
    text = f"{json.dumps(fields)}\n```diff\n{DIFF}```\n```diff\n{DIFF}```"
    assert parse(text, "synthesis", role="synthesizer").artifact.no_diff_reason == "nothing to do"


def test_two_diff_blocks_are_rejected():
    text = json.dumps({"decision_log": [], "validation_commands": []}) + f"\n```diff\n{DIFF}```\nand\n```\n{DIFF}```\n"
    error = parse_error(text, "synthesis", role="synthesizer")
    assert (error.kind, error.message) == ("invalid_shape", "expected exactly one unified diff, found 2 diff blocks")


def test_a_diff_block_and_no_diff_together_are_rejected():
    text = json.dumps({"decision_log": [], "validation_commands": []}) + f"\nNO_DIFF: done\n```diff\n{DIFF}```\n"
    assert "both a diff block and NO_DIFF" in parse_error(text, "synthesis", role="synthesizer").message


def test_synthesis_without_any_patch_is_invalid():
    error = parse_error(json.dumps({"decision_log": [], "validation_commands": []}), "synthesis", role="synthesizer")
    assert error.kind == "invalid_shape"
    assert "patch: Field required" in error.message


# -------------------------------------------------------------------------- review


def test_review_json_with_findings():
    text = json.dumps({"decision": "request_changes", "findings": [FINDING], "summary": "one bug"})
    review = parse(text, "review", role="reviewer").artifact
    assert isinstance(review, ReviewArtifact)
    assert review.findings[0].location == "src/app.py:12"


def test_review_with_a_malformed_finding_is_invalid_finding_shape():
    bad = {**FINDING, "location": "somewhere", "severity": "Blocker"}
    text = json.dumps({"decision": "request_changes", "findings": [FINDING | {"finding_id": "F0"}, bad], "summary": "x"})
    error = parse_error(text, "review", role="reviewer")
    assert error.kind == "invalid_finding_shape"
    assert "findings[1].location" in error.message and "findings[1].severity" in error.message


def test_review_with_a_bad_decision_is_invalid_shape_even_with_bad_findings():
    text = json.dumps({"decision": "maybe", "findings": [{"finding_id": "F1"}], "summary": "x"})
    assert parse_error(text, "review", role="reviewer").kind == "invalid_shape"
    assert parse_error(json.dumps({"findings": [], "summary": "x"}), "review", role="reviewer").kind == "invalid_shape"


def test_strict_review_with_a_malformed_finding_is_invalid_finding_shape():
    artifact = {"decision": "request_changes", "findings": [{**FINDING, "code_context": ""}], "summary": "x"}
    error = parse_error(envelope(artifact, role="reviewer"), "review", role="reviewer", strict=True)
    assert error.kind == "invalid_finding_shape"


def test_markdown_review_with_finding_blocks():
    text = (
        "Decision: request changes\nSummary: one real bug\n\n## Findings\n"
        "### F1: division by zero\n- **Location:** `src/app.py:12`\n- Severity: high\n- Label: MUST_FIX\n"
        "- Issue: crashes on empty input\n  when count is 0\n- Evidence: see test\n- Minimal fix: guard count\n"
        "- Code context:\n```python\n    return total / count\n```\n"
        "### F2\n- location: src/app.py:20\n- severity: Low\n- label: CAN_IGNORE\n- issue: naming\n"
        "- evidence: style guide\n- fix: rename\n- code_context: `tmp2 = 1`\n"
    )
    review = parse(text, "review", role="reviewer").artifact
    assert review.decision == "request_changes"
    first, second = review.findings
    assert (first.finding_id, first.severity, first.issue) == ("F1", "High", "crashes on empty input\nwhen count is 0")
    assert first.code_context == "    return total / count\n"
    assert (second.finding_id, second.minimal_fix) == ("F2", "rename")


def test_markdown_review_with_no_findings():
    review = parse("**Decision:** approve\n\n## Findings\nNone.\n\n## Summary\nNo material issues found.", "review", role="reviewer").artifact
    assert (review.decision, review.findings, review.summary) == ("approve", [], "No material issues found.")


def test_markdown_review_with_unreadable_findings_is_invalid_finding_shape():
    text = "Decision: request_changes\nSummary: see findings\n## Findings\nThe division in app.py crashes on zero."
    assert parse_error(text, "review", role="reviewer").kind == "invalid_finding_shape"


# --------------------------------------------------------------------- contracts


def test_unknown_round_is_a_programming_error():
    with pytest.raises(ValueError):
        parse("{}", "implementation")


def test_parse_error_kinds_are_checked():
    with pytest.raises(ValueError):
        ParseError("weird", "x")
    assert ParseError("unparsable", "a\nb").message == "a b"


@settings(max_examples=60, deadline=None)
@given(
    plan=st.lists(st.text(min_size=1).filter(str.strip), min_size=1, max_size=5),
    assumptions=st.lists(st.text(min_size=1).filter(str.strip), max_size=3),
    risk=st.sampled_from(["low", "medium", "high"]),
    strict=st.booleans(),
)
def test_any_valid_proposal_round_trips(plan, assumptions, risk, strict):
    artifact = ProposalArtifact(plan=plan, assumptions=assumptions, risk=risk)
    parsed = parse(envelope(artifact.model_dump()), "proposal", strict=strict)
    assert parsed.artifact == artifact


@settings(max_examples=60, deadline=None)
@given(vote=st.sampled_from(["agree", "disagree"]), reason=st.text(min_size=1).filter(lambda s: s.strip()))
def test_any_valid_vote_round_trips_in_markdown(vote, reason):
    artifact = VoteArtifact(vote=vote, reason=reason)
    parsed = parse(f"Vote: {artifact.vote}\nReason: {artifact.reason}\n", "vote")
    assert parsed.artifact == artifact


# ------------------------------------------------------------------------ fuzzing

_KEYS = sorted({key for schema in ARTIFACT_SCHEMAS.values() for key in schema.model_fields} | {"artifact", "outbox", "role", "task_id", "to", "message"})
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20) | st.sampled_from(["low", "agree", "approve", "MUST_FIX", "High", "a.py:1", DIFF, "NO_DIFF: x"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=8), inner, max_size=6),
    max_leaves=20,
)
_LINES = st.sampled_from(
    [
        "## Plan", "## Findings", "### F1", "**Risk:** medium", "Vote: agree", "Reason: fine", "Decision: approve",
        "Summary: ok", "- item", "1. step", "  - sub", "| Point | Decision | Reason |", "|---|---|---|",
        "| a | accepted | b |", "```diff", "```json", "```", "~~~", "NO_DIFF: reason", "NO_DIFF:", "--- a/x",
        "+++ b/x", "@@ -1 +1 @@", "-a", "+b", " ```", "{", "}", '{"plan": ["a"], "risk": "low"', "- location: a.py:1",
        "- severity: High", "finding_id: F2", "code_context:", "Steps:", "- F1: change", "## Outbox", "- skeptic: hi", "",
    ]
)


def _check(text: str, round: str, strict: bool) -> None:
    try:
        parsed = parse_response(text, round, role="proposer", task_id=TASK, strict=strict)
    except ParseError as error:
        assert error.kind in PARSE_ERROR_KINDS
        assert error.message and "\n" not in error.message
    else:
        assert isinstance(parsed.artifact, ARTIFACT_SCHEMAS[round])
        assert parsed.raw == text


_FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(text=st.text(), round=st.sampled_from(ROUNDS), strict=st.booleans())
def test_fuzz_arbitrary_text_raises_only_parse_error(text, round, strict):
    _check(text, round, strict)


@_FUZZ
@given(
    value=_JSON,
    round=st.sampled_from(ROUNDS),
    strict=st.booleans(),
    wrap=st.sampled_from(["V", "```json\nV\n```", "text V text", '{"role": "proposer", "task_id": "bd-7f3", "artifact": V}']),
)
def test_fuzz_json_shaped_text_raises_only_parse_error(value, round, strict, wrap):
    _check(wrap.replace("V", json.dumps(value)), round, strict)


@_FUZZ
@given(lines=st.lists(_LINES | st.text(max_size=15), max_size=25), round=st.sampled_from(ROUNDS), strict=st.booleans())
def test_fuzz_markdown_shaped_text_raises_only_parse_error(lines, round, strict):
    _check("\n".join(lines), round, strict)
