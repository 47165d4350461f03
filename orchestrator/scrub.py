"""Redact credentials from text before it is stored, printed or sent to a model.

Everything mesh records (prompts, responses, validation output, comments) can carry a
secret a worker or a test suite printed. ``scrub`` replaces known credential shapes with
``[REDACTED]`` (keeping the key name of a ``KEY=value`` assignment), plus the literal values
of secret-looking environment variables. It is idempotent, and tuned to leave ordinary code
alone: ``token = tokens[0]`` or ``key = "name"`` are not credentials.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

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
)
# OpenAI keys: "sk-" and a long run holding a digit (checked in code: a lookahead would
# rescan the run), which keeps CSS-like words such as sk-learn-compatible-thing out.
_OPENAI_KEY = _token_pattern("sk-", r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}")

# The patterns below are case-insensitive. Python's regex search is several times slower
# with IGNORECASE, so they are written in lower case and run over an ASCII-lowered copy of
# the text (same length, same offsets); replacements are cut from the original.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

_AUTH_HEADER = re.compile(
    r"(?P<head>authorization[\"']?\s*[:=]\s*[\"']?"
    r"(?:(?:bearer|basic|token|digest|apikey)\s+)?)(?P<value>[^\s\"',;]{8,4096})"
)
_BEARER = re.compile(r"(?P<head>bearer\s+)(?P<value>[a-z0-9_\-.~+/]{8,4096}=*)")
# Anchored on "://" (a literal); the scheme before it stays as it is. Bounded repeats keep
# a long run without "@" from being rescanned at length.
_URL_USERINFO = re.compile(r"(?P<head>://[^\s/:@\[\]]{0,256}:)(?P<value>[^\s/@\[\]]{1,256})@")

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

_SECRET_ENV_PARTS = frozenset({"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PAT", "CREDENTIALS"})
_SECRET_ENV_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY")
_MIN_SECRET_LEN = 8


def _credential_like(value: str, *, strong: bool, quoted: bool, code_name: bool = False) -> bool:
    """Whether an assigned value looks like a credential rather than code or prose.

    ``strong`` names (password, secret, api key, ...) redact any quoted value of 8+
    characters and any bare value that is not an identifier; weak names (token, *_key)
    need a value shaped like a random token. ``code_name`` marks a lower-case name, as in
    Python code, where ``password=password`` passes a variable along.
    """
    if len(value) < _MIN_SECRET_LEN or REDACTED in value or _REFERENCE.match(value):
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
    heads = list(_ASSIGN_HEAD.finditer(text.translate(_ASCII_LOWER)))
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
    lowered = text.translate(_ASCII_LOWER)
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


def _secret_env_name(name: str) -> bool:
    parts = name.upper().split("_")
    return any(part in _SECRET_ENV_PARTS or part.endswith(_SECRET_ENV_SUFFIXES) for part in parts)


def _environment_secrets() -> list[str]:
    values = {
        value
        for name, value in os.environ.items()
        if _secret_env_name(name) and len(value) >= _MIN_SECRET_LEN and value not in REDACTED
    }
    # Longest first, so a secret that contains another is replaced whole.
    return sorted(values, key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]``; idempotent."""
    if not text:
        return text
    for secret in _environment_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _PEM.sub(REDACTED, text)
    for pattern in _TOKENS:
        text = pattern.sub(REDACTED, text)
    text = _OPENAI_KEY.sub(_redact_openai_key, text)
    text = _substitute(_AUTH_HEADER, text, _redact_header)
    text = _substitute(_BEARER, text, _redact_bearer)
    text = _substitute(_URL_USERINFO, text, _redact_value)
    text = _substitute_assignments(text)
    return text


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
