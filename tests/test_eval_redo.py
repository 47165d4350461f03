"""Issue 46, item 5: ``mesh eval run --redo CASE[:ARM[.tK]]`` with trials and attempts: the pairs a
spec names, and what redoing one removes (its result, wall notes, every attempt's result and
repository) and keeps (every other trial's and arm's, whose names start alike: ``lite`` and
``lite.t2``, ``lite.t2`` and ``lite.t21``)."""

from __future__ import annotations

import json

import pytest

from orchestrator.evals.redo import clear, generation, keys
from orchestrator.evals.shared import FolderBoard

SLOTS = ["lite", "lite.a2", "lite.t2", "lite.t2.a2", "lite.t21", "litex", "full", "full.t2"]


def _eval(folder):
    for run_slot in SLOTS:
        for case in ("c1", "c2"):
            (folder / "results" / case).mkdir(parents=True, exist_ok=True)
            (folder / "results" / case / f"{run_slot}.json").write_text(json.dumps({"state": "resolved"}))
            (folder / "results" / case / f"{run_slot}.wall").write_text("1.0\n")
            (folder / "repos" / case / run_slot).mkdir(parents=True, exist_ok=True)
            (folder / "repos" / case / run_slot / "f").write_text("x")
    return FolderBoard(folder)


def _left(folder, case="c1"):
    return sorted({p.name.split(".json")[0].split(".wall")[0] for p in (folder / "results" / case).iterdir()}), \
        sorted(p.name for p in (folder / "repos" / case).iterdir())


@pytest.mark.parametrize("spec, named", [
    ("c1", {("c1", s) for s in ("lite", "lite.t2", "lite.t3", "full", "full.t2", "full.t3")}),
    ("c1:lite", {("c1", "lite"), ("c1", "lite.t2"), ("c1", "lite.t3")}),
    ("c1:lite.t2", {("c1", "lite.t2")}),
    ("c1:lite.t1", {("c1", "lite")}),
])
def test_a_spec_names_its_pairs(spec, named):
    assert keys([spec], ["c1", "c2"], ["lite", "full"], 3) == named


@pytest.mark.parametrize("spec, said", [("c9", "no case 'c9'"), ("c1:team", "no arm 'team'"),
                                        ("c1:lite.t4", "trial 4 is not run (--trials 3)")])
def test_a_spec_naming_what_the_eval_has_not_is_refused(spec, said):
    with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
        keys([spec], ["c1", "c2"], ["lite", "full"], 3)


def test_redoing_one_trial_removes_its_files_and_its_attempts_and_no_other_trials(tmp_path):
    board = _eval(tmp_path)
    assert clear(tmp_path, ("c1", "lite.t2"), board) is True
    results, repos = _left(tmp_path)
    assert results == ["full", "full.t2", "lite", "lite.a2", "lite.t21", "litex"]
    assert repos == ["full", "full.t2", "lite", "lite.a2", "lite.t21", "litex"]
    assert _left(tmp_path, "c2")[0] == sorted(SLOTS)  # another case untouched
    assert generation(tmp_path, "c1", "lite.t2") == 1 and generation(tmp_path, "c1", "lite.t2.a2") == 1
    assert generation(tmp_path, "c1", "lite") == 0
    # Trial 1 of the arm: its attempts go with it, trial 2 onwards stays.
    assert clear(tmp_path, ("c1", "lite"), board) is True
    assert _left(tmp_path)[0] == ["full", "full.t2", "lite.t21", "litex"]
    # Redone again, with nothing left: no result, the next generation all the same.
    assert clear(tmp_path, ("c1", "lite"), board) is False and generation(tmp_path, "c1", "lite") == 2
