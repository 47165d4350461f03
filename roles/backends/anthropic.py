"""The ``anthropic`` backend: the Messages API through the official SDK (``anthropic`` 2.x).

One call of the backend is one worker answer:

- **Model** per role from ``config.model_for(role)``; the key from ``ANTHROPIC_API_KEY``
  (or the ``api_key`` option), never logged or stored; ``ANTHROPIC_BASE_URL`` is honoured
  by the SDK. The SDK is imported here, and this module only when the backend is chosen,
  so ``mesh --help`` never loads it.
- **Retries** are the SDK's own (408/409/429/5xx/529 and connection errors, with backoff
  and ``retry-after``), ``max_retries`` and ``timeout`` from ``[anthropic]``. There is no
  loop on top: what is left after them is ``no_response`` or ``timeout`` for the engine,
  whose profile rules (one retry, one strict follow-up) are the only other retries.
- **Structured output**: the round's schema (in strict mode the envelope around it) goes
  out as ``output_config.format`` (``json_schema``), made API-compatible by the SDK's own
  ``transform_schema``. That is the SDK's non-beta structured-output path in 2.x
  (``output_format`` is deprecated there), it works on plain ``messages.create`` and it
  leaves tools free for reading the repository, which a forced answer tool would not.
  The reply is checked with the same pydantic model before it is returned; the engine
  parses the text again and owns the follow-up, so a mismatch only adds a ``detail``.
- **stop_reason first**: ``max_tokens`` and ``refusal`` come back as those error kinds,
  an exhausted tool allowance or any other stop as ``no_response``.
- **Prompt caching**: ``prompt.shared`` is the system prompt, identical for every role of
  a round, its last block carrying a ``cache_control`` breakpoint; ``prompt.role_part``
  follows as the user message. The shared text is sent as two blocks, each with a
  breakpoint: the task part (system text, task metadata, repository context: the same in
  every round until the context changes) and the round part (from ``# Round:`` on), so a
  round re-reads the task part that the rounds before it wrote. The tools (identical for
  all roles) sit before them in the cache order. During tool turns one more breakpoint
  moves to the newest tool result (three in all; the API allows four).
- **Tools**: with a worktree, the read-only ``read_file``, ``list_dir`` and ``grep`` of
  ``roles.backends.tools``, at most ``max_tool_turns`` tool turns per call; the last
  request forbids tools (``tool_choice: none``) so the model must answer. ``max_tokens``
  bounds the output of the whole call, tool turns included, and tool results are capped
  per call too, so a call's cost has a known ceiling.
- **Usage and cost** of every request of a call are summed into ``WorkerResponse.usage``,
  priced with ``config.prices`` (USD per million tokens, dated ``prices.as_of``).
- **Budgets**: ``worst_case`` is an upper bound of one call, for the engine's check.
- **Batch mode** (``[anthropic] batch = true``): every request goes out through the Message
  Batches API instead, the requests made at the same time (a round's critics or voters, the
  next tool turns) gathered into one batch by ``roles.backends.batching``; the call waits
  for its result and goes on as above. Usage and ``worst_case`` are priced at the batch
  price, half the price table's. With ``batch_journal`` (a file), a run killed while its
  batch ran takes that batch's answers when resumed (``roles.backends.batch_journal``).

API errors never escape as tracebacks: an answer the run can recover from is a
``WorkerResponse`` error; only what a user must fix (no key, a key the API refuses,
billing, an unknown model or endpoint) raises ``BackendError``.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

# The rounds whose prompt offers an outbox: the schema must offer it in the same rounds.
from ..schemas import answer_model
from .base import Backend, BackendError, Usage, WorkerRequest, WorkerResponse
from .batch_journal import BatchJournal
from .batching import BATCH_PRICE_FACTOR, MessageBatches
# The run's config is passed in, typed by what a backend reads of it: roles/ never imports
# the orchestrator.
from .settings import BackendConfig
from .tools import MAX_OUTPUT_CHARS, TOOL_DEFINITIONS, RepoTools

__all__ = ["AnthropicBackend", "output_model", "CHARS_PER_TOKEN_BOUND"]

# Characters per token assumed by ``worst_case``. Real tokenisation gives about four for
# English prose and somewhat fewer for code; three keeps the estimate an upper bound.
CHARS_PER_TOKEN_BOUND = 3
# Everything a request carries besides the prompt text and the schema: message framing,
# the structured-output instructions the API adds, tool-use scaffolding.
_REQUEST_OVERHEAD_TOKENS = 600
# Tool results over one whole call, on top of the per-result cap of the tools module:
# keeps a long tool session (and the worst case) bounded.
MAX_TOOL_OUTPUT_CHARS_PER_CALL = 4 * MAX_OUTPUT_CHARS
MAX_TOOL_CALLS_PER_TURN = 8
_DETAIL_CHARS = 500
_EPHEMERAL = {"type": "ephemeral"}
# HTTP statuses that no retry can cure: the user must fix the key, billing, or the model
# name / base URL in config.
_USER_FIX_STATUSES = {
    401: "the Anthropic API refused the API key (HTTP 401); check ANTHROPIC_API_KEY",
    402: "the Anthropic API refused the request for billing reasons (HTTP 402); check the account",
    403: "the API key may not use this model or endpoint (HTTP 403); check ANTHROPIC_API_KEY and models.*",
    404: "the Anthropic API does not know the model {model!r} or the endpoint (HTTP 404); check models.* and "
         "ANTHROPIC_BASE_URL",
}


class AnthropicBackend(Backend):
    """Answer requests with the Messages API. One SDK client, shared by all threads."""

    name = "anthropic"

    def __init__(self, config: BackendConfig | None = None, *, api_key: str | None = None,
                 batch_journal: str | os.PathLike[str] | None = None):
        if config is None:
            raise BackendError("the anthropic backend needs the run's config (models, prices, anthropic settings)")
        key = (api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY", "")).strip()
        if not key:
            raise BackendError("the anthropic backend needs an API key: set ANTHROPIC_API_KEY")
        try:
            import anthropic
        except ImportError as exc:
            raise BackendError(f"the anthropic backend needs the anthropic SDK (pip install 'anthropic>=2.12,<3'):"
                               f" {exc}") from exc
        self._config = config
        self._settings = config.anthropic
        if config.budget.max_usd is not None:
            unpriced = sorted({config.model_for(role) for role in config.roles}
                              - set(config.prices.models))
            if unpriced:
                raise BackendError(f"budget.max_usd needs a price for every model; add [prices.models] rows for"
                                   f" {', '.join(unpriced)}")
        self._sdk = anthropic
        # Kept only to redact it from diagnostics; it is never written anywhere.
        self._secret = key
        # An explicit key keeps the SDK from looking for other credentials (profiles,
        # federation) that the user did not choose for mesh.
        self._client = anthropic.Anthropic(api_key=key, max_retries=self._settings.max_retries,
                                           timeout=self._settings.timeout_s)
        self._batches: MessageBatches | None = None
        if self._settings.batch:
            settings = self._settings
            self._batches = MessageBatches(self._client, poll_s=settings.batch_poll_s,
                                           timeout_s=settings.batch_timeout_s, window_s=settings.batch_window_s,
                                           guarded=self._guarded,
                                           failed=lambda kind, detail: self._failed(kind, detail, None),
                                           journal=BatchJournal(Path(batch_journal)) if batch_journal else None)

    # ------------------------------------------------------------------ calls

    def call(self, request: WorkerRequest) -> WorkerResponse:
        """Ask the role's model, running read-only tools in between; see the module doc."""
        started = time.monotonic()
        model = self._model(request.role)
        tools = RepoTools(request.worktree) if self._offers_tools(request) else None
        params: dict[str, Any] = {"model": model, "system": _system(request.prompt.shared, request.round)}
        checker = None
        if request.schema is not None:
            checker, schema = output_model(request.schema, request.round, request.strict)
            params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        if tools is not None:
            params["tools"] = TOOL_DEFINITIONS
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": request.prompt.role_part}]}]
        usage = Usage()
        tool_turns = 0
        tool_chars_left = MAX_TOOL_OUTPUT_CHARS_PER_CALL
        while True:
            # max_tokens bounds the whole answer, tool turns included: what earlier turns
            # used is not available to later ones (and worst_case can rely on it).
            params["max_tokens"] = self._settings.max_tokens - usage.output_tokens
            if tools is not None:
                # The last request allowed forbids tools, so the model has to answer.
                last = tool_turns >= self._settings.max_tool_turns
                params["tool_choice"] = {"type": "none"} if last else {"type": "auto"}
            outcome = self._create(params, messages, model)
            if isinstance(outcome, WorkerResponse):
                outcome.usage = usage + outcome.usage
                outcome.duration_s = time.monotonic() - started
                return outcome
            message = outcome
            usage = usage + self._usage(model, getattr(message, "usage", None))
            content = list(getattr(message, "content", None) or [])
            stop = getattr(message, "stop_reason", None)
            if stop == "tool_use" and tools is not None and tool_turns < self._settings.max_tool_turns:
                results, tool_chars_left = _run_tools(tools, content, tool_chars_left)
                _move_breakpoint(messages)
                messages.append({"role": "assistant", "content": _assistant_blocks(content)})
                messages.append({"role": "user", "content": results})
                tool_turns += 1
                if usage.output_tokens < self._settings.max_tokens:
                    continue
                error, text = "max_tokens", None
                detail = f"tool turns used all of max_tokens={self._settings.max_tokens}"
            else:
                error, detail, text = _verdict(stop, content, checker, tool_turns, params["max_tokens"])
            return WorkerResponse(text=text, error=error, usage=usage,
                                  model=getattr(message, "model", None) or model,
                                  duration_s=time.monotonic() - started, detail=self._clean(detail))

    def _create(self, params: dict[str, Any], messages: list[dict[str, Any]], model: str) -> Any:
        """One Messages API request (the SDK retries inside), or in batch mode one request of
        the next Message Batch; an error becomes a response."""
        if self._batches is None:
            return self._guarded(lambda: self._client.messages.create(messages=messages, **params), model)
        # A copy: the call goes on changing params and messages for its next tool turn.
        outcome = self._batches.submit(copy.deepcopy({**params, "messages": messages}))
        if isinstance(outcome, WorkerResponse):
            outcome.model, outcome.detail = model, self._clean(outcome.detail)
        return outcome

    def _guarded(self, send: Any, model: str) -> Any:
        """What ``send()`` (an SDK request) returns, or its API error as a failed response;
        the errors a user must fix raise ``BackendError``."""
        sdk = self._sdk
        try:
            return send()
        except sdk.APIStatusError as exc:
            status = exc.status_code
            if status in _USER_FIX_STATUSES:
                raise BackendError(_USER_FIX_STATUSES[status].format(model=model)) from None
            kind = "timeout" if status in (408, 504) else "no_response"
            return self._failed(kind, f"HTTP {status} {_error_type(exc)}: {exc.message}", model)
        except sdk.APITimeoutError:
            return self._failed("timeout", f"no answer within {self._settings.timeout_s:g}s"
                                           f" ({self._settings.max_retries} SDK retries)", model)
        except sdk.APIConnectionError as exc:
            return self._failed("no_response", f"connection failed ({self._settings.max_retries} SDK retries):"
                                               f" {exc.message}", model)
        except (sdk.APIError, ValueError) as exc:
            # A body that is not the API's JSON (a proxy's error page, a cut-off answer).
            return self._failed("no_response", f"malformed API response: {type(exc).__name__}: {exc}", model)

    def _offers_tools(self, request: WorkerRequest) -> bool:
        """Tools need a worktree to read, and a tool turn to spend."""
        return request.worktree is not None and self._settings.max_tool_turns > 0

    def _failed(self, error: str, detail: str, model: str | None) -> WorkerResponse:
        return WorkerResponse(text=None, error=error, model=model, detail=self._clean(detail))

    def _clean(self, detail: str | None) -> str | None:
        """One line, bounded, and never the key (an error body may echo a header)."""
        if detail is None:
            return None
        line = " ".join(detail.replace(self._secret, "[REDACTED]").split())
        return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 3] + "..."

    # ------------------------------------------------------------------ usage and budgets

    def _model(self, role: str) -> str:
        try:
            return self._config.model_for(role)
        except Exception as exc:  # noqa: BLE001 - the config's error for a role it has no model for
            raise BackendError(str(exc)) from None

    def _usage(self, model: str, reported: Any) -> Usage:
        if reported is None:
            return Usage()
        usage = Usage(
            input_tokens=int(getattr(reported, "input_tokens", 0) or 0),
            output_tokens=int(getattr(reported, "output_tokens", 0) or 0),
            cache_read_tokens=int(getattr(reported, "cache_read_input_tokens", 0) or 0),
            cache_write_tokens=int(getattr(reported, "cache_creation_input_tokens", 0) or 0),
        )
        return self._discounted(usage.priced(self._config.prices.price_for(model)))

    def _discounted(self, usage: Usage) -> Usage:
        """The batch price in batch mode (half the price table's), else ``usage`` as it is."""
        if self._batches is not None:
            usage.cost_usd *= BATCH_PRICE_FACTOR
        return usage

    def worst_case(self, request: WorkerRequest) -> Usage:
        """An upper bound of the call's usage, for the engine's budget check.

        The call makes at most one request plus one per allowed tool turn. Each request
        sends the whole prompt (counted at ``CHARS_PER_TOKEN_BOUND``), the schema and tool
        definitions, and at most every tool result the call allows and every earlier
        answer (``max_tokens`` bounds the call's output as a whole). Output is at most
        ``max_tokens``. Input is priced at the dearer of the input and cache-write rates,
        since whether the prefix is cached cannot be known in advance.
        """
        settings = self._settings
        model = self._model(request.role)
        fixed_chars = len(request.prompt.shared) + len(request.prompt.role_part)
        if request.schema is not None:
            fixed_chars += len(json.dumps(output_model(request.schema, request.round, request.strict)[1]))
        requests = 1
        tool_tokens = 0
        if self._offers_tools(request):
            fixed_chars += len(json.dumps(TOOL_DEFINITIONS))
            requests += settings.max_tool_turns
            tool_tokens = math.ceil(MAX_TOOL_OUTPUT_CHARS_PER_CALL / CHARS_PER_TOKEN_BOUND)
        prompt_tokens = math.ceil(fixed_chars / CHARS_PER_TOKEN_BOUND) + _REQUEST_OVERHEAD_TOKENS
        input_tokens = requests * prompt_tokens + (requests - 1) * (tool_tokens + settings.max_tokens)
        output_tokens = settings.max_tokens
        worst = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
        price = self._config.prices.price_for(model)
        if price is not None:
            worst.cost_usd = (input_tokens * max(price.input, price.cache_write)
                              + output_tokens * price.output) / 1_000_000
        return self._discounted(worst)

    def close(self) -> None:
        """Cancel the batches still running (batch mode), close the SDK client's
        connections; idempotent."""
        if self._batches is not None:
            self._batches.close()
        self._client.close()


# ---------------------------------------------------------------------- schemas


@functools.lru_cache(maxsize=64)
def output_model(schema: type[BaseModel], round_name: str, strict: bool) -> tuple[type[BaseModel], dict[str, Any]]:
    """The pydantic model a reply must match (``roles.schemas.answer_model``) and its JSON
    schema in the API's dialect."""
    from anthropic import transform_schema

    model = answer_model(schema, round_name, strict)
    return model, transform_schema(model.model_json_schema())


def _schema_mismatch(checker: type[BaseModel] | None, text: str) -> str | None:
    """None when ``text`` is JSON matching ``checker``; else a one-line reason."""
    if checker is None:
        return None
    try:
        checker.model_validate_json(text)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        first = errors[0]
        where = ".".join(str(part) for part in first["loc"]) or "reply"
        kind = "not JSON" if first["type"] == "json_invalid" else f"{where}: {first['msg']}"
        return f"reply does not match the {checker.__name__} schema ({kind}); the engine decides what follows"
    return None


def _verdict(stop: str | None, content: list[Any], checker: type[BaseModel] | None, tool_turns: int,
             max_tokens: int) -> tuple[str | None, str | None, str | None]:
    """(error, detail, text) of a final answer, judged by its stop_reason first."""
    text = "".join(getattr(block, "text", "") or "" for block in content if getattr(block, "type", None) == "text")
    if stop == "max_tokens":
        return "max_tokens", f"cut off at max_tokens={max_tokens}", text or None
    if stop == "refusal":
        return "refusal", "the model declined to answer", text or None
    if stop == "tool_use":
        return "no_response", f"still asking for tools after {tool_turns} tool turn(s)", None
    if stop not in ("end_turn", "stop_sequence"):
        return "no_response", f"unexpected stop_reason {stop!r}", None
    if not text.strip():
        return "no_response", "the answer had no text", None
    return None, _schema_mismatch(checker, text), text


# ---------------------------------------------------------------------- messages and tools


def _system(shared: str, round_name: str) -> list[dict[str, Any]]:
    """The shared prefix as the system prompt: the task part and the round part, each
    ending in a cache breakpoint (one block when the round heading is not found)."""
    if not shared:
        return []
    # The round template opens with this heading; it is searched from the end because the
    # task part (a file in the context pack) could quote it too.
    headings = list(re.finditer(rf"\n# Round: {re.escape(round_name)}(?=[ \n])", shared))
    cut = headings[-1].start() if headings else 0
    parts = [shared[:cut], shared[cut:]] if cut > 0 else [shared]
    return [{"type": "text", "text": part, "cache_control": dict(_EPHEMERAL)} for part in parts]


def _assistant_blocks(content: list[Any]) -> list[dict[str, Any]]:
    """The assistant's tool-use turn, sent back as it came (text and tool_use blocks)."""
    blocks: list[dict[str, Any]] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text" and block.text:
            blocks.append({"type": "text", "text": block.text})
        elif kind == "tool_use":
            blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
    return blocks


def _run_tools(tools: RepoTools, content: list[Any], chars_left: int) -> tuple[list[dict[str, Any]], int]:
    """Run each tool_use block (bounded in number and output); one tool_result per block."""
    results: list[dict[str, Any]] = []
    calls = [block for block in content if getattr(block, "type", None) == "tool_use"]
    for position, block in enumerate(calls):
        if position >= MAX_TOOL_CALLS_PER_TURN:
            text, is_error = f"at most {MAX_TOOL_CALLS_PER_TURN} tool calls per turn; this one was not run", True
        elif chars_left <= 0:
            text, is_error = "the tool output allowance of this answer is used up; answer now", True
        else:
            result = tools.run(block.name, block.input)
            text, is_error = result.content, result.is_error
            if len(text) > chars_left:
                text = text[:chars_left] + "\n[cut: the tool output allowance of this answer is used up]"
            chars_left -= len(text)
        entry: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.id, "content": text}
        if is_error:
            entry["is_error"] = True
        results.append(entry)
    if results:
        # The newest tool result carries the moving breakpoint: the next turn re-reads
        # everything before it from the cache.
        results[-1]["cache_control"] = dict(_EPHEMERAL)
    return results, chars_left


def _move_breakpoint(messages: list[dict[str, Any]]) -> None:
    """Drop the previous turn's moving breakpoint (the API allows four in all)."""
    for message in messages:
        for block in message["content"]:
            if block.get("type") == "tool_result":
                block.pop("cache_control", None)


def _error_type(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            return error["type"]
    return "error"
