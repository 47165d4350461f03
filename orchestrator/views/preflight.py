"""The preflight checkpoint as a person reads it.

The profile has a run print one machine line before any worker call (``orch_preflight
orch_run_id=... scope_mode=... key=value ...``); the run prints it, and the checkpoint keeps it
as its payload's ``line``, unchanged. Everywhere else (the run's summary, ``mesh show``, the task
page of ``mesh serve``, MCP progress) that line is rendered as a sentence instead: which run,
which scope, how many worker roles, which sandbox, which tasks.
"""

from __future__ import annotations

__all__ = ["PREFIX", "preflight_text", "readable_summary"]

PREFIX = "orch_preflight "


def _fields(line: str) -> dict[str, str]:
    out = {}
    for word in line.removeprefix(PREFIX).split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def preflight_text(line: str) -> str:
    """``run R on label plan:x: 5 worker role(s), validation sandbox bwrap, tasks A,B`` for a
    preflight line; any other line as it is."""
    if not line.startswith(PREFIX):
        return line
    f = _fields(line)
    scope = (f"label {f['plan_label']}" if f.get("plan_label") else f"epic {f['parent_epic']}"
             if f.get("parent_epic") else "no scope")
    parts = [f"{f.get('requested_workers', '?')} worker role(s)"
             + (f" (profile {f['profile']})" if f.get("profile") else "")]
    if f.get("sandbox"):
        parts.append(f"validation sandbox {f['sandbox']}")
    parts.append(f"tasks {f['ids']}" if f.get("ids") else "the scope's next task")
    return f"preflight: run {f.get('orch_run_id') or '?'} on {scope}: " + ", ".join(parts)


def readable_summary(kind: str, summary: str) -> str:
    """A checkpoint's summary line for a person: the preflight's rendered, any other as it is."""
    return preflight_text(summary) if kind == "preflight" else summary
