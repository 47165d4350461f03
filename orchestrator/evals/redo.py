"""``mesh eval run --redo CASE[:ARM[.tK]]``: run pairs of an eval again from scratch.

A pair (a case, an arm, a trial) with a result is not run again: that is what lets an eval be
stopped and continued. ``--redo`` names pairs to run anew anyway (a worker fixed, a case's
environment repaired): their results, repositories (every attempt's) and wall-time notes are
removed, and their runs get tasks of their own (a new generation: the tracker keeps the old
runs' tasks and checkpoints, closed, under their old keys). ``CASE`` redoes every arm and trial
of the case, ``CASE:ARM`` every trial of that arm, ``CASE:ARM.tK`` one trial.

May import what ``orchestrator.evals`` may.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.evals.arms import slot

__all__ = ["clear", "generation", "keys"]

_TRIAL = re.compile(r"^(?P<arm>.+?)(?:\.t(?P<trial>\d+))?$")
_ATTEMPT = re.compile(r"\.a\d+$")


def keys(specs: Sequence[str], case_ids: Sequence[str], arm_names: Sequence[str], trials: int) -> set[tuple[str, str]]:
    """The (case, slot) keys ``specs`` name; ValueError naming a case, arm or trial the eval has not."""
    out: set[tuple[str, str]] = set()
    for spec in specs:
        case, _, rest = spec.partition(":")
        if case not in case_ids:
            raise ValueError(f"--redo {spec}: the suite has no case {case!r}")
        if not rest:
            out |= {(case, slot(arm, trial)) for arm in arm_names for trial in range(1, trials + 1)}
            continue
        found = _TRIAL.match(rest)
        arm = found.group("arm") if found else rest
        if arm not in arm_names:
            raise ValueError(f"--redo {spec}: no arm {arm!r} in this run (arms: {', '.join(arm_names)})")
        chosen = [int(found.group("trial"))] if found and found.group("trial") else range(1, trials + 1)
        for trial in chosen:
            if not 1 <= trial <= trials:
                raise ValueError(f"--redo {spec}: trial {trial} is not run (--trials {trials})")
            out.add((case, slot(arm, trial)))
    return out


def _generations(folder: Path) -> dict[str, int]:
    try:
        data = json.loads((folder / "redo.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}


def generation(folder: Path, case_id: str, run_slot: str) -> int:
    """How many times the pair of ``run_slot`` (an attempt's slot names its pair's) was redone."""
    return _generations(folder).get(f"{case_id}:{_ATTEMPT.sub('', run_slot)}", 0)


def clear(folder: Path, key: tuple[str, str], board: Any) -> bool:
    """Remove what the pair ``key`` left (its result, wall notes, every attempt's repository) and
    start its next generation; False when it had left nothing."""
    case_id, run_slot = key
    had = board.result(case_id, run_slot) is not None
    results = folder / "results" / case_id
    repos = folder / "repos" / case_id
    # The pair's own files and its attempts' (``slot.aN``), never another trial's (``slot.t2``).
    for where, pattern in ((results, f"{run_slot}.json"), (results, f"{run_slot}.wall"),
                           (results, f"{run_slot}.a[0-9]*.*"), (repos, run_slot), (repos, f"{run_slot}.a[0-9]*")):
        for path in where.glob(pattern) if where.is_dir() else ():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    generations = _generations(folder)
    name = f"{case_id}:{run_slot}"
    generations[name] = generations.get(name, 0) + 1
    temporary = folder / "redo.json.tmp"
    temporary.write_text(json.dumps(generations, indent=1), encoding="utf-8")
    temporary.replace(folder / "redo.json")
    return had
