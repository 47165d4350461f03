"""Kit of the preset tests: fake agent CLIs that print what the real ones print.

A fake CLI is a real executable (a Python script named ``claude``, ``codex`` or ``opencode``)
in a folder put on PATH. It answers from a plan file beside it, one entry per call (per role,
consumed in order), and appends what it was given (argv, working directory, environment,
stdin) to ``<its folder>/<program>-calls.jsonl`` under HOME (``~/.claude``, ``~/.codex``,
``~/.local/share/opencode``): a sandboxed preset's HOME is the private one mesh keeps for it,
which sees nothing of the real HOME but the CLI's login file.

The outputs below were recorded from the real CLIs (Claude Code 2.1.197, Codex 0.169.0,
OpenCode 1.18.33) run against local fake APIs on 127.0.0.1: answers, refused keys, rate
limits, missing keys. The tool turns inside the successful runs (a Codex command, an
OpenCode file read) follow the event shapes the CLIs document. The answer text and the
token counts are the parts a test fills in.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

_FAKE = r'''
import fcntl, json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
program = os.path.basename(__file__)
prompt = sys.stdin.read()
home = os.path.join(os.environ.get("HOME", here), LOGIN[program])
os.makedirs(home, exist_ok=True)
role = os.environ.get("MESH_ROLE", "")
with open(os.path.join(home, f"{program}-state-{TAG}.json"), "a+") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    fh.seek(0)
    used = json.loads(fh.read() or "{}")
    plan = json.loads(PLAN)
    queue = plan.get(role) or plan["*"]
    key = role if plan.get(role) else "*"
    index = used.get(key, 0)
    used[key] = index + 1
    fh.seek(0); fh.truncate(); fh.write(json.dumps(used))
    entry = queue[min(index, len(queue) - 1)]
    with open(os.path.join(home, f"{program}-calls-{TAG}.jsonl"), "a") as log:
        log.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ),
                              "stdin": prompt, "role": role}) + "\n")
time.sleep(entry.get("sleep", 0))
sys.stdout.write(entry.get("stdout", ""))
sys.stderr.write(entry.get("stderr", ""))
sys.exit(entry.get("exit", 0))
'''


# Where each fake keeps its state and log: its CLI's folder under HOME (under mesh's sandbox, the
# private HOME mesh keeps for that program: see orchestrator.sandbox.worker_sandbox).
LOGIN = {"claude": ".claude", "codex": ".codex", "opencode": ".local/share/opencode"}


_INSTALLED: dict[str, str] = {}


def _tag(path: Path) -> str:
    return hashlib.sha1(str(path.absolute()).encode()).hexdigest()[:12]


def install_fake(bin_dir: Path, program: str, plan: dict[str, list[dict[str, Any]]]) -> Path:
    """Write the fake ``program`` into ``bin_dir`` with its ``plan`` (role, or ``*`` for any
    role, to a list of ``{"stdout", "stderr", "exit", "sleep"}`` entries); returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / program
    # The plan is inside the program: a sandboxed worker sees its own file, not the folder around it.
    # Its state and log are named after the fake's own path: the private HOME mesh keeps for
    # a program, repository and task may be shared by runs (and tests) that use it.
    tag = _tag(path)
    path.write_text(f"#!{sys.executable}\nLOGIN = {LOGIN!r}\nTAG = {tag!r}\nPLAN = {json.dumps(plan)!r}\n{_FAKE}",
                    encoding="utf-8")
    _INSTALLED[program] = tag
    path.chmod(0o755)
    return path


def make_home(home: Path) -> Path:
    """A HOME with each preset's login folder (what a private worker HOME shows of it)."""
    for folder in LOGIN.values():
        (home / folder).mkdir(parents=True, exist_ok=True)
    return home


def calls(home: Path, program: str) -> list[dict[str, Any]]:
    """What the fake ``program`` was given, call by call: run unsandboxed it logs under
    ``home``, sandboxed under the private HOMEs mesh keeps for it (per repository and task) in
    ``home``'s cache."""
    from orchestrator.worktree.gitops import cache_dir

    found: list[dict[str, Any]] = []
    private = {folder for root in (home / ".cache", cache_dir())
               for folder in (root / "mesh-worker-homes").glob(f"*/*/*/{program}")}
    for base in (home, *sorted(private)):
        log = base / LOGIN[program] / f"{program}-calls-{_INSTALLED.get(program, '')}.jsonl"
        if log.exists():
            found += [json.loads(line) for line in log.read_text().splitlines()]
    return found


def lines(*events: dict[str, Any]) -> str:
    """JSON Lines output."""
    return "".join(json.dumps(event) + "\n" for event in events)


# ------------------------------------------------------------------ Claude Code (--output-format json)

_CLAUDE_USAGE = {"server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0}, "service_tier": "standard",
                 "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
                 "inference_geo": "", "iterations": [], "speed": "standard"}


def claude_result(text: str, *, model: str = "claude-sonnet-4-6", input_tokens: int = 12, output_tokens: int = 40,
                  cache_read: int = 8346, cache_write: int = 120, cost: float = 0.0032) -> str:
    """A successful ``claude -p --output-format json`` result."""
    return json.dumps({
        "type": "result", "subtype": "success", "is_error": False, "api_error_status": None, "duration_ms": 262,
        "duration_api_ms": 68, "num_turns": 1, "result": text, "stop_reason": "end_turn",
        "session_id": "cbd5d9f0-b081-4980-b4b0-7d3e862a7c1e", "total_cost_usd": cost,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read, "output_tokens": output_tokens, **_CLAUDE_USAGE},
        "modelUsage": {model: {"inputTokens": input_tokens, "outputTokens": output_tokens,
                               "cacheReadInputTokens": cache_read, "cacheCreationInputTokens": cache_write,
                               "webSearchRequests": 0, "costUSD": cost, "contextWindow": 200000,
                               "maxOutputTokens": 32000}},
        "permission_denials": [], "terminal_reason": "completed", "fast_mode_state": "off",
        "uuid": "62e34f17-960c-4b36-a8c8-ce80c0f75f24"}) + "\n"


def claude_error(message: str, status: int | None) -> str:
    """A failed call as Claude Code reports it (exit status 1)."""
    return json.dumps({
        "type": "result", "subtype": "success", "is_error": True, "api_error_status": status, "duration_ms": 1042,
        "duration_api_ms": 0, "num_turns": 1, "result": message, "stop_reason": "stop_sequence",
        "session_id": "558def4d-f603-43d9-b384-7b85d5a4e70a", "total_cost_usd": 0,
        "usage": {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 0, **_CLAUDE_USAGE},
        "modelUsage": {}, "permission_denials": [], "terminal_reason": "completed", "fast_mode_state": "off",
        "uuid": "6cd80d46-73d8-4a22-8a40-6c5786dd3ad0"}) + "\n"


CLAUDE_NOT_LOGGED_IN = claude_error("Not logged in · Please run /login", None)
CLAUDE_BAD_KEY = claude_error("Invalid API key · Fix external API key", 401)
CLAUDE_RATE_LIMITED = claude_error(
    "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit", 429)
CLAUDE_OVERLOADED = claude_error(
    "API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment.", 529)
CLAUDE_NO_MODEL = claude_error(
    "There's an issue with the selected model (claude-nope). It may not exist or you may not have access to it."
    " Run --model to pick a different model.", 404)


# ------------------------------------------------------------------ Codex (exec --json)

_THREAD = {"type": "thread.started", "thread_id": "01a207f4-534d-75f1-bcac-1ed75095e9f8"}
_METADATA = {"type": "item.completed", "item": {"id": "item_0", "type": "error", "message":
             "Model metadata for `gpt-5` not found. Defaulting to fallback metadata; this can degrade performance"
             " and cause issues."}}


def codex_events(text: str, *, input_tokens: int = 1200, cached: int = 1000, output_tokens: int = 30) -> str:
    """A successful ``codex exec --json`` run: a reasoning item, a read-only command, the answer."""
    return lines(
        _THREAD, _METADATA, {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_1", "type": "reasoning", "text": "**Reading the task**"}},
        {"type": "item.started", "item": {"id": "item_2", "type": "command_execution", "command": "bash -lc ls",
                                          "aggregated_output": "", "exit_code": None, "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "item_2", "type": "command_execution", "command": "bash -lc ls",
                                            "aggregated_output": "README.md\n", "exit_code": 0,
                                            "status": "completed"}},
        {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": text}},
        {"type": "turn.completed", "usage": {"input_tokens": input_tokens, "cached_input_tokens": cached,
                                             "cache_write_input_tokens": 0, "output_tokens": output_tokens,
                                             "reasoning_output_tokens": 10}})


def codex_failure(message: str, retries: list[str] = ()) -> str:
    """A failed ``codex exec --json`` turn, after its reconnect attempts (exit status 1)."""
    return lines(_THREAD, _METADATA, {"type": "turn.started"},
                 *({"type": "error", "message": retry} for retry in retries),
                 {"type": "error", "message": message}, {"type": "turn.failed", "error": {"message": message}})


_CODEX_401 = ("unexpected status 401 Unauthorized: Incorrect API key provided: sk-test.,"
              " url: http://127.0.0.1:18765/v1/responses")
CODEX_BAD_KEY = codex_failure(_CODEX_401, [f"Reconnecting... {n}/5 ({_CODEX_401})" for n in range(1, 6)])
_CODEX_429 = "exceeded retry limit, last status: 429 Too Many Requests"
CODEX_RATE_LIMITED = codex_failure(_CODEX_429, [f"Reconnecting... {n}/5 ({_CODEX_429})" for n in range(1, 6)])
CODEX_NO_KEY = codex_failure("Missing environment variable: `OPENAI_API_KEY`.")


# ------------------------------------------------------------------ OpenCode (run --format json)

_SESSION = "ses_df807faf6ffeepBXFt5hlLi9vw"


def _oc(kind: str, part: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "timestamp": 1795430029060, "sessionID": _SESSION,
            "part": {"id": "prt_207f816de001y2SXDz96VoZFgV", "messageID": "msg_207f80e0a001X5Ta0HXkDOdFEV",
                     "sessionID": _SESSION, **part}}


def opencode_events(text: str, *, preamble: str = "Let me look at the code first.", cost: float = 0.0119625,
                    cache_write: int = 3174, output_tokens: int = 4) -> str:
    """A successful ``opencode run --format json``: a first step that reads a file, then the answer."""
    snapshot = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    return lines(
        _oc("step_start", {"snapshot": snapshot, "type": "step-start"}),
        _oc("text", {"type": "text", "text": preamble, "time": {"start": 1795430029027, "end": 1795430029036}}),
        _oc("tool_use", {"type": "tool", "callID": "toolu_01", "tool": "read",
                         "state": {"status": "completed", "input": {"filePath": "README.md"}, "output": "# demo"}}),
        _oc("step_finish", {"reason": "tool-calls", "snapshot": snapshot, "type": "step-finish", "cost": 0.002,
                            "tokens": {"total": 3200, "input": 20, "output": 6, "reasoning": 0,
                                       "cache": {"write": 0, "read": 3174}}}),
        _oc("step_start", {"snapshot": snapshot, "type": "step-start"}),
        _oc("text", {"type": "text", "text": text, "time": {"start": 1795430029027, "end": 1795430029036}}),
        _oc("step_finish", {"reason": "stop", "snapshot": snapshot, "type": "step-finish", "cost": cost,
                            "tokens": {"total": 3178, "input": 0, "output": output_tokens, "reasoning": 2,
                                       "cache": {"write": cache_write, "read": 0}}}))


def _oc_api_error(message: str, status: int, retryable: bool, error_type: str) -> str:
    body = json.dumps({"type": "error", "error": {"type": error_type, "message": message}})
    return lines({"type": "error", "timestamp": 1795430079962, "sessionID": _SESSION, "error": {
        "name": "APIError", "data": {
            "message": message, "statusCode": status, "isRetryable": retryable,
            "responseHeaders": {"content-length": str(len(body)), "content-type": "application/json",
                                "server": "BaseHTTP/0.6 Python/3.11.7"},
            "responseBody": body, "metadata": {"url": "http://127.0.0.1:44283/v1/messages"}}}})


OPENCODE_BAD_KEY = _oc_api_error("invalid x-api-key", 401, False, "authentication_error")
OPENCODE_RATE_LIMITED = _oc_api_error("Number of request tokens has exceeded your per-minute rate limit", 429,
                                      True, "rate_limit_error")
OPENCODE_NO_KEY = lines({"type": "error", "timestamp": 1795430122696, "sessionID": _SESSION, "error": {
    "name": "ProviderAuthError", "data": {"providerID": "anthropic", "message":
        "Anthropic API key is missing. Pass it using the 'apiKey' parameter or the ANTHROPIC_API_KEY"
        " environment variable."}}})
