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
from typing import Any

__all__ = ["REDACTED", "scrub", "scrub_obj"]

REDACTED = "[REDACTED]"

_PEM = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    # A truncated block (an output tail cut mid-key): take the header and body lines.
    r"|[A-Za-z0-9+/=\s:,\-]*)"
)

# Credentials recognisable by their own shape, wherever they appear.
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-ant-[A-Za-z0-9_\-]{10,}"
    r"|sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|[sr]k_(?:live|test)_[0-9A-Za-z]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"
    r"|https://hooks\.slack\.com/services/[A-Za-z0-9/]{20,}"
    r")"
)

_AUTH_HEADER = re.compile(
    r"(?i)(\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?"
    r"(?:(?:bearer|basic|token|digest|apikey)\s+)?)([^\s\"',;]{8,})"
)
_BEARER = re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9_\-.~+/]{8,}=*)")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s/:@\[\]]*):([^\s/@\[\]]+)@")

_STRONG_WORDS = r"password|passwd|passphrase|secret|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key"
_NAME = rf"[A-Za-z0-9_.\-]*?(?:{_STRONG_WORDS}|token|[_\-]key)"
_STRONG_NAME = re.compile(rf"(?i){_STRONG_WORDS}")

_FLAG = re.compile(rf"(?i)(?<![A-Za-z0-9_\-])(--?{_NAME}\s+)([^\s\"'`;|&()\[\]{{}}<>]+)")
_ASSIGN = re.compile(
    rf"""(?ix)
    (?<![A-Za-z0-9_.\-])
    (?P<head>
        (?P<q1>["']?)(?P<name>(?:--?)?{_NAME})(?P=q1)
        (?:\s*:\s*[A-Za-z_][\w.\[\]|, ]{{0,60}}?)?     # a type annotation: api_key: str = ...
        \s*(?::=|=>|=|:)\s*
    )
    (?:
        "(?P<dq>(?:[^"\\\n]|\\.)*)"
      | '(?P<sq>(?:[^'\\\n]|\\.)*)'
      | (?P<bare>[^\s"'`,;(){{}}\[\]<>&|]+)(?P<call>[(\[]?)
    )
    """
)

# A value that only refers to a secret kept elsewhere, or a placeholder.
_REFERENCE = re.compile(
    r"^(?:\$|%\(|\{\{|<|os\.|env\.|process\.env|secrets\.|settings\.|config\.|self\.|None$|null$|"
    r"true$|false$)",
    re.I,
)
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
    code_like = bool(_CODE_LIKE.fullmatch(value))
    if strong:
        if code_like and ("." in value or "_" in value):
            return False  # db_password, DEFAULT_PASSWORD, args.password
        return not (code_like and code_name and value.islower())
    if not _TOKEN_CHARS.fullmatch(value):
        return False
    mixed_case = any(ch.isupper() for ch in value) and any(ch.islower() for ch in value)
    if code_like:
        # Only a long run of mixed-case letters with no word separators is a token.
        return mixed_case and len(value) >= 24 and "_" not in value and "." not in value
    return any(ch.isdigit() for ch in value) or (mixed_case and len(value) >= 16)


def _is_strong(name: str) -> bool:
    return bool(_STRONG_NAME.search(name)) or (name.isupper() and "_" in name)


def _sub_assign(match: re.Match[str]) -> str:
    name = match.group("name").lstrip("-")
    strong = _is_strong(name)
    code_name = name.islower()
    for group, quote in (("dq", '"'), ("sq", "'")):
        value = match.group(group)
        if value is not None:
            if _credential_like(value, strong=strong, quoted=True):
                return f"{match.group('head')}{quote}{REDACTED}{quote}"
            return match.group(0)
    value = match.group("bare")
    if match.group("call") or not _credential_like(
        value, strong=strong, quoted=False, code_name=code_name
    ):
        return match.group(0)
    return f"{match.group('head')}{REDACTED}"


def _sub_flag(match: re.Match[str]) -> str:
    value = match.group(2)
    if not _credential_like(value, strong=True, quoted=False):
        return match.group(0)
    return f"{match.group(1)}{REDACTED}"


def _sub_bearer(match: re.Match[str]) -> str:
    value = match.group(2)
    if not _credential_like(value, strong=False, quoted=False):
        return match.group(0)
    return f"{match.group(1)}{REDACTED}"


def _sub_auth_header(match: re.Match[str]) -> str:
    if REDACTED in match.group(2) or _REFERENCE.match(match.group(2)):
        return match.group(0)
    return f"{match.group(1)}{REDACTED}"


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
    text = _TOKENS.sub(REDACTED, text)
    text = _AUTH_HEADER.sub(_sub_auth_header, text)
    text = _BEARER.sub(_sub_bearer, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
    text = _FLAG.sub(_sub_flag, text)
    text = _ASSIGN.sub(_sub_assign, text)
    return text


def _secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(re.fullmatch(rf"(?i){_NAME}", key))


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
