"""A workspace command (``pnpm -r test``, ``npm test --workspaces``, ``yarn workspaces run test``, or
the root script that is one of them) validated as its packages' own test scripts, each read by its
runner's reader (``orchestrator.testruns.workspaces``), and merged into one result.

Each package's script runs in its folder, one after the other, dependencies first; its tests'
ids are prefixed by the package's name. When the commit under test changed files of some
packages only, only those and the packages depending on them run (``Run.scope`` names them, so
the base comparison holds the others' tests as not run rather than lost), and the result says
which ran and why. The merged result passes when every package's does; it is read test by test
only when every package's runner was read (a package whose runner mesh does not read leaves the
whole command unread: no blind pass). A flaky test is run again in its own package alone.

May import what ``orchestrator.sandbox`` may.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from orchestrator.testruns.model import Run
from orchestrator.testruns.workspaces import Package, WorkspaceRun, affected, package_argv, prefix

__all__ = ["NOT_FOR_NPM", "run"]

# pnpm's settings npm warns about when it runs a package's script with them in its environment.
NOT_FOR_NPM = ("npm_config_manage_package_manager_versions",)

# A reason a package's result gives, the worse first: the merged result takes the first found.
_REASONS = ("runner_forged", "timeout", "not_found", "unselectable", "test_report_unreadable", "no_test_report",
            "tests_failed")


def _merged_run(results: Sequence[tuple[Package, Any]], scope: tuple[str, ...]) -> Run | None:
    runs = [(package, result.run) for package, result in results]
    if not runs or any(run is None for _, run in runs):
        return None
    names = {run.runner for _, run in runs}
    merged = Run(names.pop() if len(names) == 1 else "workspace", scope=scope)
    for package, run in runs:
        head = prefix(package)
        for case in run.cases:
            merged.add(head + case.id, case.status, case.duration_s, case.message)
        for where, message in run.collection_errors:
            merged.collection_error(head + where, message)
        merged.flaky.extend(head + test for test in run.flaky)
    return merged


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[-limit:]


def run(command: str, found: WorkspaceRun, changed: Sequence[str] | None,
        one: Callable[[list[str], str, str | None], Any], started: float, *, test_id: str | None,
        max_output_bytes: int, make: Callable[..., Any], root: Path | None = None, before_each: bool = True) -> Any:
    """The result of the workspace ``command``: ``one(argv, folder, test_id)`` runs one package's
    script in its folder (a ``ValidationResult``); ``changed``: the paths the change under
    validation changed since its base (None: unknown, every package runs); ``root``: the tree;
    ``make`` makes a result (``validation.ValidationResult``) of its fields. The root's
    ``pretest`` (``found.before``) runs first: in each package's sandbox (``before_each``: the tree
    is copied afresh for each), else once, in the tree itself."""
    workspace, chosen = found.workspace, found.chosen
    if found.before and not before_each:
        first = one(list(found.before), "", None)
        if not first.passed:
            return first
    if test_id is not None:
        package = next((p for p in chosen if test_id.startswith(prefix(p))), None)
        packages, why, inner = ([package], {}, test_id[len(prefix(package)):]) if package else ([], {}, None)
        if package is None:
            return make(command=command, exit_code=None, passed=False, rejected=True,
                                    reason="unselectable", duration_s=time.monotonic() - started,
                                    stderr_tail=f"no package of the workspace holds {test_id!r}")
    else:
        packages, why = affected(workspace, chosen, changed, root)
        if not packages:  # the change reaches no package with tests: they all run
            packages, why = list(chosen), {}
        inner = None
    each = found.before if before_each else ()
    results = [(package, one(package_argv(workspace), package.folder, inner, each)) for package in packages]
    share = max(2000, max_output_bytes // max(1, len(results)))
    out, err = [], []
    for package, result in results:
        first = f"npm run pretest, then " if found.before else ""
        head = f"── {package.name} ({package.folder}): {first}{' '.join(package_argv(workspace))} ──"
        out.append(f"{head}\n{_tail(result.stdout_tail, share)}")
        err.append(f"{head}\n{_tail(result.stderr_tail, share)}")
    left = [package for package in chosen if package not in packages]
    note = ""
    if test_id is None:
        ran = ", ".join(f"{p.name} ({why[p.name]})" if p.name in why else p.name for p in packages) or "none"
        note = f"mesh: workspace packages run: {ran}"
        if left:
            note += "; not run (the change does not reach them): " + ", ".join(p.name for p in left)
    scope = tuple(prefix(package) for package in packages)
    merged = _merged_run(results, scope)
    failed = [result for _, result in results if not result.passed]
    reason = next((r for name in _REASONS for _, res in results if (r := res.reason) == name), None) or \
        next((res.reason for res in failed if res.reason), None)
    return make(
        command=command,
        exit_code=next((res.exit_code for res in failed), 0) if results else None,
        passed=bool(results) and not failed,
        rejected=False,
        reason=reason if failed else None,
        duration_s=time.monotonic() - started,
        stdout_tail="\n".join(out),
        stderr_tail="\n".join([*err, *([note] if note else [])]),
        limit=next((res.limit for _, res in results if res.limit), None),
        tests=merged.counts() if merged is not None else None,
        run=merged,
    )

