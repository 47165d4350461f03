"""Markdown answers read as fields: the sections, lists, tables and fenced blocks a worker
writes instead of JSON (the last step of ``parsing``'s tolerant reading).

``_scan_markdown`` splits the text into fenced blocks and the sections named by the
round's fields (headings, ``key:`` lines, bold titles); a reader per field kind turns a
section into the value the artifact's schema expects (``_READERS``), and
``_markdown_fields`` applies them. ``parsing`` fills what a JSON object left out with
those fields, and reuses the item readers (a decision, a step, a command) for loosely
typed JSON. Private to ``roles``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .fields import (
    _ALIASES,
    _CHOICE,
    _CHOICE_WORDS,
    _COMMANDS,
    _DECISIONS,
    _FIELDS,
    _FINDING_ALIASES,
    _FINDING_KEYS,
    _FINDINGS,
    _LINE,
    _LIST,
    _PATCH,
    _STEPS,
    _TEXT,
    _norm_key,
)
from .schemas import looks_like_diff

_SHELL_LANGS = ("", "sh", "bash", "shell", "console", "zsh")

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
