"""Twins of JavaScript and TypeScript tests: Jest, Vitest, node --test, mocha and tape.

A ``test('title', fn)`` or ``it('title', fn)`` call (in a ``describe`` or not; ``node:test``'s
options object allowed) can be twinned when its function's last statement is an equality check
against a literal: ``assert.strictEqual(got, 3)`` (``equal``, ``deepEqual``,
``deepStrictEqual``; tape's ``t.equal``, ``t.is``, ``t.same``... then perhaps ``t.end()``),
``expect(got).toBe('a')`` (``toEqual``, ``toStrictEqual``; chai's ``to.equal``, ``to.eql``),
and no ``return`` stands in it. The twin is the same call, right after it, titled with other
words of the file's titles, whose literal is changed (a number moved, a character added inside
a string, in its own quotes); when the original passes, it must fail. ``.skip``, ``.todo``,
``.each`` and ``.failing`` tests, and tests taking a ``done`` callback, are left alone.

May import the standard library, ``orchestrator.mutants`` and ``orchestrator.testruns``.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence
from pathlib import Path

from orchestrator.mutants.braces import (Masked, block_end, changed_literal, last_statement, mask, placed, spliced,
                                         split_args)
from orchestrator.mutants.model import Candidate, Collected, Taken, Twin, mixed_words
from orchestrator.testruns.commands import node_tool, script_command

__all__ = ["MUTATOR"]

_CALL = re.compile(r"(?<![\w$.])(test|it)(\.only|\.concurrent)?\s*\(")
_FUNCTION = re.compile(r"\s*(?:async\s+)?(?:function\s*\w*\s*\(([^)]*)\)|\(([^)]*)\)\s*=>|(\w+)\s*=>)\s*\{")
_EQUAL_CALL = re.compile(r"(?:assert|t|tt|st|assert\.strict)\.(?:equal|strictEqual|deepEqual|deepStrictEqual|is|same|"
                         r"equals|isEqual|looseEqual|deepEquals|strictSame)\s*\(")
_EXPECT = re.compile(r"expect\s*\(")
_MATCHER = re.compile(r"\)\s*\.(?:toBe|toEqual|toStrictEqual|to\.equal|to\.eql|to\.deep\.equal|to\.be\.equal)\s*\(")
_END = re.compile(r"^\s*;?\s*(?:t\.end\s*\(\s*\)\s*;?\s*)?$")
_TEST_FILE = re.compile(r"(\.|-|_|^)(test|spec)\.[cm]?[jt]sx?$|^test(-.*)?\.[cm]?[jt]sx?$")
_SKIP_DIRS = frozenset({"node_modules", ".git", "dist", "build", "coverage", ".next", "vendor"})
# A test that writes a snapshot: its copy, under another name, would write one of its own (an
# inline one into the test file), a trace in the run's output and the tree: never twinned.
_SNAPSHOT = re.compile(r"\.to(?:Match|ThrowErrorMatching)(?:Inline|File)?Snapshot\s*\(")
_SELECTING = ("-t", "--testNamePattern", "--bail", "-b", "--onlyChanged", "-o", "--findRelatedTests", "--grep",
              "-g", "--fgrep", "-f", "--test-name-pattern", "--test-only", "--test-skip-pattern", "--changed",
              "--related", "--shard", "--testPathPattern", "--testPathIgnorePatterns")
_TOOLS = {"jest": ("jest",), "vitest": ("vitest",), "mocha": ("mocha", "_mocha"), "tape": ("tape",)}
_WORD = re.compile(r"[A-Za-z_$][\w$]*")


def _runner_args(argv: Sequence[str], runner: str, root: Path) -> list[str] | None:
    if runner == "node --test":
        words = script_command(argv, root, follow=True) or list(argv)
        if not words or Path(words[0]).name not in ("node", "nodejs"):
            return None
        return [word for word in words[1:] if word != "--test"]
    found = node_tool(argv, root, _TOOLS.get(runner, ()), follow=True)
    if found is None:
        return None
    args = list(found[1])
    if found[2] and "--" in argv:
        args += list(argv[list(argv).index("--") + 1:])  # what ``npm test -- ARGS`` gives the script
    if runner == "vitest" and args[:1] in (["run"], ["watch"], ["dev"]):
        args = args[1:]  # Vitest's sub-commands that run the tests the config collects
    elif runner == "vitest" and args[:1] in (["related"], ["bench"], ["list"], ["init"]):
        return None
    return args


def _walk(root: Path, folder: Path) -> list[str]:
    out = []
    for current, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        inside_tests = any(part in ("test", "tests", "__tests__") for part in Path(current).relative_to(root).parts)
        for name in sorted(files):
            path = Path(current, name)
            if path.is_symlink() or not re.search(r"\.[cm]?[jt]sx?$", name) or name.endswith(".d.ts"):
                continue
            if _TEST_FILE.search(name) or inside_tests:
                out.append(path.relative_to(root).as_posix())
    return out


def _title(text: str, masked: Masked, span: tuple[int, int]) -> str | None:
    """The title of a test when its first argument is a plain string literal."""
    if not masked.string_at(*span):
        return None
    segment = text[span[0]:span[1]]
    if segment[0] not in "'\"`" or "${" in segment or "\\" in segment:
        return None
    return segment[1:-1]


def _checked_literal(text: str, masked: Masked, start: int, end: int) -> list[tuple[int, int]]:
    """The literal the statement at ``start`` (ending the body at ``end``) checks against."""
    code = masked.code
    call = _EQUAL_CALL.match(code, start)
    if call is not None:
        args = split_args(code, call.end() - 1)
        close = _close_paren(code, call.end() - 1)
        if args is None or close is None or len(args) < 2 or not _END.match(code[close + 1:end]):
            return []
        sides = args[:2]
    else:
        expect = _EXPECT.match(code, start)
        if expect is None:
            return []
        first = _close_paren(code, expect.end() - 1)
        matcher = _MATCHER.match(code, first) if first is not None else None
        if matcher is None:
            return []
        args = split_args(code, matcher.end() - 1)
        close = _close_paren(code, matcher.end() - 1)
        if args is None or close is None or len(args) != 1 or not _END.match(code[close + 1:end]):
            return []
        sides = [(expect.end(), first), args[0]]
    literal = [span for span in sides if _is_literal(text, masked, span)]
    if len(literal) != 1:
        return []
    first, last = literal[0]
    return [(first + 1, last)] if text[first] == "-" else literal


def _is_literal(text: str, masked: Masked, span: tuple[int, int]) -> bool:
    segment = text[span[0]:span[1]].strip()
    if masked.string_at(*span):
        return "${" not in segment
    return bool(re.fullmatch(r"-?\d[\d_]*(\.\d+)?", segment))


def _close_paren(code: str, open_at: int) -> int | None:
    depth = 0
    for index in range(open_at, len(code)):
        if code[index] in "([{":
            depth += 1
        elif code[index] in ")]}":
            depth -= 1
            if depth == 0:
                return index
    return None


def _tests(text: str, masked: Masked) -> list[tuple[str, tuple[int, int], int, int, list[tuple[int, int]]]]:
    """Each test call: (title, the title's span, where the call starts, where its statement ends,
    the literal it can be twinned by: a one-item list, or [])."""
    code = masked.code
    out = []
    for found in _CALL.finditer(code):
        args = split_args(code, found.end() - 1)
        close = _close_paren(code, found.end() - 1)
        if not args or close is None or len(args) < 2:
            continue
        title = _title(text, masked, args[0])
        if title is None:
            continue
        function = _FUNCTION.match(code, args[-1][0]) or _FUNCTION.match(code, args[1][0])
        end = close + 1 + (1 if code[close + 1:close + 2] == ";" else 0)
        literal: list[tuple[int, int]] = []
        if function is not None:
            params = next((group for group in function.groups() if group is not None), "").strip()
            brace = function.end() - 1
            body_end = block_end(code, brace)
            if body_end is not None and "done" not in params and "cb" not in params.split(",")[0] \
                    and not re.search(r"\breturn\b", code[brace:body_end]):
                start = last_statement(code, brace + 1, body_end)
                if start is not None and re.match(r"t\.end\s*\(\s*\)\s*;?\s*$", code[start:body_end]):
                    start = last_statement(code, brace + 1, start)  # tape's end: the check before it
                if start is not None:
                    literal = _checked_literal(text, masked, start, body_end)
        out.append((title, args[0], found.start(), end, literal))
    return out


def _title_words(titles: Sequence[str]) -> list[str]:
    return [word.lower() for title in titles for word in re.findall(r"[A-Za-z]{3,}", title)]


class JsTests:
    """Jest's, Vitest's, node --test's, mocha's and tape's tests (``model.Mutator``)."""

    def collected(self, args: Sequence[str], runner: str, root: Path) -> Collected | None:
        tool = _runner_args(args, runner, root)
        if tool is None or any(arg.split("=", 1)[0] in _SELECTING for arg in tool):
            return None
        named = [arg for arg in tool if not arg.startswith("-") and not re.fullmatch(r"\d+", arg)]
        files: list[str] = []
        top = root.resolve()
        for pattern in named:
            matches = sorted(top.glob(pattern)) if any(ch in pattern for ch in "*?[") else [top / pattern]
            for path in matches:
                path = path.resolve()
                if path != top and top not in path.parents:
                    continue
                if path.is_file():
                    files.append(path.relative_to(top).as_posix())
                elif path.is_dir():
                    files.extend(_walk(top, path))
        if not named:
            files = _walk(top, top)
        return Collected(tuple(dict.fromkeys(files)), explicit=bool(named) and all(
            (top / arg).is_file() for arg in named))

    def candidates(self, rel: str, text: str) -> list[Candidate]:
        masked = mask(text, "js")
        return [Candidate("", title, frozenset(_WORD.findall(masked.code[start:end])))
                for title, _, start, end, literal in _tests(text, masked)
                if literal and not _SNAPSHOT.search(masked.code[start:end])]

    def twin(self, rel: str, text: str, rng: random.Random, chosen: frozenset[tuple[str, str]],
             taken: set[str]) -> tuple[str, list[Twin]]:
        masked = mask(text, "js")
        tests = _tests(text, masked)
        words = _title_words([title for title, *_ in tests]) or ["value", "input", "result", "works"]
        titles = {title for title, *_ in tests}
        copies: list[tuple[int, str]] = []
        twins: list[Twin] = []
        cursor = 0
        for title, span, start, end, literal in sorted(tests, key=lambda item: item[2]):
            if ("", title) not in chosen or not literal or start < cursor or _SNAPSHOT.search(masked.code[start:end]):
                continue  # (a test inside one already copied goes with it)
            changed = changed_literal(text, literal[0][0], literal[0][1], masked, rng, "js")
            if changed is None:
                continue
            new_title = _fresh_title(rng, title, words, titles, taken, text)
            quote = text[span[0]]
            copy = (text[start:span[0]] + quote + new_title + quote + text[span[1]:literal[0][0]] + changed
                    + text[literal[0][1]:end])
            insert, at, size = placed(text, start, end, copy, rng.random() < 0.5)
            copies.append(insert)
            cursor = end
            twins.append(Twin(rel, "", title, new_title, (), at=at, size=size))
        if not twins:
            return text, []
        return spliced(text, copies), twins

    def reaches(self, rel: str, text: str, changed: Sequence[str]) -> int:
        if rel in changed:
            return 2
        folder = Path(rel).parent
        for path in changed:
            if not re.search(r"\.[cm]?[jt]sx?$", path):
                continue
            stem = re.sub(r"\.[cm]?[jt]sx?$", "", path)
            for found in re.finditer(r"""(?:require\s*\(\s*|from\s+|import\s*\(\s*)['"]([^'"]+)['"]""", text):
                target = os.path.normpath(folder / found.group(1)).replace(os.sep, "/")
                if target in (stem, path, stem.rsplit("/index", 1)[0] if stem.endswith("/index") else None):
                    return 2
        return 1 if any(re.search(r"\.[cm]?[jt]sx?$", path) for path in changed) else 0

    def selection_args(self, runner: str, twins: Sequence[Twin]) -> list[str]:
        return []


def _fresh_title(rng: random.Random, original: str, words: Sequence[str], titles: set[str], taken: set[str],
                 text: str) -> str:
    """A title made of the original's words, one swapped for or joined by a word of the file's
    other titles; found in no title, no text of the file, and not taken (it
    is then)."""
    own = re.findall(r"[A-Za-z0-9]+", original) or ["works"]
    pool = [word for word in dict.fromkeys(words) if word not in own] or ["value", "input", "result", "case"]
    for attempt in range(200):
        title = " ".join(mixed_words(rng, own, pool, attempt))
        if title not in titles and title not in text and (taken.free(title) if isinstance(taken, Taken)
                                                          else title not in taken):
            taken.add(title)
            return title
    title = " ".join(rng.choice(pool) for _ in range(4)) + f" {rng.randint(2, 99)}"
    taken.add(title)
    return title


MUTATOR = JsTests()
