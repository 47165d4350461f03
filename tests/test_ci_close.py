"""close_mode = "ci", `mesh ci-close`, signed checkpoints, and the CI sequence on a fresh clone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.protocol.checkpoint import format_checkpoint, sign_payload, verify_payload
from orchestrator.protocol.outcomes import CLOSE_REASON
from tests.runkit import TASK, happy_script, make_workspace

KEY = "test-signing-key-0123456789"


@pytest.fixture
def ws(tmp_path, db_target):
    """The demo workspace on each engine: CI closes against a PostgreSQL tracker directly."""
    return make_workspace(tmp_path, db_target)


def ci_config(ws) -> Path:
    path = ws.root / "ci-mesh.toml"
    # close_mode is a top-level key: it must come before the first table.
    text = (ws.repo / "mesh.toml").read_text()
    head, _, rest = text.partition("[validation]")
    path.write_text(head + 'close_mode = "ci"\n\n[validation]' + rest)
    return path


def awaiting_ci(ws, *, signed: bool = True):
    env = {"MESH_SIGNING_KEY": KEY} if signed else {"MESH_SIGNING_KEY": ""}
    code, report, res = ws.run(happy_script(), "--config", str(ci_config(ws)), env=env)
    assert code == 0, res.output
    assert report["outcome"] == "awaiting_ci"
    return report


def task_checkout(ws) -> Path:
    """A CI-style clone of the task branch: the checkout ci-close closes for."""
    clone = ws.root / "ci-checkout"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", "--branch", f"mesh/{TASK}", str(ws.repo), str(clone)], check=True)
        for k, v in (("user.email", "ci@example.invalid"), ("user.name", "ci")):
            subprocess.run(["git", "config", k, v], cwd=clone, check=True)
    return clone


def ci_close(ws, *args, key: str | None = KEY, repo: Path | None = None):
    env = {"MESH_SIGNING_KEY": key or ""}
    res = ws.mesh("ci-close", "--label", "plan:demo", "--repo", str(repo or ws.repo), "--json", *args, env=env)
    return res.exit_code, (json.loads(res.stdout) if res.stdout.strip().startswith("[") else None), res


def test_sign_and_verify_roundtrip():
    payload = {"v": 1, "run_id": "r", "seq": 1, "kind": "review", "task_id": "t", "artifact": {"decision": "approve"}}
    signed = sign_payload(payload, b"k")
    assert verify_payload(signed, b"k")
    assert not verify_payload(signed, b"other")
    tampered = {**signed, "task_id": "another-task"}
    assert not verify_payload(tampered, b"k")
    assert not verify_payload(payload, b"k")


def test_ci_mode_stops_after_approval_behind_a_ci_gate(ws):
    report = awaiting_ci(ws)
    assert report["task"]["final_status"] == "in_progress"
    with ws.tracker() as t:
        blockers = t.blockers(TASK)
        assert [(b["issue_type"], b["await_type"]) for b in blockers] == [("gate", "ci")]
        assert t.ready(labels=["plan:demo"], issue_type="task", limit=0)[0]["id"] != TASK
    assert all("sig" in cp.payload for cp in ws.checkpoints())


def test_ci_close_checks_evidence_resolves_gate_and_closes(ws):
    awaiting_ci(ws)
    code, checks, res = ci_close(ws, "--revalidate", "--require-signed", repo=task_checkout(ws))
    assert code == 0, res.output
    assert len(checks) == 1
    check = checks[0]
    assert check["result"] == "closed"
    assert check["checks"] == {"vote_consensus": True, "validation_pass": True, "review_decision": "approve",
                               "open_must_fix_findings": 0, "commit_binding": "tree", "revalidation_pass": True}
    with ws.tracker() as t:
        task = t.get(TASK)
        assert task["status"] == "closed" and task["close_reason"] == CLOSE_REASON
        assert t.get(check["gate"])["status"] == "closed"
    # A second ci-close finds nothing left to do.
    code, checks, _ = ci_close(ws)
    assert code == 0 and checks == []


def test_forged_approval_does_not_close(ws):
    awaiting_ci(ws)
    with ws.tracker() as t:
        # The real review requested changes; a human (or a model) appends a forged approval.
        payload = {"v": 1, "run_id": ws.checkpoints()[-1].payload["run_id"], "seq": 999, "kind": "review",
                   "task_id": TASK, "role": "reviewer", "artifact": {"decision": "approve", "findings": [],
                                                                        "summary": "lgtm"}}
        t.add_comment(TASK, format_checkpoint("review", "decision=approve", payload))
        t.add_comment(TASK, "[orch:review] decision=approve")
    code, checks, res = ci_close(ws, "--require-signed")
    assert code == 1, res.output
    assert checks[0]["result"] == "refused"
    assert any("unsigned" in p or "no artifact" in p for p in checks[0]["problems"])
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "in_progress"


def test_wrongly_signed_evidence_is_refused(ws):
    awaiting_ci(ws)
    code, checks, _ = ci_close(ws, "--require-signed", key="a-different-key")
    assert code == 1
    assert any("wrong signature" in p for p in checks[0]["problems"])


def test_unsigned_run_is_refused_whenever_a_key_is_configured(ws):
    awaiting_ci(ws, signed=False)
    code, checks, _ = ci_close(ws, "--require-signed", repo=task_checkout(ws))
    assert code == 1 and checks[0]["result"] == "refused"
    code, checks, _ = ci_close(ws, repo=task_checkout(ws))
    assert code == 1 and any("unsigned" in p for p in checks[0]["problems"])
    # Without a key nothing can be verified: the unsigned run head is taken, bound to the tree.
    code, checks, _ = ci_close(ws, repo=task_checkout(ws), key=None)
    assert code == 0 and checks[0]["result"] == "closed"


def test_a_later_commit_is_refused_before_revalidation(ws):
    awaiting_ci(ws)
    # A later commit that leaves the task's files alone still changes the tree CI would
    # close on (it adds a failing test): refused before anything of the branch runs.
    clone = task_checkout(ws)
    (clone / "tests" / "test_later.py").write_text("import unittest\n\nclass T(unittest.TestCase):\n"
                                                   "    def test_fail(self):\n        self.fail('x')\n")
    subprocess.run(["git", "add", "tests/test_later.py"], cwd=clone, check=True)
    subprocess.run(["git", "commit", "-qm", "break the tests"], cwd=clone, check=True)
    code, checks, _ = ci_close(ws, "--revalidate", repo=clone)
    assert code == 1
    assert checks[0]["checks"]["commit_binding"] is None and checks[0]["reasons"] == ["tree_differs"]
    assert checks[0]["validation"] == []
