"""Every option the hot reads take (``tracker.bd_hot._OPTIONS``: ``ready``, ``list``, ``show``,
``blocked``, ``stats``/``status``), alone and two by two, in both of click's spellings: the hot
answer is the full command line's, byte for byte, or the hot path leaves the command line to
it. The combinations come from the table itself, so an option added there is compared here.
"""

from __future__ import annotations

import itertools

import pytest
from tests.conftest import bench_module
from tests.test_bd_hot import check_same
from tracker import bd_compat as bd
from tracker.bd_hot import _FLAG, _OPTIONS, answer
from tracker.cli import tracker_group
from tracker.jsonl import import_jsonl
from tracker.store import Tracker

_gen = bench_module("gen_workspace")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[str, dict[str, list[str]]]:
    """A generated tracker of 400 issues; its database and the values tried for each option key."""
    folder = tmp_path_factory.mktemp("hot-options")
    source = folder / "ws.jsonl"
    _gen.write_jsonl(_gen.generate(400, seed=47), source)
    tracker = Tracker.init(folder / "ws", prefix="hot")
    try:
        import_jsonl(tracker, source)
        issues = tracker.list(include_closed=True)
        labels = sorted({label for i in issues for label in i.get("labels") or ()})
        epic = next(i["id"] for i in issues if i["issue_type"] == "epic" and tracker.children(i["id"]))
        assignee = next(i["assignee"] for i in issues if i.get("assignee"))
        word = issues[0]["title"].split()[0]
        db = str(tracker.path)
    finally:
        tracker.close()
    values = {"labels": [labels[0], f"{labels[1]},{labels[2]}"], "labels_any": [f"{labels[0]},{labels[3]}"],
              "issue_type": ["task", "epic"], "priority": ["1", "0"], "parent": [epic, epic.partition("-")[2]],
              "assignee": [assignee], "limit": ["0", "3"], "sort": list(bd.READY_SORTS),
              "sort_by": list(bd.LIST_SORTS), "status": ["open,in_progress", "closed"], "title": [word.lower()]}
    return db, values


def _spellings(name: str, kind: object, key: str, values: dict[str, list[str]], turn: int) -> list[list[str]]:
    """The words of ``name`` on a command line, with each value tried for its key (``--name=value``
    on every other turn, for long names)."""
    if kind == _FLAG:
        return [[name]]
    if name.startswith("--") and turn % 2:
        return [[f"{name}={value}"] for value in values[key]]
    return [[name, value] for value in values[key]]


def _command_lines(command: str, values: dict[str, list[str]]) -> list[list[str]]:
    options = _OPTIONS[command]
    # One spelling per option key (its long name, then its short one), alone and in pairs.
    by_key: dict[str, list[str]] = {}
    for name, (key, _) in options.items():
        by_key.setdefault(key, []).append(name)
    picks = [(names[turn % len(names)], key) for turn, (key, names) in enumerate(sorted(by_key.items()))]
    lines = [[command, "--json"]]
    for size in (1, 2):
        for turn, combo in enumerate(itertools.combinations(picks, size)):
            choices = [_spellings(name, options[name][1], key, values, turn) for name, key in combo]
            for words in itertools.product(*choices):
                lines.append([command, *[w for part in words for w in part], "--json"])
    return lines


@pytest.mark.parametrize("command", sorted(set(_OPTIONS) - {"show"}))
def test_every_option_the_hot_path_takes_answers_as_the_full_command_line(workspace, command):
    db, values = workspace
    assert check_same(db, _command_lines(command, values)) > len(_OPTIONS[command])  # not every line fell back


def test_the_hot_options_are_the_commands_own(workspace):
    """Each option of ``_OPTIONS`` is one the full command has, of the same kind (a flag or not)."""
    for command, options in _OPTIONS.items():
        params = {name: param for param in tracker_group.commands[command].params for name in param.opts}
        for name, (_, kind) in options.items():
            assert name in params, (command, name)
            assert (kind == _FLAG) == bool(getattr(params[name], "is_flag", False)), (command, name)


@pytest.mark.parametrize("args", [
    ["ready", "--json", "--priority", "7"], ["ready", "--json", "--sort", "newest"], ["ready", "--json", "-l", "--json"],
    ["ready", "--json", "--label="], ["list", "--json", "--all=yes"], ["list", "--json", "--tree=false"],
    ["list", "--json", "-n", "-1"], ["blocked", "--json", "--parent"], ["stats", "--json", "extra"],
    ["ready", "--json", "-p", " 1"], ["list", "--json", "--sort", "Priority"],
])
def test_values_click_would_read_otherwise_are_left_to_it(workspace, args):
    db, _ = workspace
    assert answer(args, {"db": db}) is None
