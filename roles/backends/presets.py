"""Worker presets for the agent CLIs people already run: Claude Code, Codex and OpenCode.

A preset is a ``command`` worker (``roles.backends.command``): the same minimal
environment plus ``worker_env``, the same launcher (bubblewrap under mesh's runner), the
prompt on stdin, the request's worktree as the working directory, the same timeout. What
it adds is the command line each CLI needs for one non-interactive call (print/exec mode,
JSON output, the role's model, read-only tools only: workers return artifacts, they never
edit files), reading the CLI's JSON output (the final text is the answer; usage and cost
where the CLI reports them), and mapping the CLI's failures to outcomes:

- the program is not installed: ``BackendError`` when the backend is built (exit 2);
- not logged in, or the key is refused: ``BackendError`` naming the key to pass through
  ``worker_env`` (exit 2: no retry can fix it);
- the model is unknown to the provider: ``BackendError`` naming ``models.<role>``;
- rate limited, overloaded, any other failed call, output that is not the CLI's JSON:
  ``no_response`` with a one-line detail (``rate_limited: ...``), so the profile retries
  once, then falls back or blocks;
- running past ``worker_timeout_s``: ``no_response`` with the timeout as the detail.

Settings a worktree could carry (Claude Code's project hooks and MCP servers, OpenCode's
project config, Codex's project rules) are never loaded: the worktree holds model-written
code, and those settings run commands. OpenCode loads a worktree's ``.opencode`` plugins
whatever it is told, so it is not run in a worktree that has one.
"""

from __future__ import annotations

import abc
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redact import scrub

from .base import Backend, BackendError, Usage, WorkerRequest, WorkerResponse
from .command import (DEFAULT_MAX_OUTPUT_BYTES, CommandBackend, Finished, Launcher, call_env, resolve_program,
                      run_process)

__all__ = [
    "PRESET_NAMES",
    "PLAIN_COMMAND",
    "WORKER_NAMES",
    "CliOutput",
    "Preset",
    "PRESETS",
    "PresetBackend",
    "WorkerTeam",
    "command_workers",
]

PLAIN_COMMAND = "command"
"""The worker name of the plain ``worker_cmd`` program, for per-role choices."""

_DETAIL_CHARS = 400


@dataclass
class CliOutput:
    """What one CLI run said: the answer, or the CLI's own failure message."""

    text: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    failure: str | None = None  # the CLI's error message; None when it answered
    status: int | None = None  # the HTTP status of the failure, where the CLI reports one


class Preset(abc.ABC):
    """How one agent CLI is called and read. Subclasses fill in the class attributes."""

    name: str
    program: str
    install_hint: str
    key_hint: str  # how to pass an API key instead of a login
    defaults: Mapping[str, str] = {}  # environment defaults a worker_env variable may override
    forced: Mapping[str, str] = {}  # environment settings nothing may override

    def cli_model(self, model: str | None) -> str | None:
        """The model argument this CLI takes for mesh's ``models.<role>`` value (None: the
        CLI's own default). ValueError when the CLI cannot use the value."""
        return model or None

    @abc.abstractmethod
    def command(self, program: str, model: str | None) -> list[str]:
        """The argv of one call (the prompt goes on stdin)."""

    @abc.abstractmethod
    def read(self, stdout: str) -> CliOutput:
        """The CLI's JSON output, read."""

    def refusal(self, worktree: Path | None) -> str | None:
        """Why this CLI must not run in ``worktree``, or None."""
        return None


class ClaudeCode(Preset):
    """``claude -p --output-format json``: one JSON result object on stdout."""

    name = "claude-code"
    program = "claude"
    install_hint = "npm install -g @anthropic-ai/claude-code"
    key_hint = 'log in once by running `claude`, or export ANTHROPIC_API_KEY and set worker_env = ["ANTHROPIC_API_KEY"]'
    # Two retries like the anthropic backend's default (the CLI's own default is ten, with
    # backoff: minutes before a refused key is reported). Nonessential traffic (telemetry,
    # auto-update) has no business in a worker call.
    defaults = {"CLAUDE_CODE_MAX_RETRIES": "2", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    # Read, Grep and Glob are the CLI's read-only tools; dontAsk denies anything a permission
    # rule would have to allow (reading outside the worktree included). Only the user's own
    # settings load: a worktree's .claude/settings.json hooks and .mcp.json servers run
    # commands, and the worktree holds model-written code.
    _FLAGS = ("-p", "--output-format", "json", "--tools", "Read,Grep,Glob", "--permission-mode", "dontAsk",
              "--setting-sources", "user", "--strict-mcp-config", "--no-session-persistence")

    def command(self, program: str, model: str | None) -> list[str]:
        """``claude -p --output-format json [--model M]`` with read-only tools."""
        return [program, *self._FLAGS, *(["--model", model] if model else [])]

    def read(self, stdout: str) -> CliOutput:
        """The last ``{"type": "result"}`` object: ``result`` is the answer, ``is_error`` a
        failure (``api_error_status`` its HTTP status), ``modelUsage`` the tokens of every
        model the call used and ``total_cost_usd`` its cost."""
        result = next((event for event in reversed(_json_lines(stdout)) if event.get("type") == "result"), None)
        if result is None:
            return CliOutput(failure=_no_json(self.name, stdout))
        usage = _claude_usage(result)
        model = _main_model(result.get("modelUsage"))
        status = result.get("api_error_status")
        status = status if isinstance(status, int) else None
        text = result.get("result")
        if result.get("is_error") or result.get("subtype") != "success":
            message = text if isinstance(text, str) and text.strip() else str(result.get("subtype") or "failed")
            return CliOutput(usage=usage, model=model, failure=message, status=status)
        return CliOutput(text=text if isinstance(text, str) else None, usage=usage, model=model)


class Codex(Preset):
    """``codex exec --json``: JSON Lines events (``thread.started``, ``item.completed``,
    ``turn.completed``, ``turn.failed``, ``error``)."""

    name = "codex"
    program = "codex"
    install_hint = "npm install -g @openai/codex"
    key_hint = 'log in once with `codex login`, or export CODEX_API_KEY and set worker_env = ["CODEX_API_KEY"]'
    # read-only: Codex's own sandbox lets its commands read, never write. --ignore-rules keeps
    # a worktree's execpolicy rules from widening that; --ephemeral leaves no session files.
    _FLAGS = ("exec", "--json", "--sandbox", "read-only", "--skip-git-repo-check", "--ephemeral", "--ignore-rules",
              "--color", "never")

    def cli_model(self, model: str | None) -> str | None:
        """Claude names (mesh's defaults) are left to Codex's configured model."""
        return None if not model or model.startswith("claude") else model

    def command(self, program: str, model: str | None) -> list[str]:
        """``codex exec --json --sandbox read-only ... [-m M] -`` (``-``: the prompt is stdin)."""
        return [program, *self._FLAGS, *(["-m", model] if model else []), "-"]

    def read(self, stdout: str) -> CliOutput:
        """The last ``agent_message`` item is the answer; ``turn.completed`` events carry the
        tokens (OpenAI's ``input_tokens`` include the cached ones); ``turn.failed`` is a
        failure. ``error`` events alone are the CLI reconnecting, unless nothing answered."""
        output = CliOutput()
        last_error = None
        for event in _json_lines(stdout):
            kind = event.get("type")
            item = event.get("item") if isinstance(event.get("item"), dict) else {}
            if kind == "item.completed" and item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                output.text = item["text"]
            elif kind == "turn.completed" and isinstance(event.get("usage"), dict):
                output.usage = output.usage + _codex_usage(event["usage"])
            elif kind == "turn.failed":
                error = event.get("error") if isinstance(event.get("error"), dict) else {}
                output.failure = str(error.get("message") or "turn failed")
            elif kind == "error":
                last_error = str(event.get("message") or "error")
        if output.failure is None and output.text is None:
            output.failure = last_error or _no_json(self.name, stdout)
        if output.failure is not None:
            output.text = None
            output.status = _status_in(output.failure)
        return output


class OpenCode(Preset):
    """``opencode run --format json``: JSON Lines events (``step_start``, ``text``,
    ``tool_use``, ``step_finish``, ``error``)."""

    name = "opencode"
    program = "opencode"
    install_hint = "npm install -g opencode-ai"
    key_hint = ("log in once with `opencode auth login`, or export the provider's key (ANTHROPIC_API_KEY, "
                'OPENAI_API_KEY, ...) and list it in worker_env, e.g. worker_env = ["ANTHROPIC_API_KEY"]')
    defaults = {"OPENCODE_DISABLE_AUTOUPDATE": "1"}
    # Denied tools are not offered to the model at all: what is left is read, grep and glob
    # (inside the worktree). The permission variable is merged over every config file; the
    # project's config (and the plugins and instructions it names) is not loaded at all.
    forced = {
        "OPENCODE_PERMISSION": json.dumps({name: "deny" for name in (
            "edit", "bash", "webfetch", "websearch", "task", "skill", "todowrite", "external_directory")}),
        "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    }

    def cli_model(self, model: str | None) -> str | None:
        """``provider/model`` as OpenCode names it; a bare Claude name gets ``anthropic/``."""
        if not model:
            return None
        if "/" in model:
            return model
        if model.startswith("claude"):
            return f"anthropic/{model}"
        raise ValueError(f"opencode names models provider/model (e.g. openai/{model}), got {model!r}")

    def command(self, program: str, model: str | None) -> list[str]:
        """``opencode run --format json [--model P/M]``."""
        return [program, "run", "--format", "json", *(["--model", model] if model else [])]

    def read(self, stdout: str) -> CliOutput:
        """The text parts of the last step are the answer; ``step_finish`` parts carry tokens
        and cost; an ``error`` event is a failure (``data.statusCode`` its HTTP status)."""
        output = CliOutput()
        texts: list[str] = []
        answered = False
        for event in _json_lines(stdout):
            kind = event.get("type")
            part = event.get("part") if isinstance(event.get("part"), dict) else {}
            if kind == "step_start":
                texts = []
            elif kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
                answered = True
            elif kind == "step_finish":
                output.usage = output.usage + _opencode_usage(part)
            elif kind == "error":
                error = event.get("error") if isinstance(event.get("error"), dict) else {}
                data = error.get("data") if isinstance(error.get("data"), dict) else {}
                output.failure = str(data.get("message") or error.get("name") or "error")
                if error.get("name") == "ProviderAuthError":
                    output.status = 401
                elif isinstance(data.get("statusCode"), int):
                    output.status = data["statusCode"]
        if output.failure is None:
            if answered:
                output.text = "".join(texts)
            else:
                output.failure = _no_json(self.name, stdout)
        return output

    def refusal(self, worktree: Path | None) -> str | None:
        """OpenCode loads the plugins and tools of a ``.opencode`` folder in its working
        directory whatever its flags and variables say (1.18, checked): code a patch could
        have written. So it does not run in a worktree that has one."""
        if worktree is not None and os.path.lexists(Path(worktree) / ".opencode"):
            return ("the opencode worker does not run in a worktree holding .opencode/ (opencode loads the"
                    " plugins there whatever its settings say): remove it, or choose another worker")
        return None


PRESETS: dict[str, Preset] = {preset.name: preset for preset in (ClaudeCode(), Codex(), OpenCode())}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)
WORKER_NAMES: tuple[str, ...] = (*PRESET_NAMES, PLAIN_COMMAND)

# Failures no retry can fix, recognised by status first and by the CLI's words otherwise.
_AUTH_WORDS = re.compile(
    r"not logged in|/login\b|authenticat|unauthori[sz]ed|invalid (x-)?api[ -]?key|incorrect api key|"
    r"api key is missing|missing environment variable|missing bearer|\b40[13]\b", re.I)
_RATE_WORDS = re.compile(r"rate.?limit|too many requests|\b429\b|quota|usage limit", re.I)
_MODEL_WORDS = re.compile(r"\b404\b|model\b.{0,80}\b(not found|does not exist|not supported)|"
                          r"issue with the selected model|not_found_error|model not found", re.I)


class PresetBackend(Backend):
    """One agent CLI as a ``command`` worker; each call is its own process, so thread-safe."""

    name = "command"

    def __init__(self, preset: str, *, models: Mapping[str, str] | None = None, timeout_s: float = 600,
                 env_names: Sequence[str] = (), launcher: Launcher | None = None,
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES):
        try:
            self._preset = PRESETS[preset]
        except KeyError:
            raise BackendError(f"unknown worker {preset!r}; choose one of {', '.join(PRESET_NAMES)}") from None
        if timeout_s <= 0:
            raise BackendError(f"the worker timeout must be positive, got {timeout_s}")
        program = resolve_program(self._preset.program)
        if program is None:
            raise BackendError(f"the {preset} worker needs `{self._preset.program}`, which is not on PATH:"
                               f" {self._preset.install_hint}")
        self._program = program
        self._models: dict[str, str | None] = {}
        for role, model in (models or {}).items():
            try:
                self._models[role] = self._preset.cli_model(model)
            except ValueError as exc:
                raise BackendError(f"models.{role} for the {preset} worker: {exc}") from None
        self._timeout_s = float(timeout_s)
        self._env_names = tuple(env_names)
        self._launcher = launcher
        self._max_output_bytes = int(max_output_bytes)

    def call(self, request: WorkerRequest) -> WorkerResponse:
        """Run the CLI once on the request's prompt and read its JSON output."""
        refusal = self._preset.refusal(request.worktree)
        if refusal:
            raise BackendError(refusal)
        model = self._models.get(request.role)
        env = call_env(request, self._env_names, extra=self._preset.defaults, forced=self._preset.forced)
        finished = run_process(self._preset.command(self._program, model), env, request,
                               timeout_s=self._timeout_s, launcher=self._launcher,
                               max_output_bytes=self._max_output_bytes)
        if isinstance(finished, WorkerResponse):
            finished.model = model
            return finished
        return self._answer(finished, model)

    def _answer(self, finished: Finished, model: str | None) -> WorkerResponse:
        output = self._preset.read(finished.stdout)
        model = output.model or model
        if output.failure is None and (output.text or "").strip():
            return WorkerResponse(text=output.text, usage=output.usage, model=model, duration_s=finished.duration_s,
                                  detail=_clean(finished.stderr_tail) if finished.returncode else None)
        name = self._preset.name
        failure = output.failure or f"{name} answered with empty text"
        if not _json_lines(finished.stdout):
            # No JSON at all: the CLI stopped before its first event, and said why on stderr.
            failure = f"exit status {finished.returncode}: {finished.stderr_tail or failure}"
        kind, message = _kind(output.status, failure), _clean(failure)
        if kind == "not_logged_in":
            raise BackendError(f"the {name} worker is not logged in ({message}): {self._preset.key_hint}")
        if kind == "model_unavailable":
            raise BackendError(f"the {name} worker cannot use model {model or '(its default)'} ({message}):"
                               f" check models.<role> in mesh.toml")
        return WorkerResponse(text=None, error="no_response", usage=output.usage, model=model,
                              duration_s=finished.duration_s, detail=f"{kind}: {name}: {message}")


class WorkerTeam(Backend):
    """Per-role workers behind one backend: each call goes to its role's worker."""

    name = "command"

    def __init__(self, by_role: Mapping[str, Backend]):
        self._by_role = dict(by_role)

    def call(self, request: WorkerRequest) -> WorkerResponse:
        """Ask the worker of ``request.role``."""
        try:
            backend = self._by_role[request.role]
        except KeyError:
            raise BackendError(f"no worker is configured for role {request.role!r}") from None
        return backend.call(request)

    def close(self) -> None:
        """Close every worker once."""
        for backend in {id(b): b for b in self._by_role.values()}.values():
            backend.close()


def command_workers(*, roles: Sequence[str], worker_cmd: str | None = None, worker: str | None = None,
                    workers: Mapping[str, str] | None = None, models: Mapping[str, str] | None = None,
                    timeout_s: float = 600, env_names: Sequence[str] = (),
                    launcher: Launcher | None = None, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> Backend:
    """The ``command`` backend of a run: each of ``roles`` gets ``workers[role]``, else
    ``worker``, else the plain ``worker_cmd`` program (``"command"`` names it in ``workers``).

    A preset's calls use ``models[role]``. Returns one worker when every role has the same,
    else a ``WorkerTeam``. Raises BackendError (one line) for a role without a worker, an
    unknown name, a missing program or a model the CLI cannot take.
    """
    chosen = {role: (workers or {}).get(role) or worker or (PLAIN_COMMAND if worker_cmd else None) for role in roles}
    unset = [role for role, name in chosen.items() if name is None]
    if unset:
        raise BackendError("the command backend needs --worker NAME (" + ", ".join(PRESET_NAMES)
                           + ") or --worker-cmd CMD (or worker / worker_cmd in the config)")
    for role, name in chosen.items():
        if name not in WORKER_NAMES:
            raise BackendError(f"unknown worker {name!r} for role {role}; choose one of {', '.join(WORKER_NAMES)}")
        if name == PLAIN_COMMAND and not worker_cmd:
            raise BackendError(f"role {role} uses the plain command worker, but worker_cmd is not set")
    built: dict[str, Backend] = {}
    for name in dict.fromkeys(chosen.values()):
        if name == PLAIN_COMMAND:
            built[name] = CommandBackend(worker_cmd or "", timeout_s, env_names=env_names, launcher=launcher,
                                         max_output_bytes=max_output_bytes)
        else:
            served = {role: (models or {})[role] for role, n in chosen.items() if n == name and role in (models or {})}
            built[name] = PresetBackend(name, models=served, timeout_s=timeout_s, env_names=env_names,
                                        launcher=launcher, max_output_bytes=max_output_bytes)
    if len(built) == 1:
        return next(iter(built.values()))
    return WorkerTeam({role: built[name] for role, name in chosen.items()})


# ---------------------------------------------------------------------------- reading output


def _json_lines(stdout: str) -> list[dict[str, Any]]:
    """Every line of ``stdout`` that is a JSON object (CLIs print warnings between them)."""
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0.0


def _claude_usage(result: Mapping[str, Any]) -> Usage:
    """``modelUsage`` summed over models (it counts every turn); the top-level ``usage`` when absent."""
    cost = _float(result.get("total_cost_usd"))
    per_model = result.get("modelUsage")
    if isinstance(per_model, dict) and per_model:
        rows = [row for row in per_model.values() if isinstance(row, dict)]
        return Usage(input_tokens=sum(_int(r.get("inputTokens")) for r in rows),
                     output_tokens=sum(_int(r.get("outputTokens")) for r in rows),
                     cache_read_tokens=sum(_int(r.get("cacheReadInputTokens")) for r in rows),
                     cache_write_tokens=sum(_int(r.get("cacheCreationInputTokens")) for r in rows),
                     cost_usd=cost)
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else {}
    return Usage(input_tokens=_int(usage.get("input_tokens")), output_tokens=_int(usage.get("output_tokens")),
                 cache_read_tokens=_int(usage.get("cache_read_input_tokens")),
                 cache_write_tokens=_int(usage.get("cache_creation_input_tokens")), cost_usd=cost)


def _main_model(per_model: Any) -> str | None:
    """The model that wrote the most output (Claude Code may also call a small model)."""
    if not isinstance(per_model, dict) or not per_model:
        return None
    name = max(per_model, key=lambda m: _int(per_model[m].get("outputTokens")) if isinstance(per_model[m], dict) else 0)
    return name if isinstance(name, str) else None


def _codex_usage(usage: Mapping[str, Any]) -> Usage:
    """Codex counts cached (and cache-written) input inside ``input_tokens``; mesh's
    ``input_tokens`` are the uncached ones, as the Anthropic API counts them."""
    cached, written = _int(usage.get("cached_input_tokens")), _int(usage.get("cache_write_input_tokens"))
    return Usage(input_tokens=max(0, _int(usage.get("input_tokens")) - cached - written),
                 output_tokens=_int(usage.get("output_tokens")), cache_read_tokens=cached,
                 cache_write_tokens=written)


def _opencode_usage(part: Mapping[str, Any]) -> Usage:
    """A ``step_finish`` part's tokens (reasoning is billed as output) and cost."""
    tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    return Usage(input_tokens=_int(tokens.get("input")),
                 output_tokens=_int(tokens.get("output")) + _int(tokens.get("reasoning")),
                 cache_read_tokens=_int(cache.get("read")), cache_write_tokens=_int(cache.get("write")),
                 cost_usd=_float(part.get("cost")))


def _status_in(message: str) -> int | None:
    """The HTTP status Codex quotes in its error messages (``unexpected status 401 ...``)."""
    found = re.search(r"\bstatus:? (\d{3})\b", message)
    return int(found.group(1)) if found else None


def _kind(status: int | None, message: str) -> str:
    """A failure's kind: ``not_logged_in``, ``model_unavailable``, ``rate_limited`` or ``failed``,
    from the HTTP status where the CLI gives one, else from its words."""
    if status in (401, 403) or (status is None and _AUTH_WORDS.search(message)):
        return "not_logged_in"
    if status == 429 or (status is None and _RATE_WORDS.search(message)):
        return "rate_limited"
    if status == 404 or (status is None and _MODEL_WORDS.search(message)):
        return "model_unavailable"
    return "failed"


def _no_json(name: str, stdout: str) -> str:
    shown = stdout.strip()
    return f"{name} printed no JSON result" + (f": {shown}" if shown else "")


def _clean(text: str) -> str:
    """One line, bounded, scrubbed of credentials (a CLI's error may quote a key)."""
    line = " ".join(scrub(text).split())
    return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 3] + "..."
