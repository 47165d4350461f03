"""Adversarial corpus, the attacks that already held before issue 9, driven end to end.

The newer attacks live beside this file: test_attack_sandbox.py (hostile validation code,
worker-planted files, /proc reads), test_attack_patches.py (protected paths, symlinks,
shadowing), test_attack_scrub.py (encoded secrets), test_attack_tools.py (FIFOs, hard links,
.git), test_attack_import.py (deep JSONL), test_attack_signing.py (forged and replayed
approvals). Each test asserts what a user cares about: nothing written outside the task
branch, nothing run that was not allowed, the tracker intact, the task not closed by a forgery.
"""

from __future__ import annotations

import sqlite3

import pytest

from tests.runkit import TASK, VALIDATE, happy_script, make_workspace, critique, r, synthesis


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def test_path_traversal_writes_nothing_outside_and_commits_nothing(ws):
    evil = "--- /dev/null\n+++ b/../../escaped.txt\n@@ -0,0 +1 @@\n+boom\n"
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(evil))
    code, report, _ = ws.run(script)
    assert code == 3 and report["block_reason"] == "patch_refused"
    assert not (ws.repo.parent / "escaped.txt").exists() and not (ws.root.parent / "escaped.txt").exists()
    assert ws.git("rev-list", "--count", f"main..mesh/{TASK}").strip() == "0"
    with ws.tracker() as t:
        assert t.get(TASK)["status"] != "closed"


@pytest.mark.parametrize("suffix", ["; touch {m}", "&& touch {m}", "| tee {m}", "$(touch {m})", "`touch {m}`",
                                    "\ntouch {m}"])
def test_command_injection_in_a_validation_command_never_runs(ws, suffix):
    marker = ws.root / "injected"
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(commands=[VALIDATE + " " + suffix.format(m=marker),
                                                                   VALIDATE]))
    code, report, res = ws.run(script)
    assert code == 0, res.output
    assert not marker.exists()
    assert report["validation"][0]["rejected"] is True and report["validation"][0]["exit_code"] is None


def test_template_code_in_model_output_reaches_the_next_prompt_as_text(ws):
    payload = "{{ 7 * 7 }} {% for x in range(3) %}loop{% endfor %} {{ config }}"
    script = happy_script()
    script["critic_a"][0] = r("critique", critique(must_fix=[payload]))
    code, _, res = ws.run(script)
    assert code == 0, res.output
    conn = sqlite3.connect(ws.db)
    try:
        prompts = [row[0] for row in conn.execute(
            "SELECT prompt FROM mesh_calls WHERE round = 'synthesis' AND task_id = ?", (TASK,))]
    finally:
        conn.close()
    assert prompts and all(payload in p for p in prompts)
    assert not any("looploop" in p for p in prompts)


def test_sql_in_tracker_fields_is_stored_as_text(ws):
    title = "x'); DROP TABLE issues; --"
    res = ws.mesh("tracker", "create", title, "--type", "task", "--description", "\" OR 1=1 --", "--json")
    assert res.exit_code == 0, res.output
    with ws.tracker() as t:
        found = [i for i in t.list() if i["title"] == title]
        assert len(found) == 1 and found[0]["description"] == "\" OR 1=1 --"
        assert t.get(TASK)["id"] == TASK  # the issues table is still there
