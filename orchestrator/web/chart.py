"""A bar chart as numbers for an SVG the template draws: no script, no library, no style attribute.

The chart is server-rendered so the usage page needs no JavaScript and nothing from outside;
its colours come from classes in ``static/mesh.css``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["bar_chart"]

WIDTH, HEIGHT = 720, 220
_LEFT, _BOTTOM, _TOP = 64, 40, 12


def _label(value: float, unit: str) -> str:
    return f"{unit}{value:.2f}" if value < 100 else f"{unit}{value:.0f}"


def bar_chart(points: Sequence[tuple[str, float]], *, unit: str = "") -> dict[str, Any]:
    """Bars for ``(label, value)`` points in order: each bar's box, its label (every few bars
    when there are many) and its value as a title; four grid lines with their values. ``empty``:
    nothing above zero to draw (the page says so instead of drawing an empty grid)."""
    plot_w, plot_h = WIDTH - _LEFT - 8, HEIGHT - _BOTTOM - _TOP
    top = max((v for _, v in points), default=0.0) or 1.0
    step = plot_w / max(len(points), 1)
    every = max(1, len(points) // 12)
    bars = []
    for index, (label, value) in enumerate(points):
        h = plot_h * max(value, 0.0) / top
        bars.append({"x": round(_LEFT + index * step + step * 0.1, 1), "y": round(_TOP + plot_h - h, 1),
                     "w": round(max(step * 0.8, 1.0), 1), "h": round(h, 1), "label": label,
                     "value": _label(value, unit), "show_label": index % every == 0,
                     "label_x": round(_LEFT + index * step + step / 2, 1)})
    grid = [{"y": round(_TOP + plot_h - plot_h * i / 4, 1), "value": _label(top * i / 4, unit)} for i in range(5)]
    return {"width": WIDTH, "height": HEIGHT, "bars": bars, "grid": grid, "left": _LEFT, "right": WIDTH - 8,
            "label_y": HEIGHT - _BOTTOM + 16, "empty": not any(v > 0 for _, v in points)}
