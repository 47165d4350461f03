"""The ``llm`` backend: any model that Simon Willison's ``llm`` library and its plugins know.

One call of the backend is one ``model.prompt(...)`` of the Python API:

- **Model names.** ``models.<role>`` is looked up as llm looks names up: a model id or an
  alias (``llm models``, ``llm aliases``), so ``"gpt-4.1"``, ``"4o-mini"`` or an Ollama id
  such as ``"qwen3:8b"`` work as they are. A name that llm does not know and that reads
  ``PROVIDER:NAME`` (``"ollama:qwen3"``) names NAME among the models of the llm plugin
  PROVIDER: its entry-point or package name without the ``llm-``/``llm_`` prefix
  (``ollama``, ``gemini``, ``anthropic``; ``openai`` for llm's built-in OpenAI models). NAME
  matches a model id, an alias, or the id ``PROVIDER/NAME`` (how llm-anthropic, llm-mistral
  and others spell theirs). Every role's model is resolved when the backend starts, so an
  unknown name or a missing key is one message before any request.
- **Structured output** where the model has it (``model.supports_schema``): the round's
  artifact schema (in strict mode the envelope around it, with ``outbox`` in the rounds
  whose prompt offers one), with every ``$ref`` inlined because not every plugin resolves
  them. The reply is checked against the same pydantic model; a mismatch only adds a
  ``detail``. Models without schemas get the prompt alone, whose answer format the
  templates already spell out; either way the engine parses the text with the profile's
  tolerant rules and owns the one strict follow-up (the re-ask), so this backend never
  re-asks on its own.
- **Prompt shape.** ``prompt.shared`` is the system prompt and ``prompt.role_part`` the
  prompt, so the roles of a round share one prefix for providers that cache prefixes.
- **Options** per model name from ``[llm.options."NAME"]``, checked by the model's own
  Options class when the backend starts (an unknown option is an error, not a default).
- **Timeouts.** ``llm.timeout_s`` bounds each call, whatever the plugin does about
  timeouts: the call runs in a daemon thread and a call past the limit is ``timeout``.
  The abandoned request may still finish (and be billed) in the background.
- **Usage** from ``response.usage()``: input, output, and the cache figures a plugin
  reports in its details (OpenAI's ``cached_tokens``, Gemini's ``cachedContentTokenCount``,
  llm-anthropic's ``cache_read_input_tokens``/``cache_creation_input_tokens``), mapped to
  mesh's meaning, where ``input_tokens`` counts uncached input only. Priced from
  ``config.prices`` by the configured name, else the llm model id, else the id the
  provider reports having used.
- **Keys** stay llm's business: llm reads them from its ``keys.json`` or the plugin's
  environment variable. This backend only asks llm whether a key is there, and removes every
  key llm holds, in each encoded form the scrubber knows, from the diagnostics it returns.
- **No llm log.** Only llm's CLI writes ``logs.db``; the Python API used here never does,
  and this backend never calls ``log_to_db``. Every call is logged in mesh's calls table.

Errors never escape as tracebacks: an unknown model, a missing key, and provider answers no
retry can cure (HTTP 401, 402, 403, 404) raise ``BackendError``; a provider timeout (or
HTTP 408/504) is ``timeout``; any other failure is ``no_response`` with a one-line detail.
"""

from __future__ import annotations

import copy
import json
import math
import threading
import time
from typing import Any

from pydantic import BaseModel, ValidationError

from redact.known import MIN_SECRET_LEN, encoded_forms

# The rounds whose prompt offers an outbox: the schema must offer it in the same rounds.
from ..schemas import answer_model
from .base import Backend, BackendError, Usage, WorkerRequest, WorkerResponse
# The run's config is passed in, typed by what a backend reads of it: roles/ never imports
# the orchestrator.
from .settings import BackendConfig

__all__ = ["LlmBackend", "OUTPUT_LIMIT_OPTIONS", "output_schema", "provider_name", "resolve_model",
           "usage_from_llm"]

# Characters per token assumed by ``worst_case``: an upper bound (about four for English).
CHARS_PER_TOKEN_BOUND = 3
# Message framing and the structured-output instructions a provider adds to a request.
_REQUEST_OVERHEAD_TOKENS = 600
_DETAIL_CHARS = 500
# The option names plugins use for the output limit of one answer (OpenAI and
# llm-anthropic, llm-gemini, OpenAI reasoning models, llm-ollama): a budget needs one.
OUTPUT_LIMIT_OPTIONS = ("max_tokens", "max_output_tokens", "max_completion_tokens", "num_predict")
# Provider statuses no retry can cure: the user must fix the key, the account or the name.
_USER_FIX_STATUSES = {
    401: "the provider refused the API key of model {model!r} (HTTP 401); check `llm keys` or its key variable",
    402: "the provider refused a request to model {model!r} for billing reasons (HTTP 402); check the account",
    403: "the API key may not use model {model!r} (HTTP 403); check `llm keys` and models.*",
    404: "the provider does not know model {model!r} (HTTP 404); check models.* (for Ollama: `ollama pull`)",
}
_TIMEOUT_STATUSES = (408, 504)


class LlmBackend(Backend):
    """Answer requests with ``llm`` models. Models are resolved once; calls are independent."""

    name = "llm"

    def __init__(self, config: BackendConfig | None = None):
        if config is None:
            raise BackendError("the llm backend needs the run's config (models, prices, llm settings)")
        try:
            import llm
        except ImportError as exc:
            raise BackendError(f"the llm backend needs the llm library (pip install 'llm>=0.36,<1'): {exc}") from exc
        self._llm = llm
        self._config = config
        self._settings = config.llm
        self._names: dict[str, str] = {}  # role -> model name as configured
        self._models: dict[str, Any] = {}  # model name as configured -> llm model
        for role in config.roles:
            name = _configured_model(config, role)
            self._names[role] = name
            if name not in self._models:
                self._models[name] = resolve_model(name, setting=f"models.{role}")
        self._options = self._check_options()
        self._secret_forms = self._check_keys()
        self._output_limits = {name: limit for name in self._models
                               if (limit := _output_limit(self._options.get(name, {}))) is not None}
        self._check_budget()

    # ------------------------------------------------------------------ set-up checks

    def _check_options(self) -> dict[str, dict[str, Any]]:
        """``[llm.options]`` validated by each model's Options class."""
        checked: dict[str, dict[str, Any]] = {}
        for name, options in self._settings.options.items():
            if name not in self._models:
                raise BackendError(f"llm.options names model {name!r}, which no role uses (models.* has "
                                   f"{', '.join(sorted(self._models))})")
            model = self._models[name]
            try:
                model.Options(**options)
            except ValidationError as exc:
                first = exc.errors(include_url=False, include_input=False)[0]
                where = ".".join(str(part) for part in first["loc"]) or "options"
                raise BackendError(f"llm.options.{name!r}: {where}: {first['msg']} (model {model.model_id})") from None
            checked[name] = dict(options)
        return checked

    def _check_keys(self) -> tuple[str, ...]:
        """Fail now when a model needs a key llm does not have; return what to redact."""
        llm = self._llm
        secrets: set[str] = set()
        for name, model in self._models.items():
            if not getattr(model, "needs_key", None):
                continue
            try:
                key = model.get_key()
            except llm.NeedsKeyException as exc:
                raise BackendError(f"model {name!r} needs an API key: {_one_line(str(exc))}") from None
            except (OSError, ValueError) as exc:  # an unreadable or malformed keys.json
                raise BackendError(f"cannot read llm's keys for model {name!r}: {_one_line(str(exc))}") from None
            if isinstance(key, str):
                secrets.add(key)
        try:
            # llm writes a "// Note" entry into keys.json; it is not a key.
            secrets.update(value for name, value in llm.load_keys().items()
                           if isinstance(value, str) and not str(name).startswith("//"))
        except (OSError, ValueError, AttributeError) as exc:
            raise BackendError(f"cannot read llm's keys file: {_one_line(str(exc))}") from None
        forms: dict[str, None] = {}
        for secret in sorted(secrets):
            if len(secret) >= MIN_SECRET_LEN:
                forms.update(dict.fromkeys(encoded_forms(secret)))
        return tuple(sorted(forms, key=lambda form: (-len(form), form)))

    def _check_budget(self) -> None:
        """A budget needs a ceiling on every call: an output limit, and prices for max_usd."""
        budget = self._config.budget
        if budget.max_usd is None and budget.max_tokens is None:
            return
        unbounded = sorted(name for name in self._models if name not in self._output_limits)
        if unbounded:
            raise BackendError(f"a budget needs an output limit for every model: set one of "
                               f"{', '.join(OUTPUT_LIMIT_OPTIONS)} (the one its plugin takes) under "
                               f"[llm.options.\"NAME\"] for {', '.join(unbounded)}")
        if budget.max_usd is not None:
            unpriced = sorted(name for name, model in self._models.items() if self._price(name, model.model_id) is None)
            if unpriced:
                raise BackendError(f"budget.max_usd needs a price for every model; add [prices.models] rows for"
                                   f" {', '.join(unpriced)}")

    # ------------------------------------------------------------------ calls

    def call(self, request: WorkerRequest) -> WorkerResponse:
        """Ask the role's model once; see the module doc for what each outcome becomes."""
        started = time.monotonic()
        name, model = self._model(request.role)
        checker, schema = None, None
        if request.schema is not None and model.supports_schema:
            checker, schema = output_schema(request.schema, request.round, request.strict)
        outcome = self._prompt(model, request, schema, self._options.get(name, {}))
        duration = time.monotonic() - started
        if isinstance(outcome, BaseException):
            return self._failure(outcome, name, model, duration)
        text, reported, resolved = outcome
        model_id = resolved or model.model_id
        usage = self._priced(usage_from_llm(reported), name, model, resolved)
        if not text.strip():
            return WorkerResponse(text=None, error="no_response", usage=usage, model=model_id, duration_s=duration,
                                  detail="the answer had no text")
        return WorkerResponse(text=text, usage=usage, model=model_id, duration_s=duration,
                              detail=self._clean(_schema_mismatch(checker, text)))

    def _prompt(self, model: Any, request: WorkerRequest, schema: dict[str, Any] | None,
                options: dict[str, Any]) -> tuple[str, Any, str | None] | BaseException:
        """Run the prompt in a daemon thread, waiting at most ``llm.timeout_s``.

        Returns (text, usage, resolved model id), or the exception the plugin raised, or
        ``TimeoutError`` when the call is still running at the limit.
        """
        box: dict[str, Any] = {}

        def ask() -> None:
            try:
                response = model.prompt(request.prompt.role_part, system=request.prompt.shared or None,
                                        schema=schema, stream=False, options=dict(options) or None)
                text = response.text()
                box["answer"] = (text if isinstance(text, str) else "", response.usage(),
                                 getattr(response, "resolved_model", None))
            except Exception as exc:  # noqa: BLE001 - a plugin may raise anything; call() types it
                box["error"] = exc

        worker = threading.Thread(target=ask, name=f"mesh-llm-{request.role}", daemon=True)
        worker.start()
        worker.join(self._settings.timeout_s)
        if worker.is_alive():
            return TimeoutError(f"no answer within llm.timeout_s={self._settings.timeout_s:g}s")
        return box["error"] if "error" in box else box["answer"]

    def _failure(self, exc: BaseException, name: str, model: Any, duration: float) -> WorkerResponse:
        """A plugin's exception as a typed response, or BackendError when the user must act."""
        if isinstance(exc, self._llm.NeedsKeyException):
            raise BackendError(f"model {name!r} needs an API key: {self._clean(str(exc))}") from None
        status = _status_of(exc)
        if status in _USER_FIX_STATUSES:
            message = _USER_FIX_STATUSES[status].format(model=name)
            raise BackendError(f"{message}: {self._clean(str(exc))}") from None
        kind = "timeout" if status in _TIMEOUT_STATUSES or _is_timeout(exc) else "no_response"
        prefix = f"HTTP {status} " if status is not None else ""
        return WorkerResponse(text=None, error=kind, model=model.model_id, duration_s=duration,
                              detail=self._clean(f"{prefix}{type(exc).__name__}: {exc}"))

    def _clean(self, detail: str | None) -> str | None:
        """One line, bounded, and without any key llm holds (a provider error may quote one)."""
        if detail is None:
            return None
        for form in self._secret_forms:
            detail = detail.replace(form, "[REDACTED]")
        return _one_line(detail)

    # ------------------------------------------------------------------ models, usage and budgets

    def _model(self, role: str) -> tuple[str, Any]:
        name = self._names.get(role)
        if name is None:
            raise BackendError(f"role {role!r} is not in the configured roles, so it has no llm model")
        return name, self._models[name]

    def _price(self, name: str, *model_ids: str | None) -> Any:
        """The price row of the configured name, else of the first model id that has one."""
        prices = self._config.prices
        for candidate in (name, *model_ids):
            price = prices.price_for(candidate) if candidate else None
            if price is not None:
                return price
        return None

    def _priced(self, usage: Usage, name: str, model: Any, resolved: str | None) -> Usage:
        return usage.priced(self._price(name, model.model_id, resolved))

    def worst_case(self, request: WorkerRequest) -> Usage:
        """An upper bound of one call's usage, for the engine's budget check.

        Input is the whole prompt (and the schema, for a model that takes one) at
        ``CHARS_PER_TOKEN_BOUND`` characters a token plus the request framing, priced at the
        dearer of the input and cache-write rates; output is the model's configured limit.
        """
        name, model = self._model(request.role)
        chars = len(request.prompt.shared) + len(request.prompt.role_part)
        if request.schema is not None and model.supports_schema:
            chars += len(json.dumps(output_schema(request.schema, request.round, request.strict)[1]))
        input_tokens = math.ceil(chars / CHARS_PER_TOKEN_BOUND) + _REQUEST_OVERHEAD_TOKENS
        output_tokens = self._output_limits.get(name, 0)
        worst = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
        price = self._price(name, model.model_id)
        if price is not None:
            worst.cost_usd = (input_tokens * max(price.input, price.cache_write)
                              + output_tokens * price.output) / 1_000_000
        return worst


# ---------------------------------------------------------------------- model names


def resolve_model(name: str, *, setting: str = "models.*") -> Any:
    """The llm model called ``name`` (see the module doc); BackendError naming ``setting``."""
    import llm

    try:
        return llm.get_model(name)
    except llm.UnknownModelError:
        pass
    except Exception as exc:  # noqa: BLE001 - a broken plugin or a malformed aliases.json
        raise BackendError(f"llm could not list its models: {type(exc).__name__}: {_one_line(str(exc))}") from None
    provider, colon, rest = name.partition(":")
    if colon and provider and rest:
        models, found_plugin = _provider_models(provider)
        model = models.get(rest) or models.get(f"{provider}/{rest}")
        if model is not None:
            return model
        if not found_plugin:
            raise BackendError(f"{setting} = {name!r}: llm knows no such model and has no plugin {provider!r}"
                               f" (install it: llm install llm-{provider})")
        raise BackendError(f"{setting} = {name!r}: the llm plugin {provider!r} has no model or alias {rest!r}"
                           f" (see `llm models`)")
    raise BackendError(f"{setting} = {name!r}: llm knows no model or alias {name!r} (see `llm models`; a model"
                       f" from another provider needs its plugin, e.g. llm install llm-anthropic)")


def provider_name(plugin_name: str) -> str:
    """A plugin's provider name: ``llm_ollama`` -> ``ollama``, the built-in
    ``llm.default_plugins.openai_models`` -> ``openai``."""
    short = plugin_name.rsplit(".", 1)[-1].lower().replace("_", "-")
    short = short.removeprefix("llm-")
    return short.removesuffix("-models")


def _provider_models(provider: str) -> tuple[dict[str, Any], bool]:
    """{model id or alias: model} of the plugins whose provider name is ``provider``, and
    whether any plugin has that name. Each plugin's ``register_models`` hook is called
    alone, as llm's own ``get_tools`` does to know which plugin registered what."""
    from llm.plugins import load_plugins, pm

    load_plugins()
    wanted = provider.lower()
    distributions = {plugin: getattr(dist, "project_name", None) or getattr(dist, "name", "")
                     for plugin, dist in pm.list_plugin_distinfo()}
    found: dict[str, Any] = {}
    found_plugin = False
    for impl in pm.hook.register_models.get_hookimpls():
        names = {provider_name(pm.get_name(impl.plugin) or ""), provider_name(distributions.get(impl.plugin) or "")}
        if wanted not in names:
            continue
        found_plugin = True

        def register(model: Any, async_model: Any = None, aliases: Any = None) -> None:
            if model is None:
                return
            for key in (model.model_id, *(aliases or ())):
                found.setdefault(key, model)

        arguments = {"register": register, "model_aliases": []}
        impl.function(**{arg: arguments[arg] for arg in impl.argnames if arg in arguments})
    return found, found_plugin


def _configured_model(config: BackendConfig, role: str) -> str:
    try:
        return config.model_for(role)
    except Exception as exc:  # noqa: BLE001 - the config's error for a role it has no model for
        raise BackendError(str(exc)) from None


def _output_limit(options: dict[str, Any]) -> int | None:
    for option in OUTPUT_LIMIT_OPTIONS:
        value = options.get(option)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


# ---------------------------------------------------------------------- usage


def _count(value: Any) -> int:
    """A token count from a plugin's details (a non-negative int), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_from_llm(reported: Any) -> Usage:
    """Tokens of an ``llm.Usage`` in mesh's meaning (``input_tokens`` is uncached input).

    llm-anthropic reports cache reads and writes apart from ``input``; OpenAI
    (``prompt_tokens_details`` / ``input_tokens_details``: ``cached_tokens``) and Gemini
    (``cachedContentTokenCount``) count cached tokens inside ``input``, so they are moved
    out of it. Missing or malformed figures count as 0.
    """
    if reported is None:
        return Usage()
    input_tokens = _count(getattr(reported, "input", None))
    output_tokens = _count(getattr(reported, "output", None))
    details = getattr(reported, "details", None)
    details = details if isinstance(details, dict) else {}
    if "cache_read_input_tokens" in details or "cache_creation_input_tokens" in details:
        return Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                     cache_read_tokens=_count(details.get("cache_read_input_tokens")),
                     cache_write_tokens=_count(details.get("cache_creation_input_tokens")))
    cached = 0
    for key in ("prompt_tokens_details", "input_tokens_details"):
        part = details.get(key)
        if isinstance(part, dict):
            cached = cached or _count(part.get("cached_tokens"))
    cached = min(cached or _count(details.get("cachedContentTokenCount")), input_tokens)
    return Usage(input_tokens=input_tokens - cached, output_tokens=output_tokens, cache_read_tokens=cached)


# ---------------------------------------------------------------------- schemas


def output_schema(schema: type[BaseModel], round_name: str, strict: bool) -> tuple[type[BaseModel], dict[str, Any]]:
    """The pydantic model a reply must match and its JSON schema (``$ref``s inlined, a fresh
    dict each time: a plugin may rewrite the schema it is given).

    Strict mode: the envelope ``{"role", "task_id", "artifact", "outbox"?}`` around
    ``schema``; otherwise the artifact itself. ``outbox`` (optional) is offered in the
    rounds whose prompt offers it.
    """
    model = answer_model(schema, round_name, strict)
    return model, _inline_refs(model.model_json_schema())


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each local ``$ref`` replaced by its definition (artifact schemas are
    not recursive)."""
    definitions = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = walk(copy.deepcopy(definitions[ref.removeprefix("#/$defs/")]))
                return {**target, **{key: walk(value) for key, value in node.items() if key != "$ref"}}
            return {key: walk(value) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return walk(schema)


def _schema_mismatch(checker: type[BaseModel] | None, text: str) -> str | None:
    """None when ``text`` is JSON matching ``checker``; else a one-line reason."""
    if checker is None:
        return None
    try:
        checker.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "reply"
        kind = "not JSON" if first["type"] == "json_invalid" else f"{where}: {first['msg']}"
        return f"reply does not match the {checker.__name__} schema ({kind}); the engine decides what follows"
    return None


# ---------------------------------------------------------------------- errors


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status a provider SDK attached to its exception (``status_code`` on the
    exception, as openai and anthropic do, or on its ``response``, as httpx does)."""
    for holder in (exc, getattr(exc, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _is_timeout(exc: BaseException) -> bool:
    """A timeout, whichever library raised it: ``TimeoutError`` or a class named for one
    (openai.APITimeoutError, httpx.ReadTimeout, requests' Timeout)."""
    return isinstance(exc, TimeoutError) or any("Timeout" in cls.__name__ for cls in type(exc).__mro__)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 3] + "..."
