"""Known secrets found by any 16 characters of them, however a worker wrote them out.

A worker that holds a key (``worker_env``) and means to smuggle it past a scrubber that
looks for the exact value changes the value's shape: it drops the ``sk-ant-api03-`` prefix,
upper-cases it, spaces its letters out, writes it in full-width letters, HTML entities or
percent escapes, base32, base64 of base64, gzip then base64, or hex of it xor a key. This
module finds such leaks by **windows**: a span of the text is a leak when, normalised, it
holds ``WINDOW`` (16) consecutive characters of a known secret, or of one of the secret's
derived forms (reversed, rot13, hex, base64 and base32 at every byte alignment).

Normalising folds full-width letters to ASCII, ignores case and keeps only ASCII letters
and digits: whitespace, separators and zero-width characters are ignored. It runs on
three views of the text: the text itself and its escapes decoded once and twice (JSON and
``\\xHH`` escapes, ``%XX`` percent escapes, HTML entities: ``redact.view``'s decoder with
more escape kinds, here only for the window search). Runs of encoded text in a view are
decoded and searched again, two layers deep: base64 (any alignment, either alphabet, MIME
line breaks; a gzip or zlib stream inside is decompressed), base32 and hex. A hex run is
also searched for the secret xor a repeating key of 1 to 8 bytes: the xor of each byte
with the one ``m`` places on does not depend on such a key, so those differences are
compared with the secret's own (16 bytes of the secret, any key).

Cost stays linear: every window is hashed once per secret set; a text is normalised once
(C-level byte operations) and cut into aligned 8-character chunks, which a set
intersection compares with the secret's 8-grams; a match of 16 characters always holds
one aligned chunk, and only a chunk that hits is extended character by character.
Encoded runs are decoded once per distinct run, all runs of a view in one C call per
alignment (base32 too: ``_b32_stream``), and one by one only when that call finds something.

Not hunted: secrets under 16 normalised characters (``redact.known``'s exact forms still
cover them from 8 characters), windows with fewer than ``MIN_DISTINCT`` different
characters (``0000000000000000`` would match ordinary text), xor with a key longer than 8
bytes or one that does not repeat, encryption, compression other than gzip/zlib, and
encodings nested more than two layers deep.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import html
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .view import INVISIBLE, DecodedView, view_of

__all__ = ["WINDOW", "MIN_DISTINCT", "secret_spans", "window_forms"]

WINDOW = 16
MIN_DISTINCT = 6
_CHUNK = 8  # WINDOW >= 2 * _CHUNK - 1: a match of WINDOW holds one aligned chunk
_XOR_PERIODS = range(1, 9)
_XOR_CHUNK = 4  # WINDOW - max(_XOR_PERIODS) >= 2 * _XOR_CHUNK - 1
_XOR_DISTINCT = 4
_LAYERS = 2  # how many layers of encoded runs are decoded
_VIEWS = 2  # how many times escapes are decoded
_MAX_INFLATED = 1 << 22  # a gzip bomb stops here

_FULLWIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)}
_FULLWIDTH_CHAR = re.compile("[\uff01-\uff5e]")
_NOT_ALNUM = bytes(b for b in range(256) if not (48 <= b <= 57 or 97 <= b <= 122))

# Runs of encoded text: base64 in either alphabet (a run may hold line breaks, as MIME
# wraps it, and padding), found on a copy where each such character is "a" and any other a
# space, with bytes.find (a regex with a leading class would be tried at every position).
# Hex and base32 runs are found inside them.
_RUN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=\r\n"
_RUN_MAP = bytes(ord("a") if chr(i) in _RUN_CHARS else ord(" ") for i in range(256))
_MIN_RUN = b"a" * 20  # base64 of 15 bytes: shorter runs cannot hold a window
_B32_RUN = re.compile(r"[A-Za-z2-7]{26,}=*")
_HEX_RUN = re.compile(r"[0-9A-Fa-f]{32,}")
_B32_DIGITS = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789abcdefghijklmnopqrstuv")
_B64_CLEAN = str.maketrans("-_", "+/", "\r\n=")
# Where a gzip (1f 8b 08) or zlib (78 01 / 5e / 9c / da) stream may start in decoded bytes.
_STREAM_MAGICS = (b"\x1f\x8b\x08", b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda")
_MAX_STREAMS = 64

# Escapes the views decode, one token each (an escaped backslash first, so that the "u"
# of "\\u0041" is not read as an escape).
_ESCAPE = re.compile(
    r"\\(?:u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[\"\\/bfnrt])"
    r"|%[0-9a-fA-F]{2}"
    r"|&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?"
    rf"|[{INVISIBLE}]"
)
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _normal_bytes(data: bytes) -> bytes:
    return data.lower().translate(None, _NOT_ALNUM)


def _normal(text: str) -> bytes:
    """``text`` folded (full-width to ASCII), lower-cased, with only ASCII letters and digits."""
    if not text.isascii() and _FULLWIDTH_CHAR.search(text):
        text = text.translate(_FULLWIDTH)
    return _normal_bytes(text.encode("ascii", "ignore"))


def _kept(ch: str) -> bool:
    code = ord(ch)
    if 0xFF01 <= code <= 0xFF5E:
        code -= 0xFEE0
    return 48 <= code <= 57 or 65 <= code <= 90 or 97 <= code <= 122


def _original_indices(text: str, wanted: Iterable[int]) -> dict[int, int]:
    """Where in ``text`` the normalised characters at positions ``wanted`` come from.

    Blocks are normalised with the C-level path and counted; only a block holding a
    wanted position is walked character by character.
    """
    targets = sorted(set(wanted))
    out: dict[int, int] = {}
    block = 4096
    seen = t = 0
    for start in range(0, len(text), block):
        if t == len(targets):
            break
        piece = text[start:start + block]
        count = len(_normal(piece))
        if targets[t] < seen + count:
            rank = seen
            for offset, ch in enumerate(piece):
                if not _kept(ch):
                    continue
                while t < len(targets) and targets[t] == rank:
                    out[rank] = start + offset
                    t += 1
                rank += 1
                if t == len(targets) or targets[t] >= seen + count:
                    break
        seen += count
    return out


class _Index:
    """The ``chunk``-grams of some needles, to find in a haystack every stretch of at least
    a needle's ``min_len`` bytes that the needle also holds."""

    def __init__(self, needles: Sequence[tuple[bytes, int]], chunk: int, min_distinct: int) -> None:
        self.needles = list(needles)
        self.chunk = chunk
        self.min_distinct = min_distinct
        grams: dict[bytes, list[tuple[int, int]]] = {}
        for index, (needle, _) in enumerate(self.needles):
            for offset in range(len(needle) - chunk + 1):
                grams.setdefault(needle[offset:offset + chunk], []).append((index, offset))
        self.grams = grams
        self.keys = frozenset(grams)

    def find(self, hay: bytes) -> list[tuple[int, int, int, int, int]]:
        """Stretches of ``hay`` that match a needle over at least its ``min_len`` bytes: (start,
        end, the needle's index, where the match starts and ends in the needle)."""
        c = self.chunk
        if not self.keys or len(hay) < c:
            return []
        chunks = [hay[i:i + c] for i in range(0, len(hay) - c + 1, c)]
        hits = self.keys.intersection(chunks)
        if not hits:
            return []
        spans = []
        for k, chunk in enumerate(chunks):
            if chunk not in hits:
                continue
            pos = k * c
            for index, offset in self.grams[chunk]:
                needle, min_len = self.needles[index]
                left = 0
                while left < min(pos, offset) and hay[pos - left - 1] == needle[offset - left - 1]:
                    left += 1
                right = 0
                limit = min(len(hay) - pos - c, len(needle) - offset - c)
                while right < limit and hay[pos + c + right] == needle[offset + c + right]:
                    right += 1
                matched = needle[offset - left:offset + c + right]
                if len(matched) >= min_len and len(set(matched)) >= self.min_distinct:
                    spans.append((pos - left, pos + c + right, index, offset - left, offset + c + right))
        return spans


def _aligned_cores(data: bytes, group: int, chars: int, encode) -> list[str]:
    """The characters of ``encode(pad + data)`` that depend on ``data`` alone, for each
    alignment of ``data`` inside a ``group``-byte group of a longer stream."""
    cores = []
    bits = 8 * group // chars  # bits per character
    for alignment in range(group):
        encoded = encode(b"\0" * alignment + data).decode("ascii")
        first = -(-8 * alignment // bits)
        last = 8 * (alignment + len(data)) // bits
        cores.append(encoded[first:last])
    return cores


def window_forms(value: str) -> list[bytes]:
    """The normalised strings whose windows stand for ``value``: the value itself, reversed,
    rot13, hex, and its base64 and base32 characters at each alignment (only those at
    least ``WINDOW`` long). Empty when the value is shorter than ``WINDOW`` normalised."""
    base = _normal(value)
    if len(base) < WINDOW:
        return []
    data = value.encode("utf-8", "surrogatepass")
    forms = [base, base[::-1], _normal(codecs.encode(value, "rot13")), data.hex().encode()]
    forms += [_normal(core) for core in _aligned_cores(data, 3, 4, base64.b64encode)]
    forms += [_normal(core) for core in _aligned_cores(data, 5, 8, base64.b32encode)]
    return list(dict.fromkeys(form for form in forms if len(form) >= WINDOW))


def _xor_differences(data: bytes, period: int) -> bytes:
    """Each byte xor the one ``period`` places on: the same for ``data`` xor any key that
    repeats every ``period`` bytes."""
    if len(data) <= period:
        return b""
    size = len(data) - period
    return (int.from_bytes(data[:-period], "big") ^ int.from_bytes(data[period:], "big")).to_bytes(size, "big")


@dataclass(frozen=True)
class _Hunt:
    """What to look for, built once per set of known secrets."""

    windows: _Index
    xor: dict[int, _Index]
    # For each needle of ``windows`` that is a value's own normalised text: the characters the
    # value starts and ends with that normalising dropped ("!" of "...sNf7h!"), taken along
    # when they stand next to a match that reaches that end.
    edges: dict[int, tuple[str, str]]


def build_hunt(values: Sequence[str]) -> _Hunt | None:
    """The windows of ``values`` (known secret values), or None when none is long enough."""
    needles: list[tuple[bytes, int]] = []
    edges: dict[int, tuple[str, str]] = {}
    for value in values:
        forms = window_forms(value)
        if forms:
            kept = [i for i, ch in enumerate(value) if _kept(ch)]
            edges[len(needles)] = (value[:kept[0]], value[kept[-1] + 1:])
            needles += [(form, WINDOW) for form in forms]
    if not needles:
        return None
    xor = {}
    for period in _XOR_PERIODS:
        diffs = [(_xor_differences(value.encode("utf-8", "surrogatepass"), period), WINDOW - period)
                 for value in values if len(_normal(value)) >= WINDOW]
        xor[period] = _Index([d for d in diffs if len(d[0]) >= d[1]], _XOR_CHUNK, _XOR_DISTINCT)
    return _Hunt(_Index(needles, _CHUNK, MIN_DISTINCT), xor, edges)


# ------------------------------------------------------------------ views and encoded runs


def _unescape_token(token: str) -> str:
    if token in INVISIBLE:
        return ""
    if token[0] == "\\":
        if token[1] in "ux":
            return chr(int(token[2:], 16))
        return _SIMPLE[token[1]]
    if token[0] == "%":
        return chr(int(token[1:], 16))
    decoded = html.unescape(token)
    return token if decoded == token else decoded


def _unescaped(text: str) -> str | None:
    """``text`` with its escapes decoded once, or None when it holds none."""
    if "\\" not in text and "%" not in text and "&" not in text and not any(ch in text for ch in INVISIBLE):
        return None
    out = _ESCAPE.sub(lambda m: _unescape_token(m.group(0)), text)
    return None if out == text else out


def _unescaped_view(text: str) -> DecodedView:
    """``_unescaped`` with its map back to ``text`` (built only once something was found)."""
    view = view_of(text, ((*match.span(), _unescape_token(match.group(0))) for match in _ESCAPE.finditer(text)))
    return view if view is not None else DecodedView(text, [], [], [], [])


def _fill(run: str, group: int, fill: str, drop: tuple[int, ...]) -> str:
    """``run`` made a whole number of ``group``-character groups: a last character that
    cannot end an encoding is dropped, and the rest filled (base64's ``A`` decodes to zero
    bits, never to padding, so that filled runs can be decoded one after another in one
    call)."""
    if len(run) % group in drop:
        run = run[:-1]
    return run + fill * (-len(run) % group)


def _b64_part(run: str, offset: int) -> str:
    return _fill(run[offset:], 4, "A", (1,))


def _b64_decode(run: str, offset: int) -> bytes:
    return binascii.a2b_base64(_b64_part(run, offset))


def _hex_part(run: str, offset: int) -> str:
    return run[offset:len(run) - (len(run) - offset) % 2]


def _encoded_runs(text: str) -> dict[str, list[tuple[int, int]]]:
    """The runs of base64-alphabet text in ``text`` (line breaks and padding included), each
    with the spans where it occurs."""
    mask = text.encode("ascii", "replace").translate(_RUN_MAP)  # one byte per character
    runs: dict[str, list[tuple[int, int]]] = {}
    start = mask.find(_MIN_RUN)
    while start >= 0:
        end = mask.find(b" ", start)
        end = len(mask) if end < 0 else end
        first, last = start, end
        while first < last and text[first] in "\r\n=":
            first += 1
        while last > first and text[last - 1] in "\r\n":
            last -= 1
        runs.setdefault(text[first:last], []).append((first, last))
        start = mask.find(_MIN_RUN, end)
    return runs


def _inflated(data: bytes) -> list[bytes]:
    """What the gzip and zlib streams starting anywhere in ``data`` inflate to (the first
    ``_MAX_STREAMS`` candidates, each bounded: a bomb stops at ``_MAX_INFLATED``)."""
    out = []
    starts = sorted(at for magic in _STREAM_MAGICS for at in _occurrences(data, magic))[:_MAX_STREAMS]
    for at in starts:
        wbits = 31 if data.startswith(b"\x1f", at) else 15
        try:
            inflated = zlib.decompressobj(wbits).decompress(data[at:], _MAX_INFLATED)
        except zlib.error:
            continue
        if inflated:
            out.append(inflated)
    return out


def _occurrences(data: bytes, magic: bytes) -> list[int]:
    found = []
    at = data.find(magic)
    while at >= 0 and len(found) < _MAX_STREAMS:
        found.append(at)
        at = data.find(magic, at + 1)
    return found


class _Search:
    """One scrub's search: the hunt, and the verdicts of the encoded runs read so far (a
    text repeats its runs, and each escape view repeats the text's)."""

    def __init__(self, hunt: _Hunt) -> None:
        self.hunt = hunt
        self.verdicts: dict[tuple[str, int], bool] = {}

    def spans(self, text: str, views: int) -> list[tuple[int, int]]:
        """Spans of ``text`` holding a window of a secret: as written, in its encoded runs,
        and in its escapes decoded ``views`` times."""
        normal_spans = self.hunt.windows.find(_normal(text))
        found = self.run_spans(text, _LAYERS)
        if normal_spans:
            where = _original_indices(text, [p for span in normal_spans for p in (span[0], span[1] - 1)])
            for a, b, index, first, last in normal_spans:
                # A position the map misses (it should not) widens the span: more is redacted, never less.
                start, end = where.get(a, 0), where.get(b - 1, len(text) - 1) + 1
                lead, trail = self.hunt.edges.get(index, ("", ""))
                needle = self.hunt.windows.needles[index][0]
                if lead and first == 0 and text.endswith(lead, 0, start):
                    start -= len(lead)
                if trail and last == len(needle) and text.startswith(trail, end):
                    end += len(trail)
                found.append((start, end))
        unescaped = _unescaped(text) if views > 0 else None
        if unescaped is not None:
            inner = self.spans(unescaped, views - 1)
            if inner:
                view = _unescaped_view(text)
                found += [view.original_span(a, b) for a, b in inner if b > a]
        return found

    def run_spans(self, text: str, layers: int) -> list[tuple[int, int]]:
        """Spans of the encoded runs of ``text`` whose decoding (``layers`` deep) holds a secret."""
        runs = _encoded_runs(text)
        if not runs:
            return []
        todo = [run for run in runs if (run, layers) not in self.verdicts]
        # All new runs in one go first: most texts hold none, and one C call per alignment says so.
        if todo and not self._batch_holds(todo, layers - 1):
            self.verdicts.update(((run, layers), False) for run in todo)
        for run in todo:
            if (run, layers) not in self.verdicts:
                self.verdicts[(run, layers)] = self._run_holds(run, layers - 1)
        return [span for run, found in runs.items() if self.verdicts[(run, layers)] for span in found]

    def blob_holds(self, blob: bytes, layers: int, *, xor: bool = False) -> bool:
        """Whether bytes decoded from a run hold a window of a secret: as they are, xor a
        repeating key (hex runs), inflated, or in runs of their own (``layers`` more deep)."""
        if self.hunt.windows.find(_normal_bytes(blob)):
            return True
        if xor and any(index.find(_xor_differences(blob, period)) for period, index in self.hunt.xor.items()):
            return True
        for inflated in _inflated(blob):
            text = inflated.decode("utf-8", "replace")
            if self.hunt.windows.find(_normal(text)) or (layers > 0 and self.run_spans(text, layers)):
                return True
        return layers > 0 and bool(self.run_spans(blob.decode("latin-1"), layers))

    def _batch_holds(self, runs: list[str], layers: int) -> bool:
        """Whether any of ``runs`` may hold a secret (decoded all together: a hit across two
        runs is possible, so a True is checked again run by run)."""
        cleaned = [run.translate(_B64_CLEAN) for run in runs]
        for offset in range(4):
            if self.blob_holds(binascii.a2b_base64("".join(_b64_part(run, offset) for run in cleaned)), layers):
                return True
        joined = " ".join(runs)
        hexes = _HEX_RUN.findall(joined)
        if hexes and any(self.blob_holds(bytes.fromhex("".join(_hex_part(run, offset) for run in hexes)), layers,
                                         xor=True) for offset in range(2)):
            return True
        b32 = [run.rstrip("=").upper() for run in _B32_RUN.findall(joined)]
        return bool(b32) and any(self.blob_holds(_b32_stream(b32, offset), layers) for offset in range(8))

    def _run_holds(self, run: str, layers: int) -> bool:
        clean = run.translate(_B64_CLEAN)
        if any(self.blob_holds(_b64_decode(clean, offset), layers) for offset in range(4)):
            return True
        for hexes in _HEX_RUN.findall(run):
            if any(self.blob_holds(bytes.fromhex(_hex_part(hexes, offset)), layers, xor=True) for offset in range(2)):
                return True
        return any(self._b32_holds(b32, layers) for b32 in _B32_RUN.findall(run))

    def _b32_holds(self, run: str, layers: int) -> bool:
        clean = run.rstrip("=").upper()
        for offset in range(8):
            try:
                blob = base64.b32decode(_fill(clean[offset:], 8, "=", (1, 3, 6)))
            except (binascii.Error, ValueError):
                continue
            if self.blob_holds(blob, layers):
                return True
        return False


def _b32_stream(runs: list[str], offset: int) -> bytes:
    """The base32 ``runs`` (upper case, unpadded; each from ``offset``) decoded as one stream in
    one C call: each run filled with ``A`` (zero bits) to whole 8-character groups, so its bytes
    are those its own decoding gives, then zeros. Random text holds thousands of short base32
    runs; decoding them one by one (``base64.b32decode`` is Python) made most of a scrub's time."""
    text = "".join(_fill(run[offset:], 8, "A", (1, 3, 6)) for run in runs)
    if not text:
        return b""
    # int() of a power-of-two base is linear (and not bounded by the limit on decimal digits).
    return int(text.translate(_B32_DIGITS), 32).to_bytes(len(text) * 5 // 8, "big")


_hunt_cache: tuple[tuple[str, ...], _Hunt | None] = ((), None)


def secret_spans(text: str, values: tuple[str, ...]) -> list[tuple[int, int]]:
    """Spans of ``text`` holding ``WINDOW`` characters of one of ``values`` in any form this
    module hunts (see the module doc); the hunt is built once per set of values."""
    global _hunt_cache
    if _hunt_cache[0] != values:
        _hunt_cache = (values, build_hunt(values))
    hunt = _hunt_cache[1]
    if hunt is None or not text:
        return []
    return _Search(hunt).spans(text, _VIEWS)
