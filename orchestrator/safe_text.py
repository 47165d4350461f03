"""Untrusted text (model answers, worker output, names read from the database) made safe to
print on a terminal."""

from __future__ import annotations

import unicodedata

__all__ = ["printable", "clip", "render"]

_KEEP = frozenset("\n\t")
# Control characters move the cursor or recolour the terminal (ANSI escapes); format and
# separator characters reorder or hide what is shown (bidirectional overrides).
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp"})


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control, format and separator character shown as ``\\uXXXX``
    (newlines and tabs kept, unless ``one_line``)."""
    return "".join(f"\\u{ord(char):04x}" if (char not in _KEEP or one_line) and unicodedata.category(char) in _UNSAFE
                   else char for char in text)


def clip(text: str | None, size: int) -> str:
    """``printable`` on one line, cut to ``size`` characters (an ellipsis marks the cut)."""
    if not text:
        return ""
    line = printable(text, one_line=True)
    return line if len(line) <= size else line[: size - 1] + "…"


def render(*renderables: object, width: int = 100, color: bool = False) -> str:
    """rich renderables (tables) as text, each followed by a blank line, trailing spaces
    dropped. Strings are never read as rich markup or emoji codes: a model answer holding
    ``[/bold]`` or ``:x:`` prints as written."""
    import io

    from rich.console import Console

    console = Console(width=width, color_system="standard" if color else None, force_terminal=color,
                      markup=False, emoji=False, highlight=False, file=io.StringIO())
    for renderable in renderables:
        console.print(renderable)
        console.print()
    return "\n".join(line.rstrip() for line in console.file.getvalue().rstrip("\n").splitlines())
