"""Times as a person reads them: relative ("3 min ago"), the exact time on hover.

Stored timestamps are ISO strings with microseconds; a page shows how long ago, in a ``<time>``
element whose ``datetime`` is the stored value and whose ``title`` is the exact time in UTC to
the second. A value that is not a time is shown as it is (escaped).
"""

from __future__ import annotations

from datetime import datetime, timezone

from markupsafe import Markup, escape

from tracker.model import parse_ts

__all__ = ["ago", "when"]


def ago(then: datetime, now: datetime) -> str:
    """``just now``, ``42 s ago``, ``5 min ago``, ``3 h ago``, ``2 days ago``; later times ``in 5 min``."""
    seconds = (now - then).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 5:
        return "just now"
    for size, unit in ((86400, "day"), (3600, "h"), (60, "min"), (1, "s")):
        if seconds >= size:
            count = int(seconds // size)
            text = f"{count} {unit}" + ("s" if unit == "day" and count != 1 else "")
            return f"in {text}" if future else f"{text} ago"
    return "just now"


def when(value: object, now: datetime | None = None) -> Markup:
    """The ``<time>`` element of a stored timestamp (see the module docstring)."""
    try:
        then = parse_ts(str(value))
    except (TypeError, ValueError):
        return Markup(escape(value if value is not None else ""))
    then = then if then.tzinfo else then.replace(tzinfo=timezone.utc)
    exact = then.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    text = ago(then, now or datetime.now(timezone.utc))
    return Markup(f'<time datetime="{escape(str(value))}" title="{exact}">{escape(text)}</time>')
