"""Untrusted text (model answers, worker output, names read from the database) made safe to
print on a terminal: ``printable`` and ``clip`` (from ``tracker.safe_text``, shared with the
tracker's command line), ``render`` for rich tables, and ``plain_table`` for a table of short
cells that must print without importing rich (``mesh logs``, whose whole process is a few
times rich's import)."""

from __future__ import annotations

from collections.abc import Container, Sequence

from tracker.safe_text import clip, printable

__all__ = ["printable", "clip", "render", "plain_table", "terminal"]


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


_GAP = "  "
_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"


def plain_table(title: str, columns: Sequence[str], rows: Sequence[tuple[Sequence[str], bool]], *,
                right: Container[str] = (), fold: Sequence[str] = (), width: int = 100, color: bool = False) -> str:
    """A table of already inert cells (``clip``) as text: a title line, a header, then each row
    (``(cells, alarm)``; with ``color``, a row whose ``alarm`` is set is red and the header is
    bold). Columns are as wide as their widest cell, two spaces apart, the ``right`` ones
    right-justified; when the table is wider than ``width``, the ``fold`` columns narrow
    (the widest first, down to their header) and their cells continue on the next lines."""
    widths = [max([len(name), *(len(cells[k]) for cells, _ in rows)]) for k, name in enumerate(columns)]
    floor = {k: max(len(columns[k]), 4) for k, name in enumerate(columns) if name in fold}
    excess = sum(widths) + len(_GAP) * (len(columns) - 1) - width
    while excess > 0:
        narrowable = [k for k in floor if widths[k] > floor[k]]
        if not narrowable:
            break
        widest = max(narrowable, key=lambda k: widths[k])
        widths[widest] -= 1
        excess -= 1

    def lines(cells: Sequence[str]) -> list[str]:
        pieces = [[cell[i:i + size] for i in range(0, len(cell), size)] or [""] for cell, size in zip(cells, widths)]
        out = []
        for depth in range(max(len(p) for p in pieces)):
            parts = [(p[depth] if depth < len(p) else "") for p in pieces]
            out.append(_GAP.join(part.rjust(size) if name in right else part.ljust(size)
                                 for part, size, name in zip(parts, widths, columns)).rstrip())
        return out

    header = lines(columns)
    text = [title, *(f"{_BOLD}{line}{_RESET}" if color else line for line in header)]
    for cells, alarm in rows:
        text += [f"{_RED}{line}{_RESET}" if color and alarm else line for line in lines(cells)]
    return "\n".join(text)


def terminal() -> tuple[int, bool]:
    """Width and colour of the tables: the terminal's (colour unless ``NO_COLOR`` is set), or
    120 columns of plain text in a pipe."""
    import os
    import sys

    if sys.stdout.isatty():
        import shutil

        return shutil.get_terminal_size((100, 24)).columns, "NO_COLOR" not in os.environ
    return 120, False
