"""A scripted worker for the drain tests, run by the ``command`` backend once per call.

``drain_worker.py PLAN`` reads the prompt on stdin and the call from ``MESH_ROLE``,
``MESH_ROUND`` and ``MESH_TASK_ID``, and answers from PLAN (JSON: task id -> entry):

- ``patch``: the synthesis patch (a fixed unified diff), or
- ``files``: path -> wanted content; the patch is computed against the worktree it runs in;
- ``retry_patch`` / ``retry_files``: used instead when the prompt says an earlier attempt
  could not land (the send-back context);
- ``commands``: the validation commands;
- ``move`` / ``retry_move``: ``{"branch", "path", "content"}``: on the (retry's) review, commit
  that file onto that branch, as another task's landing would between this task's start and
  its landing;
- ``revise``: path -> content the reviewer requires (of files the synthesis creates): while the
  worktree differs, the review requests changes (one MUST_FIX finding) and the revision's patch
  brings those files there, so the task takes two review cycles and lands two commits;
- ``sleep_s``: seconds to wait before each answer (a fixed per-call latency).

Every answer follows from the plan, the prompt and the worktree alone (no state of its own), so a
resumed run asking again gets the same answer (``move`` aside, which acts once per call).
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LAND_CONTEXT = "could not land"


def _diff(files: dict[str, str]) -> str:
    out = []
    for path, wanted in sorted(files.items()):
        target = Path(path)
        old = target.read_text() if target.exists() else None
        old_lines = (old or "").splitlines(keepends=True)
        new_lines = wanted.splitlines(keepends=True)
        src = f"a/{path}" if old is not None else "/dev/null"
        body = list(difflib.unified_diff(old_lines, new_lines, src, f"b/{path}"))
        if body:
            out.append("".join(body))
    return "".join(out) or "NO_DIFF: already there"


def _git(*args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})}).stdout.strip()


def _move(spec: dict) -> None:
    """Commit ``spec['path']`` = ``spec['content']`` on ``spec['branch']`` without a checkout."""
    ref = f"refs/heads/{spec['branch']}"
    index = Path(_git("rev-parse", "--git-common-dir")).resolve() / "drain-test-index"
    env = {"GIT_INDEX_FILE": str(index), "GIT_AUTHOR_NAME": "other", "GIT_AUTHOR_EMAIL": "o@x",
           "GIT_COMMITTER_NAME": "other", "GIT_COMMITTER_EMAIL": "o@x"}
    _git("read-tree", ref, env=env)
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=spec["content"], capture_output=True,
                          text=True, check=True).stdout.strip()
    _git("update-index", "--add", "--cacheinfo", f"100644,{blob},{spec['path']}", env=env)
    tree = _git("write-tree", env=env)
    commit = _git("commit-tree", tree, "-p", ref, "-m", "another landing", env=env)
    _git("update-ref", ref, commit)
    index.unlink()


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    prompt = sys.stdin.read()
    role, round_name, task = os.environ["MESH_ROLE"], os.environ["MESH_ROUND"], os.environ["MESH_TASK_ID"]
    entry = plan.get(task, {})
    retry = LAND_CONTEXT in prompt
    time.sleep(float(entry.get("sleep_s", plan.get("*", {}).get("sleep_s", 0))))
    if round_name == "proposal":
        answer = {"plan": [f"do {task}"], "assumptions": ["none"], "risk": "low"}
    elif round_name == "critique":
        answer = {"findings": ["fine"], "must_fix": [], "vote_flip_conditions": [], "risk": "low"}
    elif round_name == "synthesis":
        if retry and ("retry_patch" in entry or "retry_files" in entry):
            patch = entry.get("retry_patch") or _diff(entry["retry_files"])
        else:
            patch = entry.get("patch") or _diff(entry.get("files", {}))
        answer = {"decision_log": [{"point": "p", "decision": "accepted", "reason": "r"}], "patch": patch,
                  "validation_commands": entry.get("commands", ["python3 check.py"])}
    elif round_name == "vote":
        answer = {"vote": "agree", "reason": "fine"}
    elif round_name == "revision-plan":
        answer = {"summary": "do what the reviewer asks", "steps": [{"finding_id": "F1", "change": "as required"}]}
    elif round_name == "revision":
        answer = {"decision_log": [{"point": "F1", "decision": "accepted", "reason": "MUST_FIX"}],
                  "patch": _diff(entry["revise"]), "validation_commands": entry.get("commands", ["python3 check.py"])}
    elif round_name == "review":
        move = entry.get("retry_move") if retry else entry.get("move")
        if move:
            _move(move)
        answer = {"decision": "approve", "findings": [], "summary": "No material issues found."}
        wanted = entry.get("revise") or {}
        differs = sorted(path for path, content in wanted.items()
                         if not Path(path).is_file() or Path(path).read_text() != content)
        if differs:
            answer = {"decision": "request_changes", "summary": "Changes needed.", "findings": [{
                "finding_id": "F1", "location": f"{differs[0]}:1", "severity": "High", "label": "MUST_FIX",
                "issue": f"{differs[0]} is not what the task needs", "evidence": "read it",
                "minimal_fix": "rewrite it", "code_context": "see the file"}]}
    else:
        answer = {}
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
