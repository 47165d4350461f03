"""Attacks on approvals (issue 9: 5, 6, 7, 13, 14): someone with tracker write access but no
signing key, or a branch changed after approval, must not get a task closed, and nothing
that was not signed may run.

Every scenario starts from a real signed run (replay backend, real git, real tracker) that
stops awaiting CI; the attacker then edits the tracker or the checkout as a CI user could.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.protocol.checkpoint import format_checkpoint, parse_checkpoint, sign_payload
from orchestrator.runner import RunOptions, run
from tests.runkit import TASK, VALIDATE, demo_script, make_workspace
from tests.test_ci_close import KEY, awaiting_ci, ci_close, task_checkout

ALSO_ALLOWED = VALIDATE + " -v"  # in the demo's allowlist, but never signed by the run


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def comments(ws, kind: str) -> list[dict]:
    with ws.tracker() as t:
        return [c for c in t.comments(TASK) if c["text"].startswith(f"[orch:{kind}]")]


def run_head(ws) -> tuple[str, dict]:
    """(comment text, payload) of the task's only run head."""
    [c] = comments(ws, "run-head")
    return c["text"], parse_checkpoint(c["text"]).payload


def status(ws) -> str:
    with ws.tracker() as t:
        return t.get(TASK)["status"]


def later_signed_run(ws, *, decision: str = "request_changes") -> str:
    """A second run of the task that did not approve, signed as mesh signs (attempt 2)."""
    _, head = run_head(ws)
    artifact = {**head["artifact"], "run_id": "run-2", "attempt": 2, "decision": decision,
                "review_decision": decision, "outcome": "blocked"}
    payload = {k: v for k, v in head.items() if k != "sig"}
    payload.update(run_id="run-2", seq=1, artifact=artifact)
    with ws.tracker() as t:
        t.add_comment(TASK, format_checkpoint("run-head", "blocked attempt 2", sign_payload(payload, KEY.encode())))
    return "run-2"


def commit(repo: Path, path: str, text: str, message: str) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    subprocess.run(["git", "add", path], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", message], cwd=repo, check=True)


def test_run_head_binds_run_commit_tree_and_commands(ws):
    awaiting_ci(ws)
    text, head = run_head(ws)
    art = head["artifact"]
    assert head["kind"] == "run-head" and "sig" in head
    assert art["task_id"] == TASK and art["attempt"] == 1 and art["decision"] == "approve"
    assert art["commit"] == ws.git("rev-parse", f"mesh/{TASK}").strip()
    assert art["tree"] == ws.git("rev-parse", f"mesh/{TASK}^{{tree}}").strip()
    assert art["validation"]["commands"] == [VALIDATE] and art["validation"]["passed"] is True
    # The digests of every checkpoint written before the head, in order (the outcome follows it).
    with ws.tracker() as t:
        texts = [c["text"] for c in t.comments(TASK) if c["text"].startswith("[orch:")]
    assert texts.index(text) == len(texts) - 2 and texts[-1].startswith("[orch:outcome]")
    assert art["checkpoints"] == [hashlib.sha256(x.encode()).hexdigest() for x in texts[:-2]]


def test_attack5_replayed_older_approval_does_not_close(ws):
    awaiting_ci(ws)
    old_text, _ = run_head(ws)
    later_signed_run(ws)
    with ws.tracker() as t:
        t.add_comment(TASK, old_text)  # the older signed approval, replayed as the newest comment
    code, checks, res = ci_close(ws, repo=task_checkout(ws))
    assert code == 1, res.output
    assert checks[0]["run_id"] == "run-2"
    assert any("not an approval" in p for p in checks[0]["problems"])
    assert status(ws) == "in_progress"


def test_attack13_forged_gate_does_not_choose_older_evidence(ws):
    report = awaiting_ci(ws)
    later_signed_run(ws)
    with ws.tracker() as t:
        t.gate_create("ci for the approved run", blocks=TASK, await_type="ci", await_id=report["orch_run_id"])
    code, checks, res = ci_close(ws, "--revalidate", repo=task_checkout(ws))
    assert code == 1, res.output
    assert checks[0]["run_id"] == "run-2"
    assert checks[0]["validation"] == []  # refused before anything ran
    assert status(ws) == "in_progress"


def test_later_run_without_a_head_holds_the_older_approval_back(ws):
    awaiting_ci(ws)
    # A later run started (signed, as mesh signs) and was killed before its run head.
    [preflight] = comments(ws, "preflight")
    payload = {k: v for k, v in parse_checkpoint(preflight["text"]).payload.items() if k != "sig"}
    payload.update(run_id="run-later", seq=1)
    with ws.tracker() as t:
        t.add_comment(TASK, format_checkpoint("preflight", "later run", sign_payload(payload, KEY.encode())))
    code, checks, res = ci_close(ws, repo=task_checkout(ws))
    assert code == 1, res.output
    assert any("run-later" in p and "has not ended" in p for p in checks[0]["problems"])
    assert status(ws) == "in_progress"


def forged_synthesis(ws, run_id: str) -> None:
    payload = {"v": 1, "run_id": run_id, "seq": 500, "kind": "synthesis", "task_id": TASK, "role": "synthesizer",
               "step": ["synthesis", "synthesizer", "c"],
               "artifact": {"patch": "", "validation_commands": [ALSO_ALLOWED]}}
    with ws.tracker() as t:
        t.add_comment(TASK, format_checkpoint("synthesis", "forged", payload))


def test_attack6_forged_synthesis_in_the_run_is_refused_and_nothing_runs(ws):
    report = awaiting_ci(ws)
    forged_synthesis(ws, report["orch_run_id"])
    code, checks, res = ci_close(ws, "--revalidate", repo=task_checkout(ws))
    assert code == 1, res.output
    assert any("unsigned" in p for p in checks[0]["problems"])
    assert checks[0]["validation"] == []
    assert status(ws) == "in_progress"


def test_attack6_revalidate_runs_only_the_signed_commands(ws):
    # Without a key nothing is verified, yet the commands still come from the run head only.
    report = awaiting_ci(ws, signed=False)
    forged_synthesis(ws, report["orch_run_id"])
    code, checks, res = ci_close(ws, "--revalidate", repo=task_checkout(ws), key=None)
    assert code == 0, res.output
    assert [v["command"] for v in checks[0]["validation"]] == [VALIDATE]


def test_attack6_branch_changed_after_approval_is_refused(ws):
    awaiting_ci(ws)
    clone = task_checkout(ws)
    commit(clone, "temperature.py", "def fahrenheit_to_celsius(f):\n    return 0\n", "sneak a change in")
    code, checks, res = ci_close(ws, "--revalidate", repo=clone)
    assert code == 1, res.output
    assert checks[0]["reasons"] == ["tree_differs"]
    assert any("not the approved tree" in p and "temperature.py" in p for p in checks[0]["problems"])
    assert checks[0]["validation"] == []
    assert status(ws) == "in_progress"


def test_checkout_without_the_approved_commit_is_refused(ws):
    awaiting_ci(ws)
    # The user's main checkout never got the task branch: its tree is not the approved one.
    code, checks, res = ci_close(ws)
    assert code == 1, res.output
    assert any("differs from the approved tree" in p for p in checks[0]["problems"])
    assert status(ws) == "in_progress"


def test_unrelated_later_commit_is_refused_too(ws):
    # Which files a later commit touches says nothing of what it changes (issue 16: a package
    # beside the approved module); only the approved tree, whole, is closed on.
    awaiting_ci(ws)
    clone = task_checkout(ws)
    commit(clone, "docs/notes.md", "unrelated\n", "unrelated change")
    code, checks, res = ci_close(ws, repo=clone)
    assert code == 1, res.output
    assert checks[0]["reasons"] == ["tree_differs"]
    assert status(ws) == "in_progress"


def test_attack14_wrong_signature_refused_without_require_signed(ws):
    awaiting_ci(ws)
    code, checks, res = ci_close(ws, repo=task_checkout(ws), key="another-key-than-the-runs")
    assert code == 1, res.output
    assert any("wrong signature" in p for p in checks[0]["problems"])
    assert status(ws) == "in_progress"


def test_attack14_forged_run_head_with_made_up_signature(ws):
    awaiting_ci(ws, signed=False)  # the real run stopped unsigned; the attacker adds a "signed" head
    _, head = run_head(ws)
    forged = {**head, "artifact": {**head["artifact"], "attempt": 9}, "sig": "0" * 64}
    with ws.tracker() as t:
        t.add_comment(TASK, format_checkpoint("run-head", "forged", forged))
    code, checks, res = ci_close(ws, repo=task_checkout(ws))
    assert code == 1, res.output
    assert any("wrong signature" in p for p in checks[0]["problems"])
    assert status(ws) == "in_progress"


def test_header_kind_must_equal_signed_kind(ws):
    awaiting_ci(ws)
    # A genuinely signed review re-posted under a run-head header.
    [review] = comments(ws, "review")
    with ws.tracker() as t:
        t.add_comment(TASK, "[orch:run-head]" + review["text"][len("[orch:review]"):])
    code, checks, res = ci_close(ws, repo=task_checkout(ws))
    assert code == 1, res.output
    assert any("differs from the signed kind" in p for p in checks[0]["problems"])
    assert status(ws) == "in_progress"


def test_altered_checkpoint_listed_by_the_run_head_is_refused_without_a_key(ws):
    awaiting_ci(ws, signed=False)
    [review] = comments(ws, "review")
    with ws.tracker() as t:
        t.add_comment(TASK, review["text"].replace("decision=approve", "decision=approve "))
        # Deleting is not possible through the API: rewrite the stored text as a database user could.
        with t.transaction() as c:
            c.execute("UPDATE comments SET text = ? WHERE id = ?", (review["text"] + "\n", review["id"]))
    code, checks, res = ci_close(ws, repo=task_checkout(ws), key=None)
    assert code == 1, res.output
    assert any("missing or altered" in p for p in checks[0]["problems"])


def test_ci_close_outside_a_git_checkout_says_so_in_one_line(ws, tmp_path):
    awaiting_ci(ws)
    elsewhere = tmp_path / "not-a-checkout"
    elsewhere.mkdir()
    code, checks, res = ci_close(ws, repo=elsewhere)
    assert code == 2 and checks is None
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a git checkout" in lines[0]
    assert status(ws) == "in_progress"


def _killed_run(ws, script_path: Path, crash_at: str) -> None:
    os.environ["MESH_CRASH_AT"] = crash_at
    os.environ["MESH_SIGNING_KEY"] = KEY
    run(RunOptions(label="plan:demo", backend="replay", script=script_path, repo=ws.repo, db=ws.db, actor="tester"),
        echo=lambda line: None)
    os._exit(0)


@pytest.mark.parametrize("sig", [None, "0" * 64])
def test_attack7_resume_refuses_a_forged_checkpoint(ws, monkeypatch, sig):
    child = multiprocessing.get_context("fork").Process(
        target=_killed_run, args=(ws, ws.write_script(demo_script()), "checkpoint#4"))
    child.start()
    child.join(120)
    assert child.exitcode == -9
    run_id = ws.checkpoints()[0].run_id
    payload = {"v": 1, "run_id": run_id, "seq": 5, "kind": "synthesis", "task_id": TASK, "role": "synthesizer",
               "step": ["synthesis", "synthesizer", "c"], "artifact": {"patch": "", "validation_commands":
                                                                          [ALSO_ALLOWED]}}
    if sig:
        payload["sig"] = sig
    with ws.tracker() as t:
        forged = t.add_comment(TASK, format_checkpoint("synthesis", "forged", payload))
    monkeypatch.setenv("MESH_SIGNING_KEY", KEY)
    monkeypatch.delenv("MESH_CRASH_AT", raising=False)
    report = run(RunOptions(label="plan:demo", backend="replay", script=ws.write_script({}, "none.json"),
                            repo=ws.repo, db=ws.db, actor="tester", task=TASK, force=True), echo=lambda line: None)
    assert report.outcome == "blocked" and report.block_reason == "tampered_checkpoint"
    assert f"comment {forged['id']}" in report.block_detail
    assert report.validation == []  # the forged commands never ran
    assert status(ws) != "closed"
    assert ws.kinds()[-2:] == ["run-head", "outcome"]


def test_a_checkout_config_cannot_switch_the_revalidation_sandbox_off(tmp_path):
    """Remark 3: mesh.toml on the checked-out branch says sandbox = "none"; revalidation stays in bwrap."""
    import subprocess as sp

    from orchestrator.landing.ci_close import CloseCheck, _revalidate
    from orchestrator.config import MeshConfig
    from orchestrator.sandbox.bwrap import SANDBOX_HOME

    repo = tmp_path / "checkout"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_where.py").write_text(
        "import os, unittest\n\nclass T(unittest.TestCase):\n    def test_sandboxed(self):\n"
        f"        self.assertEqual(os.environ.get('HOME'), {SANDBOX_HOME!r})\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "c"]):
        sp.run(["git", *args], cwd=repo, check=True)
    command = "python3 -m unittest discover -s tests -t ."
    config = MeshConfig.model_validate({"validation": {"allow": [command], "sandbox": "none"}})

    def revalidate(trust: bool) -> bool:
        check = CloseCheck(task_id="t", title="t", run_id="r", artifact={"validation": {"commands": [command]}})
        return _revalidate(check, config, repo, trust)

    assert revalidate(False) is True  # the branch's "none" was ignored: the probe saw the sandbox's HOME
    assert revalidate(True) is False  # CI's own config may opt out knowingly
