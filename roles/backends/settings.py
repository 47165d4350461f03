"""What a model backend reads of the run's configuration, as structural types.

The orchestrator's ``MeshConfig`` satisfies ``BackendConfig`` as it is (no base class, no
registration): a backend is typed with these protocols, so ``roles`` never imports the
layer that builds the configuration. Members are read-only properties, so a plain
attribute of the configuration (a pydantic field) satisfies them. A backend that needs
one more setting names it here first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

__all__ = ["AnthropicSettings", "BackendConfig", "BudgetSettings", "LlmSettings", "Price", "Prices"]


class Price(Protocol):
    """One model's price row: USD per million tokens of each kind."""

    @property
    def input(self) -> float: ...

    @property
    def output(self) -> float: ...

    @property
    def cache_read(self) -> float: ...

    @property
    def cache_write(self) -> float: ...

    def cost_usd(self, *, input_tokens: int = 0, output_tokens: int = 0, cache_read_tokens: int = 0,
                 cache_write_tokens: int = 0) -> float:
        """The price in USD of one call's token usage."""
        ...


class Prices(Protocol):
    """``[prices]``: the models priced, and the row of one model (None when unpriced)."""

    @property
    def models(self) -> Collection[str]: ...

    def price_for(self, model: str) -> Price | None:
        """The price row of ``model``, or None when the table does not know it."""
        ...


class BudgetSettings(Protocol):
    """``[budget]``: a backend refuses to start when it could not keep to a ceiling set here."""

    @property
    def max_usd(self) -> float | None: ...

    @property
    def max_tokens(self) -> int | None: ...


class AnthropicSettings(Protocol):
    """``[anthropic]``: the SDK's retries and timeout, the output and tool-turn limits, and
    batch mode (the Message Batches API): its switch, gathering window, poll interval and
    total wait."""

    @property
    def max_retries(self) -> int: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def max_tool_turns(self) -> int: ...

    @property
    def batch(self) -> bool: ...

    @property
    def batch_window_s(self) -> float: ...

    @property
    def batch_poll_s(self) -> float: ...

    @property
    def batch_timeout_s(self) -> float: ...


class LlmSettings(Protocol):
    """``[llm]``: the call timeout and each model's options."""

    @property
    def timeout_s(self) -> float: ...

    @property
    def options(self) -> Mapping[str, Mapping[str, Any]]: ...


class BackendConfig(Protocol):
    """The run's configuration as the anthropic and llm backends read it."""

    @property
    def roles(self) -> Sequence[str]: ...

    @property
    def prices(self) -> Prices: ...

    @property
    def budget(self) -> BudgetSettings: ...

    @property
    def anthropic(self) -> AnthropicSettings: ...

    @property
    def llm(self) -> LlmSettings: ...

    def model_for(self, role: str) -> str:
        """The model name configured for ``role``; an error for a role it has no model for."""
        ...
