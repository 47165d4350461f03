"""A scripted worker whose answer can carry one enormous field (the bounded-answers tests).

``bulky_worker.py PLAN`` is run by the ``command`` backend once per call. It reads the prompt on
stdin and the call from ``MESH_ROLE``, ``MESH_ROUND`` and ``MESH_ATTEMPT``, appends one line of
JSON to ``PLAN["log"]`` (``role``, ``round``, ``attempt``; ``chars``: the prompt's length;
``bulk``: whether the prompt holds a piece of an enormous field), and answers a valid artifact
for the round: the patch and validation commands of ``PLAN["patch"]`` and ``PLAN["commands"]``,
agreeing votes, an approving review, a one-step revision plan (a failed validation then revises
to the same patch until the review cycles run out, and the task ends ``validation_failed``).

``PLAN["bulk"]`` (``{"chars", "kind", "rounds": {round or "role:round": [attempt, ...]}}``) makes
the answer to those rounds (of every role, or of that role), on those attempts, carry one field of
``chars`` characters: an assumption of the proposal, a finding of a critique, a decision's reason
of a synthesis. ``kind`` is ``prose`` (one
sentence over and over) or ``base64`` (of random bytes: the costliest text for the scrubber).
"""

from __future__ import annotations

import base64
import json
import os
import random
import sys
from pathlib import Path

_SENTENCE = "The plan should also cover the case where the input is not a number at all. "


def bulk_text(chars: int, kind: str) -> str:
    """The enormous field: ``chars`` characters of ``kind``."""
    if kind == "base64":
        return base64.b64encode(random.Random(7).randbytes(chars)).decode()[:chars]
    return (_SENTENCE * (chars // len(_SENTENCE) + 1))[:chars]


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    prompt = sys.stdin.read()
    role, round_name, attempt = os.environ["MESH_ROLE"], os.environ["MESH_ROUND"], int(os.environ["MESH_ATTEMPT"])
    bulk = plan.get("bulk") or {}
    piece = bulk_text(200, bulk.get("kind", "prose"))[100:200]
    with open(plan["log"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"role": role, "round": round_name, "attempt": attempt, "chars": len(prompt),
                              "bulk": piece in prompt}) + "\n")
    rounds = bulk.get("rounds") or {}
    wanted = attempt in rounds.get(f"{role}:{round_name}", rounds.get(round_name, ()))
    big = bulk_text(bulk["chars"], bulk.get("kind", "prose")) if wanted else None
    if round_name == "hydration":
        answer = {"acceptance": "it works", "design": "", "notes": ""}
    elif round_name == "proposal":
        answer = {"plan": ["Add fahrenheit_to_celsius", "Test it"], "assumptions": [big or "floats"], "risk": "low"}
    elif round_name == "critique":
        answer = {"findings": [big or "fine"], "must_fix": [], "vote_flip_conditions": [], "risk": "low"}
    elif round_name in ("synthesis", "revision"):
        answer = {"decision_log": [{"point": "p", "decision": "accepted", "reason": big or "r"}],
                  "patch": plan["patch"], "validation_commands": plan["commands"]}
    elif round_name == "vote":
        answer = {"vote": "agree", "reason": "fine"}
    elif round_name == "review":
        answer = {"decision": "approve", "findings": [], "summary": "No material issues found."}
    elif round_name == "revision-plan":  # a failed validation or a finding: the same patch again
        answer = {"summary": "Address the findings", "steps": [{"finding_id": "F1", "change": "fix it"}]}
    else:
        answer = {}
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
