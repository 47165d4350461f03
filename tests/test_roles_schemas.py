"""Role definitions and artifact schemas: required fields, normalisation, rejections."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from roles.definitions import (
    ALL_ROLES,
    CRITIC_ROLES,
    FALLBACK_ROLES,
    FULL_ROLES,
    REVIEWER,
    ROLE_BRIEFS,
    ROUNDS,
    critics_for,
    round_owner,
)
from roles.schemas import (
    ARTIFACT_SCHEMAS,
    CritiqueArtifact,
    Finding,
    HydrationArtifact,
    OutboxMessage,
    ProposalArtifact,
    ReviewArtifact,
    RevisionPlanArtifact,
    SynthesisArtifact,
    VoteArtifact,
    looks_like_diff,
)

DIFF = "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def finding(**changes):
    base = {
        "finding_id": "F1",
        "location": "src/app.py:12",
        "severity": "High",
        "label": "MUST_FIX",
        "issue": "division by zero",
        "evidence": "count may be 0",
        "minimal_fix": "guard count",
        "code_context": "    return total / count",
    }
    base.update(changes)
    return base


def synthesis(**changes):
    base = {
        "decision_log": [{"point": "guard zero", "decision": "accepted", "reason": "crash"}],
        "patch": DIFF,
        "validation_commands": ["python -m pytest -q"],
    }
    base.update(changes)
    return base


# ------------------------------------------------------------------- definitions


def test_role_sets_follow_the_profile():
    assert FULL_ROLES == ("proposer", "critic_a", "critic_b", "skeptic", "synthesizer")
    assert FALLBACK_ROLES == ("proposer", "skeptic", "synthesizer")
    assert set(ROLE_BRIEFS) == set(ALL_ROLES) == set(FULL_ROLES) | {REVIEWER}
    assert all(len(brief) > 80 and "\n" not in brief for brief in ROLE_BRIEFS.values())


def test_critics_for_full_and_fallback_sets():
    assert critics_for(FULL_ROLES) == CRITIC_ROLES
    assert critics_for(FALLBACK_ROLES) == ("skeptic",)
    assert critics_for(["skeptic", "critic_a"]) == ("critic_a", "skeptic")
    assert critics_for(["proposer"]) == ()


def test_round_owner():
    assert round_owner("hydration") == round_owner("proposal") == "proposer"
    assert round_owner("synthesis") == round_owner("revision-plan") == round_owner("revision") == "synthesizer"
    assert round_owner("review") == "reviewer"
    assert round_owner("critique") is None and round_owner("vote") is None
    with pytest.raises(ValueError, match="unknown round"):
        round_owner("implementation")


def test_every_round_has_a_schema():
    assert tuple(ARTIFACT_SCHEMAS) == ROUNDS
    assert ARTIFACT_SCHEMAS["revision"] is SynthesisArtifact


# ----------------------------------------------------------------------- proposal


def test_proposal_normalises_case_and_whitespace_and_ignores_unknown_keys():
    proposal = ProposalArtifact.model_validate(
        {"plan": ["  add guard "], "assumptions": [], "risk": " Medium ", "confidence": 0.9}
    )
    assert proposal.plan == ["add guard"]
    assert proposal.risk == "medium"
    assert "confidence" not in proposal.model_dump()


@pytest.mark.parametrize(
    "plan",
    [[], ["a", "b", "c", "d", "e", "f"], ["ok", "   "], "one string", [1]],
)
def test_proposal_plan_must_hold_one_to_five_non_empty_strings(plan):
    with pytest.raises(ValidationError):
        ProposalArtifact.model_validate({"plan": plan, "assumptions": [], "risk": "low"})


def test_proposal_accepts_five_steps_and_rejects_unknown_risk_or_missing_fields():
    assert len(ProposalArtifact.model_validate({"plan": list("abcde"), "assumptions": ["x"], "risk": "HIGH"}).plan) == 5
    with pytest.raises(ValidationError):
        ProposalArtifact.model_validate({"plan": ["a"], "assumptions": [], "risk": "severe"})
    with pytest.raises(ValidationError) as info:
        ProposalArtifact.model_validate({"plan": ["a"]})
    assert {error["loc"][0] for error in info.value.errors()} == {"assumptions", "risk"}


def test_critique_requires_every_field():
    critique = CritiqueArtifact.model_validate(
        {"findings": [], "must_fix": [], "vote_flip_conditions": ["tests"], "risk": "Low"}
    )
    assert critique.risk == "low"
    with pytest.raises(ValidationError):
        CritiqueArtifact.model_validate({"findings": [], "must_fix": [], "risk": "low"})


def test_hydration_needs_acceptance_but_allows_empty_design_and_notes():
    hydration = HydrationArtifact.model_validate({"acceptance": " - tests pass ", "design": "", "notes": ""})
    assert hydration.acceptance == "- tests pass"
    with pytest.raises(ValidationError):
        HydrationArtifact.model_validate({"acceptance": " ", "design": "", "notes": ""})
    with pytest.raises(ValidationError):
        HydrationArtifact.model_validate({"acceptance": "x", "design": ""})


# ---------------------------------------------------------------------- synthesis


def test_synthesis_accepts_a_unified_diff_and_adds_the_final_newline():
    artifact = SynthesisArtifact.model_validate(synthesis(patch=DIFF.rstrip("\n")))
    assert artifact.patch == DIFF
    assert artifact.no_diff_reason is None


def test_synthesis_unwraps_a_fenced_patch_and_keeps_trailing_context_lines():
    patch = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n \n"
    artifact = SynthesisArtifact.model_validate(synthesis(patch=f"\n```diff\n{patch}```\n"))
    assert artifact.patch == patch


def test_synthesis_no_diff_reason():
    artifact = SynthesisArtifact.model_validate(synthesis(patch="  NO_DIFF:already implemented upstream "))
    assert artifact.patch == "NO_DIFF: already implemented upstream"
    assert artifact.no_diff_reason == "already implemented upstream"


@pytest.mark.parametrize(
    "patch",
    ["NO_DIFF:", "NO_DIFF:   ", "see the diff below", "--- a/x\n+++ b/x\n-a\n+b\n", "@@ -1 +1 @@\n-a\n+b\n", ""],
)
def test_synthesis_rejects_patches_that_are_neither_diff_nor_no_diff(patch):
    with pytest.raises(ValidationError) as info:
        SynthesisArtifact.model_validate(synthesis(patch=patch))
    assert info.value.errors()[0]["loc"] == ("patch",)


def test_git_diffs_with_only_mode_or_rename_headers_are_diffs():
    rename = "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"
    mode = "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
    assert looks_like_diff(rename) and looks_like_diff(mode)
    assert SynthesisArtifact.model_validate(synthesis(patch=rename)).patch == rename
    assert not looks_like_diff("diff --git a/x b/x\n")


def test_decision_log_entries_are_validated():
    artifact = SynthesisArtifact.model_validate(
        synthesis(decision_log=[{"point": "p", "decision": "Reject", "reason": "scope"}])
    )
    assert artifact.decision_log[0].decision == "rejected"
    with pytest.raises(ValidationError):
        SynthesisArtifact.model_validate(synthesis(decision_log=[{"point": "p", "decision": "maybe", "reason": "r"}]))
    with pytest.raises(ValidationError):
        SynthesisArtifact.model_validate(synthesis(decision_log=[{"point": "p", "decision": "accepted"}]))
    with pytest.raises(ValidationError):
        SynthesisArtifact.model_validate(synthesis(validation_commands=["pytest", " "]))


# --------------------------------------------------------------------------- vote


def test_vote_keeps_the_first_non_empty_line_of_the_reason():
    vote = VoteArtifact.model_validate({"vote": "Disagree", "reason": "\n  risky migration  \nsecond line"})
    assert (vote.vote, vote.reason) == ("disagree", "risky migration")


@pytest.mark.parametrize(
    "data",
    [{"vote": "agree", "reason": " \n "}, {"vote": "abstain", "reason": "x"}, {"vote": "agree"}, {"vote": True, "reason": "x"}],
)
def test_vote_rejections(data):
    with pytest.raises(ValidationError):
        VoteArtifact.model_validate(data)


# ------------------------------------------------------------------------- review


@pytest.mark.parametrize("location", ["a.py:1", "`src/app.py:12`", "src/app.py:3-5", "C:/work/x.py:7"])
def test_finding_locations_accepted(location):
    assert Finding.model_validate(finding(location=location)).location == location.strip("`")


@pytest.mark.parametrize("location", ["a.py", "a.py:0", ":12", "a.py:x", "a.py:5-3", "a.py:1\nb.py:2", "a.py:²"])
def test_finding_locations_rejected(location):
    with pytest.raises(ValidationError) as info:
        Finding.model_validate(finding(location=location))
    assert info.value.errors()[0]["loc"] == ("location",)


def test_finding_normalises_severity_and_label_and_keeps_code_indentation():
    parsed = Finding.model_validate(finding(severity="critical", label="must fix"))
    assert (parsed.severity, parsed.label) == ("Critical", "MUST_FIX")
    assert parsed.code_context == "    return total / count"


@pytest.mark.parametrize("field", ["finding_id", "issue", "evidence", "minimal_fix", "code_context"])
def test_finding_text_fields_must_not_be_blank(field):
    with pytest.raises(ValidationError):
        Finding.model_validate(finding(**{field: "  \n "}))
    without = finding()
    del without[field]
    with pytest.raises(ValidationError):
        Finding.model_validate(without)


def test_finding_rejects_unknown_severity_and_label():
    with pytest.raises(ValidationError):
        Finding.model_validate(finding(severity="Blocker"))
    with pytest.raises(ValidationError):
        Finding.model_validate(finding(label="NICE_TO_HAVE"))


def test_review_decision_aliases_and_summary_lines():
    review = ReviewArtifact.model_validate(
        {"decision": "Request changes", "findings": [finding()], "summary": "one\n\ntwo\n"}
    )
    assert review.decision == "request_changes"
    assert review.summary == "one\ntwo"
    with pytest.raises(ValidationError):
        ReviewArtifact.model_validate({"decision": "approve", "findings": [], "summary": "\n".join("abcdef")})
    with pytest.raises(ValidationError):
        ReviewArtifact.model_validate({"decision": "approve", "findings": [], "summary": " "})
    with pytest.raises(ValidationError):
        ReviewArtifact.model_validate({"decision": "lgtm", "findings": [], "summary": "ok"})


def test_review_rejects_duplicate_finding_ids():
    with pytest.raises(ValidationError) as info:
        ReviewArtifact.model_validate(
            {"decision": "request_changes", "findings": [finding(), finding()], "summary": "two"}
        )
    assert info.value.errors()[0]["loc"] == ("findings",)
    assert "duplicate finding_id" in info.value.errors()[0]["msg"]


def test_revision_plan_needs_steps_with_finding_ids():
    plan = RevisionPlanArtifact.model_validate({"summary": "fix F1", "steps": [{"finding_id": "F1", "change": "guard"}]})
    assert plan.steps[0].finding_id == "F1"
    with pytest.raises(ValidationError):
        RevisionPlanArtifact.model_validate({"summary": "nothing", "steps": []})
    with pytest.raises(ValidationError):
        RevisionPlanArtifact.model_validate({"summary": "x", "steps": [{"change": "guard"}]})


def test_outbox_message_fields():
    assert OutboxMessage.model_validate({"to": " skeptic ", "message": "look at locking"}).to == "skeptic"
    with pytest.raises(ValidationError):
        OutboxMessage.model_validate({"to": "skeptic", "message": ""})
