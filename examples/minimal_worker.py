#!/usr/bin/env python3
"""A minimal mesh worker for the command backend: it answers every round of the demo task.

    mesh run --label plan:demo --backend command --worker-cmd "python3 /abs/path/to/examples/minimal_worker.py"

(Give the script's absolute path: each call runs in the task's worktree, so a relative one
would be looked up there.)

The contract it follows is docs/workers.md: the prompt arrives on stdin, the call's role and
round in MESH_ROLE and MESH_ROUND, and the answer is one JSON object on stdout. It answers
with the strict envelope {"role", "task_id", "artifact"}, which both the tolerant and the
strict (--strict-output) reading accept. A real worker would hand the prompt to a model; this
one writes the demo's change itself: it reads temperature.py from the worktree (its working
directory, read-only) and returns the unified diff that adds fahrenheit_to_celsius with its
tests. It needs nothing but the standard library.
"""

import difflib
import json
import os
import re
import sys

FUNCTION = '''

def fahrenheit_to_celsius(fahrenheit: float) -> float:
    """Convert degrees Fahrenheit to degrees Celsius; below absolute zero is a ValueError."""
    celsius = (fahrenheit - 32) * 5 / 9
    if celsius < ABSOLUTE_ZERO_C:
        raise ValueError(f"{fahrenheit} F is below absolute zero")
    return celsius
'''

TESTS = '''import unittest

from temperature import celsius_to_fahrenheit, fahrenheit_to_celsius


class FahrenheitToCelsius(unittest.TestCase):
    def test_freezing_point(self):
        self.assertEqual(fahrenheit_to_celsius(32), 0)

    def test_round_trip(self):
        self.assertAlmostEqual(fahrenheit_to_celsius(celsius_to_fahrenheit(21.5)), 21.5)

    def test_below_absolute_zero(self):
        with self.assertRaises(ValueError):
            fahrenheit_to_celsius(-500)
'''

VALIDATE = "python3 -m unittest discover -s tests -t ."


def file_diff(path, old, new):
    """One file's part of a git-style unified diff (old is None for a new file)."""
    before = "/dev/null" if old is None else f"a/{path}"
    lines = difflib.unified_diff((old or "").splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=before, tofile=f"b/{path}")
    header = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if old is None else "")
    return header + "".join(lines)


def patch():
    """The demo's change against the worktree, or NO_DIFF when it is already there."""
    try:
        with open("temperature.py", encoding="utf-8") as handle:
            source = handle.read()
    except OSError:
        return "NO_DIFF: no temperature.py in the worktree; this worker only knows the demo task"
    if "def fahrenheit_to_celsius" in source:
        return "NO_DIFF: fahrenheit_to_celsius is already there"
    return (file_diff("temperature.py", source, source + FUNCTION)
            + file_diff("tests/test_fahrenheit.py", None, TESTS))


def must_fix_ids(prompt):
    """The ids of the review's MUST_FIX findings, as the prompt lists them ("- F1 [High, MUST_FIX] ...")."""
    return re.findall(r"^- (\S+) \[\w+, MUST_FIX\]", prompt, flags=re.MULTILINE) or ["F1"]


def artifact(round_name, prompt):
    """This round's answer (docs/workers.md gives each round's schema)."""
    if round_name == "hydration":
        return {"acceptance": "fahrenheit_to_celsius(32) == 0 and below absolute zero raises ValueError",
                "design": "", "notes": ""}
    if round_name == "proposal":
        return {"plan": ["Add fahrenheit_to_celsius beside celsius_to_fahrenheit",
                         "Raise ValueError below absolute zero", "Cover both with unittest cases"],
                "assumptions": ["Inputs are floats in degrees Fahrenheit"], "risk": "low"}
    if round_name == "critique":
        return {"findings": [], "must_fix": [], "vote_flip_conditions": [], "risk": "low"}
    if round_name in ("synthesis", "revision"):
        return {"decision_log": [], "patch": patch(), "validation_commands": [VALIDATE]}
    if round_name == "vote":
        return {"vote": "agree", "reason": "The change meets the acceptance criteria."}
    if round_name == "review":
        return {"decision": "approve", "findings": [], "summary": "No material issues found."}
    if round_name == "revision-plan":
        return {"summary": "Fix the review's MUST_FIX findings.",
                "steps": [{"finding_id": fid, "change": "Apply the finding's minimal fix"}
                          for fid in must_fix_ids(prompt)]}
    raise SystemExit(f"minimal_worker: unknown round {round_name!r}")


def main():
    prompt = sys.stdin.read()
    answer = {"role": os.environ["MESH_ROLE"], "task_id": os.environ["MESH_TASK_ID"],
              "artifact": artifact(os.environ["MESH_ROUND"], prompt)}
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
