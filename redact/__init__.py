"""Redact credentials from text before it is stored, printed or sent to a model.

Everything mesh records (prompts, responses, validation output, comments) can carry a
secret a worker or a test suite printed. ``scrub`` replaces with ``[REDACTED]``:

- the known secret values (every secret-looking environment variable and
  ``MESH_SIGNING_KEY``) in each form listed by ``redact.known``: raw, base64
  (both alphabets, any alignment inside a longer stream, padded or not), hex, URL-encoded,
  rot13 and reversed. Values shorter than 8 characters are not hunted, in any form: they
  would match ordinary text by chance;
- any 16 characters of a known value, however written (``redact.windows``: case, spacing,
  separators, full-width letters, HTML and percent escapes, base32, base64 of base64,
  gzip, hex xor a repeating key...);
- credentials recognisable by their shape: private key blocks, provider tokens (Anthropic,
  OpenAI, GitHub, GitLab, Slack, AWS key ids and bare secret access keys, Google, Stripe,
  Hugging Face ``hf_``, npm ``npm_``, JWTs, Slack hooks), Azure ``AccountKey=``, the password
  of a ``scheme://user:<password>@host`` URL (user and host kept), authorization headers and
  the values of secret-named assignments (keeping the key name of ``KEY=value``);
- all of the above once more in the decoded view of the text (``redact.view``:
  JSON escapes read, zero-width characters and soft hyphens dropped, two levels deep), so a
  secret split by invisible characters or written with escapes is redacted too, escapes and
  all.

Passes repeat until the text no longer changes, so it is idempotent (a token that a
redaction left standing alone is taken on the next pass), and tuned to leave ordinary code alone: ``token = tokens[0]`` or
``key = "name"`` are not credentials, nor are git object ids, uuids or base64 of text.
``scrub(text) != text`` is therefore a usable test for "this text holds a secret".

The package: this module (``scrub``, ``scrub_obj``, the shape patterns and the passes),
``known`` (the known secrets and their encoded forms), ``view`` (the decoded view),
``windows`` (the 16-character windows of a known value, however written) and ``controls``
(terminal control sequences stripped from untrusted output). A bottom layer beside the
tracker, imported by roles and the orchestrator. May import: no other package of mesh (the
standard library only).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from .known import MIN_SECRET_LEN, hunted_forms, known_secrets
from .view import DecodedView, decode, decoded_view, special_count
from .windows import secret_spans

__all__ = ["REDACTED", "scrub", "scrub_obj"]

REDACTED = "[REDACTED]"

_PEM = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    # A truncated block (an output tail cut mid-key): take the header and body lines.
    r"|[A-Za-z0-9+/=\s:,\-]*)"
)

# Credentials recognisable by their own shape, wherever they appear. Each pattern starts
# with a literal, which Python's regex engine searches for quickly, and checks right after
# it that the literal starts a word: a lookbehind placed first would defeat the literal
# search, and with none a long run repeating the literal would be rescanned from each copy.
_TOKEN_CHAR = r"[A-Za-z0-9_\-]"


def _token_pattern(literal: str, rest: str) -> re.Pattern[str]:
    escaped = re.escape(literal)
    return re.compile(rf"{escaped}(?<!{_TOKEN_CHAR}{escaped}){rest}")


_TOKENS = (
    _token_pattern("sk-ant-", r"[A-Za-z0-9_\-]{10,}"),
    _token_pattern("gh", r"[pousr]_[A-Za-z0-9]{20,}"),
    _token_pattern("github_pat_", r"[A-Za-z0-9_]{20,}"),
    _token_pattern("glpat-", r"[A-Za-z0-9_\-]{20,}"),
    _token_pattern("xox", r"[abposr]-[A-Za-z0-9\-]{10,}"),
    _token_pattern("A", r"(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    _token_pattern("AIza", r"[0-9A-Za-z_\-]{35}"),
    _token_pattern("sk_", r"(?:live|test)_[0-9A-Za-z]{16,}"),
    _token_pattern("rk_", r"(?:live|test)_[0-9A-Za-z]{16,}"),
    _token_pattern("eyJ", r"[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"),
    _token_pattern("https://hooks.slack.com/services/", r"[A-Za-z0-9/]{20,}"),
    _token_pattern("hf_", r"[A-Za-z0-9]{30,}"),
    _token_pattern("npm_", r"[A-Za-z0-9]{36,}"),
)
# OpenAI keys: "sk-" and a long run holding a digit (checked in code: a lookahead would
# rescan the run), which keeps CSS-like words such as sk-learn-compatible-thing out.
_OPENAI_KEY = _token_pattern("sk-", r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}")

# The patterns below are case-insensitive. Python's regex search is several times slower
# with IGNORECASE, so they are written in lower case and run over a lower-cased copy of
# the text (same length, same offsets: _lowered); replacements are cut from the original.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _lowered(text: str) -> str:
    """A lower-case copy of ``text`` with the same offsets.

    str.lower is C code at any width, where str.translate is only fast on ASCII text; it
    keeps every offset unless a character lowers to two (U+0130), and then the ASCII-only
    table is used instead.
    """
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)

_AUTH_HEADER = re.compile(
    r"(?P<head>authorization[\"']?\s*[:=]\s*[\"']?"
    r"(?:(?:bearer|basic|token|digest|apikey)\s+)?)(?P<value>[^\s\"',;]{8,4096})"
)
_BEARER = re.compile(r"(?P<head>bearer\s+)(?P<value>[a-z0-9_\-.~+/]{8,4096}=*)")
# Anchored on "://" (a literal); the scheme before it stays as it is. Bounded repeats keep
# a long run without "@" from being rescanned at length. The user may hold an "@" (an e-mail
# address) and so may the password: it runs to the last "@" before the path, as a URL parser
# reads it.
_URL_USERINFO = re.compile(r"(?P<head>://[^\s/:\[\]]{0,256}:)(?P<value>[^\s/\[\]\"'<>]{1,256})@")
# Azure storage and service bus connection strings: `AccountKey=<base64>;`. One pattern per
# name, each starting with a literal (a leading alternation is tried at every position).
_AZURE_KEYS = tuple(
    re.compile(rf"(?P<head>{name}\s*=\s*)(?P<value>[a-z0-9+/]{{16,}}={{0,2}})")
    for name in ("accountkey", "sharedaccesskey")
)

_STRONG_WORDS = r"password|passwd|passphrase|secret|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key"
_KEYWORD = rf"(?:{_STRONG_WORDS}|token|[_\-]key)"
# What an assignment search looks for: a name's last word. The whole name, found by
# looking back, must then match _SECRET_KEY_NAME (so `key = ...` or `monkey = ...` do not).
_HEAD_WORD = r"(?:pass(?:word|wd|phrase)|secret|token|key)"
_STRONG_NAME = re.compile(_STRONG_WORDS)
_SECRET_KEY_NAME = re.compile(rf"[a-z0-9_.\-]*{_KEYWORD}")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")

# An assignment is found from the keyword that ends its name (a search that starts on a
# literal is fast; one that starts on an open-ended name prefix is not); the name's start is
# found by looking back. `--password value` is the whitespace-separated form, for flags only.
_ASSIGN_HEAD = re.compile(
    rf"""(?x)
    (?P<kw>{_HEAD_WORD})(?P<q1>["']?)
    (?P<sep>
        \s*:\s*[a-z_][\w.\[\]|, ]{{0,60}}?\s*=\s*     # a type annotation: api_key: str = ...
      | \s*(?::=|=>|=|:)\s*
      | (?P<ws>[ \t]+)
    )
    """
)
_MAX_VALUE = 1024
_MAX_NAME = 256
_ASSIGN_VALUE = re.compile(
    rf"""(?x)
        "(?P<dq>(?:[^"\\\n]|\\.){{0,{_MAX_VALUE}}})"
      | '(?P<sq>(?:[^'\\\n]|\\.){{0,{_MAX_VALUE}}})'
      | (?P<bare>[^\s"'`,;(){{}}\[\]<>&|]{{1,{_MAX_VALUE}}})(?P<call>[(\[]?)
    """
)

# A value that only refers to a secret kept elsewhere, or a placeholder.
_REFERENCE = re.compile(
    r"(?:\$|%\(|\{\{|<|os\.|env\.|process\.env|secrets\.|settings\.|config\.|self\.|None$|null$|"
    r"true$|false$)",
    re.I,
)
# A Python name or attribute path without digits in its first part: `db_password`, `args.pw`.
_PY_NAME = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# A word or dotted/hyphenated name with no digits up front: `created_at`, `bert-base`.
_CODE_LIKE = re.compile(r"[A-Za-z_][A-Za-z_]*(?:[.\-][A-Za-z_][A-Za-z0-9_]*)*")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_\-/+=.~]+")

# A bare AWS secret access key: 40 characters of the base64 alphabet standing alone, judged
# by _looks_like_aws_secret. Runs are found on a copy where each alphabet character is "a"
# and every other one a space, with bytes.find (a regex would try every position).
_BASE64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_RUN_MAP = bytes(ord("a") if chr(i) in _BASE64_ALPHABET else ord(" ") for i in range(256))
_RUN_OF_40 = b"a" * 40
_LOW_SIXTY_FOUR = frozenset(_BASE64_ALPHABET[:32])
_LOWER_RUN = re.compile(r"[a-z]{3,}")


def _credential_like(value: str, *, strong: bool, quoted: bool, code_name: bool = False) -> bool:
    """Whether an assigned value looks like a credential rather than code or prose.

    ``strong`` names (password, secret, api key, ...) redact any quoted value of 8+
    characters and any bare value that is not an identifier; weak names (token, *_key)
    need a value shaped like a random token. ``code_name`` marks a lower-case name, as in
    Python code, where ``password=password`` passes a variable along.
    """
    if len(value) < MIN_SECRET_LEN or REDACTED in value or _REFERENCE.match(value):
        return False
    if len(set(value)) == 1:
        return False  # a mask like ******** or xxxxxxxx
    if strong and quoted:
        return True
    if any(ch.isspace() for ch in value):
        return False
    if strong:
        if _PY_NAME.fullmatch(value):
            if "." in value or "_" in value:
                return False  # db_password, DEFAULT_PASSWORD, args.password
            if code_name and value.islower():
                return False  # password=password, a keyword argument passed along
        return True
    code_like = bool(_CODE_LIKE.fullmatch(value))
    if not _TOKEN_CHARS.fullmatch(value):
        return False
    mixed_case = any(ch.isupper() for ch in value) and any(ch.islower() for ch in value)
    if code_like:
        # Only a long run of mixed-case letters with no word separators is a token.
        return mixed_case and len(value) >= 24 and "_" not in value and "." not in value
    return any(ch.isdigit() for ch in value) or (mixed_case and len(value) >= 16)


def _is_strong(name: str) -> bool:
    # An upper-case NAME_WITH_PARTS is an environment variable or a constant: config, not code.
    return bool(_STRONG_NAME.search(name.lower())) or (name.isupper() and "_" in name)


def _group(match: re.Match[str], text: str, name: str) -> str | None:
    start, end = match.span(name)
    return None if start < 0 else text[start:end]


def _redact_assign(head: re.Match[str], value: re.Match[str], text: str) -> str | None:
    begin = head.start()
    floor = max(0, begin - _MAX_NAME)
    while begin > floor and text[begin - 1] in _NAME_CHARS:
        begin -= 1
    name = text[begin : head.end("kw")]
    if not _SECRET_KEY_NAME.fullmatch(name.lower()):
        return None
    quote = head.group("q1")
    # A quoted name must be quoted on both sides ("api_key": ...), else this is not a key.
    if quote and (begin == 0 or text[begin - 1] != quote):
        return None
    flag = name.startswith("-")
    spaced = head.group("ws") is not None
    if spaced and (not flag or quote):
        return None
    name = name.lstrip("-")
    strong = _is_strong(name) or spaced
    prefix = text[head.start() : head.end()]
    for group, mark in (("dq", '"'), ("sq", "'")):
        found = value.group(group)
        if found is not None:
            if _credential_like(found, strong=strong, quoted=True):
                return f"{prefix}{mark}{REDACTED}{mark}"
            return None
    if value.group("call") or not _credential_like(
        value.group("bare"), strong=strong, quoted=False, code_name=name.islower()
    ):
        return None
    return f"{prefix}{REDACTED}"


def _substitute_assignments(text: str) -> str:
    """Redact the values of secret-named assignments (``NAME=value``, ``"name": "value"``...).

    A bare value is read only up to the next assignment head, so that a chain of heads
    costs linear time and a long declined value cannot hide the assignments inside it.
    """
    heads = list(_ASSIGN_HEAD.finditer(_lowered(text)))
    if not heads:
        return text
    pieces: list[str] = []
    last = 0
    for index, head in enumerate(heads):
        if head.start() < last:
            continue  # inside a value already redacted
        start = head.end()
        next_head = heads[index + 1].start() if index + 1 < len(heads) else len(text)
        if text.startswith(('"', "'"), start):
            # A quoted value runs to its closing quote, heads inside the string or not.
            value = _ASSIGN_VALUE.match(text, start, start + _MAX_VALUE + 2)
        else:
            value = _ASSIGN_VALUE.match(text, start, min(next_head, start + _MAX_VALUE))
        if value is None:
            continue
        replacement = _redact_assign(head, value, text)
        if replacement is None:
            continue
        pieces.append(text[last : head.start()])
        pieces.append(replacement)
        last = value.end()
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _starts_word(text: str, index: int) -> bool:
    return index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_")


def _redact_openai_key(match: re.Match[str]) -> str:
    return REDACTED if any(ch.isdigit() for ch in match.group(0)) else match.group(0)


def _redact_bearer(match: re.Match[str], text: str) -> str | None:
    if not _starts_word(text, match.start()):
        return None
    value = _group(match, text, "value") or ""
    if not _credential_like(value, strong=False, quoted=False):
        return None
    return f"{_group(match, text, 'head')}{REDACTED}"


def _redact_header(match: re.Match[str], text: str) -> str | None:
    if not _starts_word(text, match.start()):
        return None
    return _redact_value(match, text)


def _redact_value(match: re.Match[str], text: str) -> str | None:
    value = _group(match, text, "value") or ""
    if REDACTED in value or _REFERENCE.match(value):
        return None
    return text[match.start() : match.start("value")] + REDACTED + text[match.end("value") : match.end()]


def _substitute(
    pattern: re.Pattern[str],
    text: str,
    redact: Callable[[re.Match[str], str], str | None],
) -> str:
    """Apply ``redact`` to each match of ``pattern`` in the lowered copy of ``text``.

    A declined match resumes the search one character on, so that a span which only
    looked like a credential cannot hide one inside it.
    """
    lowered = _lowered(text)
    pieces: list[str] = []
    last = 0
    pos = 0
    while (match := pattern.search(lowered, pos)) is not None:
        replacement = redact(match, text)
        if replacement is None:
            pos = match.start() + 1
            continue
        pieces.append(text[last : match.start()])
        pieces.append(replacement)
        last = pos = match.end()
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _looks_like_aws_secret(run: str, text: str, end: int) -> bool:
    """Whether a 40-character base64-alphabet run is a secret access key, not a look-alike.

    Git object ids (hex, one case) lack mixed case; identifiers and paths are mostly
    lower-case words; base64 of 7-bit text has every fourth character in the lower half of
    the alphabet (a byte's top bit is 0), which a random key has with odds of 1 in 1024.
    A run padded with ``=`` is base64 of something else, and one glued to ``-`` or ``_`` is a
    piece of a longer URL-safe base64 token (a wheel RECORD's sha256, say). About 0.3% of
    real keys fail these checks; the assignment rules still catch them under a
    secret-looking name.
    """
    start = end - len(run)
    if len(run) != 40 or text.startswith(("=", "-", "_"), end) or (start and text[start - 1] in "-_"):
        return False
    if not any(ch.isupper() for ch in run) or not any(ch.islower() for ch in run):
        return False
    if not any(ch.isdigit() or ch in "+/" for ch in run):
        return False
    if all(ch in _LOW_SIXTY_FOUR for ch in run[::4]):
        return False
    return sum(len(word) for word in _LOWER_RUN.findall(run)) < 20


def _redact_aws_secrets(text: str) -> str:
    # One byte per character ("?" for any other than ASCII), so offsets are the text's own.
    runs = text.encode("ascii", "replace").translate(_RUN_MAP)
    pieces: list[str] = []
    last = 0
    start = runs.find(_RUN_OF_40)
    while start >= 0:
        end = runs.find(b" ", start)
        end = len(runs) if end < 0 else end
        if _looks_like_aws_secret(text[start:end], text, end):
            pieces.append(text[last:start])
            pieces.append(REDACTED)
            last = end
        start = runs.find(_RUN_OF_40, end)
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _patterns(text: str) -> str:
    """``text`` with every credential recognisable by its shape redacted.

    Each step only replaces spans by ``REDACTED`` (a prefix it matched is written back as it
    was): _changed_spans relies on that to find what changed.
    """
    text = _PEM.sub(REDACTED, text)
    for pattern in _TOKENS:
        text = pattern.sub(REDACTED, text)
    text = _OPENAI_KEY.sub(_redact_openai_key, text)
    text = _substitute(_AUTH_HEADER, text, _redact_header)
    text = _substitute(_BEARER, text, _redact_bearer)
    text = _substitute(_URL_USERINFO, text, _redact_value)
    for pattern in _AZURE_KEYS:
        text = _substitute(pattern, text, _redact_value)
    text = _substitute_assignments(text)
    return _redact_aws_secrets(text)


def _changed_spans(before: str, after: str) -> list[tuple[int, int]]:
    """The spans of ``before`` that ``_patterns`` replaced to give ``after``.

    ``after`` is ``before`` with disjoint non-empty spans replaced by the marker, so its
    pieces between markers appear in ``before`` in order. Where they could sit at more than
    one place, each span is widened to cover every possible placement: more is redacted,
    never less.
    """
    pieces = after.split(REDACTED)
    count = len(pieces) - 1
    first, last = pieces[0], pieces[-1]
    size = len(before)
    whole = [(len(first), size - len(last))]
    if count == 0 or len(first) + len(last) + count > size or not (
        before.startswith(first) and before.endswith(last)
    ):
        return [(0, size)]
    ends = [len(first)]  # earliest end of each piece, from the left
    for piece in pieces[1:-1]:
        at = before.find(piece, ends[-1] + 1)
        if at < 0:
            return whole
        ends.append(at + len(piece))
    starts = [size - len(last)]  # latest start of each piece, from the right
    for piece in reversed(pieces[1:-1]):
        at = before.rfind(piece, 0, starts[-1] - 1)
        if at < 0:
            return whole
        starts.append(at)
    starts.reverse()
    return [(a, b) for a, b in zip(ends, starts) if b > a]


# How many layers of escapes the decoded view reads: JSON inside a JSON string is common
# (a logged API response holding a model's JSON answer); deeper nesting is not.
_VIEW_DEPTH = 2
# A credential the decoded view finds, and the text as written does not, touches an escape
# or an invisible character, so it lies within an assignment's longest name and value of
# one. Where they are few, only those windows are searched.
_VIEW_WINDOW = _MAX_NAME + _MAX_VALUE + 128


def _form_spans(text: str, forms: tuple[str, ...]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for form in forms:
        at = text.find(form)
        while at >= 0:
            spans.append((at, at + len(form)))
            at = text.find(form, at + len(form))
    return spans


def _pattern_spans(text: str) -> list[tuple[int, int]]:
    cleaned = _patterns(text)
    if cleaned == text:
        return []
    # A marker already in the text comes back as a "span" of itself: not a finding.
    return [(a, b) for a, b in _changed_spans(text, cleaned) if text[a:b] != REDACTED]


def _window_edge(text: str, index: int, step: int) -> int:
    """``index`` moved outwards to the nearest whitespace (at most _MAX_NAME characters), so
    that a window does not cut a word and make a new, shorter one."""
    limit = max(0, index - _MAX_NAME) if step < 0 else min(len(text), index + _MAX_NAME)
    while index != limit and not (text[index - 1] if step < 0 else text[index]).isspace():
        index += step
    return index


def _windowed_pattern_spans(text: str, near: list[int]) -> list[tuple[int, int]]:
    """``_pattern_spans`` of ``text``, searched only around the positions ``near`` (sorted)."""
    windows: list[list[int]] = []
    for pos in near:
        start, end = max(0, pos - _VIEW_WINDOW), min(len(text), pos + _VIEW_WINDOW)
        if windows and start <= windows[-1][1]:
            windows[-1][1] = end
        else:
            windows.append([start, end])
    spans: list[tuple[int, int]] = []
    for start, end in windows:
        start, end = _window_edge(text, start, -1), _window_edge(text, end, 1)
        spans.extend((start + a, start + b) for a, b in _pattern_spans(text[start:end]))
    return spans


def _view_spans(text: str, forms: tuple[str, ...], depth: int) -> list[tuple[int, int]]:
    """Spans of ``text`` whose decoded view (``depth`` layers deep) shows a secret."""
    few = len(text) // (2 * _VIEW_WINDOW)
    count = special_count(text, few + 1)
    if not count:
        return []
    view: DecodedView | None = None
    if count <= few:
        # Few escapes: map them (cheap for few) and search only the windows around them.
        view = decoded_view(text)
        if view is None:
            return []
        view_text = view.text
        found = _form_spans(view_text, forms) + _windowed_pattern_spans(view_text, view.view_pos)
    else:
        decoded = decode(text)
        if decoded is None:
            return []
        view_text = decoded
        found = _form_spans(view_text, forms) + _pattern_spans(view_text)
    if depth > 1:
        found.extend(_view_spans(view_text, forms, depth - 1))
    if not found:
        return []
    view = view or decoded_view(text)
    if view is None or view.text != view_text:
        return [(0, len(text))]  # the two decoders disagree: a bug; redact rather than leak
    return [view.original_span(a, b) for a, b in found]


def _redact_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span replaced by the marker (overlapping or touching spans as one)."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces: list[str] = []
    last = 0
    for start, end in merged:
        pieces.append(text[last:start])
        pieces.append(REDACTED)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


# Each pass only replaces spans by the marker, so passes converge quickly; a text that keeps
# changing past this many (never seen) is redacted whole rather than returned half-clean.
_MAX_PASSES = 8


def _scrub_once(text: str) -> str:
    forms = hunted_forms()
    for form in forms:
        if form in text:
            text = text.replace(form, REDACTED)
    spans = secret_spans(text, known_secrets())
    if spans:
        text = _redact_spans(text, spans)
    text = _patterns(text)
    spans = _view_spans(text, forms, _VIEW_DEPTH)
    return _redact_spans(text, spans) if spans else text


def scrub(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]``; idempotent.

    A redaction can make a neighbour recognisable (an AWS secret key glued to a known
    secret's value stands alone once the value is a marker), so the passes repeat until
    the text no longer changes: the result is a fixed point, hence idempotent.
    """
    if not text:
        return text
    for _ in range(_MAX_PASSES):
        cleaned = _scrub_once(text)
        if cleaned == text:
            return text
        text = cleaned
    return REDACTED


def _secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY_NAME.fullmatch(key.lower()))


def scrub_obj(obj: Any) -> Any:
    """``obj`` with every string scrubbed, recursively through dicts, lists and tuples.

    Dict keys are kept as they are; a string value under a secret-sounding key
    (``{"api_key": "..."}``) is judged as the value of that assignment.
    """
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        cleaned: dict[Any, Any] = {}
        for key, value in obj.items():
            if isinstance(value, str) and _secret_key(key) and _credential_like(
                value, strong=_is_strong(key), quoted=True
            ):
                cleaned[key] = REDACTED
            else:
                cleaned[key] = scrub_obj(value)
        return cleaned
    if isinstance(obj, list):
        return [scrub_obj(item) for item in obj]
    if isinstance(obj, tuple):
        return tuple(scrub_obj(item) for item in obj)
    return obj
