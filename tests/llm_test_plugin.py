"""A test-only ``llm`` plugin: real ``llm.Model`` subclasses that answer mesh's prompts
from a script, registered the way llm's own test suite registers its mock model (a
``register_models`` hookimpl on an object given to ``llm.plugins.pm.register``).

``Script`` routes each prompt by the role and round it names (``# Your role: X``,
``# Round: X``) to that role's queue, like a replay script. An entry is a replay-style dict
``{"round": ..., "text": ..., "resolved"?: ...}`` (``resolved``: the model id the provider
reports having used, ``response.set_resolved_model``) or a ``Fault``: an exception to raise, or a hang that lasts
until the script is released. Every prompt a model receives is recorded in ``seen``.

Three models, under the plugin name ``scripted`` (provider ``scripted``):

- ``scripted/json`` (alias ``sj``) supports schemas and reports usage the way llm's OpenAI
  plugin does: cached tokens inside ``input``, under ``prompt_tokens_details``, with a
  simulated prefix cache of the system prompt;
- ``scripted/text`` (alias ``plain-text``) has no schema support and reports bare usage;
- ``scripted/keyed`` needs a key (``llm keys set scripted`` or ``MESH_TEST_SCRIPTED_KEY``) and
  says which key it was given only through ``seen``.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import llm
from llm.plugins import pm
from pydantic import Field

PLUGIN_NAME = "scripted"
KEY_ENV = "MESH_TEST_SCRIPTED_KEY"


def count_tokens(text: str) -> int:
    """The plugin's token count: four characters a token, rounded up."""
    return (len(text) + 3) // 4


class ProviderError(Exception):
    """What a provider SDK raises for an HTTP error: the status rides on the exception."""

    def __init__(self, status_code: int, message: str):
        super().__init__(message)
        self.status_code = status_code


class ProviderTimeout(Exception):
    """A provider SDK's own timeout class (named like openai's APITimeoutError)."""


@dataclass
class Fault:
    """A scripted failure: ``error`` is raised, or with ``hang`` the call blocks until
    ``Script.release()``."""

    error: BaseException | None = None
    hang: bool = False
    round: str | None = None


@dataclass
class Seen:
    """One prompt a scripted model received."""

    model_id: str
    role: str | None
    round: str | None
    system: str
    prompt: str
    schema: dict | None
    options: dict[str, Any]
    key: str | None = None


@dataclass
class Script:
    """Per-role queues of answers, shared by the scripted models."""

    queues: dict[str, deque] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._cached_prefixes: set[str] = set()

    @classmethod
    def of(cls, script: Mapping[str, Iterable[Any]]) -> Script:
        """A script from a replay-shaped mapping: role -> list of entries."""
        return cls(queues={role: deque(entries) for role, entries in script.items()})

    def release(self) -> None:
        """End every hang (the test is over)."""
        self._released.set()

    def cached(self, prefix: str) -> bool:
        """Whether ``prefix`` was sent before (and remember it now)."""
        with self._lock:
            hit = prefix in self._cached_prefixes
            self._cached_prefixes.add(prefix)
            return hit

    def answer(self, seen: Seen) -> dict[str, Any]:
        """The next entry of the prompt's role, or the fault it scripts raised."""
        with self._lock:
            self.seen.append(seen)
            queue = self.queues.get(seen.role or "")
            entry = queue.popleft() if queue else None
        if entry is None:
            self._problem(f"no scripted answer left for role {seen.role!r} (round {seen.round!r})")
            raise ProviderError(500, "script exhausted")
        expected = entry.round if isinstance(entry, Fault) else entry.get("round")
        if expected and expected != seen.round:
            self._problem(f"role {seen.role}: scripted round {expected!r}, asked {seen.round!r}")
            raise ProviderError(500, "round mismatch")
        if isinstance(entry, Fault):
            if entry.hang:
                self._released.wait()
                raise ProviderError(500, "released after the test")
            raise entry.error
        return entry

    def _problem(self, text: str) -> None:
        with self._lock:
            self.problems.append(text)


def _named(pattern: str, *texts: str) -> str | None:
    for text in texts:
        found = re.search(pattern, text or "", re.M)
        if found:
            return found.group(1)
    return None


class _Scripted:
    """What the scripted models share: routing a prompt to the script and counting usage."""

    model_id: str
    cache_details = False

    class Options(llm.Options):
        max_tokens: int | None = Field(default=None, description="Output limit of one answer.")
        temperature: float | None = Field(default=None, description="Sampling temperature.")

    def __init__(self, script: Script):
        self.script = script

    def _run(self, prompt: llm.Prompt, response: llm.Response, key: str | None) -> Iterator[str]:
        system, text = prompt.system or "", prompt.prompt or ""
        seen = Seen(model_id=self.model_id, role=_named(r"^# Your role: (\S+)", text, system),
                    round=_named(r"^# Round: ([\w-]+)", system, text), system=system, prompt=text,
                    schema=prompt.schema, options=prompt.options.model_dump(exclude_none=True), key=key)
        entry = self.script.answer(seen)
        answer = entry["text"]
        if entry.get("resolved"):
            response.set_resolved_model(entry["resolved"])
        input_tokens = count_tokens(system) + count_tokens(text)
        details = None
        if self.cache_details and system and self.script.cached(system):
            details = {"prompt_tokens_details": {"cached_tokens": count_tokens(system)}}
        response.set_usage(input=input_tokens, output=count_tokens(answer), details=details)
        yield answer


class ScriptedSchemaModel(_Scripted, llm.Model):
    """Supports schemas; OpenAI-style usage details with a simulated prefix cache."""

    model_id = "scripted/json"
    supports_schema = True
    cache_details = True

    def execute(self, prompt, stream, response, conversation):
        yield from self._run(prompt, response, None)


class ScriptedTextModel(_Scripted, llm.Model):
    """No schema support: mesh must rely on the prompt and the tolerant parser."""

    model_id = "scripted/text"
    supports_schema = False

    def execute(self, prompt, stream, response, conversation):
        yield from self._run(prompt, response, None)


class ScriptedKeyModel(_Scripted, llm.KeyModel):
    """Needs the ``scripted`` key, from llm's keys.json or ``MESH_TEST_SCRIPTED_KEY``."""

    model_id = "scripted/keyed"
    needs_key = PLUGIN_NAME
    key_env_var = KEY_ENV
    supports_schema = True

    def execute(self, prompt, stream, response, conversation, key):
        yield from self._run(prompt, response, key)


class ScriptedPlugin:
    """The plugin object: registers the three scripted models on one script."""

    __name__ = "ScriptedPlugin"

    def __init__(self, script: Script):
        self.script = script

    @llm.hookimpl
    def register_models(self, register):
        register(ScriptedSchemaModel(self.script), aliases=("sj",))
        register(ScriptedTextModel(self.script), aliases=("plain-text",))
        register(ScriptedKeyModel(self.script))


@contextlib.contextmanager
def registered(script: Script) -> Iterator[Script]:
    """Register the scripted models for the block; hangs are released on the way out."""
    pm.register(ScriptedPlugin(script), name=PLUGIN_NAME)
    try:
        yield script
    finally:
        script.release()
        pm.unregister(name=PLUGIN_NAME)
