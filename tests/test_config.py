"""Configuration: defaults are the profile's, files are found in order, typos are errors."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from orchestrator.config import (
    DEFAULT_MODELS,
    ConfigError,
    MeshConfig,
    ModelPrice,
    load_config,
)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def config_error(tmp_path: Path, text: str) -> str:
    write(tmp_path / "mesh.toml", text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert "mesh.toml" in message
    return message


# ---------------------------------------------------------------- defaults


def test_defaults_are_the_profiles():
    config = MeshConfig()
    assert config.roles == ["proposer", "critic_a", "critic_b", "skeptic", "synthesizer", "reviewer"]
    assert config.voting_roles == ["proposer", "critic_a", "critic_b", "skeptic", "synthesizer"]
    assert config.fallback_roles == ["proposer", "skeptic", "synthesizer"]
    assert (config.consensus_threshold, config.consensus_needed, config.fallback_consensus_needed) == ("4/5", 4, 3)
    assert (config.consensus_retries, config.review_max_cycles) == (2, 3)
    assert config.review_required_for_close is True
    assert (config.strict_output, config.integrate) == (False, True)
    assert (config.backend, config.worker_cmd, config.worker_timeout_s) == ("replay", None, 600)
    assert config.validation.allow == [] and config.validation.required is True
    assert (config.validation.timeout_s, config.validation.max_output_bytes) == (300, 65536)
    assert config.protected_branches == ["main", "master"]
    assert (config.budget.max_usd, config.budget.max_tokens) == (None, None)
    assert config.close_mode == "local"
    assert (config.patch.max_bytes, config.patch.max_files) == (1_000_000, 200)
    anthropic = config.anthropic
    assert (anthropic.max_retries, anthropic.timeout_s, anthropic.max_tokens) == (2, 120, 8192)
    assert (anthropic.max_tool_turns, anthropic.context_tokens) == (8, 20000)


def test_every_default_model_has_a_dated_price():
    config = MeshConfig()
    dt.date.fromisoformat(config.prices.as_of)
    for role in config.roles:
        model = config.model_for(role)
        assert model == DEFAULT_MODELS[role]
        price = config.prices.price_for(model)
        assert price is not None and price.output > price.input > price.cache_read > 0
    assert config.prices.price_for("no-such-model") is None


def test_model_for_an_unknown_role_is_an_error():
    with pytest.raises(ConfigError):
        MeshConfig().model_for("hydrator")


def test_cost_is_per_million_tokens():
    price = ModelPrice(input=3, output=15, cache_read=0.3, cache_write=3.75)
    cost = price.cost_usd(input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=2_000_000,
                          cache_write_tokens=1_000_000)
    assert cost == pytest.approx(3 + 1.5 + 0.6 + 3.75)


# ---------------------------------------------------------------- where config comes from


MESH_TOML = """
consensus_retries = 5
[validation]
allow = ["python -m pytest -q", "python -m pytest {args...}"]
timeout_s = 60
"""


def test_mesh_toml_is_read(tmp_path):
    write(tmp_path / "mesh.toml", MESH_TOML)
    config = load_config(tmp_path)
    assert config.consensus_retries == 5
    assert config.validation.allow == ["python -m pytest -q", "python -m pytest {args...}"]
    assert config.validation.timeout_s == 60
    assert config.validation.required is True  # untouched keys keep their defaults


def test_pyproject_tool_mesh_is_read_when_there_is_no_mesh_toml(tmp_path):
    write(tmp_path / "pyproject.toml", "[project]\nname='x'\n[tool.mesh]\nreview_max_cycles = 7\n"
                                       "[tool.mesh.budget]\nmax_usd = 2.5\n")
    config = load_config(tmp_path)
    assert (config.review_max_cycles, config.budget.max_usd) == (7, 2.5)


def test_mesh_toml_wins_over_pyproject_and_an_explicit_file_wins_over_both(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.mesh]\nreview_max_cycles = 7\n")
    write(tmp_path / "mesh.toml", "review_max_cycles = 5\n")
    explicit = write(tmp_path / "other.toml", "review_max_cycles = 9\n")
    assert load_config(tmp_path).review_max_cycles == 5
    assert load_config(tmp_path, explicit).review_max_cycles == 9


def test_defaults_without_any_file_or_section(tmp_path):
    assert load_config(tmp_path) == MeshConfig()
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n[tool.black]\nline-length = 100\n")
    assert load_config(tmp_path) == MeshConfig()


def test_repo_defaults_to_the_current_directory(tmp_path, monkeypatch):
    write(tmp_path / "mesh.toml", "consensus_retries = 1\n")
    monkeypatch.chdir(tmp_path)
    assert load_config().consensus_retries == 1


def test_a_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path, tmp_path / "missing.toml")


# ---------------------------------------------------------------- errors name the file and the key


def test_unknown_top_level_key(tmp_path):
    message = config_error(tmp_path, "validaton = {allow = []}\n")
    assert message.endswith("mesh.toml: unknown key 'validaton'")


def test_unknown_nested_key(tmp_path):
    assert "unknown key 'validation.alow'" in config_error(tmp_path, "[validation]\nalow = []\n")
    assert "unknown key 'anthropic.max_retry'" in config_error(tmp_path, "[anthropic]\nmax_retry = 1\n")
    assert "unknown key 'prices.models.m.inptu'" in config_error(
        tmp_path, "[prices.models.m]\ninput = 1\noutput = 2\ninptu = 3\n"
    )


def test_unknown_key_in_pyproject_names_the_section(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.mesh]\nintegrat = false\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert "pyproject.toml [tool.mesh]: unknown key 'integrat'" in str(info.value)


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('consensus_threshold = "5/4"', "consensus_threshold"),
        ('consensus_threshold = "0/5"', "consensus_threshold"),
        ('consensus_threshold = "four of five"', "consensus_threshold"),
        ('consensus_threshold = "3/4"', "(top level)"),  # 4 voters needed but 5 configured
        ("consensus_retries = -1", "consensus_retries"),
        ("review_max_cycles = 0", "review_max_cycles"),
        ('integrate = "maybe"', "integrate"),
        ('backend = "openai"', "backend"),
        ('close_mode = "remote"', "close_mode"),
        ("worker_timeout_s = 0", "worker_timeout_s"),
        ("worker_cmd = ''", "worker_cmd"),
        ("worker_cmd = 'agent \"unterminated'", "worker_cmd"),
        ('roles = ["proposer", "critic_a", "hacker", "skeptic", "synthesizer", "reviewer"]', "roles"),
        ('roles = ["proposer", "proposer", "critic_b", "skeptic", "synthesizer", "reviewer"]', "roles"),
        ('fallback_roles = ["proposer", "reviewer", "synthesizer"]', "(top level)"),
        ("protected_branches = ['']", "protected_branches"),
        ("[models]\ncritc_a = 'x'", "models"),
        ("[models]\nproposer = ' '", "models"),
        ("[validation]\ntimeout_s = 0", "validation.timeout_s"),
        ("[validation]\nallow = ['make && make test']", "validation.allow"),
        ("[validation]\nallow = ['pytest {args...} -q']", "validation.allow"),
        ("[validation]\nallow = ['{path}']", "validation.allow"),
        ("[budget]\nmax_usd = -1", "budget.max_usd"),
        ("[budget]\nmax_tokens = 0", "budget.max_tokens"),
        ("[patch]\nmax_files = 0", "patch.max_files"),
        ("[anthropic]\nmax_tokens = 0", "anthropic.max_tokens"),
        ("[prices]\nas_of = '2025-13-01'", "prices.as_of"),
        ("[prices]\nas_of = 'last week'", "prices.as_of"),
        ("[prices.models.m]\ninput = -1\noutput = 1", "prices.models.m.input"),
    ],
)
def test_bad_values_name_their_key(tmp_path, toml, key):
    message = config_error(tmp_path, toml + "\n")
    if key == "(top level)":
        assert "mesh.toml: " in message
    else:
        assert f"'{key}'" in message


def test_invalid_toml_and_wrong_section_type(tmp_path):
    assert "invalid TOML" in config_error(tmp_path, "consensus_retries = \n")
    write(tmp_path / "mesh.toml", "")
    (tmp_path / "mesh.toml").unlink()
    write(tmp_path / "pyproject.toml", "[tool]\nmesh = 3\n")
    with pytest.raises(ConfigError, match=r"\[tool.mesh\] must be a table"):
        load_config(tmp_path)


@settings(max_examples=60, deadline=None)
@given(st.from_regex(r"[a-z]{2,8}(_[a-z]{2,6})?", fullmatch=True))
def test_any_unknown_key_is_refused(name):
    if name in MeshConfig.model_fields:
        return
    with pytest.raises(ConfigError, match=f"unknown key '{name}'"):
        MeshConfig().with_overrides(**{name: 1})


# ---------------------------------------------------------------- shapes and merging


def test_main_and_master_stay_protected_whatever_the_list_says(tmp_path):
    write(tmp_path / "mesh.toml", 'protected_branches = ["release/*", "prod"]\n')
    assert load_config(tmp_path).protected_branches == ["release/*", "prod", "main", "master"]


def test_a_models_table_overrides_only_the_roles_it_names(tmp_path):
    write(tmp_path / "mesh.toml", '[models]\nreviewer = "claude-opus-4-1"\n')
    config = load_config(tmp_path)
    assert config.model_for("reviewer") == "claude-opus-4-1"
    assert config.model_for("critic_a") == DEFAULT_MODELS["critic_a"]


def test_custom_prices_merge_and_derive_cache_rates(tmp_path):
    write(tmp_path / "mesh.toml", "[prices]\nas_of = 2026-01-31\n[prices.models.my-model]\ninput = 2\noutput = 8\n")
    prices = load_config(tmp_path).prices
    assert prices.as_of == "2026-01-31"  # a TOML date is accepted
    mine = prices.price_for("my-model")
    assert (mine.cache_read, mine.cache_write) == (pytest.approx(0.2), pytest.approx(2.5))
    assert prices.price_for(DEFAULT_MODELS["critic_a"]) is not None  # defaults kept


def test_a_smaller_role_set_needs_a_matching_threshold(tmp_path):
    write(tmp_path / "mesh.toml", 'roles = ["proposer", "critic_a", "skeptic", "synthesizer", "reviewer"]\n'
                                  'consensus_threshold = "3/4"\n')
    config = load_config(tmp_path)
    assert (config.voting_roles, config.consensus_needed) == (["proposer", "critic_a", "skeptic", "synthesizer"], 3)


def test_review_can_be_dropped_only_when_not_required(tmp_path):
    roles = 'roles = ["proposer", "critic_a", "critic_b", "skeptic", "synthesizer"]\n'
    assert "reviewer" in config_error(tmp_path, roles)
    write(tmp_path / "mesh.toml", roles + "review_required_for_close = false\n")
    assert "reviewer" not in load_config(tmp_path).roles


# ---------------------------------------------------------------- overrides


def test_overrides_make_a_validated_copy():
    base = MeshConfig()
    changed = base.with_overrides(integrate=False, strict_output=True, backend="command", worker_cmd="agent --stdin",
                                  budget__max_usd=1.5, validation__allow=["make test"])
    assert (changed.integrate, changed.strict_output, changed.backend) == (False, True, "command")
    assert (changed.worker_cmd, changed.budget.max_usd, changed.validation.allow) == ("agent --stdin", 1.5,
                                                                                      ["make test"])
    assert base == MeshConfig()  # untouched


def test_none_means_flag_not_given():
    assert MeshConfig().with_overrides(integrate=None, backend=None) == MeshConfig()


@pytest.mark.parametrize(
    "overrides",
    [{"backend": "telepathy"}, {"budget__max_usd": -3}, {"budget__nope": 1}, {"nope__x": 1},
     {"integrate__x": 1}, {"validation__allow": ["a; b"]}],
)
def test_bad_overrides_are_config_errors(overrides):
    with pytest.raises(ConfigError) as info:
        MeshConfig().with_overrides(**overrides)
    assert str(info.value).startswith("command line: ")


def test_config_is_frozen():
    config = MeshConfig()
    with pytest.raises(ValidationError):
        config.integrate = False  # type: ignore[misc]
