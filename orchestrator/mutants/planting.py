"""Twins planted in a validation's tree copy, for the command about to run there.

May import the standard library and ``orchestrator.mutants`` only.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from orchestrator.mutants.model import Candidate, Planting, Taken, changed_names, plan_files
from orchestrator.mutants.table import MUTATORS

__all__ = ["plant"]

# At most this many test files are read to choose the twins among their tests.
_MAX_FILES = 300


def plant(args: Sequence[str], runner: str | None, root: Path,
          changed: Mapping[str, Sequence[tuple[int, int]]] | Sequence[str] = (), *,
          seed: int | None = None) -> Planting | None:
    """Twins of the tests a ``runner`` started as ``args`` (the command) collects in the tree
    copy at ``root``: of the tests the command names; else of the tests of the files that reach
    the ``changed`` files (path: its hunks' line ranges, the commit's own change), those that
    use a name the change defines first; else of a sample of the others. None when mesh twins no
    test of this runner, cannot know what the command collects, or finds no test to twin."""
    mutator = MUTATORS.get(runner or "")
    if mutator is None:
        return None
    collected = mutator.collected(args, runner or "", root)
    if collected is None or not collected.files:
        return None
    if not isinstance(changed, Mapping):
        changed = {path: () for path in changed}
    rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "big"))
    plan, budget = plan_files(mutator, collected, root, list(changed), rng)
    names = changed_names(root, changed)
    texts: dict[str, tuple[Path, bytes, str]] = {}
    pool: list[tuple[int, int, float, str, Candidate]] = []
    for order, (rel, wanted) in enumerate(plan[:_MAX_FILES]):
        if len(pool) >= 4 * budget and not wanted:
            break
        path = root / rel
        if path.is_symlink() or not path.is_file():
            continue
        original = path.read_bytes()
        try:
            text = original.decode("utf-8")
        except UnicodeDecodeError:
            continue
        texts[rel] = (path, original, text)
        for found in mutator.candidates(rel, text):
            if wanted is not None and (found.scope, found.name) not in wanted and ("", found.name) not in wanted:
                continue
            pool.append((0 if found.words & names else 1, order, rng.random(), rel, found))
    # A twin's name is new to every file the command collects, and to their paths (a report id
    # holds its file's or module's name: tests.test_add_again.T.test_again is no twin of
    # test_again's named test_add_again): a report id holding it is the twin's.
    corpus = ["\n".join(collected.files[:20_000])]
    for rel in collected.files[:20_000]:
        try:
            corpus.append(texts[rel][2] if rel in texts else (root / rel).read_bytes().decode("utf-8", "replace"))
        except OSError:
            continue
    taken = Taken(corpus)
    ranked = sorted(pool)
    picked = ranked[:budget]
    if len(ranked) > budget and collected.named is None:
        # A quarter of the twins go to tests drawn at random beyond the first choice, so that
        # a change cannot steer every twin to tests it does not need to lie for.
        reserve = max(1, budget // 4)
        picked = ranked[:budget - reserve] + rng.sample(ranked[budget - reserve:], reserve)
    chosen: dict[str, set[tuple[str, str]]] = {}
    for _, _, _, rel, found in picked:
        chosen.setdefault(rel, set()).add((found.scope, found.name))
    planting = Planting()
    for rel, tests in chosen.items():
        path, original, text = texts[rel]
        new, twins = mutator.twin(rel, text, rng, frozenset(tests), taken)
        if not twins:
            continue
        planting.originals[path] = original
        path.write_bytes(new.encode("utf-8"))
        folder = Path(rel).parent.as_posix()
        planting.twins.extend(twin if twin.marks else replace(twin, marks=collected.marks.get(folder, ()))
                              for twin in twins)
    if not planting.twins:
        return None
    if collected.named is not None:
        planting.args = mutator.selection_args(runner or "", planting.twins)
    return planting
