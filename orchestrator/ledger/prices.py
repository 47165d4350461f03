"""``mesh prices``: the price table in use, and the user's stored table that keeps it current.

``mesh prices --update-from FILE`` checks a JSON or TOML price file against the config's
``PriceTable`` model and stores its rows, as JSON, at ``config.user_prices_path()``
(``$XDG_CONFIG_HOME/mesh/prices.json``). Config loading lays that table over the built-in
rows for every project of this user, and a project's own ``[prices]`` over it. The file is
replaced in one rename: a failed update leaves the previous table whole.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.config import (
    DEFAULT_PRICES_AS_OF,
    PriceTable,
    price_file_data,
    read_price_file,
    user_price_table,
    user_prices_path,
)
from orchestrator.safe_text import clip, render

__all__ = ["install_prices", "describe_prices", "render_prices"]


def install_prices(source: Path, *, dest: Path | None = None) -> tuple[PriceTable, Path, list[str]]:
    """Check the price file ``source`` and store its rows (cache rates filled in) at ``dest``
    (default: ``user_prices_path()``). Returns the table now in effect without a project
    (built-in rows with the stored ones over them), where it was stored and the models the
    file prices. ConfigError with one line for a file that is not a valid, dated price
    table; nothing is written then."""
    data = price_file_data(source)
    table = read_price_file(source)
    target = Path(dest) if dest is not None else user_prices_path()
    stored = {"as_of": table.as_of,
              "models": {name: table.models[name].model_dump() for name in sorted(data["models"])}}
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".prices-", suffix=".json", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(stored, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return table, target, list(stored["models"])


def describe_prices(prices: PriceTable) -> dict[str, Any]:
    """The table in use (``config.prices``) as ``mesh prices --json`` prints it: ``as_of``,
    ``models`` (USD per million tokens), the user's stored table (``stored_file``, None when
    there is none), the built-in table's date, and the rows the project's own ``[prices]``
    sets (``project_rows``)."""
    path = user_prices_path()
    base = user_price_table()
    return {
        "as_of": prices.as_of,
        "models": {name: row.model_dump() for name, row in sorted(prices.models.items())},
        "stored_file": str(path) if path.is_file() else None,
        "built_in_as_of": DEFAULT_PRICES_AS_OF,
        "project_rows": sorted(name for name, row in prices.models.items() if base.models.get(name) != row),
    }


def render_prices(description: dict[str, Any], *, width: int = 100, color: bool = False) -> str:
    """``describe_prices``'s result as a text table headed by its date."""
    from rich.table import Table

    table = Table(title=f"prices as of {description['as_of']}, USD per million tokens", title_justify="left",
                  box=None, pad_edge=False)
    table.add_column("model")
    for column in ("input", "output", "cache read", "cache write"):
        table.add_column(column, justify="right")
    for name, row in description["models"].items():
        table.add_row(clip(name, 60), *(f"{row[k]:g}" for k in ("input", "output", "cache_read", "cache_write")))
    stored = description["stored_file"]
    source = (f"stored table: {stored} (over the built-in table of {description['built_in_as_of']})" if stored
              else f"built-in table of {description['built_in_as_of']}; "
                   f"update it with 'mesh prices --update-from FILE'")
    if description["project_rows"]:
        source += "\nthe project's [prices] sets: " + ", ".join(clip(n, 60) for n in description["project_rows"])
    return render(table, width=width, color=color) + "\n" + source
