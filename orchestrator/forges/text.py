"""Model text made safe in a pull request's body or comment.

What a model wrote reaches people through the forge, where some words act: ``@name`` notifies a
person or a team, ``#123`` (``!123``, ``GH-123``) links an issue or pull request, and a closing
word before a reference ("fixes #1", "closes owner/repo#2", "resolves https://.../issues/3")
closes that issue when the pull request merges. Each is broken with a word joiner (U+2060),
invisible when read: the text reads the same, and the forge sees no mention, no reference and
no closing word. Terminal controls and secrets are taken out first.

May import: ``redact``.
"""

from __future__ import annotations

import re

from redact import scrub
from redact.controls import strip_terminal

__all__ = ["neutral"]

_JOIN = "\u2060"
_MENTION = re.compile(r"(?<![\w`])@(?=[A-Za-z0-9_-])")
_REFERENCE = re.compile(r"([#!])(?=\d)|\b(GH)-(?=\d)")
_CLOSING = re.compile(r"\b(clos|fix|resolv)(e[sd]?|es|ed)?\b", re.I)


def neutral(text: str) -> str:
    """``text`` with no mention, reference or closing word the forge acts on."""
    text = scrub(strip_terminal(text)).replace(_JOIN, "")
    text = _MENTION.sub("@" + _JOIN, text)
    text = _REFERENCE.sub(lambda m: (m.group(1) + _JOIN) if m.group(1) else (m.group(2) + _JOIN + "-"), text)
    return _CLOSING.sub(lambda m: m.group(1)[0] + _JOIN + m.group(0)[1:], text)
