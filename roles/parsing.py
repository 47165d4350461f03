"""Turn a worker's raw text into a validated round artifact.

Two modes, chosen by the run's ``strict_output``:

- strict: the text is exactly one JSON envelope ``{"role", "task_id", "artifact",
  "outbox"?}`` (surrounding whitespace and one ```json fence around it are tolerated);
  ``role`` and ``task_id`` must be the caller's.
- tolerant (the default): the first usable structure wins, tried in this order: the whole
  text as JSON (envelope or bare artifact), a ```json fenced block, the first balanced
  ``{...}`` JSON object in the prose, and finally markdown: headings or ``key:`` lines
  (``## Plan`` and bullets, ``Risk: medium``, ``Vote: agree`` / ``Reason: ...``,
  ``Decision: approve``, ``### F1`` finding blocks with ``Location: path:line`` lines...).
  Markdown fields fill the keys a JSON object left out, so a synthesis may give its
  fields as JSON and its patch as one ```diff (or ```patch) block; a line
  ``NO_DIFF:<reason>`` also counts as the patch. Keys are matched ignoring case and
  spacing, a string where a list belongs becomes a one-item list, and an envelope's
  role and task id are not checked.

Whatever the input, ``parse_response`` returns a ``ParsedResponse`` or raises
``ParseError``; nothing in the text is ever evaluated. An artifact past its bounds (a field,
the whole answer, the patch: ``bounds``) is refused as ``invalid_shape``. The fields each
round's artifact has (their kinds, aliases, choice words) are in ``fields``; the markdown
reading is in ``markdown``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from .bounds import DEFAULT_BOUNDS, AnswerBounds, oversize
from .definitions import ROUNDS
from .fields import (
    _ALIASES,
    _COMMANDS,
    _DECISIONS,
    _FIELDS,
    _FINDING_ALIASES,
    _FINDINGS,
    _LINE,
    _LIST,
    _OUTBOX_ALIASES,
    _PATCH_ROUNDS,
    _STEP_ALIASES,
    _STEPS,
    _TEXT,
    _norm_key,
)
from .markdown import (
    _NONE_ITEM,
    _command_text,
    _decision_from_text,
    _Document,
    _markdown_fields,
    _scan_markdown,
    _step_from_text,
)
from .schemas import ARTIFACT_SCHEMAS, NO_DIFF_PREFIX, OutboxMessage, looks_like_diff

__all__ = ["PARSE_ERROR_KINDS", "ParseError", "ParsedResponse", "parse_response"]

PARSE_ERROR_KINDS = ("unparsable", "invalid_shape", "invalid_finding_shape", "envelope_mismatch")


class ParseError(Exception):
    """A worker answer that cannot become an artifact.

    ``kind`` is one of ``PARSE_ERROR_KINDS``: ``unparsable`` (no structure found),
    ``invalid_shape`` (structure found, fields wrong or missing), ``invalid_finding_shape``
    (a review whose decision parsed but a finding did not), ``envelope_mismatch`` (strict
    envelope for another role or task). ``message`` is one line, fit to quote back to the
    model in a strict follow-up.
    """

    def __init__(self, kind: str, message: str):
        if kind not in PARSE_ERROR_KINDS:
            raise ValueError(f"unknown parse error kind {kind!r}")
        message = " ".join(message.split())
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class ParsedResponse:
    """A validated artifact, the outbox messages that came with it, and the raw text."""

    artifact: BaseModel
    outbox: list[OutboxMessage]
    raw: str
_MAX_EMBEDDED_ATTEMPTS = 64
_MAX_ERRORS_SHOWN = 6
_NO_DIFF_LINE = re.compile(
    r"^[ \t]*(?:[-*>][ \t]+)?(?:[*_`]*patch[*_`]*[ \t]*:[ \t]*)?[*_`]*NO_DIFF[*_`]*[ \t]*:(.*)$",
    re.MULTILINE,
)


def parse_response(
    text: str, round: str, *, role: str, task_id: str, strict: bool, bounds: AnswerBounds = DEFAULT_BOUNDS
) -> ParsedResponse:
    """Parse ``text`` answering ``round`` into a ``ParsedResponse``.

    ``strict`` selects the strict envelope contract; otherwise the tolerant reading
    described in the module docstring applies. Raises ``ParseError`` for any text that
    does not yield a valid artifact or whose artifact is past ``bounds`` (``invalid_shape``),
    and ValueError only for an unknown ``round``.
    """
    if round not in ARTIFACT_SCHEMAS:
        raise ValueError(f"unknown round {round!r}; expected one of {', '.join(ROUNDS)}")
    if not isinstance(text, str):
        raise ParseError("unparsable", "the response is empty")
    if strict:
        data, outbox_raw = _read_strict(text, role=role, task_id=task_id)
    else:
        data, outbox_raw = _read_tolerant(text, round)
    artifact = _validate(data, round)
    outbox = _read_outbox(outbox_raw, strict=strict)
    too_large = oversize(artifact.model_dump(), [message.model_dump() for message in outbox], bounds)
    if too_large:
        raise ParseError("invalid_shape", too_large)
    return ParsedResponse(artifact=artifact, outbox=outbox, raw=text)


# ---------------------------------------------------------------------------- strict


def _read_strict(text: str, *, role: str, task_id: str) -> tuple[Any, list[Any]]:
    value = _loads(_strip_outer_fence(text.strip()))
    if value is _FAILED:
        raise ParseError(
            "unparsable",
            'expected exactly one JSON object {"role", "task_id", "artifact", "outbox"?} '
            "and nothing else",
        )
    if not isinstance(value, dict):
        raise ParseError("invalid_shape", f"expected a JSON object, got a JSON {_json_type(value)}")
    missing = [key for key in ("role", "task_id", "artifact") if key not in value]
    if missing:
        raise ParseError("invalid_shape", f"the JSON envelope lacks {', '.join(missing)}")
    if value["role"] != role or value["task_id"] != task_id:
        raise ParseError(
            "envelope_mismatch",
            f"the envelope says role {_short(value['role'])} and task_id "
            f"{_short(value['task_id'])}, expected role {role!r} and task_id {task_id!r}",
        )
    artifact = value["artifact"]
    if not isinstance(artifact, dict):
        raise ParseError("invalid_shape", '"artifact" must be a JSON object')
    outbox_raw: list[Any] = []
    for owner in (value, artifact):
        outbox = owner.get("outbox")
        if outbox is not None and not isinstance(outbox, list):
            raise ParseError("invalid_shape", '"outbox" must be a list of {"to", "message"}')
        outbox_raw.extend(outbox or [])
    return artifact, outbox_raw


# -------------------------------------------------------------------------- tolerant


def _read_tolerant(text: str, round: str) -> tuple[dict[str, Any], list[Any]]:
    fields = _FIELDS[round]
    aliases = _ALIASES[round]
    doc = _scan_markdown(text, round)

    data: dict[str, Any] | None = None
    outbox_raw: list[Any] = []
    irrelevant: dict[str, Any] | None = None
    for candidate in _json_candidates(text, doc):
        keys = {_norm_key(key): value for key, value in candidate.items()}
        artifact = keys.get("artifact")
        if isinstance(artifact, str):
            artifact = _loads(artifact)
        if "artifact" in keys:
            if not isinstance(artifact, dict):
                raise ParseError("invalid_shape", '"artifact" must be a JSON object')
            data = artifact
            outbox_raw.extend(_as_list(keys.get("outbox")))
            break
        if any(key in fields or key in aliases for key in keys):
            data = candidate
            break
        if irrelevant is None:
            irrelevant = candidate

    data = _normalise_artifact(data or {}, round)
    for key, value in _markdown_fields(doc, round).items():
        data.setdefault(key, value)
    if round in _PATCH_ROUNDS:
        _attach_patch(data, doc)

    if not any(key in fields for key in data):
        if irrelevant is None:
            shape = ", ".join(fields)
            raise ParseError(
                "unparsable",
                f"found no JSON object and no recognisable fields; expected a JSON object "
                f"with {shape}",
            )
        data = _normalise_artifact(irrelevant, round)
    outbox_raw.extend(_as_list(data.pop("outbox", None)))
    return data, outbox_raw


def _json_candidates(text: str, doc: _Document) -> Iterator[dict[str, Any]]:
    """Yield JSON objects in the order the tolerant reading tries them."""
    whole = _loads(_strip_outer_fence(text.strip()))
    if isinstance(whole, dict):
        yield whole
    for fence in doc.fences:
        if fence.lang in ("json", "jsonc", "json5") or (
            fence.lang == "" and fence.body.lstrip().startswith("{")
        ):
            value = _loads(fence.body)
            if isinstance(value, dict):
                yield value
    yield from _embedded_objects(doc.prose)


def _embedded_objects(prose: str) -> Iterator[dict[str, Any]]:
    """Yield the balanced JSON objects found in ``prose``, outermost first.

    Each ``{`` is a decode attempt; the count is capped so a brace-heavy text (code,
    templates) stays linear instead of quadratic.
    """
    decoder = json.JSONDecoder()
    position = 0
    for _ in range(_MAX_EMBEDDED_ATTEMPTS):
        start = prose.find("{", position)
        if start < 0:
            return
        try:
            value, end = decoder.raw_decode(prose, start)
        except (ValueError, RecursionError):
            position = start + 1
            continue
        position = end
        if isinstance(value, dict):
            yield value


def _normalise_artifact(data: dict[str, Any], round: str) -> dict[str, Any]:
    """Match keys loosely and coerce loosely typed values to the round's field kinds."""
    fields = _FIELDS[round]
    result = _rename(data, _ALIASES[round])
    for key, kind in fields.items():
        if key in result:
            result[key] = _coerce(result[key], kind)
    return result


def _rename(data: dict[str, Any], aliases: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in data.items():
        result.setdefault(_norm_key(key), value)
    for alias, target in aliases.items():
        if alias in result and target not in result:
            result[target] = result.pop(alias)
    return result


def _coerce(value: Any, kind: str) -> Any:
    if value is None and kind in (_LIST, _COMMANDS, _TEXT):
        # Models write null for "nothing here"; an empty value keeps the field's type.
        return "" if kind == _TEXT else []
    if kind in (_LIST, _COMMANDS):
        if isinstance(value, str):
            value = [] if _NONE_ITEM.match(value) else [value]
        if kind == _COMMANDS and isinstance(value, list):
            value = [_command_text(item) if isinstance(item, str) else item for item in value]
        return value
    if kind in (_TEXT, _LINE) and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(f"- {item}" for item in value) if kind == _TEXT else " ".join(value)
    if kind == _DECISIONS and isinstance(value, list):
        return [
            _decision_from_text(item) if isinstance(item, str) else _rename_if_dict(item, {})
            for item in value
        ]
    if kind == _FINDINGS:
        if isinstance(value, dict):
            value = [value]
        if isinstance(value, list):
            return [_rename_if_dict(item, _FINDING_ALIASES) for item in value]
    if kind == _STEPS and isinstance(value, list):
        return [
            _step_from_text(item) if isinstance(item, str) else _rename_if_dict(item, _STEP_ALIASES)
            for item in value
        ]
    return value


def _rename_if_dict(value: Any, aliases: dict[str, str]) -> Any:
    return _rename(value, aliases) if isinstance(value, dict) else value


def _attach_patch(data: dict[str, Any], doc: _Document) -> None:
    """Fill ``patch`` from a fenced diff block or a ``NO_DIFF:`` line when JSON gave none."""
    patch = data.get("patch")
    if isinstance(patch, str) and (
        patch.lstrip().startswith(NO_DIFF_PREFIX) or looks_like_diff(patch)
    ):
        return
    blocks = [
        fence
        for fence in doc.fences
        if fence.lang in ("diff", "patch", "udiff") or (fence.lang == "" and looks_like_diff(fence.body))
    ]
    if len(blocks) > 1:
        raise ParseError(
            "invalid_shape", f"expected exactly one unified diff, found {len(blocks)} diff blocks"
        )
    no_diff = [match.group(1).strip().strip("*_`").strip() for match in _NO_DIFF_LINE.finditer(doc.prose)]
    if blocks and no_diff:
        raise ParseError("invalid_shape", "found both a diff block and NO_DIFF; give exactly one")
    if blocks:
        data["patch"] = blocks[0].body
    elif no_diff:
        data["patch"] = f"{NO_DIFF_PREFIX} {no_diff[0]}"


# ------------------------------------------------------------------------ validation


def _validate(data: Any, round: str) -> BaseModel:
    schema = ARTIFACT_SCHEMAS[round]
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        locations = [tuple(error["loc"]) for error in errors]
        kind = "invalid_shape"
        if (
            round == "review"
            and any(loc[:1] == ("findings",) for loc in locations)
            and not any(loc[:1] == ("decision",) for loc in locations)
        ):
            kind = "invalid_finding_shape"
        shown = [
            f"{_format_loc(error['loc'])}: {error['msg'][:120]}" for error in errors[:_MAX_ERRORS_SHOWN]
        ]
        more = len(errors) - len(shown)
        suffix = f" (and {more} more)" if more > 0 else ""
        raise ParseError(kind, f"invalid {round} artifact: {'; '.join(shown)}{suffix}") from None


def _read_outbox(raw: list[Any], *, strict: bool) -> list[OutboxMessage]:
    """Validate outbox messages: strict mode rejects a bad one, tolerant mode skips it."""
    messages: list[OutboxMessage] = []
    for item in raw:
        if not strict:
            item = _rename_if_dict(item, _OUTBOX_ALIASES)
        try:
            messages.append(OutboxMessage.model_validate(item))
        except ValidationError:
            if strict:
                raise ParseError(
                    "invalid_shape", 'every outbox entry must be {"to": role, "message": text}'
                ) from None
    return messages


# --------------------------------------------------------------------------- helpers

_FAILED = object()


def _loads(text: str) -> Any:
    """``json.loads`` that reports failure (bad JSON, absurd nesting) as ``_FAILED``."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _FAILED


def _strip_outer_fence(text: str) -> str:
    """Unwrap ``text`` when all of it is one ```json (or bare ```) fenced block."""
    if not text.startswith("```"):
        return text
    first_newline = text.find("\n")
    if first_newline < 0:
        return text
    opening = text[:first_newline].strip()
    marker = opening[: len(opening) - len(opening.lstrip("`"))]
    lang = opening[len(marker) :].strip().lower()
    closing_at = text.rfind("\n")
    closing = text[closing_at + 1 :].strip()
    if lang not in ("", "json") or closing_at <= first_newline or closing != marker:
        return text
    return text[first_newline + 1 : closing_at]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _format_loc(loc: tuple[Any, ...] | list[Any]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "artifact"
