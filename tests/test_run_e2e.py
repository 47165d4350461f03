"""End-to-end runs on a real temporary git repo and a real SQLite file, one test per rule of
mesh-profile.md (happy path, every retry rule, every block reason, integration safety)."""

from __future__ import annotations

import json

import pytest

from orchestrator.protocol.outcomes import CLOSE_REASON
from tests.runkit import (
    PATCH_FEATURE,
    PATCH_REVISION,
    TASK,
    VALIDATE,
    critique,
    demo_script,
    finding,
    happy_script,
    make_workspace,
    proposal,
    r,
    review,
    revision_plan,
    synthesis,
    vote,
)


@pytest.fixture
def ws(tmp_path, db_target):
    """The demo workspace, its tracker on each engine: a run reads and writes the same on both."""
    return make_workspace(tmp_path, db_target)


def status(ws, issue=TASK):
    with ws.tracker() as t:
        return t.get(issue)["status"]


# ---------------------------------------------------------------- happy path


def test_happy_path_closes_task_with_exact_reason(ws):
    code, report, res = ws.run(happy_script())
    assert code == 0, res.output
    assert report["outcome"] == "closed"
    assert report["task"] == {"id": TASK, "title": "Add fahrenheit_to_celsius", "final_status": "closed"}
    assert report["consensus"]["tally"] == {"agree": 5, "disagree": 0}
    assert report["consensus"]["mode"] == "full"
    assert report["validation"] == [{"command": VALIDATE, "exit_code": 0, "passed": True, "rejected": False,
                                     "reason": None, "tests": {"runner": "unittest", "ran": 5, "passed": 5,
                                                               "failed": 0, "errors": 0, "skipped": 0},
                                     "limit": None}]
    assert report["review"]["decision"] == "approve"
    with ws.tracker() as t:
        task = t.get(TASK)
    assert task["close_reason"] == CLOSE_REASON
    assert ws.kinds() == ["preflight", "proposal", "critique", "critique", "critique", "synthesis",
                          "vote", "vote", "vote", "vote", "vote", "proof", "review", "review-cycle", "run-head",
                          "outcome"]
    # The preflight line is printed before any worker is called, and persisted.
    assert res.stderr.startswith("orch_preflight orch_run_id=")
    assert "scope_mode=label plan_label=plan:demo" in res.stderr
    assert report["preflight"] in ws.checkpoints()[0].payload["artifact"]["line"]


def test_patch_committed_on_task_branch_with_trailers_and_user_checkout_untouched(ws):
    head_before = ws.git("rev-parse", "HEAD")
    code, report, _ = ws.run(happy_script())
    assert code == 0
    assert ws.git("rev-parse", "HEAD") == head_before
    assert ws.git("branch", "--show-current").strip() == "main"
    assert "fahrenheit_to_celsius" not in (ws.repo / "temperature.py").read_text()
    body = ws.git("log", "-1", "--format=%B", f"mesh/{TASK}")
    assert f"Mesh-Task: {TASK}" in body
    assert f"Mesh-Run: {report['orch_run_id']}" in body
    assert "fahrenheit_to_celsius" in ws.git("show", f"mesh/{TASK}:temperature.py")
    assert ws.git("status", "--porcelain") == ""


def test_checkpoints_follow_the_comment_format(ws):
    ws.run(happy_script())
    with ws.tracker() as t:
        comments = t.comments(TASK)
    orch = [c for c in comments if c["text"].startswith("[orch:")]
    seqs = []
    for c in orch:
        first, _, rest = c["text"].partition("\n")
        assert first.startswith("[orch:")
        block = rest[rest.index("```json orch\n") + len("```json orch\n"): rest.rindex("\n```")]
        payload = json.loads(block)
        assert payload["v"] == 1 and payload["kind"] == first[6: first.index("]")]
        assert {"run_id", "seq", "consensus_cycle", "review_cycle", "artifact", "usage"} <= payload.keys()
        seqs.append(payload["seq"])
    assert seqs == list(range(1, len(seqs) + 1))


def test_ownership_model_agents_roles_and_hooks(ws):
    ws.run(happy_script())
    with ws.tracker() as t:
        agents = t.list(issue_type="agent", include_closed=True)
        roles = t.list(issue_type="role", include_closed=True)
        assert {a["title"] for a in agents} == {f"mesh-{r}" for r in
                                                ("proposer", "critic_a", "critic_b", "skeptic", "synthesizer",
                                                 "reviewer")}
        assert {x["title"] for x in roles} >= {"proposer", "reviewer"}
        for a in agents:
            slots = t.slot_show(a["id"])
            assert slots["hook"] is None  # released at the end
            assert slots["role"] is not None
            assert t.get(a["id"])["agent_state"] == "done"
        hooked = [e for e in t.events() if e["event_type"] == "slot_set" and e["field"] == "hook_bead"]
        assert {e["new_value"] for e in hooked} == {TASK}


# ---------------------------------------------------------------- scope and selection


def test_no_scope_exits_2(ws):
    res = ws.mesh("run", "--backend", "replay", "--script", str(ws.write_script(happy_script())), env={
        "BD_PLAN_LABEL": ""})
    assert res.exit_code == 2
    assert "--label" in res.stderr


def test_env_plan_label_is_used(ws):
    path = ws.write_script(happy_script())
    res = ws.mesh("run", "--backend", "replay", "--script", str(path), "--repo", str(ws.repo), "--json",
                  env={"BD_PLAN_LABEL": "plan:demo"})
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["scope"] == {"mode": "label", "plan_label": "plan:demo", "parent_epic": None}


def test_parent_scope_selects_children_of_epic(ws):
    path = ws.write_script(happy_script())
    res = ws.mesh("run", "--parent", "demo-7kq", "--backend", "replay", "--script", str(path), "--repo",
                  str(ws.repo), "--json", env={"BD_PLAN_LABEL": ""})
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["scope"]["mode"] == "parent" and report["task"]["id"] == TASK


def test_no_runnable_task_exits_0(ws):
    with ws.tracker() as t:
        t.create("Nothing to do yet", issue_type="epic", labels=["plan:nothing-here"])
    code, report, _ = ws.run(happy_script(), label="plan:nothing-here")
    assert code == 0 and report["outcome"] == "no_runnable_task" and report["idle"]["why"] == "empty_scope"


def test_ids_restrict_selection(ws):
    code, report, _ = ws.run(happy_script(), "--ids", "demo-7kq.4")
    assert report["task"]["id"] == "demo-7kq.4"


def test_tracker_missing_exits_4(tmp_path):
    from click.testing import CliRunner

    from orchestrator.cli.main import cli

    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "none.db"), "run", "--label", "x", "--backend", "replay",
                                   "--script", __file__])
    assert res.exit_code == 4
    assert "mesh tracker doctor --fix" in res.stderr


def test_in_progress_task_is_selected_first(ws):
    with ws.tracker() as t:
        t.update("demo-7kq.4", status="in_progress", assignee="tester")
    code, report, _ = ws.run(happy_script())
    assert report["task"]["id"] == "demo-7kq.4"


# ---------------------------------------------------------------- hydration, strict output, outbox


def test_hydration_round_fills_missing_metadata(ws):
    with ws.tracker() as t:
        t.update(TASK, design="", notes="")
    script = happy_script()
    script["proposer"].insert(0, r("hydration", {"acceptance": "ignored: already set", "design": "pure function",
                                                 "notes": "hydrated notes"}))
    code, report, res = ws.run(script)
    assert code == 0, res.output
    with ws.tracker() as t:
        task = t.get(TASK)
    assert task["design"] == "pure function" and task["notes"] == "hydrated notes"
    assert task["acceptance_criteria"].startswith("- fahrenheit_to_celsius(32) == 0")
    assert ws.kinds()[1] == "hydration"


def test_strict_output_accepts_envelopes_and_rejects_bare_json(ws):
    script = happy_script()

    def env(role, artifact):
        return json.dumps({"role": role, "task_id": TASK, "artifact": artifact})

    script["proposer"][0] = r("proposal", env("proposer", proposal()))
    # A bare artifact is not an envelope: in strict mode it needs the follow-up.
    script["critic_a"][0] = r("critique", critique())
    script["critic_a"].insert(1, r("critique", env("critic_a", critique())))
    for role in ("critic_b", "skeptic"):
        script[role][0] = r("critique", env(role, critique()))
    script["synthesizer"][0] = r("synthesis", env("synthesizer", synthesis()))
    for role in ("proposer", "critic_a", "critic_b", "skeptic", "synthesizer"):
        script[role][-1] = r("vote", env(role, vote()))
    script["reviewer"][0] = r("review", env("reviewer", review()))
    code, report, res = ws.run(script, "--strict-output")
    assert code == 0, res.output
    assert report["outcome"] == "closed"


def test_non_strict_parses_markdown_and_diff_block(ws):
    script = happy_script()
    script["proposer"][0] = r("proposal", "## Plan\n- Add the function\n- Test it\n\n## Assumptions\n- floats\n\n"
                                          "Risk: low\n")
    fields = synthesis()
    del fields["patch"]
    script["synthesizer"][0] = r("synthesis", "Here is the change.\n\n```json\n" + json.dumps(fields)
                                 + "\n```\n\n```diff\n" + PATCH_FEATURE + "```\n")
    code, report, res = ws.run(script)
    assert code == 0, res.output


def test_outbox_message_is_delivered_to_its_recipient(ws):
    script = happy_script()
    script["proposer"][0] = r("proposal", {**proposal(), "outbox": [{"to": "synthesizer",
                                                                      "message": "remember ABSOLUTE_ZERO_C"}]})
    code, _, res = ws.run(script)
    assert code == 0, res.output
    from orchestrator.ledger.calls import calls_for

    with ws.tracker() as t:
        calls = calls_for(t, task_id=TASK)
    synth = [c for c in calls if c["role"] == "synthesizer" and c["round"] == "synthesis"][0]
    assert "remember ABSOLUTE_ZERO_C" in synth["prompt"]
    critic = [c for c in calls if c["role"] == "critic_a" and c["round"] == "critique"][0]
    assert "remember ABSOLUTE_ZERO_C" not in critic["prompt"]


# ---------------------------------------------------------------- retry rules


def test_no_response_retries_once_then_switches_to_fallback(ws):
    script = happy_script()
    script["critic_a"] = [r("critique", error="no_response"), r("critique", error="timeout")]
    # Fallback roles: proposer, skeptic, synthesizer; critic_b's critique is kept, its vote is not asked.
    script["critic_b"] = [r("critique", critique())]
    code, report, res = ws.run(script)
    assert code == 0, res.output
    assert report["consensus"]["mode"] == "fallback"
    assert report["consensus"]["tally"] == {"agree": 3, "disagree": 0}
    assert set(report["consensus"]["votes"]) == {"proposer", "skeptic", "synthesizer"}


def test_proposal_unparsable_gets_one_strict_follow_up(ws):
    script = happy_script()
    script["proposer"].insert(0, r("proposal", "I think we should just do it."))
    code, report, res = ws.run(script)
    assert code == 0, res.output
    from orchestrator.ledger.calls import calls_for

    with ws.tracker() as t:
        calls = [c for c in calls_for(t, task_id=TASK) if c["round"] == "proposal"]
    assert [c["attempt"] for c in calls] == [1, 2]
    assert "could not be parsed" in calls[1]["prompt"].lower() or "previous answer" in calls[1]["prompt"].lower()


def test_proposal_unparsable_twice_blocks(ws):
    script = happy_script()
    script["proposer"][:1] = [r("proposal", "no plan"), r("proposal", "still no plan")]
    code, report, _ = ws.run(script)
    assert code == 3
    assert report["outcome"] == "blocked" and report["block_reason"] == "proposal_unparsable"
    assert status(ws) == "blocked"
    assert ws.kinds()[-1] == "outcome"


def test_no_diff_parsed_twice_blocks(ws):
    script = happy_script()
    script["synthesizer"][:1] = [r("synthesis", "I would change temperature.py"), r("synthesis", "same again")]
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == "no_diff_parsed"


def test_unparsable_synthesis_recovers_after_follow_up(ws):
    script = happy_script()
    script["synthesizer"].insert(0, r("synthesis", "```diff\nnot a diff\n```"))
    code, report, res = ws.run(script)
    assert code == 0, res.output


def test_invalid_vote_shape_counts_as_disagree(ws):
    script = happy_script()
    script["critic_b"][1:] = [r("vote", "maybe?"), r("vote", {"vote": "perhaps", "reason": "x"})]
    code, report, res = ws.run(script)
    assert code == 0, res.output  # 4 of 5 still agree
    assert report["consensus"]["tally"] == {"agree": 4, "disagree": 1}
    votes = [cp for cp in ws.checkpoints() if cp.kind == "vote" and cp.payload["role"] == "critic_b"]
    assert votes[0].payload["artifact"] == {"vote": "disagree", "reason": "invalid_vote_shape"}


def test_no_consensus_reruns_cycles_and_preserves_history_then_blocks(ws):
    script = happy_script(votes="disagree")
    # Three cycles (consensus_retries=2): critique, synthesis and vote three times each.
    for role in ("critic_a", "critic_b", "skeptic"):
        script[role] = [r("critique", critique()), r("vote", vote("disagree"))] * 3
    script["synthesizer"] = [r("synthesis", synthesis()), r("vote", vote("disagree"))] * 3
    script["proposer"] = [r("proposal", proposal())] + [r("vote", vote("disagree"))] * 3
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == "no_consensus"
    assert report["consensus"]["cycles"] == 3
    kinds = ws.kinds()
    assert kinds.count("synthesis") == 3 and kinds.count("vote") == 15 and kinds.count("proposal") == 1
    cycles = sorted({cp.payload["consensus_cycle"] for cp in ws.checkpoints() if cp.kind == "synthesis"})
    assert cycles == [0, 1, 2]
    assert status(ws) == "blocked"


def test_consensus_reached_in_second_cycle(ws):
    script = happy_script()
    for role in ("critic_a", "critic_b", "skeptic"):
        script[role] = [r("critique", critique()), r("vote", vote("disagree")), r("critique", critique()),
                        r("vote", vote())]
    script["synthesizer"] = [r("synthesis", synthesis()), r("vote", vote("disagree")), r("synthesis", synthesis()),
                             r("vote", vote())]
    script["proposer"] = [r("proposal", proposal()), r("vote", vote("disagree")), r("vote", vote())]
    code, report, res = ws.run(script)
    assert code == 0, res.output
    assert report["consensus"]["cycles"] == 2


def test_review_no_response_retries_once_then_blocks(ws):
    script = happy_script()
    script["reviewer"] = [r("review", error="no_response")]
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == "review_no_response"


def test_review_retry_after_no_response_succeeds(ws):
    script = happy_script()
    script["reviewer"] = [r("review", error="timeout"), r("review", review())]
    code, report, res = ws.run(script)
    assert code == 0, res.output


def test_invalid_finding_shape_follow_up_then_blocks(ws):
    script = happy_script()
    bad = review("request_changes", [{**finding("F1"), "severity": "Catastrophic"}])
    script["reviewer"] = [r("review", bad), r("review", bad)]
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == "invalid_finding_shape"


def test_finding_pointing_at_missing_line_is_invalid(ws):
    script = happy_script()
    script["reviewer"] = [r("review", review("request_changes", [finding("F1", location="temperature.py:999")])),
                          r("review", review("request_changes", [finding("F1", location="nope.py:1")]))]
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == "invalid_finding_shape"


def test_review_unparsable_blocks(ws):
    script = happy_script()
    script["reviewer"] = [r("review", "Looks good to me!"), r("review", "Really, ship it.")]
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == "review_unparsable"


# ---------------------------------------------------------------- review findings flow


def test_two_must_fix_findings_become_review_issue_with_children_closed_when_resolved(ws):
    script = happy_script()
    script["reviewer"] = [r("review", review("request_changes", [finding("F1"), finding("F2", location="temperature.py:12")])),
                          r("review", review())]
    script["synthesizer"] += [r("revision-plan", revision_plan(["F1", "F2"])), r("vote", vote()),
                              r("revision", synthesis(PATCH_REVISION))]
    for role in ("critic_a", "critic_b", "skeptic"):
        script[role] += [r("critique", critique()), r("vote", vote())]
    script["proposer"] += [r("vote", vote())]
    code, report, res = ws.run(script)
    assert code == 0, res.output
    review_issue = report["review"]["review_issue"]
    subtasks = report["review"]["subtasks"]
    assert set(subtasks) == {"F1", "F2"}
    with ws.tracker() as t:
        parent = t.get(review_issue)
        assert parent["status"] == "closed"
        assert parent["parent"] == TASK
        for fid, issue_id in subtasks.items():
            child = t.get(issue_id)
            assert child["status"] == "closed"
            assert child["parent"] == review_issue
            assert [d["type"] for d in child["dependencies"]] == ["parent-child"]
            assert child["metadata"]["finding_id"] == fid
        assert t.get(TASK)["status"] == "closed"
    assert report["review"]["cycles"] == 2
    kinds = ws.kinds()
    for kind in ("review", "review-cycle", "revision-plan", "revision"):
        assert kind in kinds
    assert ws.git("log", "--format=%s", f"mesh/{TASK}").count("mesh:") == 2


def test_demo_script_runs_review_cycle_and_closes(ws):
    code, report, res = ws.run(demo_script())
    assert code == 0, res.output
    assert report["review"]["cycles"] == 2
    # The demo's synthesis also proposes "rm -rf ...": recorded as rejected, never run.
    assert [v["rejected"] for v in report["validation"]] == [False]  # latest cycle: the revision's commands
    proofs = [cp for cp in ws.checkpoints() if cp.kind == "proof"]
    assert [x["rejected"] for x in proofs[0].payload["artifact"]["results"]] == [False, True]


def test_review_not_approved_after_max_cycles_blocks(ws):
    script = happy_script()
    changes = r("review", review("request_changes", [finding("F1")]))
    script["reviewer"] = [changes, changes, changes]
    # Revision cycles 1 and 2; the third review still requests changes.
    script["synthesizer"] += [r("revision-plan", revision_plan(["F1"])), r("vote", vote()),
                              r("revision", synthesis(PATCH_REVISION)),
                              r("revision-plan", revision_plan(["F1"])), r("vote", vote()),
                              r("revision", synthesis("NO_DIFF: already addressed"))]
    for role in ("critic_a", "critic_b", "skeptic"):
        script[role] += [r("critique", critique()), r("vote", vote())] * 2
    script["proposer"] += [r("vote", vote())] * 2
    code, report, res = ws.run(script)
    assert code == 3, res.output
    assert report["block_reason"] == "review_not_approved"
    assert report["review"]["cycles"] == 3
    with ws.tracker() as t:
        child = t.get(report["review"]["subtasks"]["F1"])
        assert child["status"] == "open"  # never resolved
    assert status(ws) == "blocked"


# ---------------------------------------------------------------- validation and integration safety


def test_an_allowlist_admitting_no_proposed_command_stops_with_exit_2_and_leaves_the_task_open(ws):
    """After the one follow-up naming the admitted forms, commands the allowlist still does not
    admit are a configuration mistake: exit 2, the task open, the detail naming the token that
    fell outside the closest entry."""
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(commands=["make deploy"]))
    script["synthesizer"].insert(1, r("synthesis", synthesis(commands=["python3 -m unittest discover -q"])))
    code, report, _ = ws.run(script)
    assert code == 2 and report["outcome"] == "config_mistake"
    assert "token 5 '-q' is not '-s'" in report["block_detail"] and "Fix validation.allow" in report["block_detail"]
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "open" and not t.get(TASK).get("assignee")
    with ws.tracker() as t:
        from orchestrator.ledger.calls import calls_for

        prompts = [c["prompt"] for c in calls_for(t, task_id=TASK) if c["round"] == "synthesis"]
    # The synthesis prompt states what will run; the one follow-up names the admitted forms.
    assert len(prompts) == 2 and all(VALIDATE in prompt for prompt in prompts)
    assert "none of the validation_commands is admitted" in prompts[1]


def test_a_rejected_command_fixed_in_the_follow_up_runs(ws):
    script = happy_script()
    script["synthesizer"].insert(0, r("synthesis", synthesis(commands=["pytest -q"])))
    code, report, _ = ws.run(script)
    assert code == 0 and report["outcome"] == "closed"
    assert report["validation"][0]["command"] == VALIDATE


def test_rejected_validation_command_never_runs(ws):
    marker = ws.root / "pwned"
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(commands=[
        f"python3 -c \"open('{marker}', 'w').write('x')\"", f"touch {marker}", VALIDATE]))
    code, report, res = ws.run(script)
    assert code == 0, res.output
    assert not marker.exists()
    rejected = [v for v in report["validation"] if v["rejected"]]
    assert len(rejected) == 2 and all(v["exit_code"] is None for v in rejected)
    proof = [cp for cp in ws.checkpoints() if cp.kind == "proof"][0]
    assert [x["rejected"] for x in proof.payload["artifact"]["results"]] == [True, True, False]


BROKEN = PATCH_FEATURE.replace("return celsius\n", "return celsius + 1\n")
# The revision that fixes BROKEN's line, on top of it.
FIX = ("diff --git a/temperature.py b/temperature.py\n--- a/temperature.py\n+++ b/temperature.py\n"
       "@@ -16,4 +16,4 @@ def fahrenheit_to_celsius(fahrenheit: float) -> float:\n"
       "     celsius = (fahrenheit - 32) * 5 / 9\n     if celsius < ABSOLUTE_ZERO_C:\n"
       "         raise ValueError(f\"{fahrenheit} F is below absolute zero\")\n"
       "-    return celsius + 1\n+    return celsius\n")


def one_review_cycle(ws) -> str:
    config = ws.root / "one-cycle.toml"
    config.write_text((ws.repo / "mesh.toml").read_text().replace("review_max_cycles = 3", "review_max_cycles = 1"))
    return str(config)


def test_failing_validation_blocks_when_no_review_cycle_is_left(ws):
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(BROKEN))
    code, report, _ = ws.run(script, "--config", one_review_cycle(ws))
    assert code == 3 and report["block_reason"] == "validation_failed"
    assert report["validation"][0]["passed"] is False


def test_a_failing_validation_is_a_must_fix_finding_that_the_revision_cycle_fixes(ws):
    """The reviewer approves a change whose tests fail: the failure becomes the MUST_FIX finding
    VALIDATION (its evidence the output tail), the revision cycle fixes it, the task closes."""
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(BROKEN))
    script["synthesizer"] += [r("revision-plan", revision_plan(["VALIDATION"])), r("vote", vote()),
                              r("revision", synthesis(FIX))]
    for role in ("critic_a", "critic_b", "skeptic"):
        script[role] += [r("critique", critique()), r("vote", vote())]
    script["proposer"].append(r("vote", vote()))
    script["reviewer"].append(r("review", review()))
    code, report, res = ws.run(script)
    assert code == 0 and report["outcome"] == "closed", res.output
    cycles = [cp.payload["artifact"] for cp in ws.checkpoints() if cp.kind == "review-cycle"]
    assert [c["approved"] for c in cycles] == [False, True] and cycles[0]["open_must_fix"] == 1
    with ws.tracker() as t:
        [finding_issue] = [i for i in t.list(status=["open", "closed"]) if "VALIDATION" in (i.get("title") or "")
                           or "validation failed" in (i.get("title") or "")]
        assert finding_issue["status"] == "closed"
        text = (finding_issue.get("description") or "") + (finding_issue.get("notes") or "")
    assert "AssertionError" in text or "FAIL" in text  # the failing output's tail is the evidence
    assert "\x1b" not in text


@pytest.mark.parametrize("path, block, reason", [
    ("../outside.txt", "patch_refused", "path_outside_worktree"),
    (".git/hooks/post-commit", "patch_refused", "git_dir"),
    (".beads/issues.jsonl", "patch_refused", "beads_dir"),
    (".github/workflows/ci.yml", "policy_violation", ".github/workflows/ci.yml is protected"),
])
def test_patch_refusal_blocks_and_leaves_worktree_untouched(ws, path, block, reason):
    evil = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+boom\n"
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(evil))
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == block
    assert reason in report["block_detail"]
    assert not (ws.repo.parent / "outside.txt").exists()
    # The task branch holds no commit beyond main.
    assert ws.git("rev-list", "--count", f"main..mesh/{TASK}").strip() == "0"


def test_patch_that_does_not_apply_blocks(ws):
    stale = PATCH_FEATURE.replace("     return celsius * 9 / 5 + 32", "     return celsius * 9.0 / 5 + 32", 1)
    assert stale != PATCH_FEATURE
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(stale))
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == "patch_does_not_apply"
    assert ws.git("rev-list", "--count", f"main..mesh/{TASK}").strip() == "0"


def test_no_integrate_applies_nothing_runs_nothing_changes_no_status(ws):
    script = happy_script()
    del script["reviewer"]
    before = ws.git("for-each-ref")
    code, report, res = ws.run(script, "--no-integrate")
    assert code == 0, res.output
    assert report["outcome"] == "synthesis_only"
    assert report["synthesis"]["patch"] == PATCH_FEATURE
    assert report["validation"] == []
    assert status(ws) == "open"
    assert ws.git("for-each-ref") == before
    with ws.tracker() as t:
        assert t.get(TASK).get("assignee") is None


def test_secrets_are_scrubbed_from_comments_calls_and_report(ws):
    secret = "sk-ant-api03-" + "A" * 40
    script = happy_script()
    script["proposer"][0] = r("proposal", {**proposal(), "assumptions": [f"use key {secret}"]})
    code, report, res = ws.run(script)
    assert code == 0, res.output
    from orchestrator.ledger.calls import calls_for

    with ws.tracker() as t:
        texts = [c["text"] for c in t.comments(TASK)]
        calls = calls_for(t, task_id=TASK)
    assert not any(secret in x for x in texts)
    assert not any(secret in (c["response"] or "") or secret in c["prompt"] for c in calls)
    assert secret not in res.stdout


def test_budget_exceeded_is_not_triggered_by_free_backends(ws, tmp_path):
    cfg = tmp_path / "mesh.toml"
    cfg.write_text((ws.repo / "mesh.toml").read_text() + "\n[budget]\nmax_usd = 0.0001\nmax_tokens = 1\n")
    code, report, res = ws.run(happy_script(), "--config", str(cfg))
    assert code == 0, res.output


# ---------------------------------------------------------------- mesh show


def test_mesh_show_renders_history(ws):
    ws.run(demo_script())
    res = ws.mesh("show", TASK)
    assert res.exit_code == 0
    out = res.stdout
    for text in ("proposal", "critique", "vote", "review", "revision", "proof", "outcome", "F1", "MUST_FIX",
                 "closed", "agree"):
        assert text in out, text
    assert "```json orch" not in out
    res = ws.mesh("show", TASK, "--json")
    history = json.loads(res.stdout)
    assert history["task"]["status"] == "closed"
    assert history["runs"][0]["outcome"]["outcome"] == "closed"


def test_without_a_required_review_consensus_and_validation_close(ws, tmp_path):
    cfg = tmp_path / "no-review.toml"
    head, _, rest = (ws.repo / "mesh.toml").read_text().partition("[validation]")
    cfg.write_text(head + "review_required_for_close = false\n\n[validation]" + rest)
    script = happy_script()
    del script["reviewer"]
    code, report, res = ws.run(script, "--config", str(cfg))
    assert code == 0, res.output
    assert report["outcome"] == "closed" and report["review"]["cycles"] == 0
    assert "review" not in ws.kinds()


def test_secrets_in_findings_and_hydration_never_reach_issue_fields(ws):
    secret = "ghp_" + "B" * 36
    with ws.tracker() as t:
        t.update(TASK, notes="")
    script = happy_script()
    script["proposer"].insert(0, r("hydration", {"acceptance": "a", "design": "d", "notes": f"token {secret}"}))
    leaky = finding("F1")
    leaky["evidence"] = f"the log prints {secret}"
    script["reviewer"] = [r("review", review("request_changes", [leaky])), r("review", review())]
    script["synthesizer"] += [r("revision-plan", revision_plan(["F1"])), r("vote", vote()),
                              r("revision", synthesis(PATCH_REVISION))]
    for role in ("critic_a", "critic_b", "skeptic"):
        script[role] += [r("critique", critique()), r("vote", vote())]
    script["proposer"] += [r("vote", vote())]
    code, report, res = ws.run(script)
    assert code == 0, res.output
    res = ws.mesh("tracker", "export")
    assert res.exit_code == 0
    assert secret not in res.stdout
    assert "[REDACTED]" in res.stdout


def test_a_new_run_after_a_blocked_one_starts_from_head_and_keeps_the_old_attempt(ws):
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(BROKEN))
    code, first, _ = ws.run(script, "--config", one_review_cycle(ws))
    assert code == 3 and first["block_reason"] == "validation_failed"
    with ws.tracker() as t:
        t.update(TASK, status="open")  # the user looked at it and wants another try
    code, second, res = ws.run(happy_script())
    assert code == 0, res.output
    assert second["orch_run_id"] != first["orch_run_id"]
    kept = f"mesh/{TASK}-{first['orch_run_id']}"
    assert f"earlier attempt kept on branch {kept}" in second["mutations"]
    assert ws.git("rev-list", "--count", f"main..mesh/{TASK}").strip() == "1"
    assert "celsius + 1" in ws.git("show", f"{kept}:temperature.py")
    assert "celsius + 1" not in ws.git("show", f"mesh/{TASK}:temperature.py")
