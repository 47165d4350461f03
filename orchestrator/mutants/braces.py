"""Reading brace languages (Go, Rust, JavaScript and TypeScript) well enough to copy a test.

``mask`` blanks comments and the inside of string literals (same length, newlines kept), so
that braces, parentheses and keywords are found in code only, and lists each string literal's
span; ``block_end`` finds a block's closing brace; ``last_statement`` the start of a block's
last top-level statement; ``split_args`` a call's arguments. A literal is changed in its own
style by ``changed_literal``.

May import the standard library and ``orchestrator.mutants.model``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.mutants.model import Twin, edited_text, fresh_name, moved_integer

__all__ = ["Masked", "block_end", "function_twins", "changed_literal", "indent_before", "last_statement", "mask", "placed", "spliced",
           "split_args"]

_NUMBER = re.compile(r"(?<![\w.])(\d[\d_]*)(\.\d+)?(?![\w.])")


@dataclass(frozen=True)
class Masked:
    """``text`` with comments blanked and string literals' insides blanked (``code``), and the
    spans of the string literals (start, end: the quotes included)."""

    code: str
    strings: tuple[tuple[int, int], ...]

    def string_at(self, start: int, end: int) -> bool:
        """Whether ``start``..``end`` (stripped of spaces) is exactly one string literal."""
        return (start, end) in self.strings


def _blank(chars: list[str], start: int, end: int) -> None:
    for index in range(start, end):
        if chars[index] != "\n":
            chars[index] = " "


def mask(text: str, lang: str) -> Masked:
    """``text`` (``lang``: go, rust or js) masked: comments blanked; each string literal kept as
    its quotes around blanks. Template literals' substitutions (js) are blanked with them."""
    chars = list(text)
    strings: list[tuple[int, int]] = []
    index, size = 0, len(text)
    last_code = ""  # the last character of code before here (a JS regex literal follows an operator)
    while index < size:
        ch = text[index]
        two = text[index:index + 2]
        if two == "//":
            end = text.find("\n", index)
            end = size if end < 0 else end
            _blank(chars, index, end)
            index = end
            continue
        if two == "/*":
            depth, end = 1, index + 2
            while end < size and depth:
                if lang == "rust" and text.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif text.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
            _blank(chars, index, end)
            index = end
            continue
        end = _literal_end(text, index, lang, last_code)
        if end is not None:
            strings.append((index, end))
            _blank(chars, index + 1, end - 1)
            index = end
            last_code = '"'
            continue
        if not ch.isspace():
            last_code = ch
        index += 1
    return Masked("".join(chars), tuple(strings))


def _literal_end(text: str, index: int, lang: str, last_code: str) -> int | None:
    """Where the string (or rune, or JS regex) literal starting at ``index`` ends; None when
    none starts there."""
    ch = text[index]
    if lang == "rust":
        raw = re.match(r'b?r(#*)"', text[index:index + 300])
        if raw and (index == 0 or not (text[index - 1].isalnum() or text[index - 1] == "_")):
            close = '"' + raw.group(1)
            end = text.find(close, index + raw.end())
            return len(text) if end < 0 else end + len(close)
        if ch == "b" and text[index + 1:index + 2] in ('"', "'") and (index == 0 or not text[index - 1].isalnum()):
            inner = _literal_end(text, index + 1, lang, last_code)
            return inner
        if ch == "'":
            found = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", text[index:index + 16])
            return index + found.end() if found else None  # else a lifetime: 'a
    if lang == "go" and ch == "`":
        end = text.find("`", index + 1)
        return len(text) if end < 0 else end + 1
    if lang == "js" and ch == "`":
        return _template_end(text, index)
    if lang == "js" and ch == "/" and last_code in "(,=:[!&|?{};+-*%<>~^" and text[index + 1:index + 2] not in "/*":
        found = re.match(r"/(?:\\.|\[(?:\\.|[^\]\\\n])*\]|[^/\\\n\[])+/[a-z]*", text[index:index + 2000])
        return index + found.end() if found else None
    if ch in ('"', "'") and (ch == '"' or lang in ("js", "go")):
        end = index + 1
        while end < len(text) and text[end] != ch and text[end] != "\n":
            end += 2 if text[end] == "\\" else 1
        return min(end + 1, len(text))
    return None


def _template_end(text: str, index: int) -> int:
    end = index + 1
    while end < len(text):
        if text[end] == "\\":
            end += 2
        elif text[end] == "`":
            return end + 1
        elif text.startswith("${", end):
            depth, end = 1, end + 2
            while end < len(text) and depth:
                if text[end] == "`":
                    end = _template_end(text, end)
                    continue
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                end += 1
        else:
            end += 1
    return len(text)


def block_end(code: str, open_at: int) -> int | None:
    """The index of the brace closing the one at ``open_at`` in masked ``code``."""
    depth = 0
    for index in range(open_at, len(code)):
        if code[index] == "{":
            depth += 1
        elif code[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def last_statement(code: str, start: int, end: int) -> int | None:
    """Where the last statement of the block between ``start`` and ``end`` (masked ``code``,
    inside its braces) begins: the last line that begins outside any bracket and is not blank."""
    depth, found, line_start = 0, None, True
    for index in range(start, end):
        ch = code[index]
        if line_start and depth == 0 and not ch.isspace():
            found = index
        if ch == "\n":
            line_start = True
            continue
        if not ch.isspace():
            line_start = False
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
    return found


def split_args(code: str, open_paren: int) -> list[tuple[int, int]] | None:
    """The spans of the arguments of the call whose ``(`` is at ``open_paren`` (masked ``code``),
    stripped of spaces; None when unbalanced."""
    depth, spans, begin = 0, [], open_paren + 1
    for index in range(open_paren, len(code)):
        ch = code[index]
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
            if depth == 0:
                spans.append((begin, index))
                break
        elif ch == "," and depth == 1:
            spans.append((begin, index))
            begin = index + 1
    else:
        return None
    out = []
    for first, last in spans:
        while first < last and code[first].isspace():
            first += 1
        while last > first and code[last - 1].isspace():
            last -= 1
        if last > first:
            out.append((first, last))
    return out


def _inner(literal: str) -> str:
    """The characters between a string literal's opening and closing quotes."""
    opening = re.match(r"^(?:b?r#*|b)?[\"'`]", literal)
    closing = re.search(r"[\"'`]#*$", literal)
    return literal[opening.end() if opening else 0:closing.start() if closing else len(literal)]


def changed_literal(text: str, start: int, end: int, masked: Masked, rng: random.Random, lang: str) -> str | None:
    """The source of the literal at ``start``..``end`` of ``text`` changed in its own style: a
    character added inside a string, a small integer moved up (a large one down, so it keeps its
    type's range), a decimal number moved; None when it is no literal mesh changes."""
    segment = text[start:end]
    if masked.string_at(start, end):
        # The closing delimiter: exactly one quote, and a raw string's hashes (Rust's r#"..."#).
        closing = re.search(r"[\"'`]#*$", segment)
        quote = len(closing.group(0)) if closing else 0
        if quote == 0 or len(segment) < quote + 1 or (lang != "js" and segment.startswith(("'", "b'"))):
            return None  # a rune or char: one character, not to grow
        inner = _inner(segment)
        opening = len(segment) - quote - len(inner)
        changed = segment[:opening] + edited_text(inner, rng) + segment[len(segment) - quote:]
        # Still exactly one string literal, with other characters (never an empty string turned
        # into a prefix, an escaped quote into another escape).
        again = mask(changed, lang)
        return changed if again.strings == ((0, len(changed)),) and _inner(changed) != inner else None
    number = _NUMBER.fullmatch(segment)
    if number is None:
        return None
    if number.group(2) is not None:
        return f"{float(segment.replace('_', '')) + rng.choice((-1, 1)) * rng.randint(1, 9)}"
    # Never below 0: a minus before the literal is outside it (JS would read --4 as a decrement).
    return str(moved_integer(int(segment.replace("_", "")), rng, typed=True))


def spliced(text: str, inserts: list[tuple[int, str]]) -> str:
    """``text`` with each piece inserted at its index."""
    out, cursor = [], 0
    for at, piece in sorted(inserts):
        out.append(text[cursor:at] + piece)
        cursor = at
    return "".join(out) + text[cursor:]


def placed(text: str, begin: int, end: int, copy: str, before: bool) -> tuple[tuple[int, str], int, int]:
    """Where a copy of the code at ``begin``..``end`` goes, before it or after it (a blank line
    between), as (index, text to insert), and the line of ``text`` it follows with how many lines
    it adds."""
    indent = indent_before(text, begin)
    lines = copy.count("\n") + 2
    if before:
        return (begin, copy + "\n\n" + indent), text.count("\n", 0, begin), lines
    return (end, "\n\n" + indent + copy), text.count("\n", 0, end) + 1, lines


def indent_before(text: str, start: int) -> str:
    """The spaces and tabs the line holding ``start`` begins with, up to ``start``."""
    line_start = text.rfind("\n", 0, start) + 1
    return re.match(r"[ \t]*", text[line_start:start]).group(0)


def function_twins(rel: str, text: str, masked: Masked, tests: list[tuple[str, int, int, list[tuple[int, int]]]],
                   chosen: frozenset[tuple[str, str]], rng: random.Random, lang: str, keyword: str,
                   marks: Callable[[int], tuple[str, ...]], words: list[str], taken: set[str]) -> tuple[str, list[Twin]]:
    """``text`` with a twin of each ``chosen`` test function (Go's, Rust's): ``tests`` are (name,
    where its text starts, its closing brace, the literal it is twinned by); the copy takes a
    fresh name after ``keyword`` (``func``, ``fn``), its changed literal, and a place before or
    after its original; ``marks(start)`` the words its report id holds."""
    copies: list[tuple[int, str]] = []
    twins: list[Twin] = []
    for name, begin, close, literal in tests:
        if ("", name) not in chosen or not literal:
            continue
        start, end = literal[0]
        changed = changed_literal(text, start, end, masked, rng, lang)
        if changed is None:
            continue
        mutant = fresh_name(rng, name, words, taken)
        copy = text[begin:start] + changed + text[end:close + 1]
        copy = re.sub(rf"\b{keyword}\s+{re.escape(name)}\b", f"{keyword} {mutant}", copy, count=1)
        insert, at, size = placed(text, begin, close + 1, copy, rng.random() < 0.5)
        copies.append(insert)
        twins.append(Twin(rel, "", name, mutant, marks(begin), at=at, size=size))
    return (spliced(text, copies), twins) if twins else (text, [])
