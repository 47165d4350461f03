"""Counts and test names where people and their agents look (issue 35, item 2): a real drain whose
patch breaks a test, read back through the real MCP client SDK (``transcript``) and the eval's
grade detail names the failing test with its assertion; the run lines, ``mesh show`` and the HTML
report are checked in test_failures_visible and test_report_html."""

from __future__ import annotations

import asyncio

from tests.mcpkit import call, mcp_workspace, save_plan, stdio_session

UNIT = "python3 -m unittest discover -s tests -t ."
CALC = "def half(n):\n    return n // 2\n"
CALC_TEST = ("import unittest\n\nfrom calc import half\n\n\nclass Half(unittest.TestCase):\n"
             "    def test_half(self):\n        self.assertEqual(half(8), 4)\n")


def test_the_mcp_transcript_names_the_failing_test_with_its_assertion(tmp_path):
    ws = mcp_workspace(tmp_path)
    ws.config.write_text(ws.config.read_text().replace('allow = ["python3 check.py"]',
                                                       f'allow = ["python3 check.py", "{UNIT}"]\ncheck = ["{UNIT}"]'))
    for path, text in {"calc.py": CALC, "tests/__init__.py": "", "tests/test_calc.py": CALC_TEST}.items():
        (ws.repo / path).parent.mkdir(exist_ok=True)
        (ws.repo / path).write_text(text)
    from tests.drainkit import git

    git(ws.repo, "add", "-A")
    git(ws.repo, "commit", "-qm", "calc")
    ws.task("break", files={"calc.py": "def half(n):\n    return n // 3\n"}, commands=[UNIT])
    save_plan(ws)
    code, events, res = ws.drain()
    assert ws.status("break") == "blocked", res.output

    async def scenario():
        async with stdio_session(ws) as session:
            return await call(session, "transcript", task=ws.ids["break"])

    text = asyncio.run(scenario())["text"]
    assert "FAILED tests.test_calc.Half.test_half" in text
    assert "AssertionError: 2 != 4" in text
    assert f"{UNIT}: fail (exit 1" in text and "1 failed" in text
