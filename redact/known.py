"""The secret values mesh knows of, and every encoded form in which one could leak.

A secret-looking environment variable (``*_API_KEY``, ``*_TOKEN``, ``DB_PASSWORD``...) and
``MESH_SIGNING_KEY`` hold values that must never be recorded. A worker or a test suite that
prints one rarely prints it plainly when it means to smuggle it out: it encodes it first.
``encoded_forms`` lists what the scrubber hunts for each value: the raw text, its reverse,
rot13, hex (lower and upper case), URL encoding (upper and lower case escapes, ``+`` or
``%20`` for spaces) and base64 in both alphabets, whole (padded or not) and as the part of a
longer base64 stream that is fully determined by the value, at each of the three byte
alignments it can start at. Forms split by invisible characters or written with JSON escapes
are found by the scrubber's decoded view (``redact.view``), and pieces of 16 characters or
more in any of many more encodings by ``redact.windows``; neither is listed here.

Values shorter than ``MIN_SECRET_LEN`` (8) characters are not hunted at all, in any form:
their encodings are short enough to occur by chance in ordinary text, and redacting them
there would turn every record into noise and every patch into a false alarm.
"""

from __future__ import annotations

import base64
import codecs
import functools
import os
import re
from collections.abc import Mapping
from urllib.parse import quote, quote_plus

__all__ = ["MIN_SECRET_LEN", "SIGNING_KEY_ENV", "secret_env_name", "known_secrets", "encoded_forms", "hunted_forms"]

MIN_SECRET_LEN = 8
SIGNING_KEY_ENV = "MESH_SIGNING_KEY"

_SECRET_ENV_PARTS = frozenset(
    {"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PAT", "CREDENTIAL", "CREDENTIALS", "DSN"}
)
_SECRET_ENV_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY")
# Whole-name endings: a connection string carries its password or account key inside.
_SECRET_ENV_ENDINGS = ("CONNECTION_STRING", "CONNECTIONSTRING", "CONN_STR")
_PERCENT_ESCAPE = re.compile("%[0-9A-F]{2}")
# redact.REDACTED (that module imports this one, so it is not imported here).
_MARKER = "[REDACTED]"
_URLSAFE = str.maketrans("+/", "-_")


@functools.lru_cache(maxsize=4096)
def secret_env_name(name: str) -> bool:
    """Whether an environment variable of this name holds a secret (by its name's parts)."""
    upper = name.upper()
    if upper.endswith(_SECRET_ENV_ENDINGS):
        return True
    return any(part in _SECRET_ENV_PARTS or part.endswith(_SECRET_ENV_SUFFIXES) for part in upper.split("_"))


def known_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The secret values of ``environ`` (default: this process's environment), longest first.

    A value that only repeats a part of the redaction marker is left out, so that scrubbing
    stays idempotent.
    """
    env = os.environ if environ is None else environ
    values = {
        value
        for name, value in env.items()
        if (name == SIGNING_KEY_ENV or secret_env_name(name)) and len(value) >= MIN_SECRET_LEN
        and value not in _MARKER
    }
    # Longest first, so that a secret containing another is replaced whole.
    return tuple(sorted(values, key=lambda v: (-len(v), v)))


def _base64_forms(data: bytes) -> set[str]:
    forms: set[str] = set()
    whole = base64.b64encode(data).decode("ascii")
    n = len(data)
    for alignment in range(3):
        # The value's bytes start `alignment` bytes into a 3-byte group of some longer stream;
        # the characters between these bounds hold only the value's own bits.
        shifted = base64.b64encode(b"\0" * alignment + data).decode("ascii")
        first = -(-8 * alignment // 6)
        last = 8 * (alignment + n) // 6
        forms.add(shifted[first:last])
    forms.update((whole, whole.rstrip("=")))
    return forms | {form.translate(_URLSAFE) for form in forms}


def encoded_forms(value: str) -> tuple[str, ...]:
    """Every form of ``value`` the scrubber hunts (``value`` itself included), longest first.

    Returns nothing for a value shorter than ``MIN_SECRET_LEN``.
    """
    if len(value) < MIN_SECRET_LEN:
        return ()
    data = value.encode("utf-8", "surrogatepass")
    forms = {value, value[::-1], codecs.encode(value, "rot13"), data.hex(), data.hex().upper()}
    for escaped in (quote(value, safe=""), quote_plus(value, safe="")):
        forms.add(escaped)
        forms.add(_PERCENT_ESCAPE.sub(lambda m: m.group(0).lower(), escaped))
    forms |= _base64_forms(data)
    kept = (form for form in forms if len(form) >= MIN_SECRET_LEN and form not in _MARKER)
    return tuple(sorted(kept, key=lambda f: (-len(f), f)))


_cache: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def hunted_forms() -> tuple[str, ...]:
    """The encoded forms of every known secret of the current environment, longest first.

    Computed once per set of secret values: scrubbing runs on every string mesh records, and
    the environment rarely changes between two of them.
    """
    global _cache
    values = known_secrets()
    cached_values, cached_forms = _cache
    if values == cached_values:
        return cached_forms
    forms: dict[str, None] = {}
    for value in values:
        forms.update(dict.fromkeys(encoded_forms(value)))
    ordered = tuple(sorted(forms, key=lambda f: (-len(f), f)))
    _cache = (values, ordered)
    return ordered
