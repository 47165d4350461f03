"""``mesh prices``: the table in use with its date, ``--update-from`` (JSON or TOML, checked
with the config's PriceTable model, stored for the user), malformed files refused in one
line with the stored table left whole, and how config loading layers the tables."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.config import (
    DEFAULT_PRICES_AS_OF,
    ConfigError,
    PriceTable,
    load_config,
    read_price_file,
    user_prices_path,
)
from orchestrator.ledger.prices import install_prices

GOOD = {"as_of": "2027-01-15", "models": {"claude-haiku-4-5": {"input": 0.8, "output": 4.0},
                                          "gpt-test": {"input": 2.5, "output": 10.0, "cache_read": 1.25,
                                                       "cache_write": 0}}}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private config home for each test (where the stored table goes)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def mesh(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def write(path, text: str):
    path.write_text(text)
    return path


def test_the_stored_table_lives_in_the_xdg_config_home(home, monkeypatch, tmp_path):
    assert user_prices_path() == home / "mesh" / "prices.json"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # not absolute: ignored, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert user_prices_path() == tmp_path / "h" / ".config" / "mesh" / "prices.json"


def test_show_the_built_in_table_with_its_date(home, tmp_path):
    res = mesh("prices", "--repo", str(tmp_path))
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == f"prices as of {DEFAULT_PRICES_AS_OF}, USD per million tokens"
    assert lines[1].split() == ["model", "input", "output", "cache", "read", "cache", "write"]
    assert "claude-haiku-4-5       1       5         0.1         1.25" in res.stdout
    assert lines[-1].startswith(f"built-in table of {DEFAULT_PRICES_AS_OF}; update it with")
    shown = json.loads(mesh("prices", "--repo", str(tmp_path), "--json").stdout)
    assert shown == {"as_of": DEFAULT_PRICES_AS_OF, "stored_file": None, "built_in_as_of": DEFAULT_PRICES_AS_OF,
                     "project_rows": [],
                     "models": {n: r.model_dump() for n, r in sorted(PriceTable().models.items())}}


def test_update_from_json_is_stored_and_used_everywhere(home, tmp_path):
    source = write(tmp_path / "new-prices.json", json.dumps(GOOD))
    res = mesh("prices", "--update-from", str(source))
    assert res.exit_code == 0, res.output
    stored = user_prices_path()
    assert res.stdout == f"stored prices as of 2027-01-15 for 2 model(s) in {stored}\n"
    # Only the file's rows are stored (cache rates filled in): the built-in rows stay mesh's.
    assert json.loads(stored.read_text()) == {"as_of": "2027-01-15", "models": {
        "claude-haiku-4-5": {"input": 0.8, "output": 4.0, "cache_read": 0.08, "cache_write": 1.0},
        "gpt-test": {"input": 2.5, "output": 10.0, "cache_read": 1.25, "cache_write": 0.0}}}

    project = tmp_path / "project"
    project.mkdir()
    prices = load_config(project).prices
    assert prices.as_of == "2027-01-15"
    assert prices.price_for("claude-haiku-4-5").input == 0.8
    assert prices.price_for("gpt-test").cache_write == 0
    assert prices.price_for("claude-sonnet-4-6") == PriceTable().price_for("claude-sonnet-4-6")
    shown = mesh("prices", "--repo", str(project)).stdout
    assert shown.startswith("prices as of 2027-01-15,") and f"stored table: {stored}" in shown
    assert json.loads(mesh("prices", "--repo", str(project), "--json").stdout)["stored_file"] == str(stored)


@pytest.mark.parametrize("text", [
    'as_of = 2027-01-15\n[models.gpt-test]\ninput = 2.5\noutput = 10\n',
    '[prices]\nas_of = "2027-01-15"\n[prices.models.gpt-test]\ninput = 2.5\noutput = 10\n',
    '{"prices": {"as_of": "2027-01-15", "models": {"gpt-test": {"input": 2.5, "output": 10}}}}',
])
def test_update_from_toml_or_a_prices_table(home, tmp_path, text):
    source = write(tmp_path / "prices.txt", text)
    table, path, models = install_prices(source)
    assert table.as_of == "2027-01-15" and path == user_prices_path() and models == ["gpt-test"]
    assert load_config(tmp_path).prices.price_for("gpt-test").cache_write == 3.125


def test_the_projects_prices_lie_over_the_stored_table(home, tmp_path):
    install_prices(write(tmp_path / "p.json", json.dumps(GOOD)))
    project = tmp_path / "project"
    project.mkdir()
    write(project / "mesh.toml", "[prices.models.gpt-test]\ninput = 9\noutput = 9\n")
    prices = load_config(project).prices
    assert prices.as_of == "2027-01-15"  # the project's rows carry no date of their own
    assert prices.price_for("gpt-test").input == 9 and prices.price_for("claude-haiku-4-5").input == 0.8
    shown = mesh("prices", "--repo", str(project)).stdout
    assert shown.splitlines()[-1] == "the project's [prices] sets: gpt-test"

    write(project / "mesh.toml", "[prices]\nas_of = 2027-06-01\n")
    assert load_config(project).prices.as_of == "2027-06-01"
    # [tool.mesh] and --config files get the stored table too.
    (project / "mesh.toml").unlink()
    write(project / "pyproject.toml", "[tool.mesh]\nreview_max_cycles = 2\n")
    assert load_config(project).prices.price_for("gpt-test").input == 2.5
    write(project / "pyproject.toml", "[project]\nname = 'x'\n")
    assert load_config(project).prices.price_for("gpt-test").input == 2.5
    other = write(tmp_path / "other.toml", "review_max_cycles = 2\n")
    assert load_config(project, other).prices.as_of == "2027-01-15"


@pytest.mark.parametrize("name, text, message", [
    ("p.json", '{"as_of": "2027-01-15", "models": {', "invalid JSON: Expecting property name enclosed in double quotes (line 1)"),
    ("p.toml", "as_of = \n", "invalid TOML: Invalid value (at line 1, column 9)"),
    ("p.json", '{"prices": ["not", "a", "table"]}', "not a price table (expected as_of and models)"),
    ("p.json", '{"models": {"m": {"input": 1, "output": 2}}}', "missing 'as_of' (the date these prices are valid for)"),
    ("p.json", '{"as_of": "2027-01-15", "models": {}}', "no model prices (a 'models' table of rows)"),
    ("p.json", '{"as_of": "2027-01-15"}', "no model prices (a 'models' table of rows)"),
    ("p.json", '{"as_of": "last week", "models": {"m": {"input": 1, "output": 2}}}',
     "invalid value for 'as_of': Value error, must be a date YYYY-MM-DD"),
    ("p.json", '{"as_of": "2027-02-30", "models": {"m": {"input": 1, "output": 2}}}',
     "invalid value for 'as_of': Value error, must be a date YYYY-MM-DD"),
    ("p.json", '{"as_of": "2027-01-15", "models": {"m": {"input": -1, "output": 2}}}',
     # The cache rates derived from the bad input price are wrong too: counted, not listed.
     "invalid value for 'models.m.input': Input should be greater than or equal to 0 (and 2 more errors)"),
    ("p.json", '{"as_of": "2027-01-15", "models": {"m": {"input": 1}}}',
     "invalid value for 'models.m.output': Field required"),
    ("p.json", '{"as_of": "2027-01-15", "models": {"m": {"input": 1, "output": 2, "inptu": 3}}}',
     "unknown key 'models.m.inptu'"),
    ("p.json", '{"as_of": "2027-01-15", "currency": "EUR", "models": {"m": {"input": 1, "output": 2}}}',
     "unknown key 'currency'"),
    ("p.json", '{"as_of": "2027-01-15", "models": {"m": {"input": 1, "output": Infinity}}}',
     "invalid value for 'models.m.output': Input should be a finite number"),
    ("p.toml", 'as_of = 2027-01-15\n[models.m]\ninput = 1\noutput = nan\n',
     "invalid value for 'models.m.output': Input should be a finite number"),
    ("p.json", '{"as_of": "2027-01-15", "models": {"bad\\u001b[2Jname": {"input": 1, "output": 2}}}',
     "invalid value for 'models': Value error, bad model name 'bad\\x1b[2Jname'"),
    ("p.json", '{"as_of": "2027-01-15", "models": {"m": "cheap"}}',
     "invalid value for 'models.m': Input should be a valid dictionary or instance of ModelPrice"),
])
def test_a_malformed_file_is_refused_in_one_line_and_changes_nothing(home, tmp_path, name, text, message):
    install_prices(write(tmp_path / "good.json", json.dumps(GOOD)))
    before = user_prices_path().read_bytes()
    source = write(tmp_path / name, text)
    res = mesh("prices", "--update-from", str(source))
    assert res.exit_code == 2
    assert res.stderr == f"mesh: {source}: {message}\n"
    assert res.stdout == ""
    assert user_prices_path().read_bytes() == before
    assert [p.name for p in user_prices_path().parent.iterdir()] == ["prices.json"]  # no temporary left


def test_unreadable_sources_are_one_line(home, tmp_path):
    res = mesh("prices", "--update-from", str(tmp_path / "missing.json"))
    assert res.exit_code == 2 and res.stderr == f"mesh: {tmp_path / 'missing.json'}: no such file\n"
    binary = tmp_path / "p.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert mesh("prices", "--update-from", str(binary)).stderr == f"mesh: {binary}: not UTF-8 text\n"
    huge = write(tmp_path / "huge.json", '{"as_of": "2027-01-15", "models": {}}' + " " * 1_000_001)
    assert mesh("prices", "--update-from", str(huge)).stderr == \
        f"mesh: {huge}: larger than 1000000 bytes, not a price table\n"
    res = mesh("prices", "--json", "--update-from", str(tmp_path / "missing.json"))
    assert json.loads(res.stderr) == {"error": f"{tmp_path / 'missing.json'}: no such file", "code": 2}
    assert not user_prices_path().exists()


def test_a_damaged_stored_table_is_reported_naming_it(home, tmp_path):
    stored = user_prices_path()
    stored.parent.mkdir(parents=True)
    stored.write_text('{"as_of": "2027-01-15", "models": {"m": {"input": "lots", "output": 1}}}')
    with pytest.raises(ConfigError, match=f"^{stored}: invalid value for 'models.m.input'"):
        load_config(tmp_path)
    res = mesh("prices", "--repo", str(tmp_path))
    assert res.exit_code == 2 and res.stderr.startswith(f"mesh: {stored}: invalid value for 'models.m.input'")
    assert res.stderr.count("\n") == 1
    with pytest.raises(ConfigError):
        read_price_file(stored)


def test_a_price_the_config_reads_as_a_number_gets_its_cache_rates_and_a_wrong_one_is_named(home):
    """An input price written as text the config reads as a number ("2") has its cache rates
    filled in like any other; one it cannot read is the error named, not the cache rates it
    left out (the message once said 'cache_read: Field required')."""
    from orchestrator.config import config_prices
    from orchestrator.workspace import ConfigError

    row = config_prices({"prices": {"models": {"m": {"input": "2", "output": 8}}}}, "mesh.toml").models["m"]
    assert (row.input, row.cache_read, row.cache_write) == (2.0, 0.2, 2.5)
    with pytest.raises(ConfigError, match=r"prices\.models\.m\.input': Input should be a valid number"):
        config_prices({"prices": {"models": {"m": {"input": "two", "output": 8}}}}, "mesh.toml")
