"""A decoded view of a text: where a secret hidden by escapes or invisible characters shows.

``sk-ant-\\u0061pi03-...`` in a JSON document, an AWS key id with a zero-width space after
its ``AKIA``, or an AWS secret right after an escaped newline (``...\\nwJalrXUtn...``, where the
``n`` glues onto the key) all escape a scrubber that reads only the text as written. The
decoded view reads JSON string escapes (``\\n``, ``\\"``, ``\\\\``, ``\\/``, ``\\uXXXX``...) as the
characters they stand for and drops the invisible characters (U+200B..U+200D, U+2060, U+FEFF,
the soft hyphen U+00AD).

``decode`` gives the view's text quickly (C-level replacements, no per-escape Python work):
it runs on every text mesh records. ``decoded_view`` gives the same text with a map from each
of its spans back to the span of the original that produced it, so that the original is
redacted whole, escapes and all; it is slower, and only needed once something was found.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
import re
from dataclasses import dataclass

__all__ = ["INVISIBLE", "DecodedView", "decode", "decoded_view", "special_count", "view_of"]

INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_DROP_INVISIBLE = {ord(ch): None for ch in INVISIBLE}
_SPECIAL = re.compile(r"[\u200b-\u200d\u2060\ufeff\u00ad]|\\(?:u[0-9a-fA-F]{4}|[\"\\/bfnrt])")
# The same without the invisible characters: it starts with a literal, which the regex
# engine searches for quickly, where a leading character class is tried at every position.
_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|[\"\\/bfnrt])")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
# Characters that can stand for an escaped backslash while the other escapes are decoded,
# so that the "n" of "\\n" is not read as an escape: private-use characters whose \u escapes
# have a single letter ("e"), so that checking two spellings of the escape is enough.
_HOLDERS = tuple(chr(0xE000 + i) for i in range(10))


def _has_special(text: str) -> bool:
    return "\\" in text or any(ch in text for ch in INVISIBLE)


def special_count(text: str, limit: int) -> int:
    """How many escapes and invisible characters ``text`` holds (the decoded view's map
    size), counted up to ``limit``: a caller only needs to know whether there are few."""
    count = sum(text.count(ch) for ch in INVISIBLE)
    if "\\" in text:
        for count, _ in enumerate(_ESCAPE.finditer(text), start=count + 1):
            if count >= limit:
                break
    return count


def _free_holder(text: str) -> str | None:
    escapes = "\\u" in text
    for holder in _HOLDERS:
        code = f"{ord(holder):04x}"
        if holder not in text and not (escapes and (f"\\u{code}" in text or f"\\u{code.upper()}" in text)):
            return holder
    return None


def decode(text: str) -> str | None:
    """The decoded view's text, or None when decoding would not change ``text``."""
    if not _has_special(text):
        return None
    holder = _free_holder(text)
    if holder is None:
        view = decoded_view(text)
        return None if view is None else view.text
    # Escapes pair from the left, as str.replace scans: an escaped backslash is taken first,
    # then every remaining backslash starts an escape of its own, and none can overlap.
    out = text.replace("\\\\", holder)
    for escape, char in _SIMPLE_ESCAPES.items():
        if escape != "\\":
            out = out.replace("\\" + escape, char)
    if "\\u" in out:
        out = _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), out)
    out = out.replace(holder, "\\")
    if any(ch in out for ch in INVISIBLE):
        out = out.translate(_DROP_INVISIBLE)
    return None if out == text else out


@dataclass(frozen=True)
class DecodedView:
    """``text`` decoded; each special sequence of the original is one entry of the lists below
    (where it starts in the view and in the original, and its length in both)."""

    text: str
    view_pos: list[int]
    orig_pos: list[int]
    view_len: list[int]
    orig_len: list[int]

    def _orig_start(self, pos: int) -> int:
        k = bisect.bisect_right(self.view_pos, pos) - 1
        if k < 0:
            return pos
        if pos < self.view_pos[k] + self.view_len[k]:
            return self.orig_pos[k]
        return self.orig_pos[k] + self.orig_len[k] + pos - self.view_pos[k] - self.view_len[k]

    def _orig_end(self, pos: int) -> int:
        last = pos - 1
        k = bisect.bisect_right(self.view_pos, last) - 1
        if k < 0:
            return pos
        if last < self.view_pos[k] + self.view_len[k]:
            return self.orig_pos[k] + self.orig_len[k]
        return self.orig_pos[k] + self.orig_len[k] + last - self.view_pos[k] - self.view_len[k] + 1

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that decodes to ``text[start:end]`` (``end > start``)."""
        return self._orig_start(start), self._orig_end(end)


def view_of(text: str, replacements: Iterable[tuple[int, int, str]]) -> DecodedView | None:
    """The view of ``text`` in which each span ``(start, end)`` (in order, not overlapping)
    reads as its replacement, with its map back; None when there is no span."""
    pieces: list[str] = []
    view_pos: list[int] = []
    orig_pos: list[int] = []
    view_len: list[int] = []
    orig_len: list[int] = []
    last = size = 0
    for start, end, decoded in replacements:
        pieces.append(text[last:start])
        size += start - last
        view_pos.append(size)
        orig_pos.append(start)
        view_len.append(len(decoded))
        orig_len.append(end - start)
        pieces.append(decoded)
        size += len(decoded)
        last = end
    if not view_pos:
        return None
    pieces.append(text[last:])
    return DecodedView("".join(pieces), view_pos, orig_pos, view_len, orig_len)


def _decoded_token(token: str) -> str:
    if token[0] != "\\":
        return ""
    if token[1] == "u":
        decoded = chr(int(token[2:], 16))
        return "" if decoded in INVISIBLE else decoded
    return _SIMPLE_ESCAPES[token[1]]


def decoded_view(text: str) -> DecodedView | None:
    """The decoded view of ``text`` with its map back, or None when decoding changes nothing."""
    if not _has_special(text):
        return None
    special = _SPECIAL if any(ch in text for ch in INVISIBLE) else _ESCAPE
    return view_of(text, ((*match.span(), _decoded_token(match.group(0))) for match in special.finditer(text)))
