"""Strip terminal control sequences from untrusted program output before it is kept.

Validation output is written by the code under test, which a patch controls: colour codes
make it unreadable in a report, and ``ESC]52`` (write the clipboard), ``ESC[2J`` (clear the
screen) or a bidi override would act on the terminal of whoever prints it later. Output is
stored without them: escape sequences (CSI, OSC, DCS and the two-byte forms) are removed
whole, every other C0/C1 control but newline and tab is dropped, carriage returns become
newlines, and bidi overrides and isolates are dropped.
"""

from __future__ import annotations

import re

__all__ = ["strip_terminal"]

# OSC/DCS/SOS/PM/APC strings end at BEL or ST (ESC \ or 0x9c); CSI ends at a final byte; any
# other ESC takes the one character after it. An unterminated string runs to the end.
_SEQUENCE = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|$)"
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def strip_terminal(text: str) -> str:
    """``text`` without terminal control sequences, controls (but ``\\n``, ``\\t``) or bidi controls."""
    if not text:
        return text
    text = _SEQUENCE.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)
