"""Twins of Rust tests, for ``cargo test``.

A ``#[test] fn name()`` (no return type, not ``#[should_panic]``) can be twinned when its last
statement is ``assert_eq!(got, LITERAL)`` (or the literal first) and no ``return`` stands in
its body: when the original passes, the value equalled the literal; the twin, the same
function (its attributes too) under another name right after it, in the same module,
compares against a changed literal (a small integer moved up, a large one down so it keeps its
type's range, a character added inside a string; a literal with a type suffix is left alone)
and must fail.

May import the standard library and ``orchestrator.mutants`` only.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence
from pathlib import Path

from orchestrator.mutants.braces import Masked, block_end, function_twins, last_statement, mask, split_args
from orchestrator.mutants.model import Candidate, Collected, Twin, name_words

__all__ = ["MUTATOR"]

_TEST = re.compile(r"#\[test\]\s*((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?fn\s+(\w+)\s*\(\s*\)\s*(->[^{]*)?\{")
_ASSERT = re.compile(r"(?:assert_eq|pretty_assertions::assert_eq)!\s*\(")
_SELECTING = ("--exact", "--skip", "--include-ignored", "--ignored", "--list", "--no-run", "--doc")
_WORD = re.compile(r"[A-Za-z_]\w*")


def _literal(text: str, masked: Masked, span: tuple[int, int]) -> bool:
    segment = text[span[0]:span[1]]
    if masked.string_at(*span):
        return segment.startswith('"') or segment.startswith("r")
    return bool(re.fullmatch(r"-?\d[\d_]*(\.\d+)?", segment))


def _tests(text: str, masked: Masked) -> list[tuple[str, int, int, list[tuple[int, int]]]]:
    """Each test: (name, where its #[test] starts, its closing brace, the literal it can be
    twinned by: a one-item list, or [])."""
    code = masked.code
    out = []
    for found in _TEST.finditer(code):
        close = block_end(code, found.end() - 1)
        if close is None:
            continue
        literal: list[tuple[int, int]] = []
        body = code[found.end():close]
        if "should_panic" not in found.group(1) and found.group(3) is None and not re.search(r"\breturn\b", body):
            start = last_statement(code, found.end(), close)
            call = _ASSERT.match(code, start) if start is not None else None
            args = split_args(code, call.end() - 1) if call is not None else None
            shut = code.find(")", args[-1][1]) if args else -1
            if args and len(args) >= 2 and shut >= 0 and re.fullmatch(r"\s*;?\s*", code[shut + 1:close]):
                sides = [span for span in args[:2] if _literal(text, masked, span)]
                if len(sides) == 1:
                    first, last = sides[0]
                    literal = [(first + 1, last)] if text[first] == "-" else sides
        out.append((found.group(2), found.start(), close, literal))
    return out


def _module_words(rel: str) -> tuple[str, ...]:
    """The module path a file's tests are reported under (``src/a/b.rs`` -> a, b); () for a
    crate root or an integration test."""
    parts = Path(rel).with_suffix("").parts
    if "src" not in parts:
        return ()
    inner = list(parts[parts.index("src") + 1:])
    if inner and inner[-1] in ("lib", "main", "mod"):
        inner = inner[:-1]
    return tuple(word for part in inner for word in _WORD.findall(part))


class RustTests:
    """``cargo test``'s tests (``model.Mutator``)."""

    def collected(self, args: Sequence[str], runner: str, root: Path) -> Collected | None:
        rest = list(args[2:]) if Path(args[0]).name == "cargo" else list(args)
        before = rest[:rest.index("--")] if "--" in rest else rest
        after = rest[rest.index("--") + 1:] if "--" in rest else []
        if any(arg.split("=", 1)[0] in _SELECTING for arg in after) or any(
                arg in ("--doc", "--no-run") for arg in before):
            return None
        if [arg for arg in after if not arg.startswith("-")]:
            return None  # a name filter
        positional = [arg for index, arg in enumerate(before) if not arg.startswith("-")
                      and (index == 0 or not before[index - 1].startswith("-") or "=" in before[index - 1]
                           or before[index - 1] in ("--release", "--workspace", "--all-features", "--no-fail-fast",
                                                    "--lib", "--bins", "--tests", "-q", "-v"))]
        if positional:
            return None  # a test name filter
        files = []
        for current, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in ("target", ".git", "vendor", "node_modules")
                             and not d.startswith("."))
            files.extend(Path(current, name).relative_to(root).as_posix() for name in sorted(names)
                         if name.endswith(".rs") and not Path(current, name).is_symlink())
        return Collected(tuple(files))

    def candidates(self, rel: str, text: str) -> list[Candidate]:
        masked = mask(text, "rust")
        return [Candidate("", name, frozenset(_WORD.findall(masked.code[begin:close])))
                for name, begin, close, literal in _tests(text, masked) if literal]

    def twin(self, rel: str, text: str, rng: random.Random, chosen: frozenset[tuple[str, str]],
             taken: set[str]) -> tuple[str, list[Twin]]:
        masked = mask(text, "rust")
        tests = _tests(text, masked)
        words = name_words([name for name, *_ in tests])

        def marks(begin: int) -> tuple[str, ...]:
            """The file's module path and the inline modules (``mod tests {``) around ``begin``."""
            return _module_words(rel) + tuple(
                found.group(1) for found in re.finditer(r"\bmod\s+(\w+)\s*\{", masked.code)
                if found.start() < begin < (block_end(masked.code, found.end() - 1) or 0))

        return function_twins(rel, text, masked, tests, chosen, rng, "rust", "fn", marks, words, taken)

    def reaches(self, rel: str, text: str, changed: Sequence[str]) -> int:
        if rel in changed:
            return 2
        rust = [path for path in changed if path.endswith(".rs")]
        if not rust:
            return 0
        if rel.startswith("tests/"):
            return 1  # an integration test reaches the whole crate
        return 2 if any(Path(path).parent == Path(rel).parent for path in rust) else 1

    def selection_args(self, runner: str, twins: Sequence[Twin]) -> list[str]:
        return []


MUTATOR = RustTests()
