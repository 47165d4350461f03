"""JSON for the tracker without importing the ``json`` package until something needs it.

``import json`` brings its decoder, scanner and encoder and compiles six regular expressions:
about 5% of a ``bd list --json`` process, which decodes nothing when no issue it shows has
metadata or kept extras. What the hot reads need is made here from the C functions
``json`` itself uses (``_json``): the JSON array of a list of ids (the ``json_each`` parameter
of every batched query), the indented answer ``json.dumps(value, indent=2,
ensure_ascii=False)`` would print, character for character (a property test compares them), and
that answer made safe for a terminal (``json_text``, which ``safe_text`` hands out).
Decoding and the compact form import ``json`` on their first call.
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

__all__ = ["id_array", "indented", "json_text", "loads", "dumps", "compact"]

_INFINITY = float("inf")
# What json.dumps(ensure_ascii=False) leaves raw and a terminal may still obey.
_JSON_CONTROLS = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


def id_array(ids: Iterable[str]) -> str:
    """The JSON array of ``ids`` (strings), as ``json.dumps(list(ids))`` less its spaces."""
    return "[" + ",".join(map(encode_basestring_ascii, ids)) + "]"


def loads(text: str | bytes) -> Any:
    """``json.loads``."""
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
    if text.isascii() and "\x7f" not in text:  # nothing to escape: both tests are C scans, or O(1)
        return text
    return text.translate(_JSON_CONTROLS)


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
