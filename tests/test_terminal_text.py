"""Text from the tracker and the models reaches the terminal inert: `mesh show` and the run
summary show terminal escapes and bidirectional overrides as \\uXXXX, and a forged checkpoint
(a null seq, an artifact of the wrong shape) is shown as unreadable instead of crashing."""

from __future__ import annotations

from orchestrator.protocol.outcomes import RunReport
from orchestrator.views.report import render_report
from orchestrator.views.show import render_history

HOSTILE = "fix\x1b[2J\x1b]0;pwned\x07 it\u202e"


def test_show_renders_forged_steps_and_hostile_text_inert():
    history = {"task": {"id": "x-1", "title": HOSTILE, "status": "open"}, "runs": [{"run_id": "r", "steps": [
        {"seq": None, "kind": "proposal", "consensus_cycle": 0, "review_cycle": 0, "summary": HOSTILE,
         "artifact": {"plan": [HOSTILE]}},
        {"seq": 2, "kind": "review", "consensus_cycle": 0, "review_cycle": 0, "summary": "s",
         "artifact": ["not", "a", "mapping"]},
    ]}]}
    text = render_history(history)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\u001b[2J" in text and "artifact not readable" in text


def test_run_summary_shows_a_hostile_title_inert():
    report = RunReport(orch_run_id="run-1", preflight="p", scope={"mode": "label", "plan_label": "l"},
                       task={"id": "x-1", "title": HOSTILE, "final_status": "blocked"}, outcome="blocked",
                       block_reason="no_response", block_detail=HOSTILE)
    text = render_report(report)
    assert "\x1b" not in text and "\u202e" not in text and "\\u001b" in text
