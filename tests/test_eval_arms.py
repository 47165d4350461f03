"""What ``mesh eval run`` compares and how it counts (issue 36): arms with different workers on the
same cases, a third whose agent CLI is missing (its runs in error, apart, and the exit code), an
arm whose API answers 429 until its retries are spent, ``--trials 5`` with a seeded worker whose
pass@1, pass@k, pass^k and paired test are checked against values computed by hand, a
budget-matched single agent whose spend is checked against the team's per case, an arm run again
with other workers refused, and an eval started with SIGINT ignored still stopping on Ctrl-C.

Real ``mesh run`` processes, real bwrap, real git; the Messages API is the fake on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator.evals.page import eval_page_data
from orchestrator.evals.suite import read_suite
from tests.evalkit import CHECK, MESH, make_library, mesh, reference_patch, write_worker

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """The kit's library and a suite of its three newest cases."""
    root = tmp_path_factory.mktemp("arms")
    repo = make_library(root)
    built = mesh("eval", "suite", "--from-git", "--runs", "1", "--limit", "3", "--command", "python3 -m unittest {tests}",
                 "-o", str(root / "suite.jsonl"), cwd=repo)
    assert built.returncode == 0, built.stderr
    return root, repo, read_suite(root / "suite.jsonl")


def _suite_of(cases, path: Path) -> Path:
    path.write_text("".join(c.model_dump_json(exclude_defaults=True) + "\n" for c in cases))
    return path


def test_two_arms_are_compared_and_a_missing_cli_is_an_error_apart(library, tmp_path):
    root, repo, cases = library
    ids = [c.id for c in cases]
    (tmp_path / "strong").mkdir()
    (tmp_path / "weak").mkdir()
    strong = write_worker(tmp_path / "strong", repo, cases, {"strong": ids})
    weak = write_worker(tmp_path / "weak", repo, cases, {"weak": ids[:1]})
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(root / "suite.jsonl"), "--arm", f"strong: profile=single worker-cmd='{strong}'",
                "--arm", f"weak: profile=lite worker-cmd='{weak}'",
                "--arm", "gone: profile=single worker-cmd=/nonexistent/agent-cli", "--out", str(out), "--jobs", "2",
                "--yes", cwd=repo)
    # Runs in error make the eval exit 1, and each console line says why.
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("gone: error, missing_cli (mesh run exited 2: worker command not found or not"
                             " executable: /nonexistent/agent-cli)") == 3
    assert "warning: arm gone: its worker command /nonexistent/agent-cli is not installed" in done.stderr
    assert "3 run(s) in error (3 missing_cli): not counted as finished" in done.stderr
    assert "6 run(s) graded, 4 resolved, 3 in error" in done.stdout
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    rows = {row["arm"]: row for row in report["arms"]}
    assert report["reference"] == "strong"
    assert {a: (r["resolved"], r["finished"], r["errors"]["count"]) for a, r in rows.items()} == {
        "strong": (3, 3, 0), "weak": (1, 3, 0), "gone": (0, 0, 3)}
    assert rows["gone"]["rate"] is None and rows["gone"]["errors"]["kinds"] == {"missing_cli": 3}
    assert all("/nonexistent/agent-cli" in e["reason"] for e in rows["gone"]["errors"]["runs"])
    # weak against strong: 0 cases only weak resolves, 2 only strong does: McNemar 2 * (1/2)^2 = 0.5.
    assert (rows["weak"]["paired"]["only_this"], rows["weak"]["paired"]["only_reference"],
            rows["weak"]["paired"]["p_value"]) == (0, 2, 0.5)
    assert rows["gone"]["paired"]["cases"] == 0 and rows["gone"]["paired"]["p_value"] == 1.0
    # A run that never started links to no report; a command worker's cost is unknown, not $0.
    assert all(c["report"] is None for c in report["cells"] if c["arm"] == "gone")
    assert rows["strong"]["cost_known"] is False and rows["strong"]["per_case"]["cost_usd"] is None
    # Each arm's workers are recorded in the eval and in each of its results.
    meta = json.loads((out / "eval.json").read_text())
    assert meta["arms"]["strong"] == {"profile": "single", "backend": "command", "worker": None,
                                      "worker_cmd": strong}
    assert meta["arms"]["weak"]["profile"] == "lite" and meta["arms"]["weak"]["worker_cmd"] == weak
    for path in (out / "results").glob("*/*.json"):
        result = json.loads(path.read_text())
        assert result["arm_description"] == meta["arms"][result["arm"]]
    text = mesh("eval", "report", str(out), cwd=repo).stdout
    assert "gone: single, command, worker-cmd /nonexistent/agent-cli" in text
    assert "error " + ids[0] + ": missing_cli: mesh run exited 2" in text and "0 vs 2, p=0.5" in text
    assert "no common case" in text and "None" not in text and "cost and tokens unknown" in text
    # The same arm with other workers in the same folder is refused, naming what changed.
    again = mesh("eval", "run", str(root / "suite.jsonl"), "--arm", f"strong: profile=single worker-cmd='{weak}'",
                 "--out", str(out), "--yes", cwd=repo)
    assert again.returncode == 2 and "arm strong ran in this eval with other workers: worker_cmd was" in again.stderr


def _seeded(repo, cases, tmp_path, solved: dict[str, dict[str, list[int]]]) -> str:
    """A scripted worker solving, per arm, each case on the trials the table names."""
    table = {arm: {cases[i].id: trials for i, trials in enumerate(by_case.values())} for arm, by_case in solved.items()}
    return write_worker(tmp_path, repo, cases, table)


def test_five_trials_give_pass_at_k_pass_hat_k_and_the_paired_test_computed_by_hand(library, tmp_path):
    root, repo, cases = library
    cases = cases[:2]
    suite = _suite_of(cases, tmp_path / "two.jsonl")
    # s: case 0 on all five trials, case 1 on trials 2 and 4; r: case 0 never, case 1 on trial 3.
    command = _seeded(repo, cases, tmp_path, {"s": {"c0": [1, 2, 3, 4, 5], "c1": [2, 4]},
                                              "r": {"c0": [], "c1": [3]}})
    out = tmp_path / "ev"
    done = mesh("eval", "run", str(suite), "--arm", "r: profile=single", "--arm", "s: profile=single",
                "--worker-cmd", command, "--trials", "5", "--jobs", "2", "--out", str(out), "--yes", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "20 run(s) to make (0 done)" in done.stderr
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    rows = {row["arm"]: row for row in report["arms"]}
    s, r = rows["s"], rows["r"]
    assert (s["resolved"], s["finished"], r["resolved"], r["finished"]) == (7, 10, 1, 10)
    # pass@1: the mean of the per-case shares: s (5/5 + 2/5) / 2 = 0.7; r (0 + 1/5) / 2 = 0.1.
    assert s["rate"] == 0.7 and r["rate"] == 0.1
    # Its interval: sd of (1, 0.4) = 0.4243, se = 0.3, 0.7 -+ 1.96 * 0.3 = [0.112, 1.288] clipped to 1
    # (wider than Wilson's for 1.4 of 2 cases, 0.174..0.963, which it must never be narrower than).
    assert s["ci"] == [0.112, 1.0]
    # pass@5 = 1 - C(n-c, 5) / C(n, 5) per case: s 1 and 1 -> 1; r 0 and 1 -> 0.5.
    # pass^5 = C(c, 5) / C(n, 5): s 1 and 0 -> 0.5; r 0 and 0 -> 0.
    assert (s["pass_at_k"]["k"], s["pass_at_k"]["value"], s["pass_hat_k"]["value"]) == (5, 1.0, 0.5)
    assert (r["pass_at_k"]["value"], r["pass_hat_k"]["value"]) == (0.5, 0.0)
    # Per-case variance c(n-c) / (n(n-1)): s 0 and 2*3/20 = 0.3 -> 0.15; r 0 and 4/20 = 0.2 -> 0.1.
    assert (s["variance"], r["variance"]) == (0.15, 0.1)
    # Paired, every trial: differences 1 - 0 = 1 and 2/5 - 1/5 = 1/5, sum 6/5; the four sign flips
    # give 6/5, 4/5, -4/5, -6/5: two as far from 0 as observed -> p = 2/4 = 0.5.
    assert s["paired"]["against"] == "r" and s["paired"]["test"].startswith("sign-flip exact")
    assert (s["paired"]["only_this"], s["paired"]["only_reference"], s["paired"]["mean_difference"],
            s["paired"]["p_value"]) == (2, 0, 0.6, 0.5)
    # The grid's cell counts the trials and says each one's state.
    cells = {(row["case"], name): cell for row in eval_page_data(report)["grid"]
             for name, cell in zip(["r", "s"], row["cells"])}
    cell = cells[(cases[1].id, "s")]
    assert (cell["state"], cell["count"]) == ("partly", "2/5")
    assert [t["state"] for t in cell["trials"]] == ["unresolved", "resolved", "unresolved", "resolved", "unresolved"]
    # Each trial says its own outcome and reason; the cell takes none of them for itself.
    assert cell["outcome"] == "" and all(t["outcome"] == "closed" and t["reason"] for t in cell["trials"])
    text = mesh("eval", "report", str(out), cwd=repo).stdout
    assert "5 trials: pass@1 70%, pass@5 100%" in text and "pass^5 50%" in text


# ------------------------------------------------------------------ over the fake Messages API


def _answers(round_name: str, patch: str, approve: bool) -> dict:
    finding = {"finding_id": "F1", "location": "notes.txt:1", "severity": "High", "label": "MUST_FIX",
               "issue": "not convinced", "evidence": "none", "minimal_fix": "convince me", "code_context": "x"}
    return {
        "hydration": {"acceptance": "it works", "design": "", "notes": ""},
        "proposal": {"plan": ["write it"], "assumptions": [], "risk": "low"},
        "critique": {"findings": [], "must_fix": [], "vote_flip_conditions": [], "risk": "low"},
        "synthesis": {"decision_log": [], "patch": patch, "validation_commands": [CHECK]},
        "revision": {"decision_log": [], "patch": "NO_DIFF: done", "validation_commands": [CHECK]},
        "revision-plan": {"summary": "s", "steps": [{"finding_id": "F1", "change": "c"}]},
        "vote": {"vote": "agree", "reason": "r"},
        "review": ({"decision": "approve", "findings": [], "summary": "No material issues."} if approve
                   else {"decision": "request_changes", "findings": [finding], "summary": "no"}),
    }[round_name]


NOTE_PATCH = "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+a note\n"


def _api_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "api.toml"
    config.write_text(f'backend = "anthropic"\nreview_max_cycles = 1\n\n[validation]\nallow = ["{CHECK}"]\n'
                      f'timeout_s = 60\n\n[anthropic]\nmax_retries = 1\ntimeout_s = 30\n{extra}')
    return config


def _api_env(fake) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}, "ANTHROPIC_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": "k-eval-arms"}


def test_an_api_that_answers_429_until_the_retries_are_spent_is_an_error_not_a_loss(library, tmp_path):
    from tests.fake_anthropic import FakeAnthropic, api_error

    root, repo, cases = library
    suite = _suite_of(cases[:1], tmp_path / "one.jsonl")
    out = tmp_path / "ev"
    busy = api_error(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit",
                     {"retry-after": "0"})
    with FakeAnthropic(lambda request: busy) as fake:
        done = subprocess.run([*MESH, "eval", "run", str(suite), "--arm", "api: profile=single", "--out", str(out),
                               "--config", str(_api_config(tmp_path)), "--yes"], cwd=repo, env=_api_env(fake),
                              capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr
    [result] = [json.loads(p.read_text()) for p in (out / "results").glob("*/*.json")]
    assert result["state"] == "error" and result["error"]["kind"] == "api", result
    assert "429" in result["error"]["reason"] and "no_response" in result["error"]["reason"]
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    [row] = report["arms"]
    assert (row["finished"], row["resolved"], row["errors"]["count"]) == (0, 0, 1)
    assert len(fake.message_requests) >= 4  # every call tried again by the SDK, then once by mesh


def test_a_budget_matched_single_agent_spends_what_the_team_spent_on_each_case(library, tmp_path):
    """Each call of the team's model is 1,000 + 100 tokens, of the single agent's 300 + 30; the
    single agent's reviewer never approves, so each of its attempts ends blocked: it makes
    attempts until it spent at least what the team spent on the case, and no more than one over."""
    from tests.fake_anthropic import FakeAnthropic, message

    root, repo, cases = library
    cases = cases[:2]
    suite = _suite_of(cases, tmp_path / "two.jsonl")
    patches = {case.title: reference_patch(repo, case.base, case.reference) for case in cases}

    def answer(request):
        solo = request.body.get("model") == "claude-solo"
        prompt = request.system_text + request.first_user_text
        patch = NOTE_PATCH if solo else next(p for title, p in patches.items() if title in prompt)
        usage = {"input_tokens": 300, "output_tokens": 30} if solo else {"input_tokens": 1000, "output_tokens": 100}
        return message(json.dumps(_answers(request.round, patch, approve=not solo)), usage=usage)

    out = tmp_path / "ev"
    with FakeAnthropic(answer) as fake:
        done = subprocess.run([*MESH, "eval", "run", str(suite), "--arm", "team: profile=lite model=claude-team",
                               "--arm", "solo: profile=single model=claude-solo match=team match-by=tokens",
                               "--out", str(out), "--config", str(_api_config(tmp_path)), "--jobs", "2", "--yes"],
                              cwd=repo, env=_api_env(fake), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    # The models reached the API as the arms named them (mesh run --model).
    assert {r.body["model"] for r in fake.message_requests} == {"claude-team", "claude-solo"}
    for case in cases:
        team = json.loads((out / "results" / case.id / "team.json").read_text())
        solo = json.loads((out / "results" / case.id / "solo.json").read_text())
        assert team["state"] == "resolved" and team["calls"] > 0
        target = team["tokens_in"] + team["tokens_out"]
        assert target == 1100 * team["calls"]
        budget = solo["budget"]
        assert budget["against"] == "team" and budget["by"] == "tokens" and budget["budget"] == target
        spent = solo["tokens_in"] + solo["tokens_out"]
        assert spent == budget["spent"] == 330 * solo["calls"]
        last = solo["attempts"][-1]
        assert spent >= target > spent - (last["tokens_in"] + last["tokens_out"])  # stopped once it was spent
        assert len(solo["attempts"]) == budget["attempts"] >= 2 and budget["stopped"] == "the budget is spent"
        assert all(a["status"] == "blocked" for a in solo["attempts"])
        assert solo["state"] == "unresolved" and solo["outcome"] == "blocked"
    report = json.loads(mesh("eval", "report", str(out), "--json", cwd=repo).stdout)
    rows = {row["arm"]: row for row in report["arms"]}
    assert rows["solo"]["budget"]["spent"] >= rows["solo"]["budget"]["budget"]
    assert rows["team"]["tokens_per_resolved"] == (rows["team"]["tokens_in"] + rows["team"]["tokens_out"]) / 2
    assert rows["solo"]["tokens_per_resolved"] is None  # it resolved nothing


def test_an_eval_started_with_sigint_ignored_still_stops_on_ctrl_c(library, tmp_path):
    """A script's ``mesh eval run ... &`` starts it with SIGINT ignored; Ctrl-C's signal still stops it
    as documented: exit 130, no run left, continued by the next run."""
    from tests.test_eval_run import _no_run_alive, _started

    root, repo, cases = library
    command = write_worker(tmp_path, repo, cases, {"single": [c.id for c in cases]})
    out = tmp_path / "ev"
    args = [*MESH, "eval", "run", str(root / "suite.jsonl"), "--profile", "single", "--worker-cmd", command,
            "--out", str(out), "--yes"]
    env = {k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}
    proc = subprocess.Popen(args, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    import time

    deadline = time.monotonic() + 300
    while not _started(out, 1):
        assert proc.poll() is None and time.monotonic() < deadline, "the eval ended before its first run"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "stopped: mesh eval run continues where it stopped" in err
    _no_run_alive(out, "a run of the stopped eval kept running")


def test_an_interval_of_cases_that_all_agree_is_never_a_point():
    """Four cases resolved on every trial have no spread: the interval is Wilson's for 4 of 4
    (0.5101..1), not 100-100%."""
    from orchestrator.evals.stats import mean_interval, wilson

    assert mean_interval([1.0, 1.0, 1.0, 1.0]) == (1.0, wilson(4, 4)[0], 1.0)
    assert round(wilson(4, 4)[0], 4) == 0.5101
    mean, low, high = mean_interval([0.0, 0.2])
    assert (mean, low) == (0.1, 0.0) and round(high, 4) == round(wilson(0.2, 2)[1], 4)
