"""Untrusted text (tracker fields, model answers, worker output) made safe to print.

A title or a comment can hold terminal control sequences (``ESC[2J`` clears the screen,
``ESC]0;...`` retitles the window, ``ESC]52;c;...`` writes the clipboard) or bidirectional
overrides (U+202E shows text reversed). ``printable`` shows every control, format and
separator character as an escape (``\\u001b``, ``\\u202e``) so that what reaches a terminal
is inert, whether or not the output is a terminal (a pipe into ``less -R`` or a log viewer
renders it too). JSON output stays exact: ``json_text`` (defined in ``jsontext``) escapes the
controls ``json.dumps`` leaves raw (DEL and C1) and keeps every other character as it is.

Every human-readable output of ``mesh`` and ``bd`` goes through here; this module sits in
the lowest layer so that the tracker's command line and the orchestrator share it. It
imports nothing heavy: ``bd ready`` loads it.
"""

from __future__ import annotations


TYPE_CHECKING = False  # typing costs each bd process ~2 ms to import; annotations only need it
if TYPE_CHECKING:
    from typing import Any

__all__ = ["printable", "clip", "inert", "json_text"]

_KEEP = frozenset("\n\t")
# A tab moves no line: kept on one line too (``go test`` prints its package lines with tabs).
_KEEP_ON_A_LINE = frozenset("\t")
# Control characters (C0, DEL, C1) move the cursor or reprogram the terminal; format
# characters (bidirectional overrides and isolates, marks, zero-width characters) reorder or
# hide what is shown; line and paragraph separators break lines; a lone surrogate cannot
# even be written out.
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control, format and separator character shown as ``\\uXXXX``:
    newlines and tabs are kept (a CRLF counts as a newline); with ``one_line``, where a field
    must stay on its line, only tabs."""
    if text.isprintable():  # the common case: nothing but printable characters and spaces
        return text
    if not one_line:
        text = text.replace("\r\n", "\n")
    import unicodedata  # here: the common case above, and `mesh --help`, never need it

    keep = _KEEP_ON_A_LINE if one_line else _KEEP
    return "".join(_escape(char) if char not in keep and unicodedata.category(char) in _UNSAFE
                   else char for char in text)


def clip(text: str | None, size: int) -> str:
    """``printable`` on one line, cut to ``size`` characters (an ellipsis marks the cut)."""
    if not text:
        return ""
    line = printable(text, one_line=True)
    return line if len(line) <= size else line[: size - 1] + "…"


def inert(value: Any, *, multiline: frozenset[str] = frozenset()) -> Any:
    """A copy of a JSON-like ``value`` whose strings (mapping keys too) are ``printable`` on
    one line, except the values of the keys in ``multiline`` (text bodies), which keep their
    newlines and tabs."""
    if isinstance(value, str):
        return printable(value, one_line=True)
    if isinstance(value, dict):
        return {inert(key): printable(item) if key in multiline and isinstance(item, str)
                else inert(item, multiline=multiline) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert(item, multiline=multiline) for item in value]
    return value


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``jsontext.json_text``: ``value`` as JSON that decodes to exactly ``value``, non-ASCII text
    kept and the controls ``json.dumps`` leaves raw (DEL, C1) escaped. Its definition is there, so
    that a hot read prints safe JSON without loading this module."""
    from .jsontext import json_text as safe_json  # here: `mesh --help` imports this module, never for JSON

    return safe_json(value, indent=indent)
