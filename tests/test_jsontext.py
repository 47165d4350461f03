"""tracker.jsontext writes what ``json.dumps`` writes, without importing ``json`` on the hot
reads: the indented answer character for character, the id arrays as JSON that decodes to
the ids, and whatever it does not write itself (a subclass, a key that is not a string, a
cycle) exactly as ``json.dumps`` does, error included."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import OrderedDict

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tracker.jsontext import _has_controls, id_array, indented, json_text, loads

_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
            | st.text())
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                       | st.dictionaries(st.text(), inner, max_size=4), max_leaves=30)


@given(_values, st.sampled_from([0, 1, 2, 4]))
@example({"title": "\x1b[2J\u202e\x7f\x85", "n": [1, 2.5, -0.0, 1e300, None, True], "e": {}, "l": []}, 2)
@example([float("nan"), float("inf"), -float("inf")], 2)
@example({"\ud800": "\udfff"}, 2)  # lone surrogates pass through as json.dumps lets them
def test_indented_is_json_dumps_character_for_character(value, indent):
    assert indented(value, indent) == json.dumps(value, indent=indent, ensure_ascii=False)
    assert indented(value, indent, ensure_ascii=True) == json.dumps(value, indent=indent)


@given(_values, st.sampled_from([None, 1]), st.sampled_from(["", " ", "\n", "x", "\ufeff"]))
@example({"a": [1, 2.5, None, True, "\u00e9\x7f"]}, None, "")
@example([float("nan"), float("inf"), -float("inf"), 10**30, 1e400], None, "")
def test_loads_reads_what_json_loads_reads_and_refuses_what_it_refuses(value, indent, around):
    """The C scanner's fast path (``jsontext.loads``) and ``json.loads`` agree on every text: a
    value alone, with space or a byte-order mark around it, or with trailing data (an error, the
    same one)."""
    for text in (json.dumps(value, indent=indent, ensure_ascii=False), json.dumps(value)):
        for variant in (text, around + text, text + around):
            try:
                expected = ("value", json.dumps(json.loads(variant)))
            except ValueError as exc:
                expected = ("error", type(exc), str(exc))
            try:
                got = ("value", json.dumps(loads(variant)))
            except ValueError as exc:
                got = ("error", type(exc), str(exc))
            assert got == expected


@given(st.text() | st.text(st.sampled_from(["a", "\x7f", "\x80", "\x9f", "\xa0", "\xc2", "é", "\ud800", "😀"])))
@example("é\x85«")
def test_json_text_escapes_del_and_c1_and_nothing_else(text):
    """The C scans that decide whether an answer needs the escaping find exactly DEL and the C1
    controls (U+0080-U+009F), whatever else the text holds (accents, U+00C2 itself, a lone
    surrogate); the answer still decodes to the value."""
    assert _has_controls(text) == any(0x7F <= ord(c) <= 0x9F for c in text)
    shown = json_text({"t": text}, indent=2)
    assert not any(0x7F <= ord(c) <= 0x9F for c in shown)
    if "\ud800" not in text:
        assert json.loads(shown) == {"t": text}


@given(st.lists(st.text()))
def test_an_id_array_decodes_to_the_ids(ids):
    assert json.loads(id_array(ids)) == ids


class _Text(str):
    pass


class _Count(int):
    pass


@pytest.mark.parametrize("value", [
    {1: "a", None: "b", 2.5: "c", False: "d"},   # keys json.dumps turns into strings
    OrderedDict(b=1, a=2),                      # a dict subclass
    [_Text("x"), _Count(3), (1, 2)],            # str and int subclasses, a tuple
])
def test_what_the_writer_leaves_to_json_dumps_comes_out_the_same(value):
    assert indented(value) == json.dumps(value, indent=2, ensure_ascii=False)


def test_a_cycle_and_an_unknown_type_raise_what_json_dumps_raises():
    looped: list = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        indented(looped)
    with pytest.raises(TypeError, match="not JSON serializable"):
        indented({"when": object()})


def test_the_hot_bd_reads_do_not_import_json(tmp_path):
    """``bd list/ready/show --json`` on a workspace whose issues have no metadata: the answer
    is printed and the json package was never imported."""
    from tracker.store import Tracker

    tracker = Tracker.init(tmp_path, prefix="hj")
    first = tracker.create("first", labels=["a"])["id"]
    tracker.add_dependency(tracker.create("second")["id"], first)
    tracker.add_comment(first, "a note")
    tracker.close()
    probe = ("import atexit, sys; sys.argv = ['bd'] + sys.argv[1:];"
             " atexit.register(lambda: print('JSON-IMPORTED' if 'json' in sys.modules else 'NO-JSON', file=sys.stderr));"
             " from tracker.bd_shim import main; sys.exit(main())")
    for args in (["list", "--json"], ["ready", "--json"], ["show", first, "--json"]):
        done = subprocess.run([sys.executable, "-c", probe, *args], cwd=tmp_path, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"})
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout), args
        assert done.stderr.strip().endswith("NO-JSON"), (args, done.stderr)
