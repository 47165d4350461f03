"""mesh configuration: `mesh.toml`, or `[tool.mesh]` in `pyproject.toml`.

Every key has the profile's default, and every table is a pydantic model with
``extra="forbid"``: a misspelt key is an error naming the file and the key, never a
silently ignored setting. The models are frozen; ``MeshConfig.with_overrides`` makes the
changed copy that command-line flags need.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from redact.known import SIGNING_KEY_ENV
from orchestrator.worktree.policy import check_pattern
from orchestrator.workspace import ConfigError, config_table
from orchestrator.eval_settings import EvalConfig
from orchestrator.forges.settings import ForgeConfig
from orchestrator.price_rows import (
    DEFAULT_PRICE_ROWS as _DEFAULT_PRICE_ROWS,
    DEFAULT_PRICES_AS_OF,
    MODEL_NAME,
    PRICE_FILE_MAX_BYTES,
    cost_usd,
    price_date,
    user_prices_path,
    with_cache_rates,
)
from roles.backends.command import split_command
from roles.bounds import AnswerBounds
from roles.backends.presets import PRESET_NAMES, WORKER_NAMES

TYPE_CHECKING = False
if TYPE_CHECKING:  # the sandbox's modules load when a config names commands or its limits are read
    from orchestrator.sandbox.bwrap import Limits
    from orchestrator.sandbox.worker_sandbox import WorkerLimits

__all__ = [
    "ConfigError",
    "DEFAULT_FALLBACK_ROLES",
    "DEFAULT_MODELS",
    "DEFAULT_PRICES_AS_OF",
    "DEFAULT_ROLES",
    "KNOWN_ROLES",
    "PROFILE_NAMES",
    "ProfilesConfig",
    "ALWAYS_PROTECTED",
    "AnswersConfig",
    "AnthropicConfig",
    "LlmConfig",
    "BudgetConfig",
    "MeshConfig",
    "ModelPrice",
    "PatchConfig",
    "PriceTable",
    "ValidationConfig",
    "load_config",
    "price_file_data",
    "read_price_file",
    "user_price_table",
    "user_prices_path",
]

KNOWN_ROLES: tuple[str, ...] = (
    "proposer",
    "critic_a",
    "critic_b",
    "skeptic",
    "synthesizer",
    "reviewer",
)
DEFAULT_ROLES: tuple[str, ...] = KNOWN_ROLES
DEFAULT_FALLBACK_ROLES: tuple[str, ...] = ("proposer", "skeptic", "synthesizer")
REVIEWER_ROLE = "reviewer"
ALWAYS_PROTECTED: tuple[str, ...] = ("main", "master")

# Writing roles get the stronger model; the critics and the skeptic only object and vote.
DEFAULT_MODELS: dict[str, str] = {
    "proposer": "claude-sonnet-4-6",
    "critic_a": "claude-haiku-4-5",
    "critic_b": "claude-haiku-4-5",
    "skeptic": "claude-haiku-4-5",
    "synthesizer": "claude-sonnet-4-6",
    "reviewer": "claude-sonnet-4-6",
}

_THRESHOLD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_MODEL_NAME_RE = re.compile(MODEL_NAME)


def _over_defaults(defaults: dict[str, Any], value: Any) -> Any:
    """A user's table laid over the defaults (left alone when it is not a table: pydantic says why)."""
    return {**defaults, **value} if isinstance(value, dict) else value


class _Strict(BaseModel):
    # Frozen so a loaded config cannot drift during a run; with_overrides makes copies.
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_env_names(value: list[str]) -> list[str]:
    """Environment variable names a user passes through; the signing key never is one."""
    for name in value:
        if not _ENV_NAME_RE.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if name == SIGNING_KEY_ENV:
            raise ValueError(f"{SIGNING_KEY_ENV} never leaves mesh's process")
    return value


class ValidationConfig(_Strict):
    """`[validation]`: which commands may run and how."""

    allow: list[str] = Field(default_factory=list)
    required: bool = True
    timeout_s: float = Field(default=300.0, gt=0)
    max_output_bytes: int = Field(default=65536, gt=0)
    sandbox: Literal["bwrap", "none"] = "bwrap"
    env: list[str] = Field(default_factory=list)
    cpu_limit_s: int = Field(default=600, gt=0)
    # For the whole process tree of a command, its /tmp and HOME included, where control groups
    # can be made (preflight says); else per process.
    memory_limit_mb: int = Field(default=4096, gt=0)
    file_size_limit_mb: int = Field(default=1024, gt=0)
    max_processes: int = Field(default=512, gt=0)
    tree_growth_mb: int = Field(default=1024, gt=0)
    # The project's environment (orchestrator.sandbox.project_env): an interpreter, or a virtualenv;
    # unset, it is found (VIRTUAL_ENV, .venv/, venv/, uv, Poetry, Hatch).
    python: str | None = None
    env_dir: str | None = None
    # Validate the run's base tree too (once per run) and fail a candidate whose test runner ran
    # fewer tests there: the cost is one more run of each passing test command per run.
    compare_base: bool = True
    # A test that passed on the base and fails in validation is run again alone this many times
    # before it counts; one that then passes is reported as flaky (0: never run again).
    flaky_retries: int = Field(default=1, ge=0, le=5)
    # The base check (orchestrator.toolchains.base_check): the project's check command run on the
    # base tree before any worker call, once per base commit. ``check`` unset: the detected
    # toolchains' check commands that ``allow`` admits. ``allow_failing_base``: record what fails on
    # the base and count only new failures against a patch.
    base_check: bool = True
    check: list[str] = Field(default_factory=list)
    allow_failing_base: bool = False
    # Untracked files of the checkout (globs from the repository root) copied into the tree copy
    # where the commit has no such file, and commands run in the sandbox on the tree copy before
    # each validation command (admitted by ``allow`` like any validation command).
    carry: list[str] = Field(default_factory=list)
    setup: list[str] = Field(default_factory=list)
    # The bound of each toolchain's build cache of a project (orchestrator.toolchains.caches).
    build_cache_mb: int = Field(default=4096, gt=0)

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, value: list[str]) -> list[str]:
        if value:
            from orchestrator.sandbox.allowlist import parse_allow_entry
        for entry in value:
            try:
                parse_allow_entry(entry)
            except ValueError as exc:
                raise ValueError(f"bad allow entry {entry!r}: {exc}") from None
        return value

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: list[str]) -> list[str]:
        return _check_env_names(value)

    @field_validator("carry")
    @classmethod
    def _check_carry(cls, value: list[str]) -> list[str]:
        for pattern in value:
            parts = pattern.replace("\\", "/").split("/")
            if not pattern or pattern.startswith("/") or ".." in parts or ".git" in parts:
                raise ValueError(f"bad carry pattern {pattern!r}: a glob relative to the repository, inside it")
        return value

    @model_validator(mode="after")
    def _setup_is_allowed(self) -> "ValidationConfig":
        if self.setup or self.check:
            from orchestrator.sandbox.allowlist import explain, is_allowed
        for command in [*self.setup, *self.check]:
            if not is_allowed(command, self.allow):
                raise ValueError(f"{command!r} (setup or check) is not admitted by validation.allow:"
                                 f" {explain(command, self.allow)}")
        return self

    @property
    def limits(self) -> Limits:
        """The per-process resource limits of a validation command."""
        from orchestrator.sandbox.bwrap import Limits
        return Limits(cpu_s=self.cpu_limit_s, memory_mb=self.memory_limit_mb, file_size_mb=self.file_size_limit_mb,
                      max_processes=self.max_processes, tree_growth_mb=self.tree_growth_mb)


class WorkerLimitsConfig(_Strict):
    """`[worker_limits]`: what one command worker call may take (orchestrator.sandbox.worker_sandbox).

    ``memory_mb`` and ``max_processes`` cap the call's whole process tree (a control group;
    without one, memory per process), ``home_growth_mb`` and ``home_files`` what its private HOME
    may grow by (bytes on disk, entries),
    ``max_output_mb`` its answer on stdout. A call past one fails as ``no_response`` naming it.
    """

    memory_mb: int = Field(default=2048, gt=0)
    max_processes: int = Field(default=256, gt=0)
    home_growth_mb: int = Field(default=1024, gt=0)
    home_files: int = Field(default=20000, gt=0)
    max_output_mb: int = Field(default=4, gt=0)

    @property
    def limits(self) -> WorkerLimits:
        """The caps the worker sandbox applies to each call."""
        from orchestrator.sandbox.worker_sandbox import WorkerLimits
        return WorkerLimits(memory_mb=self.memory_mb, max_processes=self.max_processes,
                            home_growth_mb=self.home_growth_mb, home_files=self.home_files)


class AnswersConfig(_Strict):
    """`[answers]`: what of a worker's answer mesh takes, and so carries into later prompts
    (roles.bounds); an answer past a bound is refused as ``invalid_shape``. The patch's own
    bound is ``patch.max_bytes``."""

    max_field_chars: int = Field(default=AnswerBounds.max_field_chars, gt=0)
    max_answer_chars: int = Field(default=AnswerBounds.max_answer_chars, gt=0)


class BudgetConfig(_Strict):
    """`[budget]`: optional ceilings on a run's spend."""

    max_usd: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)


PROFILE_NAMES: tuple[str, ...] = ("full", "lite", "single", "candidates")


class ProfilesConfig(_Strict):
    """`[profiles]`: the settings of the leaner profiles (docs/protocol.md, "Profiles")."""

    # lite: the one critic who critiques the proposal.
    lite_critic: Literal["critic_a", "critic_b", "skeptic"] = "skeptic"
    # single: how many patches the one agent may write against failing validation before review.
    single_attempts: int = Field(default=3, ge=1, le=10)
    # candidates: the roles that each write a candidate (each with its own models.<role> or
    # workers.<role>: different models or agent CLIs make different candidates).
    candidates: list[Literal["proposer", "critic_a", "critic_b", "skeptic", "synthesizer"]] = Field(
        default_factory=lambda: ["synthesizer", "proposer", "critic_a"], min_length=2, max_length=5)

    @field_validator("candidates")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a role is listed twice")
        return value


class DrainConfig(_Strict):
    """`[drain]`: defaults of ``mesh drain``."""

    jobs: int = Field(default=1, ge=1, le=64)
    onto: str | None = None
    # The branch the integration branch follows (merged in before a task starts); None: the one
    # checked out when the scope's branch was first used, recorded in the tracker.
    base: str | None = None
    # A git remote shared by several runners: task branches are cut from and landed on its
    # integration branch (``--remote``); None pushes nothing.
    remote: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class TrackerConfig(_Strict):
    """`[tracker]`: where the tracker lives when neither ``--db`` nor ``MESH_DB`` says."""

    # A SQLite path, ``sqlite:///relative`` / ``sqlite:////absolute`` or ``postgresql://user@host/db``. Keep passwords out
    # of files: PGPASSWORD or ~/.pgpass are read by the driver.
    url: str | None = None


class PatchConfig(_Strict):
    """`[patch]`: size limits on the synthesizer's diff, and its protected-path policy
    (``protected`` adds glob patterns to ``orchestrator.worktree.policy.DEFAULT_PROTECTED``,
    ``allow`` permits patterns the defaults refuse)."""

    max_bytes: int = Field(default=1_000_000, gt=0)
    max_files: int = Field(default=200, gt=0)
    protected: list[str] = Field(default_factory=list)
    allow: list[str] = Field(default_factory=list)

    @field_validator("protected", "allow")
    @classmethod
    def _check_patterns(cls, value: list[str]) -> list[str]:
        return [check_pattern(pattern) for pattern in value]


class AnthropicConfig(_Strict):
    """`[anthropic]`: settings of the Messages API backend."""

    max_retries: int = Field(default=2, ge=0)
    timeout_s: float = Field(default=120.0, gt=0)
    max_tokens: int = Field(default=8192, gt=0)
    max_tool_turns: int = Field(default=8, ge=0)  # 0: no repository tools
    context_tokens: int = Field(default=20000, gt=0)
    # Batch mode (the Message Batches API, half price): calls made at the same time go out as
    # one batch, gathered for batch_window_s, looked at every batch_poll_s, given up (and
    # cancelled) after batch_timeout_s; the API itself expires a batch after 24 hours.
    batch: bool = False
    batch_window_s: float = Field(default=1.0, gt=0, le=60)
    batch_poll_s: float = Field(default=10.0, gt=0, le=3600)
    batch_timeout_s: float = Field(default=86400.0, gt=0, le=86400)

    @model_validator(mode="after")
    def _batch_times(self) -> "AnthropicConfig":
        if self.batch_poll_s > self.batch_timeout_s:
            raise ValueError("batch_poll_s must not exceed batch_timeout_s")
        return self


class LlmConfig(_Strict):
    """`[llm]`: settings of the backend that calls models through the ``llm`` library."""

    timeout_s: float = Field(default=600.0, gt=0)
    # llm options per model name as written in [models] ("gpt-4.1" = {temperature = 0.2});
    # each model's own Options class checks them when the backend starts.
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)


class ModelPrice(_Strict):
    """USD per million tokens for one model.

    Cache rates left out follow Anthropic's published multipliers of the input price:
    reads at 0.1x, 5-minute writes at 1.25x.
    """

    # A price of infinity would turn every cost figure and budget check into inf.
    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cache_read: float = Field(ge=0, allow_inf_nan=False)
    cache_write: float = Field(ge=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _fill_cache_rates(cls, data: Any) -> Any:
        return with_cache_rates(data)

    cost_usd = cost_usd  # the price in USD of one call's token usage (price_rows.cost_usd)


class PriceTable(_Strict):
    """`[prices]`: a dated price table; user rows are merged over the defaults."""

    as_of: str = DEFAULT_PRICES_AS_OF
    models: dict[str, ModelPrice] = Field(
        default_factory=lambda: {name: ModelPrice(**row) for name, row in _DEFAULT_PRICE_ROWS.items()}
    )

    @field_validator("as_of", mode="before")
    @classmethod
    def _check_as_of(cls, value: Any) -> str:
        # TOML has a native date type; it is taken as well as the quoted form.
        as_of = price_date(value)
        if as_of is None:
            raise ValueError("must be a date YYYY-MM-DD")
        return as_of

    @field_validator("models", mode="before")
    @classmethod
    def _merge_defaults(cls, value: Any) -> Any:
        return _over_defaults(_DEFAULT_PRICE_ROWS, value)

    @field_validator("models")
    @classmethod
    def _check_model_names(cls, value: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        # Names are printed in tables on a terminal: no control characters, no blanks.
        for name in value:
            if not _MODEL_NAME_RE.match(name):
                raise ValueError(f"bad model name {name!r}")
        return value

    def price_for(self, model: str) -> ModelPrice | None:
        """The price row of ``model``, or None when the table does not know it."""
        return self.models.get(model)


class MeshConfig(_Strict):
    """The whole configuration of a mesh run (ARCHITECTURE section 6)."""

    roles: list[str] = Field(default_factory=lambda: list(DEFAULT_ROLES))
    fallback_roles: list[str] = Field(default_factory=lambda: list(DEFAULT_FALLBACK_ROLES))
    # The rounds a run goes through (orchestrator.protocol.profiles): "full" (the mesh profile),
    # "lite", "single" or "candidates"; their settings in [profiles].
    profile: Literal["full", "lite", "single", "candidates"] = "full"
    profiles: ProfilesConfig = Field(default_factory=ProfilesConfig)
    consensus_threshold: str = "4/5"
    consensus_retries: int = Field(default=2, ge=0)
    review_max_cycles: int = Field(default=3, ge=1)
    review_required_for_close: bool = True
    # The issue types a run or drain takes from its scope (the profile's "task"; add "bug" to run
    # bugs too). Epics group tasks: they never run.
    runnable_types: list[Literal["task", "bug", "feature", "chore"]] = Field(default_factory=lambda: ["task"],
                                                                             min_length=1)
    # Who gives round E's review: a reviewer worker, or a person (orchestrator.protocol.human_review:
    # the run waits at the review gate for ``mesh review``); a task or epic labelled review:human
    # always waits for a person. ``human_review_poll_s``: how often a waiting run looks.
    reviewer: Literal["worker", "human"] = "worker"
    human_review_poll_s: float = Field(default=1.0, gt=0, le=60)
    strict_output: bool = False
    integrate: bool = True
    backend: Literal["replay", "command", "anthropic", "llm"] = "replay"
    worker_cmd: str | None = None
    worker: str | None = None  # an agent CLI preset for every role of the command backend
    workers: dict[str, str] = Field(default_factory=dict)  # role -> preset (or "command": worker_cmd)
    worker_timeout_s: float = Field(default=600.0, gt=0)
    worker_env: list[str] = Field(default_factory=list)
    # The HOME a command worker sees (orchestrator.sandbox.worker_sandbox): "private" (the default; "auto"
    # is its old name) is a folder of its own, plus a preset's login file read-only; "real" is
    # the user's HOME, writable, announced on every start.
    worker_home: Literal["private", "real", "auto"] = "private"
    # The network of a command worker: "auto" gives it a namespace of its own where pasta works
    # (the outside, not the host's loopback services), "isolated" requires that, "host" shares
    # the host's. ``worker_loopback_ports`` are forwarded to the host's loopback besides the
    # ports of loopback URLs in the variables the worker is passed (a local model endpoint).
    worker_network: Literal["auto", "isolated", "host"] = "auto"
    worker_loopback_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list)
    # The hosts a command worker in a namespace of its own may reach besides its preset's model
    # APIs and the hosts of URLs in its environment (orchestrator.sandbox.egress): "host",
    # "host:port", "*.suffix"; "*" is the whole internet (announced on every start).
    worker_egress: list[str] = Field(default_factory=list)
    worker_limits: WorkerLimitsConfig = Field(default_factory=WorkerLimitsConfig)
    answers: AnswersConfig = Field(default_factory=AnswersConfig)
    # Folders or files a command worker may read besides what it sees anyway (docs/workers.md):
    # never HOME, nor one holding the repository or the tracker.
    worker_read_only: list[str] = Field(default_factory=list)
    models: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_MODELS))
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    protected_branches: list[str] = Field(default_factory=lambda: list(ALWAYS_PROTECTED))
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    # "local": closed by the run; "ci": closed by mesh ci-close (or mesh forge sync on merge);
    # "forge": closed once its pull request's required checks pass ([forge], docs/pull-requests.md).
    close_mode: Literal["local", "ci", "forge"] = "local"
    lease_ttl_s: float = Field(default=60.0, gt=0)
    # A process mesh started as a worker (MESH_WORKER set) may start mesh runs or drains itself
    # (orchestrator.runner.refuse_nested_run): off, so an agent cannot recurse into mesh by accident.
    allow_nested_runs: bool = False
    drain: DrainConfig = Field(default_factory=DrainConfig)
    tracker: TrackerConfig = Field(default_factory=TrackerConfig)
    patch: PatchConfig = Field(default_factory=PatchConfig)
    anthropic: AnthropicConfig = Field(default_factory=AnthropicConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    prices: PriceTable = Field(default_factory=PriceTable)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    forge: ForgeConfig | None = None

    @model_validator(mode="after")
    def _forge_token_stays_with_mesh(self) -> "MeshConfig":
        if self.forge is not None:
            for name, what in ((self.forge.token_name(), "the forge's token (forge.token_env)"),
                               (self.forge.webhook_secret_env, "the forge webhook's secret (forge.webhook_secret_env)")):
                if name and (name in self.worker_env or name in self.validation.env):
                    raise ValueError(f"{name} is {what}: it may not be passed to workers"
                                     " (worker_env) or validation (validation.env)")
        elif self.close_mode == "forge":
            raise ValueError('close_mode = "forge" needs a [forge] table (docs/pull-requests.md)')
        return self

    @field_validator("roles", "fallback_roles")
    @classmethod
    def _check_role_names(cls, value: list[str]) -> list[str]:
        for role in value:
            if role not in KNOWN_ROLES:
                raise ValueError(f"unknown role {role!r} (known: {', '.join(KNOWN_ROLES)})")
        if len(set(value)) != len(value):
            raise ValueError("a role is listed twice")
        return value

    @field_validator("worker_env")
    @classmethod
    def _check_worker_env(cls, value: list[str]) -> list[str]:
        return _check_env_names(value)

    @field_validator("worker_cmd")
    @classmethod
    def _check_worker_cmd(cls, value: str | None) -> str | None:
        if value is not None:
            split_command(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _presets_choose_command(cls, data: Any) -> Any:
        # A worker preset is a command worker: naming one is enough to choose that backend.
        if isinstance(data, dict) and "backend" not in data and (data.get("worker") or data.get("workers")):
            data = {**data, "backend": "command"}
        return data

    @field_validator("worker")
    @classmethod
    def _check_worker(cls, value: str | None) -> str | None:
        if value is not None and value not in PRESET_NAMES:
            raise ValueError(f"unknown worker {value!r} (known: {', '.join(PRESET_NAMES)})")
        return value

    @field_validator("workers")
    @classmethod
    def _check_workers(cls, value: dict[str, str]) -> dict[str, str]:
        for role, name in value.items():
            if role not in KNOWN_ROLES:
                raise ValueError(f"unknown role {role!r} (known: {', '.join(KNOWN_ROLES)})")
            if name not in WORKER_NAMES:
                raise ValueError(f"unknown worker {name!r} for {role} (known: {', '.join(WORKER_NAMES)})")
        return value

    @field_validator("consensus_threshold")
    @classmethod
    def _check_threshold(cls, value: str) -> str:
        match = _THRESHOLD_RE.match(value)
        if not match:
            raise ValueError(f"must be 'N/M', got {value!r}")
        needed, total = int(match.group(1)), int(match.group(2))
        if not 1 <= needed <= total:
            raise ValueError(f"needs 1 <= N <= M, got {value!r}")
        return f"{needed}/{total}"

    @field_validator("models", mode="before")
    @classmethod
    def _merge_models(cls, value: Any) -> Any:
        # A user naming one role's model keeps the defaults of the others.
        return _over_defaults(DEFAULT_MODELS, value)

    @field_validator("models")
    @classmethod
    def _check_models(cls, value: dict[str, str]) -> dict[str, str]:
        for role, model in value.items():
            if role not in KNOWN_ROLES:
                raise ValueError(f"unknown role {role!r} (known: {', '.join(KNOWN_ROLES)})")
            if not model.strip():
                raise ValueError(f"empty model name for role {role!r}")
        return value

    @field_validator("protected_branches")
    @classmethod
    def _always_protect_main(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern.strip():
                raise ValueError("empty branch pattern")
        # main and master stay protected whatever the user's list says.
        return list(value) + [name for name in ALWAYS_PROTECTED if name not in value]

    @model_validator(mode="after")
    def _check_consistency(self) -> "MeshConfig":
        for needed in ("proposer", "synthesizer"):
            if needed not in self.roles:
                raise ValueError(f"roles must include {needed!r}")
        if self.review_required_for_close and REVIEWER_ROLE not in self.roles:
            raise ValueError("roles must include 'reviewer' while review_required_for_close is true")
        for role in self.fallback_roles:
            if role == REVIEWER_ROLE:
                raise ValueError("fallback_roles are voting roles; 'reviewer' cannot be one")
            if role not in self.roles:
                raise ValueError(f"fallback role {role!r} is not in roles")
        total = int(self.consensus_threshold.split("/")[1])
        if total != len(self.voting_roles):
            raise ValueError(
                f"consensus_threshold {self.consensus_threshold!r} expects {total} voting roles, "
                f"roles has {len(self.voting_roles)}"
            )
        return self

    @property
    def voting_roles(self) -> list[str]:
        """The roles that vote: every role but the reviewer, in configured order."""
        return [role for role in self.roles if role != REVIEWER_ROLE]

    @property
    def consensus_needed(self) -> int:
        """How many agree votes the full role set needs (N of ``N/M``)."""
        return int(self.consensus_threshold.split("/")[0])

    @property
    def fallback_consensus_needed(self) -> int:
        """How many agree votes the fallback set needs: all of them (3/3 by default)."""
        return len(self.fallback_roles)

    @property
    def answer_bounds(self) -> AnswerBounds:
        """What of a worker's answer the parser takes: ``[answers]`` and ``patch.max_bytes``."""
        return AnswerBounds(max_field_chars=self.answers.max_field_chars,
                            max_answer_chars=self.answers.max_answer_chars, max_patch_bytes=self.patch.max_bytes)

    def model_for(self, role: str) -> str:
        """The model name configured for ``role``; ConfigError for a role mesh does not know."""
        try:
            return self.models[role]
        except KeyError:
            raise ConfigError(f"no model configured for role {role!r}") from None

    # Where the configuration was read (a file, or "defaults"): preflight prints it.
    _source: str = PrivateAttr(default="defaults")

    @property
    def source(self) -> str:
        """The file this configuration came from (``mesh.toml``, ``pyproject.toml [tool.mesh]``),
        or ``defaults`` when none was found."""
        return self._source

    def with_overrides(self, **overrides: Any) -> "MeshConfig":
        """A validated copy with command-line overrides applied.

        Keyword names are top-level keys (``integrate=False``); a nested key is written
        with a double underscore (``budget__max_usd=1.5``). A value of None means "flag
        not given" and leaves the key alone, so a CLI can pass its options straight in.
        """
        data = self.model_dump()
        for name, value in overrides.items():
            if value is None:
                continue
            path = name.split("__")
            target = data
            for part in path[:-1]:
                if part not in target or not isinstance(target[part], dict):
                    raise ConfigError(f"command line: unknown key {'.'.join(path)!r}")
                target = target[part]
            if path[-1] not in target:
                raise ConfigError(f"command line: unknown key {'.'.join(path)!r}")
            target[path[-1]] = value.model_dump() if isinstance(value, BaseModel) else value
        changed = _validate(data, "command line")
        changed._source = self._source
        return changed


def _error_key(loc: tuple[Any, ...]) -> str:
    # pydantic reports positions inside lists as ints and validator names as strings
    # that are not keys; keep only what a user could have typed.
    return ".".join(str(part) for part in loc if not isinstance(part, int)) or "(top level)"


def _one_line(exc: ValidationError, source: str, key_prefix: str = "") -> str:
    """A validation error as one line naming the source and the first bad key."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    key = key_prefix + _error_key(first["loc"])
    if first["type"] == "extra_forbidden":
        message = f"{source}: unknown key {key!r}"
    elif not first["loc"]:
        message = f"{source}: {first['msg']}"
    else:
        message = f"{source}: invalid value for {key!r}: {first['msg']}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return message.replace("\n", " ")


def _validate(data: dict[str, Any], source: str, key_prefix: str = "") -> MeshConfig:
    try:
        config = MeshConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, source, key_prefix)) from None
    config._source = source
    return config


def load_config(repo: Path | None = None, config_file: Path | None = None) -> MeshConfig:
    """Load the configuration of ``repo`` (default: the current directory).

    An explicit ``config_file`` (shaped like ``mesh.toml``) wins; else the nearest of
    ``config_folders(repo)`` that holds a ``mesh.toml`` or a ``pyproject.toml`` with a
    ``[tool.mesh]`` table (a ``mesh.toml`` before a ``pyproject.toml`` of the same folder), so
    a run started in a subfolder of the project reads the project's config; else the
    defaults. ``MeshConfig.source`` says which. The price table is the one exception to
    "files are never merged": the user's stored table (``user_prices_path``) is laid over the
    built-in rows, and the project's ``[prices]`` over that. Any problem raises ConfigError
    with a one-line message naming the file and the key.
    """
    table, source = config_table(repo, config_file)
    return _validate(_with_user_prices(table), source)


def config_prices(table: dict[str, Any], source: str) -> PriceTable:
    """The price table a raw config ``table`` (``config_table``) gives, validated as
    ``load_config`` validates it, without the rest of the config: the built-in rows, the
    user's stored table over them, the project's ``[prices]`` over that. ConfigError with one
    line naming the file and the key."""
    data = _with_user_prices(table)
    return _validate({"prices": data["prices"]} if "prices" in data else {}, source).prices


def _from_pyproject(data: dict[str, Any], source: str) -> MeshConfig:
    tool = data.get("tool", {})
    section = tool.get("mesh") if isinstance(tool, dict) else None
    if section is None:
        return _validate(_with_user_prices({}), "defaults")
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: [tool.mesh] must be a table")
    return _validate(_with_user_prices(section), f"{source} [tool.mesh]")


def config_from_text(mesh_toml: str | None, pyproject: str | None, source: str) -> MeshConfig:
    """The configuration a ``mesh.toml`` text gives, else a ``pyproject.toml`` text's
    ``[tool.mesh]``, else the defaults: ``load_config`` for files read elsewhere than the
    file system (``mesh ci-close`` reads them from the protected branch's git objects)."""
    for text, name in ((mesh_toml, "mesh.toml"), (pyproject, "pyproject.toml")):
        if text is None:
            continue
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}:{name}: invalid TOML: {exc}") from None
        if name == "mesh.toml":
            return _validate(_with_user_prices(data), f"{source}:{name}")
        return _from_pyproject(data, f"{source}:{name}")
    return _validate(_with_user_prices({}), "defaults")


# ------------------------------------------------------------------ the user's price table


def read_price_file(path: Path) -> PriceTable:
    """A dated price table from a JSON or TOML file (``price_file_data``), its rows laid over
    the built-in ones. Raises ConfigError with one line naming the file."""
    data = price_file_data(path)
    try:
        return PriceTable.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, str(path))) from None


def price_file_data(path: Path) -> dict[str, Any]:
    """The price table a JSON or TOML file holds, not yet validated: ``{"as_of": ...,
    "models": {...}}``, or the same under a ``prices`` table (a ``mesh.toml`` holding only
    ``[prices]``). A file opening with ``{`` is read as JSON, any other as TOML. ``as_of``
    and at least one model row are required. ConfigError with one line naming the file
    otherwise."""
    path = Path(path)
    try:
        if path.stat().st_size > PRICE_FILE_MAX_BYTES:
            raise ConfigError(f"{path}: larger than {PRICE_FILE_MAX_BYTES} bytes, not a price table")
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: invalid JSON: {exc.msg} (line {exc.lineno})") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}".replace("\n", " ")) from None
    if isinstance(data, dict) and set(data) == {"prices"}:
        data = data["prices"]
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a price table (expected as_of and models)")
    if "as_of" not in data:
        raise ConfigError(f"{path}: missing 'as_of' (the date these prices are valid for)")
    if not isinstance(data.get("models"), dict) or not data["models"]:
        raise ConfigError(f"{path}: no model prices (a 'models' table of rows)")
    return data


def user_price_table() -> PriceTable:
    """The price table without a project: the built-in rows with the user's stored table
    (when there is one) laid over them. ConfigError if the stored table is damaged."""
    path = user_prices_path()
    return read_price_file(path) if path.is_file() else PriceTable()


def _with_user_prices(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the user's stored price table under its own ``[prices]`` (row by row,
    and ``as_of`` unless the project dates its own table)."""
    path = user_prices_path()
    project = data.get("prices", {})
    if not path.is_file() or not isinstance(project, dict) or not isinstance(project.get("models", {}), dict):
        return data  # a malformed [prices] is reported by validation, naming the project's file
    base = read_price_file(path)
    rows = {name: row.model_dump() for name, row in base.models.items()}
    prices = {**project, "as_of": project.get("as_of", base.as_of), "models": {**rows, **project.get("models", {})}}
    return {**data, "prices": prices}
