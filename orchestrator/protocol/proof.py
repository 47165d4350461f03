"""What a validation proves: the ``[orch:proof]`` evidence, with test counts held against the base tree.

A command that exits 0 with tests that ran can still prove less than before: a patch that
deletes half the test files, or skips them, leaves a green run of the rest. So the run's
base tree (the commit its task branch forked from) is validated too, with the same commands
in the same sandbox, and a command whose test runner ran fewer tests on the candidate than
on the base fails with ``fewer_tests_than_base``. The base is counted once per run and per
command, only for commands that passed with counts (a failing candidate needs no
comparison), and the counts are kept in every later proof checkpoint, so a resumed run
finds them there instead of counting again. ``validation.compare_base = false`` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from redact import scrub
from redact.controls import strip_terminal

from orchestrator.safe_text import clip
from orchestrator.sandbox.testcounts import TestCounts, runner_counts_phrase

if TYPE_CHECKING:
    from orchestrator.sandbox.validation import ValidationResult

__all__ = ["BaseTests", "Proof", "TAIL_LINES", "brief", "failed_detail", "output_tail", "state", "tests_line"]

# The fields of a result that the run report, the run head and the land checkpoint keep.
_BRIEF_KEYS = ("command", "exit_code", "passed", "rejected", "reason", "tests", "limit")
# How much of a failing command's output the run summary, ``mesh show`` and the live lines
# print: enough for a traceback's last frames and the assertion, not a whole test log.
TAIL_LINES = 20
_TAIL_WIDTH = 240


def brief(result: Mapping[str, Any], *, output: bool = False) -> dict[str, Any]:
    """The short form of a result dict (a stored one may predate ``reason`` and ``tests``);
    with ``output``, a failed command keeps its ``output_tail`` (the run report's)."""
    out = {key: result.get(key) for key in _BRIEF_KEYS}
    if output and not result.get("passed") and not result.get("rejected"):
        out["output_tail"] = output_tail(result)
    return out


def output_tail(result: Mapping[str, Any], lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` non-blank lines of a result's output (stdout, then stderr), each one
    printable line clipped to a terminal's width. The tails were stripped of terminal
    sequences and scrubbed when they were kept; a stored checkpoint is tracker text, so this
    does both again rather than trust it."""
    text = "\n".join(part for part in (result.get("stdout_tail"), result.get("stderr_tail"))
                     if isinstance(part, str) and part)
    kept = [line.rstrip() for line in scrub(strip_terminal(text)).splitlines() if line.strip()]
    return [clip(line, _TAIL_WIDTH) for line in kept[-lines:]]


def tests_line(result: Mapping[str, Any], base_counts: Any = None) -> str:
    """``12 ran: 12 passed, ...; base tree 12 ran`` for a result dict with counts, else "";
    ``base_counts`` is a proof's ``base_tests.counts`` (tracker text: any shape)."""
    counts = TestCounts.from_dict(result.get("tests"))
    if counts is None:
        return ""
    command = result.get("command")
    base = TestCounts.from_dict(base_counts.get(command)) \
        if isinstance(base_counts, Mapping) and isinstance(command, str) else None
    return counts.line() + (f"; base tree {base.ran} ran" if base else "")


def state(result: Mapping[str, Any], base_counts: Any = None) -> str:
    """One line for a result dict: ``pass (tests 12 ran: ...; base tree 12 ran)``,
    ``fail (exit 0, no_tests_ran)``."""
    if result.get("rejected"):
        return "rejected"
    tests = tests_line(result, base_counts)
    if result.get("passed"):
        return f"pass (tests {tests})" if tests else "pass"
    parts = [f"exit {result.get('exit_code')}"]
    if isinstance(result.get("reason"), str):
        parts.append(result["reason"])
    if isinstance(result.get("limit"), str):
        parts.append(f"{result['limit']} limit hit")
    return f"fail ({', '.join([*parts, *([f'tests {tests}'] if tests else [])])})"


@dataclass
class BaseTests:
    """The test counts of the run's base tree, by validation command (None: no report)."""

    commit: str
    counts: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    @classmethod
    def resumed(cls, artifacts: Iterable[Any], commit: str) -> BaseTests:
        """The counts the latest of a run's stored proof ``artifacts`` holds, else none yet."""
        for artifact in reversed(list(artifacts)):
            base = artifact.get("base_tests") if isinstance(artifact, Mapping) else None
            if isinstance(base, Mapping) and isinstance(base.get("commit"), str) and \
                    isinstance(base.get("counts"), Mapping):
                return cls(base["commit"], dict(base["counts"]))
        return cls(commit)

    def judge(self, results: Sequence[ValidationResult],
              run_on_base: Callable[[list[str]], list[ValidationResult]]) -> list[ValidationResult]:
        """``results`` with every passing command that ran fewer tests than on the base failed."""
        wanted = list(dict.fromkeys(r.command for r in results
                                    if r.passed and r.tests is not None and r.command not in self.counts))
        if wanted:
            for result in run_on_base(wanted):
                self.counts[result.command] = result.tests.to_dict() if result.tests else None
        judged = []
        for result in results:
            base = TestCounts.from_dict(self.counts.get(result.command))
            if result.passed and result.tests is not None and base is not None and result.tests.ran < base.ran:
                note = (f"mesh: {result.tests.ran} test(s) ran, {base.ran} on the base tree"
                        f" {self.commit[:12]}: tests were removed, skipped or deselected")
                result = replace(result, passed=False, reason="fewer_tests_than_base",
                                 stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip())
            judged.append(result)
        return judged

    def to_dict(self) -> dict[str, Any]:
        """The form kept in the proof artifact (``base_tests``)."""
        return {"commit": self.commit, "counts": dict(self.counts)}


@dataclass
class Proof:
    """The evidence of one validation: results, whether it passed, and its summary lines."""

    results: list[dict[str, Any]]
    passed: bool
    ran: int
    commit: str | None = None
    base_tests: BaseTests | None = None

    @classmethod
    def of(cls, results: Sequence[ValidationResult], *, commit: str | None = None,
           base_tests: BaseTests | None = None) -> Proof:
        """Passed when at least one command ran and every command that ran passed."""
        ran = [r for r in results if not r.rejected]
        return cls([r.to_dict() for r in results], bool(ran) and all(r.passed for r in ran), len(ran),
                   commit, base_tests)

    def artifact(self) -> dict[str, Any]:
        """The ``[orch:proof]`` artifact: ``results``, ``passed``, ``commit`` and ``base_tests``."""
        return {"results": self.results, "passed": self.passed, "commit": self.commit,
                "base_tests": self.base_tests.to_dict() if self.base_tests else None}

    def summary(self) -> str:
        """``pass: 2/2 command(s) passed; 14 test(s) ran: ...`` (the checkpoint's header line): commands, then what
        their test runners report (``testcounts.runner_counts_phrase``), so one failed command never
        reads as one failed test."""
        rejected = sum(1 for r in self.results if r["rejected"])
        counted = [c for c in (TestCounts.from_dict(r.get("tests")) for r in self.results) if c]
        return (f"{'pass' if self.passed else 'fail'}: {sum(r['passed'] for r in self.results)}/{self.ran} command(s) passed"
                + (f", {rejected} rejected" if rejected else "")
                + (f"; {runner_counts_phrase(counted)}" if counted else ""))

    def details(self) -> str:
        """One line per command."""
        base = self.base_tests.counts if self.base_tests else None
        return "\n".join(f"- `{r['command']}`: " + (f"rejected ({r.get('reason') or 'not_allowed'})" if r["rejected"]
                                                    else state(r, base)) for r in self.results)


def failed_detail(results: Iterable[Mapping[str, Any]]) -> str:
    """Why the latest validation did not pass, for a block detail: each failed command's reason."""
    failed = [f"`{r.get('command')}`: {r.get('reason') or 'exit ' + str(r.get('exit_code'))}"
              + (f" ({r['limit']} limit hit)" if isinstance(r.get("limit"), str) else "")
              for r in results if not r.get("passed") and not r.get("rejected")]
    return "; ".join(failed) if failed else "no command ran"
