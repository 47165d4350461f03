"""docs/rounds.md quotes the review prompt's "Validation results" section as real runs write it
(issue 35, item 7): the demo task run for real (replay workers, real git, real unittest), once
with a passing patch and once with a broken one, and the reviewer's prompt from the call log
compared line by line with the documented section."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.ledger.calls import calls_for
from tests.runkit import TASK, happy_script, make_workspace, r, synthesis
from tests.test_run_e2e import BROKEN, one_review_cycle

DOC = Path(__file__).resolve().parents[1] / "docs" / "rounds.md"


def _result_lines(text: str) -> list[str]:
    """The result lines (one per command) of the first "Validation results" section of ``text``."""
    section = text[text.index("## Validation results\n"):]
    section = section[:section.index("\n#", 1)]
    lines = []
    for line in section.splitlines():
        if line.startswith("```"):  # the command's failing tests and output follow, fenced
            break
        if line.startswith("- "):
            lines.append(line)
    return lines


def _documented() -> list[list[str]]:
    blocks = re.findall(r"```\n(## Validation results\n.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return [_result_lines(block + "\n#") for block in blocks]


def _review_prompt(tmp_path: Path, script: dict) -> str:
    ws = make_workspace(tmp_path)
    ws.run(script, "--ids", TASK, "--config", one_review_cycle(ws))
    with ws.tracker() as t:
        return next(c["prompt"] for c in calls_for(t, task_id=TASK) if c["round"] == "review")


def test_the_documented_validation_results_are_what_a_reviewer_reads(tmp_path):
    passed, failed = _documented()
    assert _result_lines(_review_prompt(tmp_path / "pass", happy_script())) == passed
    broken = happy_script()
    broken["synthesizer"][0] = r("synthesis", synthesis(BROKEN))
    prompt = _review_prompt(tmp_path / "fail", broken)
    assert _result_lines(prompt) == failed
    # Issue 35 item 3: the reviewer reads each failing test with its own assertion, before the output.
    section = prompt[prompt.index("## Validation results\n"):]
    assert section.index("Failing tests") < section.index("Last lines of output:")
    assert re.search(r"- tests\.test_\w+\.\w+\.test_\w+: failed\n    Traceback", section)
    assert "AssertionError" in section[:section.index("Last lines of output:")]
