"""The ``[eval]`` table of ``mesh.toml``: what ``mesh eval`` compares (arms) and how older history
is run (per-range environments). Validated like the rest of the config (``orchestrator.config``
holds it as ``MeshConfig.eval``); plain pydantic models, no behaviour.

```toml
[eval.arms.team]                  # an arm: a profile with its workers
profile = "full"
backend = "anthropic"
model = "claude-sonnet-4-5"       # every role
models = { synthesizer = "claude-opus-4-1" }   # per role, over ``model``

[eval.arms.solo]
profile = "single"
worker = "claude-code"
match = "team"                    # budget-matched: attempts until it spent what ``team`` spent
match_by = "tokens"               # or "usd"

[[eval.history]]                  # commits before ``before`` (its ancestors) run with this
before = "v2.0"
setup = "python setup.py build_ext --inplace"
env = { PYTEST_ADDOPTS = "-p no:cacheprovider" }
```
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ARM_NAME", "ArmConfig", "EvalConfig", "EvalEnv", "HistoryRange"]

# An arm's name: a folder and a file name of the eval (results/<case>/<arm>.json), a plan label's part.
ARM_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"
PROFILES = ("full", "lite", "single", "candidates")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class ArmConfig(_Strict):
    """One arm: the profile a run goes through, and the workers that answer it. Unset fields are
    the config's own (``backend``, ``models``, ``worker_cmd``)."""

    profile: Literal["full", "lite", "single", "candidates"] = "full"
    backend: Literal["replay", "command", "anthropic", "llm"] | None = None
    worker: Literal["claude-code", "codex", "opencode"] | None = None
    worker_cmd: str | None = None
    model: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    batch: bool = False
    # Budget-matched to another arm: attempts until this arm spent, on each case, what that arm spent.
    match: str | None = Field(default=None, pattern=ARM_NAME)
    match_by: Literal["tokens", "usd"] = "tokens"
    max_attempts: int = Field(default=8, ge=1, le=100)

    @model_validator(mode="after")
    def _one_worker(self) -> "ArmConfig":
        if self.worker and self.worker_cmd:
            raise ValueError("an arm names worker or worker_cmd, not both")
        if (self.worker or self.worker_cmd) and self.backend not in (None, "command"):
            raise ValueError(f"a worker or worker_cmd is a command worker; not backend {self.backend}")
        return self


class HistoryRange(_Strict):
    """How the commits before a revision run: a setup command before the tests (in the same
    sandbox and tree), environment variables for both."""

    before: str = Field(min_length=1)
    setup: str | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value


class EvalEnv(_Strict):
    """``[[eval.env]]``: a Python environment some cases are run and graded in (SWE-bench's spec
    of a repository version: its Python, its pinned packages, its test command). A case takes the
    first entry whose ``versions`` hold its instance's version, else the first whose ``before``
    comes after its base; mesh builds each once (``orchestrator.evals.environments``)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    # SWE-bench's ``version`` of the instances it serves ("5.0"), and/or a revision whose
    # ancestors it serves (a base range, as ``[[eval.history]]``).
    versions: list[str] = Field(default_factory=list)
    before: str | None = None
    # A version ("3.8": a ``python3.8`` on PATH or under pyenv) or an interpreter's path.
    python: str = Field(min_length=1)
    # pip requirements, pinned as the spec pins them ("pytest<8", "numpy==1.26.4").
    packages: list[str] = Field(default_factory=list)
    # More arguments to pip (a mirror: ["--index-url", "..."]; offline: ["--no-index", "--find-links", "DIR"]).
    pip_args: list[str] = Field(default_factory=list)
    # The instance's test command, ``{tests}`` standing for its test files (else --command's).
    test_command: str | None = None
    # What makes the virtualenv and installs the packages: uv (much faster, its own cache), pip
    # (the Python's venv and pip), or "auto": uv when it is on PATH or beside mesh's Python, else pip.
    installer: Literal["auto", "uv", "pip"] = "auto"

    @model_validator(mode="after")
    def _serves_something(self) -> "EvalEnv":
        if not self.versions and not self.before:
            raise ValueError(f"[[eval.env]] {self.name}: name the instance versions it serves, or before = REV")
        return self


class EvalConfig(_Strict):
    """`[eval]`: the arms ``mesh eval run --arm NAME`` takes by name, the history ranges and the
    environments cases run in."""

    arms: dict[str, ArmConfig] = Field(default_factory=dict)
    history: list[HistoryRange] = Field(default_factory=list)
    env: list[EvalEnv] = Field(default_factory=list)

    @field_validator("arms")
    @classmethod
    def _check_arms(cls, value: dict[str, ArmConfig]) -> dict[str, ArmConfig]:
        for name, arm in value.items():
            if not re.match(ARM_NAME, name):
                raise ValueError(f"arm name {name!r}: letters, digits, '_' and '-' (at most 40)")
            if arm.match is not None and arm.match not in value:
                raise ValueError(f"arm {name!r} is matched to {arm.match!r}, which is no arm of [eval.arms]")
            if arm.match == name:
                raise ValueError(f"arm {name!r} cannot be matched to itself")
        return value
