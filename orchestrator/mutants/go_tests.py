"""Twins of Go tests, for ``go test``.

A ``func TestXxx(t *testing.T)`` can be twinned when its last statement is a check against a
literal that fails the test: ``if got != 3 { t.Errorf(...) }`` (an init statement allowed:
``if got := f(); got != "a" {``; no ``else``), or testify's ``assert.Equal(t, 3, got)`` /
``require.Equal``; and no ``return`` stands in its body. When the original passes, the value
equalled the literal; the twin, the same function under another ``Test`` name right after it
in the same file and package, compares against a changed literal (a small integer moved up, a
large one down so it keeps its type's range, a character added inside a string) and fails.

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

_TEST = re.compile(r"^func\s+(Test[A-Z0-9_]\w*|Test)\s*\(\s*(\w+)\s+\*testing\.T\s*\)\s*\{", re.M)
# go test flags whose value is the next argument when not given with "=".
_VALUED = frozenset({"-run", "-skip", "-count", "-timeout", "-p", "-parallel", "-tags", "-coverprofile", "-o",
                     "-exec", "-ldflags", "-gcflags", "-bench", "-benchtime", "-cpu", "-covermode", "-coverpkg",
                     "-vet", "-mod", "-modfile", "-overlay", "-pkgdir", "-shuffle", "-outputdir", "-memprofile",
                     "-cpuprofile", "-blockprofile", "-mutexprofile", "-trace", "-fuzz", "-fuzztime", "-asmflags",
                     "-C", "-toolexec", "-compiler", "-installsuffix", "-buildmode", "-pgo"})
# Options after which which tests run cannot be known, or a first failure stops the run.
_SELECTING = ("-run", "-skip", "-failfast", "-list", "-fuzz")
_SKIP_DIRS = frozenset({"vendor", "testdata", "node_modules"})
_FAILS = re.compile(r"\b\w+\.(Error|Errorf|Fatal|Fatalf|Fail|FailNow)\s*\(")
_IF_CHECK = re.compile(r"if\s+(?:[^;{]*;\s*)?(?P<left>[^{;]+?)\s*!=\s*(?P<right>[^{;]+?)\s*\{")
_TESTIFY = re.compile(r"(?:assert|require)\.(?:Equal|EqualValues|Exactly)\s*\(")
_WORD = re.compile(r"[A-Za-z_]\w*")


def _module(root: Path) -> str:
    try:
        found = re.search(r"^module\s+(\S+)", (root / "go.mod").read_text(errors="replace"), re.M)
    except OSError:
        return ""
    return found.group(1).strip('"') if found else ""


def _test_files(root: Path, folder: Path, recursive: bool) -> list[str]:
    out = []
    for current, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith((".", "_"))) if recursive else []
        out.extend(Path(current, name).relative_to(root).as_posix() for name in sorted(files)
                   if name.endswith("_test.go") and not name.startswith((".", "_"))
                   and not Path(current, name).is_symlink())
    return out


def _check(text: str, masked: Masked, start: int, end: int) -> list[tuple[int, int]]:
    """The literal spans the statement at ``start``..``end`` (to its block's end) compares
    against, when it is a failing check mesh can twin; [] otherwise."""
    code = masked.code
    found = _IF_CHECK.match(code, start)
    if found is not None:
        brace = found.end() - 1
        close = block_end(code, brace)
        if close is None or code[close + 1:end].strip() or not _FAILS.search(code, brace, close):
            return []
        sides = [(found.start("left"), found.end("left")), (found.start("right"), found.end("right"))]
    else:
        call = _TESTIFY.match(code, start)
        if call is None:
            return []
        spans = split_args(code, call.end() - 1)
        close = code.rfind(")", start, end)
        if spans is None or len(spans) < 3 or code[close + 1:end].strip():
            return []
        sides = spans[1:3]
    literal = [span for span in sides if _literal(text, masked, span)]
    return literal if len(literal) == 1 else []


def _literal(text: str, masked: Masked, span: tuple[int, int]) -> bool:
    segment = text[span[0]:span[1]]
    return masked.string_at(*span) or bool(re.fullmatch(r"-?\d[\d_]*(\.\d+)?", segment))


def _tests(text: str, masked: Masked) -> list[tuple[str, int, int, int, list[tuple[int, int]]]]:
    """Each test: (name, where its func starts, its closing brace, its body's start, the
    literal it can be twinned by (a one-item list) or [])."""
    out = []
    for found in _TEST.finditer(masked.code):
        close = block_end(masked.code, found.end() - 1)
        if close is None:
            continue
        body = masked.code[found.end():close]
        literal: list[tuple[int, int]] = []
        if not re.search(r"\breturn\b", body):
            start = last_statement(masked.code, found.end(), close)
            if start is not None:
                literal = _check(text, masked, start, close)
                if literal and literal[0][0] >= 1 and text[literal[0][0]] == "-":
                    literal = [(literal[0][0] + 1, literal[0][1])]
        out.append((found.group(1), found.start(), close, found.end(), literal))
    return out


class GoTests:
    """``go test``'s tests (``model.Mutator``)."""

    def collected(self, args: Sequence[str], runner: str, root: Path) -> Collected | None:
        rest = list(args[2:]) if list(args[:2]) and Path(args[0]).name == "go" else list(args)
        packages: list[str] = []
        index = 0
        while index < len(rest):
            arg = rest[index]
            if arg.startswith("-"):
                flag = arg.split("=", 1)[0].replace("--", "-")
                if flag in _SELECTING:
                    return None
                if arg in ("-args",):
                    break
                index += 2 if flag in _VALUED and "=" not in arg else 1
                continue
            packages.append(arg)
            index += 1
        module = _module(root)
        files: list[str] = []
        for pattern in packages or ["."]:
            if module and (pattern == module or pattern.startswith(module + "/")):
                pattern = "./" + pattern[len(module):].lstrip("/")
            if not pattern.startswith((".", "/")):
                continue  # a package of another module, or the standard library
            recursive = pattern.endswith("/...")
            folder = (root / pattern[:-4] if recursive else root / pattern).resolve()
            top = root.resolve()
            if folder != top and top not in folder.parents or not folder.is_dir():
                continue
            files.extend(_test_files(top, folder, recursive))
        tail = module.rstrip("/").rsplit("/", 1)[-1]
        return Collected(tuple(dict.fromkeys(files)), marks={".": tuple(_WORD.findall(tail))} if tail else {})

    def candidates(self, rel: str, text: str) -> list[Candidate]:
        masked = mask(text, "go")
        return [Candidate("", name, frozenset(_WORD.findall(masked.code[body:close])))
                for name, _, close, body, literal in _tests(text, masked) if literal]

    def twin(self, rel: str, text: str, rng: random.Random, chosen: frozenset[tuple[str, str]],
             taken: set[str]) -> tuple[str, list[Twin]]:
        masked = mask(text, "go")
        tests = _tests(text, masked)
        taken.update(_WORD.findall(masked.code))
        words = name_words([name for name, *_ in tests])
        # The package's folder names its import path's last element (the root's is go.mod's).
        mark = tuple(_WORD.findall(Path(rel).parent.name))
        return function_twins(rel, text, masked, [(name, begin, close, literal) for name, begin, close, _, literal in tests],
                              chosen, rng, "go", "func", lambda _begin: mark, words, taken)

    def reaches(self, rel: str, text: str, changed: Sequence[str]) -> int:
        folder = str(Path(rel).parent)
        if rel in changed or any(path.endswith(".go") and str(Path(path).parent) == folder for path in changed):
            return 2
        dirs = {str(Path(path).parent) for path in changed if path.endswith(".go")}
        imports = set(re.findall(r'"([^"\s]+)"', text[:text.find(")", text.find("import")) + 1]
                                  if "import" in text else ""))
        return 1 if any(imp.endswith("/" + folder_) or imp == folder_ for imp in imports for folder_ in dirs
                        if folder_ != ".") else 0

    def selection_args(self, runner: str, twins: Sequence[Twin]) -> list[str]:
        return []


MUTATOR = GoTests()
