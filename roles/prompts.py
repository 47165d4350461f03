"""Build each worker's prompt from the Jinja2 templates in ``templates/``.

A prompt has two parts. ``shared`` is identical for every role answering the same round
with the same inputs (system text, task metadata, repository context, the round's input
artifacts and instructions), so a backend can cache it as one prefix. ``role_part``
follows it: the role's brief, messages other roles sent it, the answer format, and, on
a strict follow-up, the correction.

Templates (``templates/``):

- ``_shared.j2``: system text, task metadata and repository context.
- ``<round>.j2``: block ``shared`` (the round's inputs and instructions) and block
  ``shape`` (the artifact's JSON shape).
- ``_role.j2``: the role part; ``strict_followup.j2``: the correction appended to it.
- ``_artifacts.j2``: macros that show prior artifacts.

``task`` keys: ``id`` (required), ``title``, ``description``, ``design``,
``acceptance_criteria``, ``notes``; missing or None values become empty strings and
other keys are ignored.

``inputs`` keys (artifacts are ``model_dump()`` dicts or the models themselves; each is
validated against its schema, so a malformed one fails here, not mid-render):

- ``subject``: what a critique or vote is about: ``"proposal"`` (critique's default),
  ``"synthesis"`` (vote's default) or ``"revision_plan"``.
- ``proposal``: shown in synthesis (a synthesis without one is a single author's), required by
  a critique of the proposal; shown in a vote
  on the synthesis when given.
- ``critiques``: ``{role: critique}``; shown in synthesis, vote, revision-plan
  (critiques of the previous plan) and revision (critiques of the agreed plan).
- ``synthesis``: required by review and by a vote on the synthesis; in review it is the
  latest synthesis or revision.
- ``review``: the review artifact that requested changes; required by revision-plan,
  revision, and a critique or vote on a revision plan.
- ``revision_plan``: shown in revision (without one the revision answers the review directly),
  required by a critique or vote on a revision plan; in
  revision-plan it is the previous plan that failed to reach consensus.
- ``prior_votes``: ``{role: vote}`` of the previous consensus cycle (critique, synthesis,
  revision-plan).
- ``validation``: review: a list of ``{command, exit_code, passed}`` with optional
  ``rejected`` (bool), ``output`` (str, its tail is shown), ``reason`` (why it failed beyond
  its exit code, such as ``no_tests_ran``) and ``tests`` (the runner's counts: ``ran``,
  ``failed``, ``errors``, ``skipped``).
- ``diff``: review, revision-plan, revision: the task branch's cumulative patch text.
- ``prior_reviews``: review: the earlier cycles' review artifacts, oldest first.
- ``review_cycle``: review: the current cycle number.
- ``allowed_commands``: synthesis and revision: the project's ``validation.allow`` entries,
  the only forms of validation command that will run.
- ``candidates``: choice: ``{name: {"patch", "validation"}}``, the candidate changes whose
  validation passed, in the order they are shown.

Missing optional keys default to empty values before rendering; an unknown key is a
ValueError, so a misspelt input cannot silently vanish from the prompt.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, Template
from pydantic import BaseModel

from .validation_text import failure_text, verdict_notes
from .definitions import ALL_ROLES, CANDIDATE_BRIEF, OUTBOX_ROUNDS, ROLE_BRIEFS, ROUNDS, round_owner, round_roles
from .schemas import (
    CritiqueArtifact,
    ProposalArtifact,
    ReviewArtifact,
    RevisionPlanArtifact,
    SynthesisArtifact,
    VoteArtifact,
)

__all__ = ["Prompt", "build_prompt", "INPUT_KEYS"]

INPUT_KEYS = (
    "subject",
    "proposal",
    "critiques",
    "synthesis",
    "review",
    "revision_plan",
    "prior_votes",
    "validation",
    "diff",
    "prior_reviews",
    "review_cycle",
    "allowed_commands",
    "candidates",
)

_TASK_KEYS = ("id", "title", "description", "design", "acceptance_criteria", "notes")
_SUBJECTS = {"critique": ("proposal", "revision_plan"), "vote": ("synthesis", "revision_plan")}
_SUBJECT_NEEDS = {
    "proposal": ("proposal",),
    "synthesis": ("synthesis",),
    "revision_plan": ("revision_plan", "review"),
}
# A synthesis without proposal and critiques is one agent's own (the single and candidates
# profiles); a revision without a plan answers the review directly (lite, single, candidates).
_REQUIRED = {
    "review": ("synthesis",),
    "revision-plan": ("review",),
    "choice": ("candidates",),
}
_PATCH_ROUNDS = ("synthesis", "revision")
_MAX_OUTPUT_CHARS = 6000


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: the cacheable ``shared`` prefix, then the ``role_part``."""

    shared: str
    role_part: str

    @property
    def text(self) -> str:
        """The whole prompt as one string."""
        return self.shared + self.role_part


def build_prompt(
    round: str,
    role: str,
    *,
    task: Mapping[str, Any],
    inputs: Mapping[str, Any],
    repo_context: str = "",
    strict: bool = False,
    attempt: int = 1,
    parse_error: str | None = None,
    outbox: Sequence[Mapping[str, str]] = (),
) -> Prompt:
    """Render the prompt for ``role`` answering ``round``.

    ``inputs`` holds the round's input artifacts (keys in the module docstring);
    ``outbox`` the messages other roles sent this role, each ``{"message", "from"?}``.
    When ``attempt`` > 1 and ``parse_error`` is given, the strict follow-up correction
    is appended to the role part; a retry after no response (no ``parse_error``) gets
    the plain prompt again. Raises ValueError for an unknown round, a role that does
    not answer the round, a missing required input or an unknown input key.
    """
    _check_role(round, role)
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more, got {attempt}")
    environment = _environment()
    task_values = _task_values(task)
    round_template = environment.get_template(f"{round}.j2")

    shared = environment.get_template("_shared.j2").render(
        task=task_values, repo_context=repo_context or ""
    ) + _render_block(round_template, "shared", _round_values(round, inputs))

    role_values = {
        "role": role,
        "role_brief": CANDIDATE_BRIEF if round == "synthesis" and role != round_owner(round) else ROLE_BRIEFS[role],
        "task_id": task_values["id"],
        "strict": strict,
        "shape": _render_block(round_template, "shape", {}).strip(),
        "outbox": [_outbox_values(message) for message in outbox],
        "outbox_allowed": round in OUTBOX_ROUNDS,
        "patch_round": round in _PATCH_ROUNDS,
        "roles": ALL_ROLES,
        "attempt": attempt,
        "parse_error": parse_error,
    }
    role_part = environment.get_template("_role.j2").render(role_values)
    if attempt > 1 and parse_error:
        role_part += environment.get_template("strict_followup.j2").render(role_values)
    return Prompt(shared=shared, role_part=role_part)


def _check_role(round: str, role: str) -> None:
    if round not in ROUNDS:
        raise ValueError(f"unknown round {round!r}; expected one of {', '.join(ROUNDS)}")
    if role not in ROLE_BRIEFS:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ALL_ROLES)}")
    allowed = round_roles(round)
    if role not in allowed:
        raise ValueError(f"role {role!r} does not answer the {round} round ({', '.join(allowed)} do)")


@cache
def _environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(str(files("templates"))),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["fenced"] = _fenced
    environment.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False)
    return environment


def _render_block(template: Template, name: str, values: Mapping[str, Any]) -> str:
    return "".join(template.blocks[name](template.new_context(dict(values))))


def _fenced(text: str, lang: str = "") -> str:
    """Wrap ``text`` in a code fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def _task_values(task: Mapping[str, Any]) -> dict[str, str]:
    values = {key: "" if task.get(key) is None else str(task.get(key)).strip() for key in _TASK_KEYS}
    if not values["id"]:
        raise ValueError("task needs an 'id'")
    return values


def _round_values(round: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the round's inputs and fill every template variable, defaults included."""
    unknown = sorted(set(inputs) - set(INPUT_KEYS))
    if unknown:
        raise ValueError(f"unknown prompt input(s) {', '.join(unknown)}; known: {', '.join(INPUT_KEYS)}")
    subjects = _SUBJECTS.get(round)
    subject = inputs.get("subject") or (subjects[0] if subjects else None)
    required = list(_REQUIRED.get(round, ()))
    if subjects is not None:
        if subject not in subjects:
            raise ValueError(f"{round} subject must be one of {', '.join(subjects)}, got {subject!r}")
        required.extend(_SUBJECT_NEEDS[subject])
    missing = [key for key in required if inputs.get(key) is None]
    if missing:
        raise ValueError(f"the {round} round needs input(s) {', '.join(missing)}")

    validation = [_validation_values(result) for result in inputs.get("validation") or ()]
    return {
        "subject": subject,
        "proposal": _artifact(inputs.get("proposal"), ProposalArtifact),
        "critiques": _by_role(inputs.get("critiques"), CritiqueArtifact),
        "synthesis": _artifact(inputs.get("synthesis"), SynthesisArtifact),
        "review": _artifact(inputs.get("review"), ReviewArtifact),
        "revision_plan": _artifact(inputs.get("revision_plan"), RevisionPlanArtifact),
        "prior_votes": _by_role(inputs.get("prior_votes"), VoteArtifact),
        "validation": validation,
        "diff": inputs.get("diff") or "",
        "prior_reviews": [_artifact(review, ReviewArtifact) for review in inputs.get("prior_reviews") or ()],
        "review_cycle": None if inputs.get("review_cycle") is None else int(inputs["review_cycle"]),
        "allowed_commands": [str(entry) for entry in inputs.get("allowed_commands") or ()],
        "candidates": [(str(name), _candidate(candidate))
                       for name, candidate in (inputs.get("candidates") or {}).items()],
    }


def _candidate(value: Mapping[str, Any]) -> dict[str, Any]:
    """A candidate of the choice round: its patch and its validation (``{"patch", "validation"}``)."""
    return {"patch": str(value.get("patch") or ""),
            "validation": [_validation_values(result) for result in value.get("validation") or ()]}


def _artifact(value: Any, schema: type[BaseModel]) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, BaseModel):
        value = value.model_dump()
    return schema.model_validate(value).model_dump()


def _by_role(value: Mapping[str, Any] | None, schema: type[BaseModel]) -> list[tuple[str, dict[str, Any]]]:
    """Role-keyed artifacts in the profile's role order, so completion order of concurrent
    workers never changes the prompt (and its cache key)."""
    order = {role: position for position, role in enumerate(ALL_ROLES)}
    items = sorted((value or {}).items(), key=lambda item: (order.get(item[0], len(order)), item[0]))
    return [(role, _artifact(artifact, schema) or {}) for role, artifact in items]


def _clipped(output: str) -> str:
    return "[...]\n" + output[-_MAX_OUTPUT_CHARS:] if len(output) > _MAX_OUTPUT_CHARS else output


def _validation_values(result: Mapping[str, Any]) -> dict[str, str]:
    command = result["command"]
    if not isinstance(command, str):
        command = shlex.join(str(part) for part in command)
    if result.get("rejected"):
        status = "rejected by the allowlist, not run"
    elif result.get("passed"):
        status = "passed"
    elif result.get("exit_code") is None:
        status = "failed (no exit code: timed out or did not start)"
    elif isinstance(result.get("reason"), str):
        status = f"failed ({result['reason']}, exit code {result['exit_code']})"
    else:
        status = f"failed (exit code {result['exit_code']})"
    tests = result.get("tests")
    if isinstance(tests, Mapping) and not result.get("rejected"):
        # Told to the reviewer so a green run of no tests is seen as what it is.
        status += "; tests: " + ", ".join(f"{tests.get(k)} {k}" for k in ("ran", "failed", "errors", "skipped"))
    elif not result.get("rejected") and result.get("exit_code") is not None and "stderr_tail" in result:
        status += "; tests: not counted (mesh does not read this command's test runner)"
    if result.get("passed") and isinstance(result.get("reason"), str):
        status += f" ({result['reason']})"
    # A failed command's verdict, failing tests with their messages, then its output's last lines;
    # a passed one's verdict when mesh has one (a flaky test, a failure the base shares).
    if result.get("rejected"):
        output = ""
    elif result.get("passed"):
        output = "\n".join(verdict_notes(result))[:_MAX_OUTPUT_CHARS]
    else:
        output = failure_text(result, max_chars=_MAX_OUTPUT_CHARS) or _clipped(str(result.get("output") or ""))
    return {"command": command, "status": status, "output": output}


def _outbox_values(message: Mapping[str, str]) -> dict[str, str]:
    if not message.get("message"):
        raise ValueError("every outbox message needs a 'message'")
    return {"sender": str(message.get("from") or ""), "message": str(message["message"])}
