"""A package.json script that chains commands with ``&&`` (``node --test && npm run
check:type:ts``, ``eslint . && jest``), validated part by part as the shell would run it, so that
its test runner is read (``orchestrator.testruns.table.read_chain`` finds the one part that runs
a runner mesh reads).

The parts run in the script's order (its ``pre`` script first and ``post`` script last, as npm
runs them), each in a fresh tree copy of the sandbox like any validation command, stopping at
the first that fails; the runner's part is read as that runner (its report, mesh's twins and
control tests), the others count by their exit status, and the result is one command's: its
run and counts are the runner part's. A test run again alone (a flaky one) runs the runner's
part alone.

May import what ``orchestrator.sandbox`` may.
"""

from __future__ import annotations

import shlex
import time
from typing import Any, Callable, Sequence

__all__ = ["run"]


def run(command: str, parts: Sequence[Sequence[str]], reader: int,
        one: Callable[[list[str], str | None, float], Any], started: float, *, test_id: str | None,
        timeout_s: float, make: Callable[..., Any]) -> Any:
    """The result of ``command`` whose script is ``parts`` (``reader``: the place of the runner's
    part): ``one(argv, test_id, seconds left)`` runs one part (a ``ValidationResult``); ``make``
    makes the result of its fields."""
    chosen = [reader] if test_id is not None else list(range(len(parts)))
    results: list[tuple[int, Any]] = []
    for index in chosen:
        left = timeout_s - (time.monotonic() - started)
        if left <= 0:
            break
        result = one(list(parts[index]), test_id if index == reader else None, left)
        results.append((index, result))
        if not result.passed:
            break
    out, err = [], []
    for index, result in results:
        head = f"── {shlex.join(parts[index])} ──"
        out.append(f"{head}\n{result.stdout_tail}".rstrip("\n"))
        err.append(f"{head}\n{result.stderr_tail}".rstrip("\n"))
    ran = {index for index, _ in results}
    failed = next((result for _, result in results if not result.passed), None)
    unrun = [shlex.join(parts[index]) for index in chosen if index not in ran]
    if failed is None and unrun:  # the time ran out between two parts
        return make(command=command, exit_code=None, passed=False, rejected=False, reason="timeout",
                    duration_s=time.monotonic() - started, stdout_tail="\n".join(out),
                    stderr_tail="\n".join([*err, f"mesh: timed out after {timeout_s:.0f}s before "
                                                 f"{unrun[0]} ran"]))
    read = next((result for index, result in results if index == reader), None)
    note = ""
    if failed is not None and unrun:
        note = f"mesh: not run, as the script's && stops at a failure: {', '.join(unrun)}"
    return make(
        command=command,
        exit_code=failed.exit_code if failed is not None else 0,
        passed=failed is None,
        rejected=False,
        reason=failed.reason if failed is not None else None,
        duration_s=time.monotonic() - started,
        stdout_tail="\n".join(out),
        stderr_tail="\n".join([*err, *([note] if note else [])]),
        limit=failed.limit if failed is not None else None,
        tests=read.tests if read is not None else None,
        run=read.run if read is not None else None,
    )
