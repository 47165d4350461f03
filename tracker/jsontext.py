"""JSON for the tracker without importing the ``json`` package until something needs it.

``import json`` brings its decoder, scanner and encoder and compiles six regular expressions:
about 5% of a ``bd list --json`` process, which decodes nothing when no issue it shows has
metadata or kept extras. What the hot reads need is made here from the C functions
``json`` itself uses (``_json``): the JSON array of a list of ids (the ``json_each`` parameter
of every batched query), the indented answer ``json.dumps(value, indent=2,
ensure_ascii=False)`` would print, character for character (a property test compares them), and
that answer made safe for a terminal (``json_text``, which ``safe_text`` hands out), and the
stored values decoded (``loads``, by ``_json``'s scanner). The compact form, and a text the
scanner does not read alone, import ``json`` on their first call.
"""

from __future__ import annotations

try:
    from _json import encode_basestring, encode_basestring_ascii
except ImportError:  # an interpreter without the C accelerator: json's own Python versions
    from json.encoder import py_encode_basestring as encode_basestring  # type: ignore[assignment]
    from json.encoder import py_encode_basestring_ascii as encode_basestring_ascii  # type: ignore[assignment]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any


class _Decoding:
    """What ``_json``'s scanner reads of its decoder: ``json.loads``' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


try:
    from _json import make_scanner

    _scan = make_scanner(_Decoding())
except ImportError:  # pragma: no cover - an interpreter without the C accelerator: json.loads
    _scan = None
_SPACE = " \t\n\r\ufeff"  # what json.loads skips around a value, and the mark it refuses

__all__ = ["id_array", "indented", "json_text", "loads", "dumps", "compact"]

_INFINITY = float("inf")
# What json.dumps(ensure_ascii=False) leaves raw and a terminal may still obey.
_JSON_CONTROLS = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


def id_array(ids: Iterable[str]) -> str:
    """The JSON array of ``ids`` (strings), as ``json.dumps(list(ids))`` less its spaces."""
    return "[" + ",".join(map(encode_basestring_ascii, ids)) + "]"


def loads(text: str | bytes) -> Any:
    """``json.loads``. A string that is one JSON value with nothing around it (what the tracker
    stores: an issue's metadata and kept fields) is read by the C scanner ``json`` itself uses,
    without importing ``json``: that import brings ``re`` and ``enum``, about 11 ms, which every
    hot read of a real export whose issues keep fields paid. Anything else (bytes, surrounding
    space, trailing data, invalid text) is ``json.loads``' to read or refuse, in its words."""
    if _scan is not None and type(text) is str and text and text[0] not in _SPACE:
        try:
            value, end = _scan(text, 0)
        except Exception:  # invalid: json.loads raises its own error for it below
            pass
        else:
            if end == len(text):
                return value
    import json

    return json.loads(text)


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps``."""
    import json

    return json.dumps(value, **options)


def compact(value: Any) -> str:
    """``value`` in the tracker's stored form: compact, non-ASCII kept."""
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON that decodes to exactly ``value``, safe to print (``safe_text``'s
    ``json_text``): non-ASCII text kept as it is (as bd prints it), the controls ``json.dumps``
    leaves raw (DEL, C1) escaped like the others."""
    text = dumps(value, ensure_ascii=False) if indent is None else indented(value, indent)
    return text.translate(_JSON_CONTROLS) if _has_controls(text) else text


def _has_controls(text: str) -> bool:
    """Whether ``text`` holds DEL or a C1 control, by C scans: ``translate`` itself reads a
    non-ASCII text a character at a time through the mapping, a lookup that fails for almost
    every character (20 M instructions for a 36 KB answer of a real export with accented
    text). In UTF-8 a C1 control is 0xC2 followed by 0x80-0x9F."""
    if "\x7f" in text:
        return True
    if text.isascii():  # O(1): the string knows
        return False
    data = text.encode("utf-8", "surrogatepass")
    at = data.find(b"\xc2")
    while at != -1:
        if at + 1 < len(data) and 0x80 <= data[at + 1] <= 0x9F:
            return True
        at = data.find(b"\xc2", at + 2)
    return False


class _Unusual(Exception):
    """A value the plain writer leaves to ``json.dumps`` (a subclass, a key that is not a
    string, a cycle): the answer is then ``json.dumps``' own, error included."""


def indented(value: Any, indent: int = 2, *, ensure_ascii: bool = False) -> str:
    """``json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)``."""
    try:
        return _text(value, "\n", " " * indent, encode_basestring_ascii if ensure_ascii else encode_basestring, {})
    except (_Unusual, RecursionError):
        return dumps(value, indent=indent, ensure_ascii=ensure_ascii)


def _text(value: Any, newline: str, step: str, quote: Any, heads: dict) -> str:
    """One value's text, ``newline`` its own indentation: each object or array is one ``join``
    of its members' texts (a string member's text is the C quoting function's, with no call of
    this function), a third less time than writing token by token (``bd blocked``'s megabyte).
    ``heads``: each key's quoted text and colon, made once per answer (the same fields repeat
    in every issue)."""
    kind = type(value)
    if kind is str:
        return quote(value)
    if kind is dict:
        if not value:
            return "{}"
        inner = newline + step
        return ("{" + inner + ("," + inner).join([
            f"{heads.get(key) or _head(key, quote, heads)}"
            f"{quote(item) if type(item) is str else _text(item, inner, step, quote, heads)}"
            for key, item in value.items()]) + newline + "}")
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        inner = newline + step
        return ("[" + inner + ("," + inner).join([
            quote(item) if type(item) is str else _text(item, inner, step, quote, heads) for item in value])
                + newline + "]")
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        return _float(value)
    raise _Unusual


def _head(key: Any, quote: Any, heads: dict) -> str:
    """A key's quoted text and colon, kept in ``heads``; a key that is not a string is
    ``json.dumps``' to write (it turns numbers into strings, and refuses others)."""
    if type(key) is not str:
        raise _Unusual
    head = heads[key] = quote(key) + ": "
    return head


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)
