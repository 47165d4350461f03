"""A validation command whose tests another command of the same validation runs too is judged
from that command's run, not run again (``orchestrator.testruns.subsets`` tells which).

The larger command runs first; the smaller's result is the larger run's cases it selects, with a
note naming the command that stood for it. It runs after all when its tests are not found in the
larger's run (none reported, or the larger wrote no readable report), and shares the larger's
verdict when that run cannot be trusted (forged, unreadable): the same tests, the same runner.

May import what ``orchestrator.sandbox`` may.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from orchestrator.testruns.model import Run
from orchestrator.testruns.subsets import covered_by

__all__ = ["covering", "derived", "plan"]

# A larger run with one of these reasons says nothing trustworthy of its tests: its subsets share it.
_SHARED_REASONS = ("runner_forged", "test_report_unreadable", "no_test_report")


def plan(commands: Sequence[str], tree: Any, select: Mapping[str, str], split: Callable[[str], list[str]]
         ) -> dict[int, tuple[int, Callable[[str], bool]]]:
    """For each command judged from another's run: (its place) -> (the other's place, the predicate
    picking its tests out of the other's case ids). A command covering others always runs."""
    argvs = [split(command) or [] for command in commands]
    out: dict[int, tuple[int, Callable[[str], bool]]] = {}
    bigs: set[int] = set()
    for i, small in enumerate(argvs):
        if not small or commands[i] in select or i in bigs:
            continue
        for j, big in enumerate(argvs):
            if j == i or j in out or not big or commands[j] in select or commands[j] == commands[i]:
                continue
            pick = covered_by(small, big, tree)
            if pick is not None:
                out[i] = (j, pick)
                bigs.add(j)
                break
    return out


def derived(command: str, big_command: str, big: Any, pick: Callable[[str], bool], make: Callable[..., Any]) -> Any:
    """``command``'s result judged from ``big``'s (the result of ``big_command``), or None when it
    must run itself."""
    if big.rejected:
        return None
    if big.reason in _SHARED_REASONS:
        return make(command=command, exit_code=big.exit_code, passed=False, rejected=False, reason=big.reason,
                    stderr_tail=f"mesh: judged from the run of `{big_command}`, which ran its tests: {big.reason}",
                    judged_from=big_command)
    if big.run is None:
        return None
    cases = [case for case in big.run.cases if pick(case.id)]
    if not any(case.status != "skipped" for case in cases):
        return None
    run = Run(big.run.runner, cases, list(big.run.collection_errors), True,
              [test for test in big.run.flaky if pick(test)])
    counts = run.counts()
    failed = bool(counts.failed or counts.errors or counts.collection_errors)
    note = (f"mesh: judged from the tests of `{big_command}`, which ran every test this command selects"
            f" ({counts.ran} ran here); not run again")
    return make(command=command, exit_code=1 if failed else 0, passed=not failed, rejected=False, reason=None,
                stderr_tail=note, tests=counts, run=run, judged_from=big_command)


def covering(commands: Sequence[str], checks: Sequence[str], tree: Any) -> list[str]:
    """The check commands (``checks``) not in ``commands`` that run every test of one of them:
    run in their place, they judge it from their run, and leave the whole tree's results for
    the next task cut from it (its base check), so the tree's tests run once."""
    from orchestrator.sandbox.allowlist import split

    out = []
    for check in checks:
        if check in commands or check in out:
            continue
        big = split(check) or []
        if big and any(covered_by(split(command) or [], big, tree) is not None for command in commands):
            out.append(check)
    return out
