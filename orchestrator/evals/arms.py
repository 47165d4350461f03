"""What an eval compares: arms. An arm is a profile with its workers (backend, agent CLI preset or
worker command, models per role, batch mode), named by the user, optionally budget-matched to
another arm (it makes attempts until it spent, on each case, what that arm spent).

Arms come from ``[eval.arms]`` of ``mesh.toml`` (``--arm NAME``), from the command line
(``--arm 'NAME: profile=single worker-cmd="python3 w.py"'``), or from ``--profile P`` (an arm
named P, with the run's ``--backend``/``--worker``/``--worker-cmd``). Each arm's ``description``
(its workers as they will answer, the config's defaults filled in) is recorded in the eval and
in every result: an eval folder refuses to run an existing arm with other workers.

A run of an arm on a case is a *slot*: ``arm`` for the first trial's first attempt, ``arm.t2`` for
the second trial, ``arm.t2.a3`` for its third attempt (a budget-matched arm's). Arm names hold
no dot, so a slot names one (arm, trial, attempt).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from orchestrator.eval_settings import ARM_NAME, ArmConfig

__all__ = ["Arm", "ArmError", "arms_from", "parse_arm", "slot"]


class ArmError(ValueError):
    """An arm the user named cannot be made (unknown, malformed, matched to an arm not run): exit 2."""


@dataclass(frozen=True)
class Arm:
    """One arm: its name and its settings (``orchestrator.eval_settings.ArmConfig``)."""

    name: str
    config: ArmConfig

    @property
    def profile(self) -> str:
        return self.config.profile

    def backend(self, config: Any) -> str:
        """The backend its runs use: a worker or worker command is the command backend."""
        arm = self.config
        if arm.worker or arm.worker_cmd:
            return "command"
        return arm.backend or config.backend

    def models(self, config: Any) -> dict[str, str]:
        """The model of each role: the config's, under the arm's ``model`` (every role), under its ``models``."""
        every = {role: self.config.model for role in config.models} if self.config.model else {}
        return {**config.models, **every, **self.config.models}

    def description(self, config: Any) -> dict[str, Any]:
        """The arm as its runs will be answered: recorded in the eval and each result, and compared
        when an eval folder is run again (another worker under the same name is refused)."""
        arm, backend = self.config, self.backend(config)
        worker = arm.worker or (None if arm.worker_cmd or backend != "command" else config.worker)
        out: dict[str, Any] = {"profile": arm.profile, "backend": backend}
        if backend == "command":
            out["worker"] = worker
            out["worker_cmd"] = arm.worker_cmd or (None if worker else config.worker_cmd)
            if config.workers:
                out["workers"] = dict(sorted(config.workers.items()))
        if backend in ("anthropic", "llm"):
            out["models"] = dict(sorted(self.models(config).items()))
        if arm.batch or (backend == "anthropic" and config.anthropic.batch):
            out["batch"] = True
        if arm.match:
            out.update(match=arm.match, match_by=arm.match_by, max_attempts=arm.max_attempts)
        return out

    def run_args(self, config: Any) -> list[str]:
        """The ``mesh run`` flags that make a run of this arm (the profile, the workers, the models)."""
        arm = self.config
        args = ["--profile", arm.profile]
        if arm.worker:
            args += ["--worker", arm.worker]
        elif arm.worker_cmd:
            args += ["--worker-cmd", arm.worker_cmd]
        elif arm.backend:
            args += ["--backend", arm.backend]
        if self.backend(config) in ("anthropic", "llm"):
            for role, model in sorted(self.models(config).items()):
                if config.models.get(role) != model:
                    args += ["--model", f"{role}={model}"]
        if arm.batch:
            args.append("--batch")
        return args


def slot(arm: str, trial: int = 1, attempt: int = 1) -> str:
    """The name of one run of ``arm``: ``arm``, ``arm.t2``, ``arm.a3``, ``arm.t2.a3``."""
    return arm + (f".t{trial}" if trial > 1 else "") + (f".a{attempt}" if attempt > 1 else "")


_KEYS = {"profile", "backend", "worker", "worker_cmd", "model", "batch", "match", "match_by", "max_attempts"}


def parse_arm(text: str) -> tuple[str, dict[str, Any] | None]:
    """``NAME`` (an arm of ``[eval.arms]``: settings None) or ``NAME: key=value ...`` (its settings;
    values in shell quoting; ``models.ROLE=MODEL`` for one role's model; ``-`` and ``_`` alike in keys)."""
    name, colon, rest = text.partition(":")
    name = name.strip()
    if not re.match(ARM_NAME, name):
        raise ArmError(f"--arm {text!r}: an arm's name is letters, digits, '_' and '-' (at most 40), then"
                       " ': key=value ...' for its settings")
    if not colon:
        return name, None
    settings: dict[str, Any] = {}
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise ArmError(f"--arm {name}: {exc}") from None
    for word in words:
        key, equals, value = word.partition("=")
        key = key.strip().replace("-", "_")
        if not equals:
            raise ArmError(f"--arm {name}: {word!r} is no key=value")
        if key.startswith("models."):
            settings.setdefault("models", {})[key.removeprefix("models.")] = value
        elif key in _KEYS:
            settings[key] = value.lower() in ("1", "true", "yes") if key == "batch" else value
        else:
            raise ArmError(f"--arm {name}: unknown key {key!r} (known: {', '.join(sorted(_KEYS))}, models.ROLE)")
    return name, settings


def arms_from(config: Any, *, specs: list[str], profiles: list[str], run_args: dict[str, str | None]) -> list[Arm]:
    """The arms of ``mesh eval run``, in order (the first is the reference unless ``--reference``
    says): each ``--arm`` (by name from ``[eval.arms]``, or with its settings), then each
    ``--profile`` as an arm of that name. ``run_args`` (``backend``, ``worker``, ``worker_cmd`` of
    the command line) fill in an arm that names no worker of its own."""
    arms: list[Arm] = []
    defaults = {key: value for key, value in run_args.items() if value}
    for text in specs:
        name, settings = parse_arm(text)
        if settings is None:
            if name not in config.eval.arms:
                known = ", ".join(config.eval.arms) or "none"
                raise ArmError(f"--arm {name}: no such arm in [eval.arms] (there: {known}); or give its"
                               f" settings: --arm '{name}: profile=single worker-cmd=...'")
            found = config.eval.arms[name]
            settings = found.model_dump(exclude_defaults=True)
        arms.append(_arm(name, settings, defaults))
    arms += [_arm(profile, {"profile": profile}, defaults) for profile in profiles]
    names = [arm.name for arm in arms]
    if len(set(names)) != len(names):
        raise ArmError(f"an arm is named twice: {sorted({n for n in names if names.count(n) > 1})}")
    for arm in arms:
        if arm.config.match and arm.config.match not in names:
            raise ArmError(f"arm {arm.name} is budget-matched to {arm.config.match}, which this eval does not run:"
                           f" add --arm {arm.config.match}")
        if arm.config.match:
            target = next(a for a in arms if a.name == arm.config.match)
            if target.config.match:
                raise ArmError(f"arm {arm.name} is matched to {target.name}, which is itself budget-matched")
    return arms


def _arm(name: str, settings: dict[str, Any], defaults: dict[str, str]) -> Arm:
    if not any(settings.get(key) for key in ("backend", "worker", "worker_cmd")):
        settings = {**defaults, **settings}
    try:
        return Arm(name, ArmConfig.model_validate(settings))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in error['loc']) or 'arm'}: {error['msg']}"
                             for error in exc.errors())
        raise ArmError(f"arm {name}: {problems}") from None
