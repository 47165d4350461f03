"""What a validation proves: the ``[orch:proof]`` evidence, with test counts held against the base tree.

A command that exits 0 with tests that ran can still prove less than before: a patch that
deletes half the test files, or skips them, leaves a green run of the rest. So the run's
base tree (the commit its task branch forked from) is validated too, with the same commands
in the same sandbox, and held against the candidate test by test where the runner names its
tests (``orchestrator.testruns``): a test that passed on the base and fails on the candidate
fails the command (``tests_broken``), one that is gone fails it as ``fewer_tests_than_base``;
for a runner that gives counts only, fewer tests than on the base fail it. The base runs
once per run and per command, only for commands that passed with counts (a failing candidate
needs no comparison); its counts are kept in every later proof checkpoint and each test's
status on this machine (``orchestrator.toolchains.base_results``, by tree), so a resumed run
finds them instead of running the base again. ``validation.compare_base = false`` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from roles.validation_text import failing_tests, failure_lines, lost_tests, output_lines, verdict_notes

from orchestrator.safe_text import clip
from orchestrator.toolchains import base_results
from orchestrator.toolchains.base_results import BaseStatuses

if TYPE_CHECKING:
    from orchestrator.sandbox.validation import ValidationResult

__all__ = ["BaseTests", "Proof", "TAIL_LINES", "brief", "failed_detail", "output_tail", "retry_flaky", "state",
           "tests_line"]

# The fields of a result that the run report, the run head and the land checkpoint keep.
_BRIEF_KEYS = ("command", "exit_code", "passed", "rejected", "reason", "tests", "limit")
# How much of a failing command's output the run summary, ``mesh show`` and the live lines
# print: enough for a traceback's last frames and the assertion, not a whole test log.
TAIL_LINES = 20
_TAIL_WIDTH = 240
# Failing tests named before the output's tail, and the lines of each one's message shown.
_TESTS_SHOWN = 5
_MESSAGE_LINES = 8


def brief(result: Mapping[str, Any], *, output: bool = False) -> dict[str, Any]:
    """The short form of a result dict (a stored one may predate ``reason`` and ``tests``);
    with ``output``, a failed command keeps its ``output_tail`` (the run report's)."""
    out = {key: result.get(key) for key in _BRIEF_KEYS}
    if output and not result.get("passed") and not result.get("rejected"):
        out["output_tail"] = output_tail(result)
    return out


def output_tail(result: Mapping[str, Any], lines: int = TAIL_LINES) -> list[str]:
    """What a person reads of a failed result, each printable line clipped to a terminal's
    width: its failing tests first (``FAILED <id>``, then the head of the test's own message,
    for the first ``_TESTS_SHOWN`` of them), then the last ``lines`` non-blank lines of its
    output (stdout, then stderr). A stored checkpoint is tracker text, so this strips terminal
    sequences and scrubs again rather than trust it (``roles.validation_text``)."""
    head: list[str] = list(verdict_notes(result))
    head += [f"{test['id']}: {test['status']}" for test in lost_tests(result)[:_TESTS_SHOWN]]
    tests = failing_tests(result)
    for test in tests[:_TESTS_SHOWN]:
        head.append(f"{test['status'].upper()} {test['id']}")
        head += [f"    {line}" for line in test["message"].splitlines()[:_MESSAGE_LINES] if line.strip()]
    if len(tests) > _TESTS_SHOWN:
        head.append(f"... and {len(tests) - _TESTS_SHOWN} more failing test(s)")
    head += failure_lines(result)[:2 * _MESSAGE_LINES]
    return [clip(line, _TAIL_WIDTH) for line in [*head, *output_lines(result, lines)]]


def tests_line(result: Mapping[str, Any], base_counts: Any = None) -> str:
    """``12 ran: 12 passed, ...; base tree 12 ran`` for a result dict with counts, else "";
    ``base_counts`` is a proof's ``base_tests.counts`` (tracker text: any shape)."""
    counts = _counts(result.get("tests"))
    if counts is None:
        return ""
    command = result.get("command")
    base = _counts(base_counts.get(command)) \
        if isinstance(base_counts, Mapping) and isinstance(command, str) else None
    flaky = [test for test in result.get("flaky") or [] if isinstance(test, str)]
    return (counts.line() + (f"; base tree {base.ran} ran" if base else "")
            + (f"; flaky (passed when run again alone): {', '.join(flaky[:5])}" if flaky else ""))


def state(result: Mapping[str, Any], base_counts: Any = None) -> str:
    """One line for a result dict: ``pass (tests 12 ran: ...; base tree 12 ran)``,
    ``fail (exit 0, no_tests_ran)``."""
    if result.get("rejected"):
        return "rejected"
    tests = tests_line(result, base_counts)
    if result.get("passed"):
        why = result.get("reason") if isinstance(result.get("reason"), str) else ""
        inside = "; ".join(part for part in (why, f"tests {tests}" if tests else "") if part)
        return f"pass ({inside})" if inside else "pass"
    parts = [f"exit {result.get('exit_code')}"]
    if isinstance(result.get("reason"), str):
        parts.append(result["reason"])
    if isinstance(result.get("limit"), str):
        parts.append(f"{result['limit']} limit hit")
    return f"fail ({', '.join([*parts, *([f'tests {tests}'] if tests else [])])})"


def _counts(data: Any) -> Any:
    """``TestCounts.from_dict`` (imported when a proof is read: the views that show one without
    judging it, ``mesh show``, do not load the sandbox's test readers)."""
    from orchestrator.sandbox.testcounts import TestCounts

    return TestCounts.from_dict(data)


def _phrase(counted: Sequence[Any]) -> str:
    from orchestrator.sandbox.testcounts import runner_counts_phrase

    return runner_counts_phrase(counted)


@dataclass
class BaseTests:
    """The base tree's results, by validation command: the counts (kept in every proof
    checkpoint; None: no report) and, where the runner names its tests, each test's status
    (``statuses``: kept on this machine by ``base_results``, through ``store``)."""

    commit: str
    counts: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    statuses: dict[str, BaseStatuses] = field(default_factory=dict)
    # (repository whose build caches hold them, the base's tree, the validation view's key)
    store: tuple[Path, str, str] | None = None
    # Commands whose runs of the base tree may stand for a command's (the check commands), and a
    # checkout to read a package's path from.
    covering: list[str] = field(default_factory=list)
    tree_path: Path | None = None
    # command -> the command whose kept run of the base tree its statuses were read from.
    read_from: dict[str, str] = field(default_factory=dict)

    @classmethod
    def resumed(cls, artifacts: Iterable[Any], commit: str) -> BaseTests:
        """The counts the latest of a run's stored proof ``artifacts`` holds, else none yet."""
        for artifact in reversed(list(artifacts)):
            base = artifact.get("base_tests") if isinstance(artifact, Mapping) else None
            if isinstance(base, Mapping) and isinstance(base.get("commit"), str) and \
                    isinstance(base.get("counts"), Mapping):
                return cls(base["commit"], dict(base["counts"]))
        return cls(commit)

    def known(self, command: str) -> BaseStatuses | None:
        """The base's statuses for ``command``: held, or kept on this machine."""
        if command not in self.statuses and self.store is not None:
            found = base_results.load(*self.store[:2], command, self.store[2])
            if found is None and self.covering:
                # The tree's tests ran once already under a command covering this one: read, not rerun.
                from orchestrator.toolchains.base_results import base_statuses

                derived = base_statuses(command, self.covering, self.store, self.tree_path)
                if derived is not None:
                    self.read_from[command], found = derived
            if found is not None:
                self.statuses[command] = found
        return self.statuses.get(command)

    def keep(self, result: ValidationResult) -> None:
        """Hold (and keep on this machine) what ``result``, run on the base tree, reported."""
        self.counts[result.command] = result.tests.to_dict() if result.tests else None
        if result.run is not None:
            self.statuses[result.command] = base_results.BaseStatuses.of(result.run)
            if self.store is not None:
                base_results.save(*self.store[:2], result.command, self.store[2], result.run)

    def judge(self, results: Sequence[ValidationResult],
              run_on_base: Callable[[list[str]], list[ValidationResult]]) -> list[ValidationResult]:
        """``results`` with every passing command that lost a test the base had failed: by test
        where the runner names its tests (a test that passed on the base fails: ``tests_broken``;
        is gone: ``fewer_tests_than_base``), by count otherwise."""
        wanted = list(dict.fromkeys(
            r.command for r in results if r.passed and r.tests is not None and self.known(r.command) is None
            and (r.run is not None or r.command not in self.counts)))
        if wanted:
            for result in run_on_base(wanted):
                self.keep(result)
        return [self._judged(result) for result in results]

    def _judged(self, result: ValidationResult) -> ValidationResult:
        if not result.passed or result.tests is None:
            return result
        statuses = self.known(result.command)
        if statuses is not None and result.run is not None:
            found = base_results.compare(statuses, result.run)
            if not (found.broken or found.gone or found.skipped or found.more_collection_errors):
                return result
            reason = "tests_broken" if found.broken or found.more_collection_errors else "fewer_tests_than_base"
            note = f"mesh: held against the base tree {self.commit[:12]} test by test: {found.line()}"
            return replace(result, passed=False, reason=reason, lost=found.lost(),
                           stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip())
        base = _counts(self.counts.get(result.command))
        if base is not None and result.tests.ran < base.ran:
            note = (f"mesh: {result.tests.ran} test(s) ran, {base.ran} on the base tree"
                    f" {self.commit[:12]}: tests were removed, skipped or deselected")
            return replace(result, passed=False, reason="fewer_tests_than_base",
                           stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip())
        return result

    def to_dict(self) -> dict[str, Any]:
        """The form kept in the proof artifact (``base_tests``): the counts, not the statuses."""
        return {"commit": self.commit, "counts": dict(self.counts),
                **({"read_from": dict(self.read_from)} if self.read_from else {})}


# At most this many failing tests of one command are run again alone, per validation.
MAX_RETRIED = 5


def retry_flaky(results: Sequence[ValidationResult], base: BaseTests,
                run_on_base: Callable[[list[str]], list[ValidationResult]],
                rerun: Callable[[str, str | None], ValidationResult], retries: int) -> list[ValidationResult]:
    """``results`` with each failing test that passed on the base run again alone, up to
    ``retries`` times (the first ``MAX_RETRIED`` of a command), then, when some passed alone, the
    whole command once more (``rerun(command, None)``): a test that passed alone and passes in
    that whole run counts as passed and is named flaky in the result (``flaky``, a note in its
    output), never silently; one that fails in the whole run again depends on the tests before
    it and counts as failed, with a note saying so.
    A command whose failing tests were all flaky, with nothing else wrong in its report, passes.
    The base's statuses come from ``base`` (the base is run for a command it has none of)."""
    if retries <= 0:
        return list(results)
    suspects = [r for r in results if not r.passed and r.run is not None and r.reason is None and r.limit is None
                and r.exit_code is not None and r.run.failures()]
    wanted = [r.command for r in suspects if base.known(r.command) is None]
    if wanted:
        for result in run_on_base(list(dict.fromkeys(wanted))):
            base.keep(result)
    out = []
    suspected = {id(r) for r in suspects}
    for result in results:
        statuses = base.known(result.command) if id(result) in suspected else None
        tried = [case.id for case in result.run.failures() if statuses and statuses.statuses.get(case.id) == "passed"] \
            if statuses else []
        alone = [test for test in tried[:MAX_RETRIED] if _passes_alone(result.command, test, rerun, retries)]
        # Passing alone is not enough: a test the change made depend on what runs before it fails
        # in every whole run. The whole command runs once more; a test that fails there again is not flaky.
        again = rerun(result.command, None) if alone else None
        now = {case.id: case.status for case in again.run.cases} if again is not None and again.run else {}
        flaky = [test for test in alone if now.get(test) == "passed"]
        ordered = [test for test in alone if test not in flaky]
        if ordered:
            note = (f"mesh: {', '.join(ordered)} failed in two whole runs and passed when run alone: it depends on"
                    " what runs before it (shared state the change leaves behind), so it counts as failed")
            result = replace(result, stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip())
        if not flaky:
            out.append(result)
            continue
        run = result.run.with_flaky(flaky)
        clean = not run.failures() and not run.collection_errors
        note = (f"mesh: flaky: {', '.join(flaky)} failed, then passed when run again alone"
                + ("; no other test failed, so the command counts as passed" if clean else ""))
        out.append(replace(result, run=run, tests=run.counts(), passed=clean,
                           stderr_tail=f"{result.stderr_tail.rstrip()}\n{note}".lstrip()))
    return out


def _passes_alone(command: str, test_id: str, rerun: Callable[[str, str | None], ValidationResult],
                  retries: int) -> bool:
    for _ in range(retries):
        again = rerun(command, test_id)
        if again.rejected or again.run is None:
            return False  # its runner cannot run it alone
        case = next((c for c in again.run.cases if c.id == test_id), None)
        if case is not None and case.status == "passed":
            return True
    return False


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
        # A command judged from another's run ran no test of its own: its tests are counted once.
        judged = sum(1 for r in self.results if r.get("judged_from"))
        counted = [c for c in (_counts(r.get("tests")) for r in self.results if not r.get("judged_from"))
                   if c]
        read = self.base_tests.read_from if self.base_tests else {}
        return (f"{'pass' if self.passed else 'fail'}: {sum(r['passed'] for r in self.results)}/{self.ran} command(s) passed"
                + (f", {rejected} rejected" if rejected else "")
                + (f"; {_phrase(counted)}" if counted else "")
                + (f"; {judged} command(s) judged from another's run" if judged else "")
                + (f"; the base's results of {len(read)} command(s) read from its earlier run, not run again"
                   if read else ""))

    def details(self) -> str:
        """One line per command (a failed one naming its first failing tests)."""
        base = self.base_tests.counts if self.base_tests else None
        return "\n".join(f"- `{r['command']}`: " + (f"rejected ({r.get('reason') or 'not_allowed'})" if r["rejected"]
                                                    else state(r, base) + _failing_names(r)) for r in self.results)


def _failing_names(result: Mapping[str, Any], limit: int = 5) -> str:
    """``; lost against the base: a; failing: b, c and 3 more`` for a failed result that names
    its tests, else ''."""
    if result.get("passed"):
        return ""
    parts = []
    for label, tests in (("lost against the base", lost_tests(result)), ("failing", failing_tests(result))):
        names = [f"{test['id']} (skipped now)" if test["status"].endswith("skipped now") else test["id"]
                 for test in tests]
        if names:
            parts.append(f"; {label}: {', '.join(names[:limit])}"
                         + (f" and {len(names) - limit} more" if len(names) > limit else ""))
    return "".join(parts)


def failed_detail(results: Iterable[Mapping[str, Any]]) -> str:
    """Why the latest validation did not pass, for a block detail: each failed command's reason
    and its first failing tests."""
    failed = [f"`{r.get('command')}`: {r.get('reason') or 'exit ' + str(r.get('exit_code'))}"
              + (f" ({r['limit']} limit hit)" if isinstance(r.get("limit"), str) else "") + _failing_names(r, 3)
              for r in results if not r.get("passed") and not r.get("rejected")]
    return "; ".join(failed) if failed else "no command ran"
