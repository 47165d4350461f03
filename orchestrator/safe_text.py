"""Untrusted text (model answers, worker output, names read from the database) made safe to
print on a terminal: ``printable`` and ``clip`` (from ``tracker.safe_text``, shared with the
tracker's command line), and ``render`` for rich tables."""

from __future__ import annotations

from tracker.safe_text import clip, printable

__all__ = ["printable", "clip", "render"]


def render(*renderables: object, width: int = 100, color: bool = False) -> str:
    """rich renderables (tables) as text, each followed by a blank line, trailing spaces
    dropped. Strings are never read as rich markup or emoji codes: a model answer holding
    ``[/bold]`` or ``:x:`` prints as written (escape it with ``clip`` or ``printable``)."""
    import io

    from rich.console import Console

    console = Console(width=width, color_system="standard" if color else None, force_terminal=color,
                      markup=False, emoji=False, highlight=False, file=io.StringIO())
    for renderable in renderables:
        console.print(renderable)
        console.print()
    return "\n".join(line.rstrip() for line in console.file.getvalue().rstrip("\n").splitlines())
