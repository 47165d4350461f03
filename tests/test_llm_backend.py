"""The ``llm`` backend call by call, against real llm models of a test-only plugin
(``tests/llm_test_plugin.py``), registered through llm's plugin manager as llm's own
tests register theirs: model names, schemas, usage and prices, options, keys, errors."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import llm
import pytest

from orchestrator.config import DEFAULT_ROLES, MeshConfig
from roles.backends import BackendError, WorkerRequest, get_backend
from roles.backends.llm_backend import output_schema, provider_name, resolve_model, usage_from_llm
from roles.prompts import Prompt
from roles.schemas import ARTIFACT_SCHEMAS
from tests.llm_test_plugin import KEY_ENV, Fault, ProviderError, ProviderTimeout, Script, count_tokens, registered

KEY = "scripted-key-5b1f0c9e77"
SHARED = "# mesh\nThe task and its context.\n# Round: proposal\nThe round's inputs.\n"


@pytest.fixture(autouse=True)
def llm_home(tmp_path, monkeypatch):
    """llm's user folder (keys.json, aliases.json, logs.db) in a temporary folder."""
    home = tmp_path / "llm-user"
    monkeypatch.setenv("LLM_USER_PATH", str(home))
    monkeypatch.delenv(KEY_ENV, raising=False)
    return home


def scripted(entries: dict) -> Script:
    return Script.of(entries)


def make_config(*, models: dict | None = None, llm_settings: dict | None = None, budget: dict | None = None,
                prices: dict | None = None) -> MeshConfig:
    """Every role on ``scripted/json`` unless ``models`` says otherwise."""
    data = {"models": {role: "scripted/json" for role in DEFAULT_ROLES} | (models or {}),
            "llm": llm_settings or {}, "budget": budget or {}}
    if prices is not None:
        data["prices"] = {"as_of": "2026-11-01", "models": prices}
    return MeshConfig.model_validate(data)


def request(role: str = "proposer", round_name: str = "proposal", *, strict: bool = False, attempt: int = 1,
            shared: str = SHARED) -> WorkerRequest:
    role_part = f"# Your role: {role}\nAnswer with the artifact.\n"
    return WorkerRequest(role=role, round=round_name, task_id="demo-1", run_id="run-1", attempt=attempt,
                         prompt=Prompt(shared=shared.replace("# Round: proposal", f"# Round: {round_name}"),
                                       role_part=role_part),
                         schema=ARTIFACT_SCHEMAS[round_name], strict=strict)


PROPOSAL = {"plan": ["Add the function", "Test it"], "assumptions": ["floats"], "risk": "low"}


def answer(round_name: str = "proposal", artifact: dict | str = PROPOSAL) -> dict:
    return {"round": round_name, "text": artifact if isinstance(artifact, str) else json.dumps(artifact)}


def _refs(node) -> list[str]:
    if isinstance(node, dict):
        return ([node["$ref"]] if "$ref" in node else []) + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    return []


# ------------------------------------------------------------------ model names


@pytest.mark.parametrize("name", ["scripted/json", "sj", "scripted:json", "scripted:sj"])
def test_a_name_is_an_llm_id_an_alias_or_provider_colon_name(name):
    script = scripted({"proposer": [answer()]})
    with registered(script):
        backend = get_backend("llm", config=make_config(models={"proposer": name}))
        response = backend.call(request())
    assert response.error is None and json.loads(response.text) == PROPOSAL
    assert response.model == "scripted/json" and script.seen[0].model_id == "scripted/json"


@pytest.mark.parametrize("name, expected", [
    ("no-such-model", "models.proposer = 'no-such-model': llm knows no model or alias 'no-such-model'"),
    ("ollama:qwen3", "has no plugin 'ollama' (install it: llm install llm-ollama)"),
    ("scripted:nope", "the llm plugin 'scripted' has no model or alias 'nope'"),
])
def test_an_unknown_model_is_one_message_before_any_call(name, expected):
    script = scripted({})
    with registered(script), pytest.raises(BackendError) as raised:
        get_backend("llm", config=make_config(models={"proposer": name}))
    assert expected in str(raised.value) and "\n" not in str(raised.value)
    assert script.seen == []


def test_provider_names_follow_llm_plugin_names():
    assert provider_name("llm_ollama") == "ollama"
    assert provider_name("llm-gemini") == "gemini"
    assert provider_name("llm.default_plugins.openai_models") == "openai"
    assert provider_name("anthropic") == "anthropic"


def test_the_builtin_openai_models_answer_to_the_openai_provider():
    assert resolve_model("openai:4o-mini").model_id == "gpt-4o-mini"
    assert resolve_model("openai:gpt-4.1").model_id == "gpt-4.1"


# ------------------------------------------------------------------ structured output


def test_a_schema_model_gets_the_round_schema_with_refs_inlined():
    script = scripted({"reviewer": [answer("review", {"decision": "approve", "findings": [], "summary": "ok"})],
                       "proposer": [answer()]})
    with registered(script):
        backend = get_backend("llm", config=make_config())
        review = backend.call(request("reviewer", "review"))
        proposal = backend.call(request())
    assert review.error is None and review.detail is None and proposal.error is None
    review_seen, proposal_seen = script.seen
    assert review_seen.schema == output_schema(ARTIFACT_SCHEMAS["review"], "review", False)[1]
    # A finding is its own model: its definition is inlined, no $ref/$defs is left.
    assert _refs(review_seen.schema) == [] and "$defs" not in review_seen.schema
    assert review_seen.schema["properties"]["findings"]["items"]["properties"]["label"]
    # The proposal round offers an outbox, the review round does not.
    assert "outbox" in proposal_seen.schema["properties"] and "outbox" not in review_seen.schema["properties"]
    # The shared part is the system prompt (llm strips its ends), the role part the prompt.
    assert proposal_seen.system == SHARED.strip() and proposal_seen.prompt.startswith("# Your role: proposer")


def test_strict_mode_asks_for_the_envelope():
    envelope = {"role": "proposer", "task_id": "demo-1", "artifact": PROPOSAL}
    script = scripted({"proposer": [answer("proposal", envelope)]})
    with registered(script):
        response = get_backend("llm", config=make_config()).call(request(strict=True))
    assert response.error is None and response.detail is None
    schema = script.seen[0].schema
    assert set(schema["required"]) == {"role", "task_id", "artifact"}
    assert schema["properties"]["artifact"]["required"] == ["plan", "assumptions", "risk"]


def test_a_model_without_schemas_gets_the_prompt_alone():
    script = scripted({"proposer": [answer("proposal", "## Plan\n- Add it\n\nRisk: low\n")]})
    with registered(script):
        response = get_backend("llm", config=make_config(models={"proposer": "plain-text"})).call(request())
    assert script.seen[0].schema is None and script.seen[0].model_id == "scripted/text"
    # The text goes back as it came: the engine's tolerant parser reads it.
    assert response.error is None and response.text.startswith("## Plan") and response.detail is None


def test_a_reply_that_misses_the_schema_is_returned_with_a_note():
    script = scripted({"proposer": [answer("proposal", "Sure! Here is my plan: add it.")]})
    with registered(script):
        response = get_backend("llm", config=make_config()).call(request())
    assert response.error is None and response.text == "Sure! Here is my plan: add it."
    assert "does not match the ProposalArtifactWithOutbox schema (not JSON)" in response.detail


# ------------------------------------------------------------------ usage and prices


def test_usage_is_counted_cached_and_priced():
    prices = {"scripted/json": {"input": 2.0, "output": 10.0, "cache_read": 0.5}}
    script = scripted({"critic_a": [answer("critique", {"findings": [], "must_fix": [], "vote_flip_conditions": [],
                                                        "risk": "low"})],
                       "critic_b": [answer("critique", {"findings": ["x"], "must_fix": [], "vote_flip_conditions": [],
                                                        "risk": "low"})]})
    with registered(script):
        backend = get_backend("llm", config=make_config(prices=prices))
        first = backend.call(request("critic_a", "critique"))
        second = backend.call(request("critic_b", "critique"))
    system = script.seen[0].system
    sent = count_tokens(system) + count_tokens(script.seen[0].prompt)
    assert (first.usage.input_tokens, first.usage.cache_read_tokens) == (sent, 0)
    assert first.usage.output_tokens == count_tokens(first.text)
    assert first.usage.cost_usd == pytest.approx((sent * 2.0 + first.usage.output_tokens * 10.0) / 1e6)
    # The second role of the round re-sent the same system prompt: the plugin reports it
    # cached inside its input, and mesh moves it out of input_tokens.
    assert second.usage.cache_read_tokens == count_tokens(system)
    assert second.usage.input_tokens == count_tokens(script.seen[1].prompt)
    assert second.usage.cost_usd == pytest.approx((second.usage.input_tokens * 2.0 + count_tokens(system) * 0.5
                                                   + second.usage.output_tokens * 10.0) / 1e6)


def test_the_model_the_provider_reports_is_recorded_and_priced():
    prices = {"scripted/json-2026-01": {"input": 2.0, "output": 10.0}}
    script = scripted({"proposer": [answer() | {"resolved": "scripted/json-2026-01"}]})
    with registered(script):
        response = get_backend("llm", config=make_config(prices=prices)).call(request())
    assert response.model == "scripted/json-2026-01"
    assert response.usage.cost_usd == pytest.approx((response.usage.input_tokens * 2.0
                                                     + response.usage.output_tokens * 10.0) / 1e6)


def test_a_model_without_a_price_row_costs_nothing():
    script = scripted({"proposer": [answer()]})
    with registered(script):
        response = get_backend("llm", config=make_config()).call(request())
    assert response.usage.input_tokens > 0 and response.usage.cost_usd == 0.0


@pytest.mark.parametrize("reported, expected", [
    # llm-anthropic: cache figures apart from input.
    (llm.Usage(input=100, output=20, details={"cache_read_input_tokens": 900, "cache_creation_input_tokens": 50}),
     (100, 20, 900, 50)),
    # llm's OpenAI plugin (Chat Completions and Responses): cached tokens inside input.
    (llm.Usage(input=1000, output=20, details={"prompt_tokens_details": {"cached_tokens": 768}}), (232, 20, 768, 0)),
    (llm.Usage(input=1000, output=20, details={"input_tokens_details": {"cached_tokens": 512}}), (488, 20, 512, 0)),
    # llm-gemini: cachedContentTokenCount inside promptTokenCount.
    (llm.Usage(input=300, output=7, details={"cachedContentTokenCount": 200, "thoughtsTokenCount": 3}),
     (100, 7, 200, 0)),
    # Nothing reported, or nonsense: zeros, never an exception.
    (llm.Usage(), (0, 0, 0, 0)),
    (llm.Usage(input=-5, output="many", details={"prompt_tokens_details": {"cached_tokens": 10**9}}), (0, 0, 0, 0)),
    (llm.Usage(input=10, output=True, details=["not", "a", "dict"]), (10, 0, 0, 0)),
])
def test_usage_details_of_each_plugin_family_map_to_mesh_usage(reported, expected):
    usage = usage_from_llm(reported)
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == expected


# ------------------------------------------------------------------ options and budgets


def test_options_reach_the_model_and_are_checked_by_its_options_class():
    settings = {"options": {"scripted/json": {"temperature": 0.2, "max_tokens": 50}}}
    script = scripted({"proposer": [answer()]})
    with registered(script):
        get_backend("llm", config=make_config(llm_settings=settings)).call(request())
    assert script.seen[0].options == {"temperature": 0.2, "max_tokens": 50}


@pytest.mark.parametrize("options, expected", [
    ({"scripted/json": {"temprature": 0.2}}, "llm.options.'scripted/json': temprature: Extra inputs are not permitted"),
    ({"gpt-4.1": {"temperature": 0.2}}, "llm.options names model 'gpt-4.1', which no role uses"),
])
def test_bad_options_stop_the_backend_with_one_message(options, expected):
    with registered(scripted({})), pytest.raises(BackendError) as raised:
        get_backend("llm", config=make_config(llm_settings={"options": options}))
    assert expected in str(raised.value)


def test_a_budget_needs_an_output_limit_and_prices():
    with registered(scripted({})):
        with pytest.raises(BackendError, match="a budget needs an output limit for every model"):
            get_backend("llm", config=make_config(budget={"max_tokens": 100000}))
        limited = {"options": {"scripted/json": {"max_tokens": 400}}}
        with pytest.raises(BackendError, match=r"needs a price for every model; add \[prices.models\] rows for"
                                               r" scripted/json"):
            get_backend("llm", config=make_config(budget={"max_usd": 1.0}, llm_settings=limited))
        prices = {"scripted/json": {"input": 2.0, "output": 10.0, "cache_write": 4.0}}
        backend = get_backend("llm", config=make_config(budget={"max_usd": 1.0}, llm_settings=limited,
                                                        prices=prices))
    worst = backend.worst_case(request())
    schema_chars = len(json.dumps(output_schema(ARTIFACT_SCHEMAS["proposal"], "proposal", False)[1]))
    chars = len(request().prompt.text) + schema_chars
    assert worst.output_tokens == 400 and worst.input_tokens == -(-chars // 3) + 600
    # Input at the dearer of the input and cache-write rates: whether a prefix is cached is unknown.
    assert worst.cost_usd == pytest.approx((worst.input_tokens * 4.0 + 400 * 10.0) / 1e6)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("fault, kind, detail", [
    (ProviderError(503, "overloaded"), "no_response", "HTTP 503 ProviderError: overloaded"),
    (ProviderError(429, "slow down"), "no_response", "HTTP 429 ProviderError: slow down"),
    (ProviderError(504, "gateway timeout"), "timeout", "HTTP 504 ProviderError: gateway timeout"),
    (ProviderTimeout("read timed out"), "timeout", "ProviderTimeout: read timed out"),
    (TimeoutError("socket"), "timeout", "TimeoutError: socket"),
    (ConnectionError("refused\non two lines"), "no_response", "ConnectionError: refused on two lines"),
    (llm.ModelError("the model is loading"), "no_response", "ModelError: the model is loading"),
])
def test_provider_failures_are_typed_responses(fault, kind, detail):
    script = scripted({"proposer": [Fault(fault)]})
    with registered(script):
        response = get_backend("llm", config=make_config()).call(request())
    assert (response.text, response.error, response.detail) == (None, kind, detail)
    assert response.model == "scripted/json"


@pytest.mark.parametrize("status, expected", [
    (401, "the provider refused the API key of model 'scripted/json' (HTTP 401)"),
    (403, "the API key may not use model 'scripted/json' (HTTP 403)"),
    (404, "the provider does not know model 'scripted/json' (HTTP 404)"),
])
def test_answers_no_retry_can_cure_stop_the_run(status, expected):
    script = scripted({"proposer": [Fault(ProviderError(status, "nope"))]})
    with registered(script), pytest.raises(BackendError) as raised:
        get_backend("llm", config=make_config()).call(request())
    assert str(raised.value).startswith(expected) and "\n" not in str(raised.value)


def test_a_call_past_the_timeout_is_a_timeout():
    script = scripted({"proposer": [Fault(hang=True)]})
    with registered(script):
        response = get_backend("llm", config=make_config(llm_settings={"timeout_s": 0.2})).call(request())
    assert response.error == "timeout" and "llm.timeout_s=0.2s" in response.detail


def test_an_empty_answer_is_no_response():
    script = scripted({"proposer": [answer("proposal", "  \n")]})
    with registered(script):
        response = get_backend("llm", config=make_config()).call(request())
    assert (response.text, response.error, response.detail) == (None, "no_response", "the answer had no text")
    assert response.usage.input_tokens > 0


# ------------------------------------------------------------------ keys


def test_a_missing_key_is_one_message_naming_both_places_llm_looks():
    with registered(scripted({})), pytest.raises(BackendError) as raised:
        get_backend("llm", config=make_config(models={"reviewer": "scripted/keyed"}))
    message = str(raised.value)
    assert message.startswith("model 'scripted/keyed' needs an API key")
    assert "llm keys set scripted" in message and KEY_ENV in message


def test_a_key_from_llms_keys_file_is_used_and_never_returned(llm_home):
    llm_home.mkdir(parents=True, exist_ok=True)
    # As `llm keys set` writes it, with its note.
    (llm_home / "keys.json").write_text(json.dumps({"// Note": "This file stores secret API credentials.",
                                                    "scripted": KEY}))
    encoded = base64.b64encode(KEY.encode()).decode()
    script = scripted({"reviewer": [Fault(ProviderError(500, f"bad request with key {KEY} ({encoded})")),
                                    Fault(ProviderError(401, f"invalid key {KEY}"))]})
    with registered(script):
        backend = get_backend("llm", config=make_config(models={"reviewer": "scripted/keyed"}))
        failed = backend.call(request("reviewer", "review"))
        with pytest.raises(BackendError) as refused:
            backend.call(request("reviewer", "review"))
    assert script.seen[0].key == KEY
    assert failed.error == "no_response" and KEY not in failed.detail and encoded not in failed.detail
    assert failed.detail == "HTTP 500 ProviderError: bad request with key [REDACTED] ([REDACTED])"
    assert KEY not in str(refused.value) and "[REDACTED]" in str(refused.value)


def test_a_key_from_the_environment_works_too(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    script = scripted({"reviewer": [answer("review", {"decision": "approve", "findings": [], "summary": "ok"})]})
    with registered(script):
        response = get_backend("llm", config=make_config(models={"reviewer": "scripted/keyed"})).call(
            request("reviewer", "review"))
    assert response.error is None and script.seen[0].key == KEY


# ------------------------------------------------------------------ imports and llm's own files


def test_llm_is_imported_only_when_the_backend_is_chosen():
    code = ("import sys, orchestrator.cli.main, roles.backends, roles.backends.base;"
            " assert 'llm' not in sys.modules, 'llm imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_calls_write_nothing_to_llms_log(llm_home):
    script = scripted({"proposer": [answer()]})
    with registered(script):
        get_backend("llm", config=make_config()).call(request())
    assert script.seen and not (llm_home / "logs.db").exists()
