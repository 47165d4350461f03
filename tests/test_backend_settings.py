"""The orchestrator's ``MeshConfig`` gives every member the backends' ``BackendConfig``
protocol names, with the same call signatures: the backends are typed by that protocol
(roles/ never imports the orchestrator), so a renamed setting must fail here, not in a run."""

from __future__ import annotations

import inspect
import typing

from orchestrator.config import MeshConfig
from roles.backends import settings


def _missing(value: object, protocol: type, where: str) -> list[str]:
    """Members of ``protocol`` that ``value`` lacks or offers with another signature,
    following nested protocols (``prices``, ``budget``...) into the values they name."""
    hints = {}
    for name, member in vars(protocol).items():
        if isinstance(member, property):
            hints[name] = typing.get_type_hints(member.fget, vars(settings))["return"]
    problems = []
    for name, member in vars(protocol).items():
        if name.startswith("_") or not (isinstance(member, property) or inspect.isfunction(member)):
            continue
        if not hasattr(value, name):
            problems.append(f"{where}.{name}")
            continue
        found = getattr(value, name)
        if inspect.isfunction(member):
            wanted = list(inspect.signature(member).parameters)[1:]
            if list(inspect.signature(found).parameters) != wanted:
                problems.append(f"{where}.{name}{inspect.signature(found)}")
        elif getattr(hints[name], "_is_protocol", False):
            problems += _missing(found, hints[name], f"{where}.{name}")
    return problems


def test_mesh_config_satisfies_the_backend_protocol():
    config = MeshConfig(budget={"max_usd": 1.0, "max_tokens": 1000})
    price = config.prices.price_for(config.model_for("proposer"))
    assert price is not None
    assert _missing(config, settings.BackendConfig, "config") == []
    assert _missing(price, settings.Price, "price") == []


def test_the_check_sees_a_missing_setting():
    class Partial:
        roles = ["proposer"]

        def model_for(self, role: str) -> str:
            return "m"

    assert _missing(Partial(), settings.BackendConfig, "config") == [
        "config.prices", "config.budget", "config.anthropic", "config.llm"]
