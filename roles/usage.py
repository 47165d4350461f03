"""The tokens and cost of worker calls: a plain dataclass, importable without the backends (the
orchestrator's outcomes and read-only views carry it without loading pydantic or jinja2).

May import: the standard library only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Usage"]


@dataclass
class Usage:
    """Tokens and cost of one call, or of several summed with ``+``."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )

    def to_dict(self) -> dict[str, Any]:
        """The usage as a JSON-ready dict with the field names above."""
        return asdict(self)

    def priced(self, price: Any) -> Usage:
        """Set ``cost_usd`` from ``price`` (a price row of the run's config, whose
        ``cost_usd(**token counts)`` gives dollars); a None price leaves it as it is."""
        if price is not None:
            self.cost_usd = price.cost_usd(input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                                           cache_read_tokens=self.cache_read_tokens,
                                           cache_write_tokens=self.cache_write_tokens)
        return self
