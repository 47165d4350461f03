"""Grading a finished pair of an eval: its run's tree against the case's hidden tests, in the case's
environment, its figures (tokens, cost, wall time, calls, review cycles) and its report page,
written as the pair's result; or the error it ended in. Part of ``EvalRun`` (a mixin): it uses
the run's tracker, board, folder, configuration and environments.

May import what ``orchestrator.evals`` may.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.evals.cases import Grade, grade_run
from orchestrator.evals.environments import view_in
from orchestrator.evals.launch import blocked_error
from orchestrator.evals.suite import Case

__all__ = ["Grading"]


class Grading:
    """Grading and error results of an eval's pairs (mixed into ``EvalRun``; a pair and an attempt
    are ``runs.Pair`` and ``runs.Attempt``)."""

    def error_result(self, pair: Any, kind: str, reason: str, **extra: Any) -> dict:
        """Write and say the result of a pair that ended in an error (never counted as finished)."""
        result = {"case": pair.case.id, "arm": pair.arm.name, "profile": pair.arm.profile, "trial": pair.trial,
                  "arm_description": self.meta["arms"][pair.arm.name], "task": None, "state": "error",
                  "outcome": None, "detail": reason, "error": {"kind": kind, "reason": reason}, "report": None,
                  "run_id": None, **extra}
        self._put(pair, result)
        self.echo(f"{pair.case.id} {pair.slot}: error, {kind} ({reason})")
        return result

    def grade(self, pair: Any, chosen: Any, attempts: list[Any], **extra: Any) -> dict:
        """Grade ``chosen`` (the pair's run, or the attempt a budget-matched arm keeps) and write
        the pair's result; its figures are those of every attempt."""
        from orchestrator.evals.cases import _git  # one git runner for the case repositories
        from orchestrator.protocol.checkpoint import load_checkpoints
        from orchestrator.protocol.faults import crash_point
        from orchestrator.views.report_html import write_report

        crash_point("eval_grade")  # the tests' kill between a run's end and its grade
        with self.tracker() as tracker:
            issue = tracker.get(chosen.task)
            checkpoints = load_checkpoints(tracker, chosen.task)
            outcomes = [cp for cp in checkpoints if cp.kind == "outcome"]
            last = (outcomes[-1].payload.get("artifact") or {}) if outcomes else {}
            cycles = 0
            for attempt in attempts:
                cycles += sum(1 for cp in load_checkpoints(tracker, attempt.task) if cp.kind == "review-cycle")
            usage = {key: sum(a.usage.get(key, 0) for a in attempts) for key in ("calls", "tokens_in", "tokens_out",
                                                                                  "cost_usd")}
            trouble = blocked_error(tracker, chosen.task, last) if issue["status"] == "blocked" else None
            report = self.folder / "runs" / pair.case.id / f"{pair.slot}.html"
            report.parent.mkdir(parents=True, exist_ok=True)
            try:
                if checkpoints:  # a run that never started (a missing CLI) has no report to link
                    write_report(tracker, chosen.task, report, prices=self.config.prices)
                else:
                    report = None
            except OSError:
                report = None
        error = chosen.error if chosen.error and issue["status"] not in ("closed", "blocked") else trouble
        walls = [sum(self.board.walls(pair.case.id, a.slot)) for a in attempts]
        figures = {**usage, "review_cycles": cycles, "wall_s": round(sum(walls), 3),
                   "report": str(report.relative_to(self.folder)) if report else None,
                   "run_id": outcomes[-1].payload.get("run_id") if outcomes else None, "task": chosen.task,
                   "outcome": last.get("outcome") or issue["status"], "block_reason": last.get("block_reason")}
        if len(attempts) > 1 or pair.arm.config.match:
            figures["attempts"] = [{"slot": a.slot, "task": a.task, "status": a.status,
                                    "error": list(a.error) if a.error else None, **a.usage} for a in attempts]
        if error is not None:
            return self.error_result(pair, error[0], error[1], **figures, **extra)
        branch = f"refs/heads/mesh/{chosen.task}"
        try:
            head = _git(chosen.repo, "rev-parse", "--verify", "-q", branch).strip()
            head = head if head != _git(chosen.repo, "rev-parse", "main").strip() else None
        except ValueError:
            head = None
        proofs = [cp for cp in checkpoints if cp.kind == "proof"]
        validated = (proofs[-1].payload.get("artifact") or {}).get("commit") if proofs else None
        if chosen.borrowed and validated and head != validated:
            return self.error_result(pair, "eval", f"the run ended on another runner at {validated[:12]}, which"
                                                   " stopped before it shared that commit: this runner cannot grade"
                                                   " it", **figures, **extra)
        view = view_in(self._view(chosen.repo, own=bool(pair.case.environment)), self.environments.for_case(pair.case),
                       chosen.repo)
        # A case curated at suite build is graded by its lists: the base's check says nothing more.
        checks, base_passes = ([], False) if pair.case.grading else self._base_checks(pair.case, chosen.repo, view)
        grade: Grade = grade_run(chosen.repo, self.origin, pair.case, head, settings=self.config.validation, view=view,
                                 checks=checks, base_passes=base_passes)
        state = "resolved" if grade.resolved else "unresolved"
        detail = grade.detail
        if issue["status"] == "blocked" and last.get("block_reason"):
            # Why the run stopped is part of the grade's story (a refused patch is no change).
            detail = f"{detail}; the run ended blocked: {last['block_reason']}"
        graded = {key: value for key, value in grade.to_dict().items() if key not in ("resolved", "detail", "commit")}
        result = {"case": pair.case.id, "arm": pair.arm.name, "profile": pair.arm.profile, "trial": pair.trial,
                  "arm_description": self.meta["arms"][pair.arm.name], "state": state, "detail": detail,
                  "error": None, "head": head, "graded_commit": grade.commit, **graded, **figures, **extra,
                  **({"environment": pair.case.environment["name"]} if pair.case.environment else {})}
        result["model_patch"] = self._model_patch(pair.case, result)
        self._put(pair, result)
        self.echo(f"{pair.case.id} {pair.slot}: {state} ({result['outcome']}, {usage['calls']} call(s),"
                  f" ${usage['cost_usd']:.4f}, {result['wall_s']:.1f}s"
                  + (f", {len(attempts)} attempts" if len(attempts) > 1 else "") + ")")
        return result

    def _model_patch(self, case: Case, result: dict) -> str | None:
        """The run's final diff (what ``mesh eval export`` writes), kept in its result: a report or
        an export on a machine that does not hold the run's repository reads it there."""
        from orchestrator.evals.export import model_patch
        from orchestrator.evals.report import ReportError

        try:
            return model_patch(self.folder, case, result)
        except ReportError:
            return None

    def _view(self, repo: Path, own: bool = False):
        """The validation view of ``repo``; a case with an environment of its own (``own``) needs
        no dependency installed beside the checkout."""
        from orchestrator.toolchains.view import inspect

        return inspect(repo, self.config.validation, check_installed=not own).view

    def _base_checks(self, case: Case, repo: Path, view: Any) -> tuple[list[str], bool]:
        """The project's check commands (``view``'s, as the base check's), and whether the case's
        base passes them (once per case)."""
        if case.id in self._checks:
            return self._checks[case.id]
        from orchestrator.evals.cases import _git
        from orchestrator.evals.suite import sandbox_run
        from orchestrator.toolchains.base_check import check_commands

        cfg = self.config.validation
        checks = check_commands(cfg, list(view.checks) if view else [])
        run = sandbox_run(repo, cfg, view, setup=case.setup, env=case.env)  # its history range's, if any
        base = _git(repo, "rev-parse", "main").strip()
        passes = all(run(base, command)[0] for command in checks)
        self._checks[case.id] = (checks, passes)
        return checks, passes

