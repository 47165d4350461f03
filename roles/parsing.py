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
``ParseError``; nothing in the text is ever evaluated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from .definitions import ROUNDS
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


# Field kinds decide how a markdown section or a loosely typed JSON value is read.
_TEXT, _LINE, _LIST, _CHOICE, _DECISIONS, _COMMANDS, _FINDINGS, _STEPS, _PATCH = (
    "text",
    "line",
    "list",
    "choice",
    "decisions",
    "commands",
    "findings",
    "steps",
    "patch",
)

_SYNTHESIS_FIELDS = {"decision_log": _DECISIONS, "patch": _PATCH, "validation_commands": _COMMANDS}
_FIELDS: dict[str, dict[str, str]] = {
    "hydration": {"acceptance": _TEXT, "design": _TEXT, "notes": _TEXT},
    "proposal": {"plan": _LIST, "assumptions": _LIST, "risk": _CHOICE},
    "critique": {"findings": _LIST, "must_fix": _LIST, "vote_flip_conditions": _LIST, "risk": _CHOICE},
    "synthesis": _SYNTHESIS_FIELDS,
    "vote": {"vote": _CHOICE, "reason": _LINE},
    "review": {"decision": _CHOICE, "findings": _FINDINGS, "summary": _TEXT},
    "revision-plan": {"summary": _TEXT, "steps": _STEPS},
    "revision": _SYNTHESIS_FIELDS,
}
_PATCH_ROUNDS = ("synthesis", "revision")

_SYNTHESIS_ALIASES = {
    "decisions": "decision_log",
    "diff": "patch",
    "validation": "validation_commands",
    "commands": "validation_commands",
}
_ALIASES: dict[str, dict[str, str]] = {
    "hydration": {"acceptance_criteria": "acceptance"},
    "proposal": {"steps": "plan", "risk_level": "risk"},
    "critique": {"risk_level": "risk", "flip_conditions": "vote_flip_conditions"},
    "synthesis": _SYNTHESIS_ALIASES,
    "vote": {"verdict": "vote", "rationale": "reason"},
    "review": {"verdict": "decision"},
    "revision-plan": {"plan": "steps"},
    "revision": _SYNTHESIS_ALIASES,
}
_FINDING_KEYS = (
    "finding_id",
    "location",
    "severity",
    "label",
    "issue",
    "evidence",
    "minimal_fix",
    "code_context",
)
_FINDING_ALIASES = {"id": "finding_id", "fix": "minimal_fix", "context": "code_context", "code": "code_context"}
_STEP_ALIASES = {"id": "finding_id", "finding": "finding_id", "description": "change"}
_OUTBOX_ALIASES = {"role": "to", "recipient": "to", "text": "message", "body": "message"}

# Words a markdown value may start with, per choice field (longest first so "disagree"
# is tried before "agree"); the schema maps the aliases to the canonical values.
_CHOICE_WORDS = {
    "risk": ("medium", "high", "low"),
    "vote": ("disagreed", "disagree", "agreed", "agree"),
    "decision": ("changes_requested", "request_changes", "approved", "approve"),
}

_SHELL_LANGS = ("", "sh", "bash", "shell", "console", "zsh")
_MAX_EMBEDDED_ATTEMPTS = 64
_MAX_ERRORS_SHOWN = 6

_FENCE_LINE = re.compile(r"^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*)$")
_BOLD_TITLE = re.compile(r"^ {0,3}(?:\*\*|__)([^*_\n]{1,60})(?:\*\*|__)[ \t]*:?[ \t]*$")
_KEY_LINE = re.compile(
    r"^[ \t]{0,3}(?:[-*+][ \t]+)?(?:\*\*|__)?([A-Za-z][A-Za-z0-9 _-]{0,40}?)(?:\*\*|__)?"
    r"[ \t]*:(?:\*\*|__)?[ \t]*(.*)$"
)
_BULLET = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,3}[.)])[ \t]+(.*)$")
_CHECKBOX = re.compile(r"^\[[ xX]\][ \t]+")
_NUMBERING = re.compile(r"^\d{1,3}[.)][ \t]*")
_NONE_ITEM = re.compile(r"(?i)^[(\s*_`]*(none|n/a|na|nil|nothing|-+|—)[)\s.!*_`]*$")
_NONE_FINDINGS = re.compile(
    r"(?i)^[(\s*_`]*(none|n/a|nil|nothing( to report| found)?|no (material )?(findings|issues)"
    r"( found)?|-+|—)[)\s.!*_`]*$"
)
_NO_DIFF_LINE = re.compile(
    r"^[ \t]*(?:[-*>][ \t]+)?(?:[*_`]*patch[*_`]*[ \t]*:[ \t]*)?[*_`]*NO_DIFF[*_`]*[ \t]*:(.*)$",
    re.MULTILINE,
)
# A leading "accept"/"reject" only counts as the decision when set apart ("Reject: x"),
# so a point that starts with the verb ("Reject empty input") is not misread.
_LEADING_DECISION = re.compile(
    r"(?i)^[\s\[(*_`]*((?:accepted|rejected)\b|(?:accept|reject)(?=[\])*_`]*[ \t]*[:—–|-]))"
)
_DECISION_WORD = re.compile(r"(?i)\b(accepted|rejected|accept|reject)\b")
_DECORATED_DECISION = re.compile(
    r"(?i)(?:\[|\(|\*\*|__|`|:[ \t]*|[—–][ \t]*|\|[ \t]*)(accepted|rejected)\b"
)
_POINT_REASON_SEPARATORS = (" | ", " — ", " – ", " -- ", " - ", ": ", "; ", " because ")
_STEP_ITEM = re.compile(
    r"(?i)^(?:finding[ \t]+)?(?:\[`?([A-Za-z0-9][\w.-]*)`?\][ \t]*[:—–-]?"
    r"|`?([A-Za-z0-9][\w.-]*)`?[ \t]*(?::|—|–|-|\)))[ \t]*(.+)$"
)
_OUTBOX_ITEM = re.compile(r"(?i)^(?:to[ \t]+)?@?`?([A-Za-z][\w-]*)`?[ \t]*(?::|—|–|->)[ \t]*(.+)$")
_BACKTICK_SPAN = re.compile(r"`([^`\n]+)`")


def parse_response(
    text: str, round: str, *, role: str, task_id: str, strict: bool
) -> ParsedResponse:
    """Parse ``text`` answering ``round`` into a ``ParsedResponse``.

    ``strict`` selects the strict envelope contract; otherwise the tolerant reading
    described in the module docstring applies. Raises ``ParseError`` for any text that
    does not yield a valid artifact, and ValueError only for an unknown ``round``.
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


# -------------------------------------------------------------------------- markdown


@dataclass
class _Fence:
    lang: str
    body: str


@dataclass
class _Section:
    key: str
    level: int  # heading level; 0 for a section opened by a key line or bold title
    inline: str
    entries: list[str | _Fence] = field(default_factory=list)


@dataclass
class _Document:
    prose: str  # the text with fenced blocks blanked out
    fences: list[_Fence]
    sections: dict[str, _Section]
    preamble: list[str]  # prose lines before the first recognised section


def _section_key(title: str, round: str) -> str | None:
    key = _norm_key(_NUMBERING.sub("", title.strip().strip("*_`").strip()))
    if key in _FIELDS[round] or key == "outbox":
        return key
    return _ALIASES[round].get(key)


def _scan_markdown(text: str, round: str) -> _Document:
    """Split ``text`` into fenced blocks and the sections named by the round's field names."""
    lines = text.splitlines()
    fences: list[_Fence] = []
    sections: dict[str, _Section] = {}
    preamble: list[str] = []
    prose: list[str] = []
    current: _Section | None = None
    seen_section = False

    def open_section(key: str, level: int, inline: str) -> _Section:
        nonlocal seen_section
        seen_section = True
        section = _Section(key=key, level=level, inline=inline.strip())
        # A repeated heading must not override the first answer.
        sections.setdefault(key, section)
        return section

    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _FENCE_LINE.match(line)
        if opening:
            indent, marker = len(opening.group(1)), opening.group(2)
            body: list[str] = []
            end = index + 1
            while end < len(lines):
                candidate = lines[end]
                stripped = candidate.strip()
                # A closing fence is no more indented than its opening one, so a diff's
                # context line " ```" stays inside the block.
                if (
                    stripped
                    and set(stripped) == {marker[0]}
                    and len(stripped) >= len(marker)
                    and len(candidate) - len(candidate.lstrip()) <= indent
                ):
                    break
                body.append(candidate)
                end += 1
            fence = _Fence(lang=opening.group(3).lower(), body="".join(f"{b}\n" for b in body))
            fences.append(fence)
            if current is not None:
                current.entries.append(fence)
            prose.extend([""] * (min(end, len(lines) - 1) - index + 1))
            index = end + 1
            continue
        prose.append(line)
        index += 1

        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            title = heading.group(2).strip().rstrip("#").strip()
            key, inline = _title_parts(title, round)
            if key is not None:
                current = open_section(key, level, inline)
            elif current is not None and 0 < current.level < level:
                current.entries.append(line)
            else:
                current = None
            continue
        bold = _BOLD_TITLE.match(line)
        key_line = None if bold else _KEY_LINE.match(line)
        if key_line and current is not None and current.level > 0 and _BULLET.match(line):
            # Inside a heading's list a bullet such as "- Risk: the lock may stall writes"
            # is an item of that list, not a new field.
            key_line = None
        key = None
        if bold:
            key, inline = _section_key(bold.group(1).rstrip(":"), round), ""
        elif key_line:
            key, inline = _section_key(key_line.group(1), round), key_line.group(2)
        if key is not None:
            current = open_section(key, 0, inline)
        elif current is not None:
            current.entries.append(line)
        elif not seen_section:
            preamble.append(line)
    return _Document(prose="\n".join(prose), fences=fences, sections=sections, preamble=preamble)


def _title_parts(title: str, round: str) -> tuple[str | None, str]:
    """Read a heading as a field name, with an inline value when it has one (``Risk: low``)."""
    key_line = _KEY_LINE.match(title)
    if key_line:
        key = _section_key(key_line.group(1), round)
        if key is not None:
            return key, key_line.group(2)
    return _section_key(title.rstrip(":"), round), ""


def _markdown_fields(doc: _Document, round: str) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, kind in _FIELDS[round].items():
        section = doc.sections.get(key)
        if section is None or kind == _PATCH:
            continue
        result[key] = _READERS[kind](section, key)
    if round == "vote" and "vote" not in result:
        result.update(_leading_vote(doc.preamble))
    outbox = doc.sections.get("outbox")
    if outbox is not None:
        result["outbox"] = [_outbox_from_text(item) for item in _list_items(outbox)]
    return result


def _lines(section: _Section) -> list[str]:
    return [entry for entry in section.entries if isinstance(entry, str)]


def _list_items(section: _Section) -> list[str]:
    """Bullets (``-``, ``*``, ``1.``) of a section; deeper bullets join their parent item."""
    items: list[str] = []
    plain: list[str] = []
    base_indent: int | None = None
    for line in _lines(section):
        bullet = _BULLET.match(line)
        if bullet:
            indent = len(bullet.group(1).expandtabs(4))
            content = _CHECKBOX.sub("", bullet.group(2).strip())
            if base_indent is None:
                base_indent = indent
            if indent > base_indent and items:
                items[-1] = f"{items[-1]} {content}".strip()
            else:
                items.append(content)
        elif items and line[:1].isspace() and line.strip():
            items[-1] = f"{items[-1]} {line.strip()}"
        elif line.strip():
            plain.append(line.strip())
    found = items or plain
    if section.inline:
        found = [section.inline, *found]
    return [item for item in found if item and not _NONE_ITEM.match(item)]


def _read_text(section: _Section, key: str) -> str:
    parts = [section.inline] if section.inline else []
    for entry in section.entries:
        if isinstance(entry, _Fence):
            parts.append(f"```{entry.lang}\n{entry.body}```")
        else:
            parts.append(entry.rstrip())
    return "\n".join(parts).strip()


def _read_line(section: _Section, key: str) -> str:
    if section.inline:
        return section.inline.strip()
    for line in _lines(section):
        if line.strip():
            return line.strip()
    return ""


def _read_choice(section: _Section, key: str) -> str:
    return _match_choice(_read_line(section, key), _CHOICE_WORDS[key])


def _match_choice(value: str, words: tuple[str, ...]) -> str:
    """Return the choice word ``value`` starts with, or ``value`` unchanged for the schema."""
    plain = re.sub(r"[\s-]+", "_", value.strip().strip("*_`").strip().lower())
    for word in words:
        if plain.startswith(word) and (len(plain) == len(word) or not plain[len(word)].isalnum()):
            return word
    return value.strip()


def _read_list(section: _Section, key: str) -> list[str]:
    return _list_items(section)


def _read_commands(section: _Section, key: str) -> list[str]:
    inline_spans = _BACKTICK_SPAN.findall(section.inline)
    commands = list(inline_spans) if inline_spans else ([section.inline] if section.inline else [])
    body = _Section(key=key, level=section.level, inline="", entries=section.entries)
    commands.extend(_command_text(item) for item in _list_items(body))
    for entry in section.entries:
        if isinstance(entry, _Fence) and entry.lang in _SHELL_LANGS and not looks_like_diff(entry.body):
            for line in entry.body.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    commands.append(line.removeprefix("$ ").strip())
    return [command for command in commands if command]


def _command_text(item: str) -> str:
    span = _BACKTICK_SPAN.search(item)
    return (span.group(1) if span else item).strip().removeprefix("$ ").strip()


def _read_decisions(section: _Section, key: str) -> list[Any]:
    table = _table_rows(_lines(section))
    if table:
        return table
    return [_decision_from_text(item) for item in _list_items(section)]


def _table_rows(lines: list[str]) -> list[dict[str, str]]:
    """Read a markdown table with point / decision / reason columns into decision entries."""
    rows = [line.strip() for line in lines if line.strip().startswith("|")]
    if len(rows) < 2:
        return []
    columns = {
        "point": ("point", "item", "critique", "finding", "issue", "objection"),
        "decision": ("decision", "status", "verdict", "outcome"),
        "reason": ("reason", "rationale", "why", "justification"),
    }
    header = [_norm_key(cell) for cell in _cells(rows[0])]
    positions: dict[str, int] = {}
    for name, names in columns.items():
        for position, cell in enumerate(header):
            if cell in names:
                positions[name] = position
                break
    if "decision" not in positions:
        return []
    entries = []
    for row in rows[1:]:
        cells = _cells(row)
        if all(set(cell) <= set("-: ") for cell in cells):
            continue
        entries.append({name: cells[pos] for name, pos in positions.items() if pos < len(cells)})
    return entries


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _decision_from_text(item: str) -> dict[str, str]:
    """Read ``accepted: point — reason`` (and similar orders) into a decision entry."""
    text = item.strip()
    leading = _LEADING_DECISION.match(text)
    match = leading or _DECORATED_DECISION.search(text) or _DECISION_WORD.search(text)
    if match is None:
        return {"point": text}
    word = match.group(1)
    start, end = match.span(1)
    rest = f"{text[:start].rstrip(' [(*_`|:—–')} {text[end:].lstrip(' ])*_`')}"
    rest = rest.strip(" \t:;|—–-[]()*_`")
    for separator in _POINT_REASON_SEPARATORS:
        point, found, reason = rest.partition(separator)
        if found and point.strip() and reason.strip(" \t:;—–-"):
            return {
                "point": point.strip(" \t:;—–-"),
                "decision": word,
                "reason": reason.strip(" \t:;—–-"),
            }
    return {"point": rest, "decision": word}


def _read_steps(section: _Section, key: str) -> list[dict[str, str]]:
    return [_step_from_text(item) for item in _list_items(section)]


def _step_from_text(item: str) -> dict[str, str]:
    match = _STEP_ITEM.match(item.strip())
    if match is None:
        return {"change": item.strip()}
    return {"finding_id": match.group(1) or match.group(2), "change": match.group(3).strip()}


def _outbox_from_text(item: str) -> dict[str, str] | str:
    match = _OUTBOX_ITEM.match(item.strip())
    if match is None:
        return item
    return {"to": match.group(1), "message": match.group(2).strip()}


def _read_findings(section: _Section, key: str) -> list[Any]:
    """Read finding blocks: a ``### F1`` heading or a ``finding_id:`` line starts each one,
    ``key: value`` lines fill it, and a fenced block gives its ``code_context``."""
    blocks: list[dict[str, str]] = []
    explicit_id: list[bool] = []
    loose: list[str] = []
    current: dict[str, str] | None = None
    last_key: str | None = None
    entries = list(section.entries)
    if section.inline:
        entries.insert(0, section.inline)
    for entry in entries:
        if isinstance(entry, _Fence):
            if current is not None and not current.get("code_context", "").strip():
                current["code_context"] = entry.body
                last_key = None
            elif current is None:
                loose.append(entry.body)
            continue
        heading = _HEADING.match(entry)
        if heading:
            current, last_key = {}, None
            blocks.append(current)
            explicit_id.append(False)
            finding_id = _finding_id_from_title(heading.group(2))
            if finding_id:
                current["finding_id"] = finding_id
            continue
        key_line = _KEY_LINE.match(entry)
        finding_key = _finding_key(key_line.group(1)) if key_line else None
        if key_line and finding_key:
            if current is None or (finding_key == "finding_id" and explicit_id[-1]):
                current = {}
                blocks.append(current)
                explicit_id.append(False)
            if finding_key == "finding_id":
                explicit_id[-1] = True
            current[finding_key] = key_line.group(2).strip()
            last_key = finding_key
            continue
        if not entry.strip():
            continue
        if current is not None and last_key is not None:
            addition = entry.rstrip() if last_key == "code_context" else entry.strip()
            joined = f"{current[last_key]}\n{addition}" if current[last_key] else addition
            current[last_key] = joined
        else:
            loose.append(entry.strip())
    if blocks:
        return list(blocks)
    text = "\n".join(loose).strip()
    if not text or _NONE_FINDINGS.match(text):
        return []
    # Prose where findings belong cannot be read as findings: hand it to validation as
    # it is so the answer is reported as an invalid finding, not silently dropped.
    return [text]


def _finding_key(name: str) -> str | None:
    key = _norm_key(name)
    if key in _FINDING_KEYS:
        return key
    return _FINDING_ALIASES.get(key)


def _finding_id_from_title(title: str) -> str | None:
    text = _NUMBERING.sub("", title.strip().strip("*_`").strip())
    text = re.sub(r"(?i)^finding\b[\s:#-]*", "", text)
    match = re.match(r"[`*\[]*([A-Za-z0-9][\w.-]*)", text)
    return match.group(1).rstrip(".") if match else None


def _leading_vote(preamble: list[str]) -> dict[str, str]:
    """Read an answer that opens with the vote itself: ``**Agree** — reason``."""
    lines = [line.strip() for line in preamble if line.strip()]
    if not lines:
        return {}
    first = lines[0].lstrip("#>*_` \t")
    vote = _match_choice(first, _CHOICE_WORDS["vote"])
    if vote not in _CHOICE_WORDS["vote"]:
        return {}
    rest = first[len(vote) :].strip(" \t*_`.:;—–-,")
    reason = rest or (lines[1] if len(lines) > 1 else "")
    return {"vote": vote, "reason": reason}


_READERS = {
    _TEXT: _read_text,
    _LINE: _read_line,
    _LIST: _read_list,
    _CHOICE: _read_choice,
    _DECISIONS: _read_decisions,
    _COMMANDS: _read_commands,
    _FINDINGS: _read_findings,
    _STEPS: _read_steps,
}


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


def _norm_key(key: Any) -> str:
    """``"Vote Flip Conditions"``, ``"vote-flip-conditions"``, ``"voteFlipConditions"`` -> one key."""
    if not isinstance(key, str):
        return ""
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key.strip().strip("*` :"))
    return re.sub(r"[\s-]+", "_", key.lower())


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
