"""Predictions out: ``mesh eval export`` as a library.

For each arm (and trial) of an eval, a SWE-bench predictions file, ``predictions-<slot>.jsonl``
(``slot``: the arm's name, ``arm.t2`` for its second trial), a line per finished run:
``{"instance_id", "model_name_or_path", "model_patch"}``, where ``instance_id`` is the SWE-bench
instance's (a case imported with ``--from-swebench``), else the case's id, ``model_name_or_path``
is the slot, and ``model_patch`` is ``git diff <base> <head>`` of the run's repository (its final
commit, the result's ``head``) without the case's hidden test files: empty for a run that
committed nothing. The grading keeps it in the result (``model_patch``), which is read first:
a machine of a shared eval exports the runs other machines made. A run in error is no prediction (errors stand apart, as in the report).

``results.jsonl``: a line per (case, arm, trial) of the eval, pending ones too: the state, the
error's kind and reason, resolved (None when not graded), the graded tests, cost, tokens, calls,
wall time, the head and the base. Another harness (SWE-bench's ``run_evaluation``) re-grades the
predictions; these lines are what to compare its verdicts with.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from orchestrator.evals.cases import write_text
from orchestrator.evals.report import ReportError, _slot
from orchestrator.evals.suite import Case, read_suite

__all__ = ["Exported", "export_eval", "model_patch"]


@dataclass
class Exported:
    """The files ``export_eval`` wrote and what they hold."""

    out: Path
    predictions: dict[str, Path] = field(default_factory=dict)  # slot -> its predictions file
    results: Path | None = None
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # slot -> {"predictions", "errors", "pending"}

    def lines(self) -> list[str]:
        out = []
        for run_slot, path in self.predictions.items():
            counts = self.counts[run_slot]
            apart = [f"{n} {what}" for what, n in (("run(s) in error", counts["errors"]),
                                                   ("not run yet", counts["pending"])) if n]
            out.append(f"{path}: {counts['predictions']} prediction(s)"
                       + (f" ({', '.join(apart)}: no prediction)" if apart else ""))
        return [*out, f"{self.results}: a line per (case, arm, trial)"]

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "predictions": {k: str(v) for k, v in self.predictions.items()},
                "results": str(self.results), "counts": self.counts}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-C", str(repo), *args], capture_output=True,
                          stdin=subprocess.DEVNULL, env=env)


def model_patch(folder: Path, case: Case, result: dict) -> str:
    """The run's final diff against its base, hidden test files excluded (empty: no commit).
    Its repository is the result's slot's (``repos/<case>/<slot>/``), or one of its attempts'."""
    head = result.get("head")
    if not head:
        return ""
    slots = [_slot(result["arm"], int(result.get("trial") or 1)),
             *[a["slot"] for a in result.get("attempts") or [] if a.get("slot")]]
    for run_slot in dict.fromkeys(slots):
        repo = folder / "repos" / case.id / run_slot
        if (repo / ".git").exists() and _git(repo, "cat-file", "-e", f"{head}^{{commit}}").returncode == 0:
            excluded = [f":(exclude,literal){path}" for path in case.hidden_paths()]
            done = _git(repo, "diff", "--no-color", "--no-ext-diff", "--full-index", "--binary", case.base, head,
                        "--", ".", *excluded)
            if done.returncode != 0:
                raise ReportError(f"{repo}: git diff: {done.stderr.decode('utf-8', 'replace').strip()[-300:]}")
            return done.stdout.decode("utf-8", "replace")
    raise ReportError(f"the run of {case.id} by {result['arm']} ended at {head[:12]}, which no repository under"
                      f" {folder / 'repos' / case.id} holds any more")


def export_eval(folder: Path, *, arms: Sequence[str] = (), out: Path | None = None) -> Exported:
    """Write the predictions files and ``results.jsonl`` of the eval in ``folder`` (of ``arms``,
    default all) into ``out`` (default ``FOLDER/export``). ReportError: no eval there, an arm it
    does not have, its suite gone (the bases and hidden files come from it)."""
    folder = Path(folder)
    meta_path = folder / "eval.json"
    if not meta_path.is_file():
        raise ReportError(f"{folder} holds no eval (no eval.json); run mesh eval run first")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    order: list[str] = meta.get("order") or meta["profiles"]
    unknown = [arm for arm in arms if arm not in order]
    if unknown:
        raise ReportError(f"--arm {unknown[0]}: no such arm (this eval's: {', '.join(order)})")
    try:
        cases = read_suite(Path(meta["suite"]))
    except (OSError, ValueError) as exc:
        raise ReportError(f"the eval's suite cannot be read ({exc}): its cases' bases are in it") from None
    exported = Exported(out=Path(out) if out else folder / "export")
    rows = []
    for arm in [a for a in order if not arms or a in arms]:
        for trial in range(1, int((meta.get("trials") or {}).get(arm, 1)) + 1):
            run_slot = _slot(arm, trial)
            predictions, counts = [], {"predictions": 0, "errors": 0, "pending": 0}
            for case in cases:
                path = folder / "results" / case.id / f"{run_slot}.json"
                result = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
                row = _row(case, arm, trial, run_slot, result)
                if result is None or result.get("state") not in ("resolved", "unresolved"):
                    counts["pending" if result is None else "errors"] += 1
                else:
                    # Kept in the result when graded (a shared eval's other machines hold no repository of it).
                    kept = result.get("model_patch")
                    patch = kept if isinstance(kept, str) else model_patch(folder, case, result)
                    row["model_patch_bytes"] = len(patch.encode())
                    predictions.append({"instance_id": row["instance_id"], "model_name_or_path": run_slot,
                                        "model_patch": patch})
                    counts["predictions"] += 1
                rows.append(row)
            exported.predictions[run_slot] = exported.out / f"predictions-{run_slot}.jsonl"
            exported.counts[run_slot] = counts
            write_text(exported.predictions[run_slot], "".join(json.dumps(p) + "\n" for p in predictions))
    exported.results = exported.out / "results.jsonl"
    write_text(exported.results, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    return exported


def _row(case: Case, arm: str, trial: int, run_slot: str, result: dict | None) -> dict[str, Any]:
    """One line of ``results.jsonl``."""
    result = result or {"state": "pending"}
    state = result.get("state")
    error = result.get("error") or {}
    return {"instance_id": case.instance_id or case.id, "case": case.id, "arm": arm, "trial": trial,
            "model_name_or_path": run_slot, "state": state,
            "resolved": state == "resolved" if state in ("resolved", "unresolved") else None,
            "error_kind": error.get("kind"), "error": error.get("reason"), "detail": result.get("detail"),
            "outcome": result.get("outcome"), "tests": result.get("tests") or {},
            "tests_status": _tests_status(case, result.get("tests") or {}),
            **{key: result.get(key) for key in ("cost_usd", "tokens_in", "tokens_out", "calls", "wall_s",
                                                "review_cycles", "head")},
            "base": case.base, "arm_description": result.get("arm_description"),
            # The environment that graded it (an [[eval.env]] entry, SWE-bench's spec), else None.
            "environment": result.get("environment")}


def _tests_status(case: Case, tests: dict) -> dict[str, dict[str, list[str]]] | None:
    """The grade's tests in the shape of SWE-bench's report (``tests_status``), named as the
    instance names them; None for a run graded by no list (not graded, graded by exit status)."""
    if case.grading != "tests" or not tests:
        return None
    status = {}
    for kind, listed, key in (("FAIL_TO_PASS", case.fail_to_pass, "fail_to_pass"),
                              ("PASS_TO_PASS", case.pass_to_pass, "pass_to_pass")):
        failed = set((tests.get(key) or {}).get("failed") or [])
        # Several tests may stand for one id SWE-bench cut at a space: it fails when one of them does.
        failing = list(dict.fromkeys(case.swebench_ids.get(t, t) for t in listed if t in failed))
        status[kind] = {"success": [name for name in dict.fromkeys(case.swebench_ids.get(t, t) for t in listed)
                                    if name not in failing],
                        "failure": failing}
    return status
