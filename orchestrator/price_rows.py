"""Model prices as plain data: the built-in rows, where the user's stored table lives, the cost
of a call, and a price table read without pydantic when every row of it is plainly valid.

``config.PriceTable`` validates a price table (pydantic, with one-line errors naming the file
and key). Importing pydantic and building the config's models is most of a ``mesh logs``
process, which only needs the rates: ``plain_prices`` reads the same sources the same way
(the built-in rows, the user's stored table over them, a project's ``[prices]`` over that;
cache rates left out follow the input price) and returns the same table, or None as soon as
anything is not plainly valid (a string where a number goes, an unknown key, a TOML file where
JSON was stored): the caller then validates with ``config.PriceTable``, which accepts it or
says why. A test compares the two on valid and invalid tables alike.

May import: the standard library only.
"""

from __future__ import annotations

import os
import re
from collections import namedtuple
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["DEFAULT_PRICES_AS_OF", "DEFAULT_PRICE_ROWS", "PRICE_FILE_MAX_BYTES", "Rates", "Prices",
           "user_prices_path", "with_cache_rates", "cost_usd", "plain_prices", "price_date", "MODEL_NAME"]

# Anthropic's published list prices in USD per million tokens on this date (cache writes
# at the 5-minute TTL rate). Prices change: users override them under [prices].
# claude-sonnet-4-5 reaches end of life on 2026-11-30 (SDK 2.12's deprecation table), so the
# defaults use claude-sonnet-4-6, priced at the Sonnet tier's list price.
DEFAULT_PRICES_AS_OF = "2025-10-15"
DEFAULT_PRICE_ROWS: dict[str, dict[str, float]] = {
    "claude-sonnet-4-6": {"input": 3.0, "output": 15.0, "cache_read": 0.30, "cache_write": 3.75},
    "claude-sonnet-4-5": {"input": 3.0, "output": 15.0, "cache_read": 0.30, "cache_write": 3.75},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_read": 0.10, "cache_write": 1.25},
    "claude-opus-4-1": {"input": 15.0, "output": 75.0, "cache_read": 1.50, "cache_write": 18.75},
}
PRICE_FILE_MAX_BYTES = 1_000_000
# Names are printed in tables on a terminal: no control characters, no blanks.
MODEL_NAME = r"^[\x21-\x7e]{1,200}$"
_DATE = r"^\d{4}-\d{2}-\d{2}$"
_RATES = ("input", "output", "cache_read", "cache_write")


def user_prices_path() -> Path:
    """Where ``mesh prices --update-from`` stores the user's price table:
    ``$XDG_CONFIG_HOME/mesh/prices.json``, ``~/.config/mesh/prices.json`` when that variable
    is unset or not an absolute path (the XDG rule)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "mesh" / "prices.json"


def with_cache_rates(row: Any) -> Any:
    """A price row with the cache rates it leaves out (or sets to nothing) filled in from its
    input price: reads at 0.1x, 5-minute writes at 1.25x (Anthropic's published multipliers)."""
    if not isinstance(row, dict):
        return row
    try:  # what the config reads as a number ("2", true): else the input price's own error is the one to tell
        price = float(row.get("input"))
    except (TypeError, ValueError):
        return row
    row = dict(row)
    if row.get("cache_read") is None:
        row["cache_read"] = round(price * 0.1, 6)
    if row.get("cache_write") is None:
        row["cache_write"] = round(price * 1.25, 6)
    return row


def cost_usd(rates: Any, *, input_tokens: int = 0, output_tokens: int = 0, cache_read_tokens: int = 0,
             cache_write_tokens: int = 0) -> float:
    """The price in USD of one call's token usage at ``rates`` (USD per million tokens)."""
    total = (input_tokens * rates.input + output_tokens * rates.output + cache_read_tokens * rates.cache_read
             + cache_write_tokens * rates.cache_write)
    return total / 1_000_000


# Plain tuples and classes, not dataclasses: ``dataclasses`` imports ``inspect`` (and ``ast``,
# ``dis``, ``tokenize``), a tenth of a ``mesh logs`` process.
class Rates(namedtuple("Rates", "input output cache_read cache_write")):
    """USD per million tokens for one model."""

    __slots__ = ()
    cost_usd = cost_usd  # the price in USD of one call's token usage


class Prices:
    """A dated price table (what ``config.PriceTable`` holds, as plain data)."""

    __slots__ = ("as_of", "models")

    def __init__(self, as_of: str, models: dict[str, Rates]):
        self.as_of = as_of
        self.models = models

    def price_for(self, model: str) -> Rates | None:
        """The price row of ``model``, or None when the table does not know it."""
        return self.models.get(model)


def price_date(value: Any) -> str | None:
    """A price table's ``as_of`` as ``YYYY-MM-DD``: a quoted date that exists, or TOML's own
    date (or date-time); None for anything else."""
    from datetime import date, datetime

    if isinstance(value, datetime):
        value = value.date()
    if isinstance(value, date):
        return value.isoformat()
    if not isinstance(value, str) or not re.match(_DATE, value):
        return None
    try:
        date.fromisoformat(value)
    except ValueError:
        return None
    return value


def plain_prices(project: Mapping[str, Any]) -> Prices | None:
    """The price table in use for a project whose raw config table is ``project``: the
    built-in rows, the user's stored table over them, the project's ``[prices]`` over that.
    None when any of it is not plainly valid (see the module doc): then ask ``config``."""
    as_of, rows = DEFAULT_PRICES_AS_OF, dict(DEFAULT_PRICE_ROWS)
    path = user_prices_path()
    if path.is_file():
        stored = _stored_table(path)
        if stored is None:
            return None
        as_of, rows = stored[0], {**rows, **stored[1]}
    if "prices" in project:
        own = project["prices"]
        if not isinstance(own, dict) or not set(own) <= {"as_of", "models"}:
            return None
        if "as_of" in own:
            as_of = price_date(own["as_of"])
        models = own.get("models", {})
        if as_of is None or not isinstance(models, dict):
            return None
        for name, row in models.items():
            rows[name] = _row(name, row)
    if any(row is None for row in rows.values()):
        return None
    return Prices(as_of, {name: Rates(**row) for name, row in rows.items()})


def _stored_table(path: Path) -> tuple[str, dict[str, dict | None]] | None:
    """The date and rows of the user's stored table when it is the JSON ``mesh prices`` writes."""
    try:
        if path.stat().st_size > PRICE_FILE_MAX_BYTES:
            return None
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.lstrip().startswith("{"):
        return None
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or set(data) != {"as_of", "models"}:
        return None
    as_of, models = price_date(data["as_of"]), data["models"]
    if as_of is None or not isinstance(models, dict) or not models:
        return None
    return as_of, {name: _row(name, row) for name, row in models.items()}


def _row(name: Any, row: Any) -> dict[str, float] | None:
    """A row's four rates as floats, or None unless every rate is a plain finite number >= 0."""
    if not isinstance(name, str) or not re.match(MODEL_NAME, name) or not isinstance(row, dict):
        return None
    if not set(row) <= set(_RATES) or "input" not in row or "output" not in row:
        return None
    row = with_cache_rates(row)
    out = {}
    for key in _RATES:
        value = row.get(key)
        if type(value) not in (int, float) or not 0 <= value < 1e300:  # NaN fails the comparison
            return None
        out[key] = float(value)
    return out
