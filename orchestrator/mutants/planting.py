"""Twins planted in a validation's tree copy, for the command about to run there.

May import the standard library and ``orchestrator.mutants`` only.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path

from orchestrator.mutants.model import Planting, plan_files
from orchestrator.mutants.table import MUTATORS

__all__ = ["plant"]


def plant(args: Sequence[str], runner: str | None, root: Path, changed: Sequence[str] = (), *,
          seed: int | None = None) -> Planting | None:
    """Twins of the tests a ``runner`` given ``args`` (its own arguments) collects in the tree
    copy at ``root``, in the files that reach the ``changed`` files (relative paths; the
    commit's own change) or, when none does, in a sample of the others; None when mesh twins
    no test of this runner or cannot know what the command collects."""
    mutator = MUTATORS.get(runner or "")
    if mutator is None:
        return None
    collected = mutator.collected(args, runner or "", root)
    if collected is None or not collected.files:
        return None
    rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "big"))
    planting = Planting()
    taken: set[str] = set()
    plan = plan_files(mutator, collected, root, changed, rng)
    budget = max((limit for _, _, limit in plan), default=0)  # all twins together, not per file
    for rel, wanted, limit in plan:
        if budget <= 0:
            break
        path = root / rel
        if path.is_symlink() or not path.is_file():
            continue
        original = path.read_bytes()
        try:
            text = original.decode("utf-8")
        except UnicodeDecodeError:
            continue
        new, twins = mutator.twin(rel, text, rng, wanted, taken, min(limit, budget))
        if not twins:
            continue
        planting.originals[path] = original
        path.write_bytes(new.encode("utf-8"))
        planting.twins.extend(twins)
        budget -= len(twins)
    if not planting.twins:
        return None
    if collected.named is not None:
        planting.args = mutator.selection_args(runner or "", planting.twins)
    return planting
