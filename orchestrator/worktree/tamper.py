"""A static look at every patch for code that reaches into the test machinery.

The verdict of a validation is written by the code under test's process: a module of the
patch that replaces ``unittest.TestCase.assertEqual``, wraps pytest's ``Function.runtest``,
prints ``go test``'s PASS lines from an ``init()`` and exits, or runs before Rust's ``main`` from
``.init_array``, forges it. Control tests catch a forger that cannot tell them from real tests;
this check catches the tools of forgery themselves, whatever they target. Each rule of
``RULES`` is one row: the language, which files it reads (code outside test files), what it
looks for, and why that has no place there. ``scan`` runs every rule on the text of each
changed file before and after the patch and reports what the patch adds (a line the base
already had is the project's own).

A finding is not proof: the engine makes each one a MUST_FIX finding of the review, so a
worker reviewer can never approve the run while the lines are there, and only a person's
review (``mesh review``) can (orchestrator.protocol.review).

May import the standard library only.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["RULES", "Rule", "Tamper", "is_test_path", "markdown_table", "scan", "scan_text"]

Hit = tuple[int, str]  # (line number, 1-based; the line's text)


class Rule(NamedTuple):
    """One kind of tampering: ``language`` and ``files`` (a predicate of the path) say what it
    reads, ``find`` returns the offending lines of a text, ``what`` and ``why`` what it says."""

    rule: str
    language: str
    files: Callable[[str], bool]
    find: Callable[[str], list[Hit]]
    what: str
    why: str


@dataclass(frozen=True)
class Tamper:
    """One line a patch adds that a rule flags."""

    rule: str
    path: str
    line: int
    text: str
    what: str
    why: str

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"

    def to_dict(self) -> dict:
        return {"rule": self.rule, "location": self.location, "text": self.text, "what": self.what, "why": self.why}


# ---------------------------------------------------------------- which files are tests

_JS = re.compile(r"\.(?:[cm]?js|jsx|[cm]?ts|tsx)$", re.IGNORECASE)
_TEST_DIRS = frozenset({"test", "tests", "__tests__", "spec", "specs", "testing", "testdata"})


def is_test_path(path: str) -> bool:
    """Whether ``path`` is a test file of its language (its runner collects it as tests)."""
    parts = path.split("/")
    name = parts[-1].lower()
    if name.endswith(".py"):
        return name == "conftest.py" or name.startswith("test") or name.endswith("_test.py")
    if name.endswith(".go"):
        return name.endswith("_test.go")
    if name.endswith(".rs"):
        return any(part in ("tests", "benches") for part in parts[:-1])
    if _JS.search(name):
        return bool(re.search(r"[.-](test|spec)\.[^.]+$", name)) or any(p.lower() in _TEST_DIRS for p in parts[:-1])
    return False


def _python(path: str) -> bool:
    return path.lower().endswith((".py", ".pyw")) and not is_test_path(path)


def _go(path: str) -> bool:
    return path.endswith(".go") and not is_test_path(path)


def _rust_library(path: str) -> bool:
    parts = path.split("/")
    return (path.endswith(".rs") and not is_test_path(path) and parts[-1] not in ("main.rs", "build.rs")
            and "bin" not in parts[:-1] and "examples" not in parts[:-1])


def _js_library(path: str) -> bool:
    parts = path.split("/")
    return bool(_JS.search(path)) and not is_test_path(path) and "bin" not in parts[:-1] \
        and not parts[-1].lower().startswith(("jest.", "vitest.", "vite.", "babel.", "eslint."))


# ---------------------------------------------------------------- helpers


def _lines_matching(text: str, pattern: re.Pattern[str], *, skip_comments: str = "") -> list[Hit]:
    hits = []
    for number, line in enumerate(text.split("\n"), start=1):
        code = line.split(skip_comments, 1)[0] if skip_comments else line
        if pattern.search(code):
            hits.append((number, line.strip()))
    return hits


def _line(text: str, number: int) -> Hit:
    lines = text.split("\n")
    return number, (lines[number - 1].strip() if 0 < number <= len(lines) else "")


def _brace_bodies(text: str, head: re.Pattern[str]) -> Iterable[tuple[int, int]]:
    """(start, end) offsets of the ``{...}`` body after each match of ``head``."""
    for match in head.finditer(text):
        start = text.find("{", match.end() - 1)
        if start < 0:
            continue
        depth, index = 0, start
        while index < len(text):
            char = text[index]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    break
            elif char in "\"'`":
                end = text.find(char, index + 1)
                while end > 0 and text[end - 1] == "\\":
                    end = text.find(char, end + 1)
                index = end if end > 0 else index
            index += 1
        yield start, index


# ---------------------------------------------------------------- Python

_MACHINERY = frozenset({"unittest", "_pytest", "pytest", "doctest", "nose", "nose2"})


class _PythonLook(ast.NodeVisitor):
    """Names bound to the test machinery, and what the module does to them."""

    def __init__(self) -> None:
        self.aliases: set[str] = set()
        self.assigned: list[int] = []
        self.imports: list[int] = []
        self.frames: list[int] = []
        self.exits: list[int] = []

    def _is_machinery(self, node: ast.AST) -> bool:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Call):
            return self._imports_machinery(node)
        return isinstance(node, ast.Name) and node.id in self.aliases

    @staticmethod
    def _imports_machinery(call: ast.Call) -> bool:
        name = ast.unparse(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else ""
        return name in ("__import__", "importlib.import_module", "import_module") and bool(call.args) \
            and isinstance(call.args[0], ast.Constant) and str(call.args[0].value).split(".")[0] in _MACHINERY

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            root = alias.name.split(".")[0]
            if root in _MACHINERY:
                self.aliases.add(alias.asname or root)
                if root == "_pytest":
                    self.imports.append(node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        root = (node.module or "").split(".")[0]
        if root in _MACHINERY and node.level == 0:
            self.aliases.update(alias.asname or alias.name for alias in node.names)
            if root == "_pytest":
                self.imports.append(node.lineno)

    def _targets(self, targets: Sequence[ast.AST], lineno: int) -> None:
        for target in targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                self._targets(target.elts, lineno)
            elif isinstance(target, (ast.Attribute, ast.Subscript)) and self._is_machinery(target.value):
                self.assigned.append(lineno)
            elif isinstance(target, ast.Subscript) and ast.unparse(target.value) == "sys.modules" and \
                    isinstance(target.slice, ast.Constant) and str(target.slice.value).split(".")[0] in _MACHINERY:
                self.assigned.append(lineno)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node.targets, node.lineno)
        if isinstance(node.value, ast.Call) and self._imports_machinery(node.value):
            self.aliases.update(t.id for t in node.targets if isinstance(t, ast.Name))
            self.imports.append(node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets([node.target], node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets([node.target], node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._targets(node.targets, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = ast.unparse(node.func) if isinstance(node.func, (ast.Name, ast.Attribute)) else ""
        if name in ("setattr", "delattr", "object.__setattr__", "type.__setattr__", "vars") and node.args \
                and self._is_machinery(node.args[0]):
            self.assigned.append(node.lineno)
        if name in ("sys._getframe", "inspect.currentframe", "inspect.stack", "inspect.getouterframes",
                    "inspect.getframeinfo", "traceback.extract_stack", "traceback.walk_stack", "_getframe",
                    "currentframe"):
            self.frames.append(node.lineno)
        if name in ("os._exit", "posix._exit", "atexit.register", "_exit", "os.kill", "signal.raise_signal"):
            self.exits.append(node.lineno)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ("f_back", "f_code", "f_locals", "f_globals", "tb_frame"):
            self.frames.append(node.lineno)
        self.generic_visit(node)


@functools.lru_cache(maxsize=4)
def _python_look(text: str) -> _PythonLook | None:
    """The module's look, parsed once for the four Python rules (read-only: it is shared)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    look = _PythonLook()
    look.visit(tree)
    return look


def _py_lines(attribute: str, fallback: re.Pattern[str]) -> Callable[[str], list[Hit]]:
    def find(text: str) -> list[Hit]:
        look = _python_look(text)
        if look is None:
            return _lines_matching(text, fallback, skip_comments="#")
        if attribute == "frames" and not (look.aliases or look.assigned):
            return []  # reading callers' frames is a forger's tool next to the test machinery only
        return [_line(text, number) for number in sorted(set(getattr(look, attribute)))]
    return find


# ---------------------------------------------------------------- Go, Rust, JavaScript

_GO_INIT = re.compile(r"^func\s+init\s*\(\s*\)\s*\{", re.MULTILINE)
_GO_OUTPUT = re.compile(r"\bos\.(Stdout|Stderr|Exit)\b|\bsyscall\.(Exit|Write)\b|\bfmt\.(F?[Pp]rint)|\bprintln?\(|"
                        r"\blog\.(Fatal|Print)|\bruntime\.Goexit")


def _go_init(text: str) -> list[Hit]:
    hits: list[Hit] = []
    for start, end in _brace_bodies(text, _GO_INIT):
        first = text.count("\n", 0, start) + 1
        for offset, line in enumerate(text[start:end].split("\n")):
            if _GO_OUTPUT.search(line.split("//", 1)[0]):
                hits.append((first + offset, line.strip()))
    return hits


def _go_exit(text: str) -> list[Hit]:
    if re.search(r"^package\s+main\b", text, re.MULTILINE):
        return []
    return _lines_matching(text, re.compile(r"\b(os|syscall)\.Exit\s*\("), skip_comments="//")


_GO_TESTING = re.compile(r"[\"`]-?test\.(v|run|paniconexit0|testlogfile|count)\b|test2json|flag\.Lookup\(\s*\"test\.|"
                         r"\"(--- PASS|=== RUN|PASS\\n|ok  \\t)")
_RUST_INIT = re.compile(r"link_section|\.init_array|\.fini_array|\.ctors\b|#\s*\[\s*(used|ctor|dtor)\b|"
                        r"__libc_start_main|#\s*\[\s*no_mangle\s*\]\s*(pub\s+)?(extern\s+\"C\"\s+)?fn\s+main\b")
_RUST_EXIT = re.compile(r"\bprocess::(exit|abort)\s*\(|\blibc::_?exit\s*\(")
_RUST_PANIC = re.compile(r"\bpanic::(set_hook|take_hook|always_abort)\b")
_RUST_OUTPUT = re.compile(r"test result: |running \d+ tests?\b|\.\.\. ok\b|test \{.*\} \.\.\.")

_JS_MODULES = r"(?:node:)?assert(?:/strict)?|chai|node:test|vitest|@jest/globals|expect|uvu/assert|tape|ava"
_JS_BIND = re.compile(
    r"(?:const|let|var)\s+(\w+)\s*=\s*require\(\s*['\"](?:" + _JS_MODULES + r")['\"]\s*\)"
    r"|import\s+(?:\*\s+as\s+)?(\w+)\s*(?:,\s*\{[^}]*\})?\s+from\s+['\"](?:" + _JS_MODULES + r")['\"]")
_JS_DIRECT = re.compile(r"require\(\s*['\"](?:" + _JS_MODULES + r")['\"]\s*\)\s*(?:\.\w+|\[[^\]]+\])+\s*=(?!=)")
_JS_GLOBALS = re.compile(
    r"\b(?:globalThis|global|window|self)\s*(?:\.\s*|\[\s*['\"])(?:expect|it|test|describe|assert|suite|beforeEach|"
    r"afterEach|beforeAll|afterAll|jest|vi|__vitest_\w*|__jest\w*)\b[^=;\n]*=(?!=)|\bexpect\.extend\s*\(|"
    r"\bObject\.(?:assign|defineProperty|defineProperties)\(\s*(?:globalThis|global)\s*,")
# process.exit at a module's top level (a CLI library exits from its functions, as commander does),
# and the ways around exit anywhere.
_JS_EXIT = re.compile(r"^(?:if\s*\(.*\)\s*|;\s*)?process\s*\.\s*(?:exit|abort)\s*\(|\bprocess\s*\.\s*reallyExit\s*\(|"
                      r"\bprocess\.kill\(\s*process\.pid|\bprocess\.(?:on|once)\(\s*['\"](?:exit|beforeExit)['\"]")
_JS_OUTPUT = re.compile(r"['\"`](?:ok \d+ |# pass\b|# tests \d|✓ |✔ |Tests:\s+\d+ passed|Test Files\s+\d+ passed)")


def _js_assert(text: str) -> list[Hit]:
    names = {name for match in _JS_BIND.finditer(text) for name in match.groups() if name}
    patterns = [_JS_DIRECT]
    for name in names:
        escaped = re.escape(name)
        patterns.append(re.compile(rf"(?<![\w.$]){escaped}(?:\s*\.\s*\w+|\[[^\]]+\])+\s*=(?!=)"))
        patterns.append(re.compile(rf"\bObject\.(?:assign|defineProperty|defineProperties|setPrototypeOf)\(\s*"
                                   rf"{escaped}\b"))
    return [hit for pattern in patterns for hit in _lines_matching(text, pattern, skip_comments="//")]


_MESH_PATHS = re.compile(r"/mesh/(tree|report|cache|home)\b")


def _code_outside_tests(path: str) -> bool:
    return _python(path) or _go(path) or _rust_library(path) or _js_library(path)


def _regex(pattern: re.Pattern[str], comment: str = "//") -> Callable[[str], list[Hit]]:
    return lambda text: _lines_matching(text, pattern, skip_comments=comment)


_FORGES = "the verdict of the tests is written by the process the code under test runs in"

RULES: tuple[Rule, ...] = (
    Rule("py-runner-attribute", "Python", _python,
         _py_lines("assigned", re.compile(r"\b(unittest|_pytest|pytest)\b[\w.\[\]'\"]*\s*=[^=]|setattr\(\s*(unittest|"
                                          r"_pytest|pytest)")),
         "assigns to the test machinery (unittest, pytest, _pytest) outside a test file",
         f"replacing assertEqual or Function.runtest makes failing tests pass: {_FORGES}"),
    Rule("py-runner-import", "Python", _python,
         _py_lines("imports", re.compile(r"^\s*(import|from)\s+_pytest\b|__import__\(\s*['\"](unittest|_?pytest)")),
         "imports pytest's internals (_pytest) or the runner by name at run time outside a test file",
         "a library has no use for the runner's internals; a forger needs them"),
    Rule("py-caller-frames", "Python", _python, _py_lines("frames", re.compile(r"sys\._getframe|\.f_back\b")),
         "reads its callers' frames in a module that also touches the test machinery",
         "how a forger tells mesh's control tests from real ones: by who calls"),
    Rule("py-process-exit", "Python", _python,
         _py_lines("exits", re.compile(r"\bos\._exit\s*\(|\batexit\.register\s*\(")),
         "ends the process (os._exit) or registers exit code (atexit) in a module under test",
         f"the runner's report and exit status are cut short or rewritten: {_FORGES}"),
    Rule("go-init-output", "Go", _go, _go_init, "writes to stdout or exits from func init() outside a test file",
         "init runs before the test binary's main: it can print go test's PASS lines and exit 0"),
    Rule("go-exit", "Go", _go, _go_exit, "calls os.Exit in a package that is not main",
         "a library that exits ends the test binary with the status it chooses"),
    Rule("go-test-protocol", "Go", _go, _regex(_GO_TESTING),
         "names go test's flags or output lines (test2json, -test.v, --- PASS) outside a test file",
         "what a forger prints to pass for the test binary"),
    Rule("rust-init-section", "Rust", _rust_library, _regex(_RUST_INIT),
         "puts code in .init_array (link_section, #[used], #[ctor]) or defines main in library code",
         "it runs before the test harness's main and can print libtest's lines and exit"),
    Rule("rust-exit", "Rust", _rust_library, _regex(_RUST_EXIT), "exits the process (std::process::exit) in library code",
         "a library that exits ends the test binary with the status it chooses"),
    Rule("rust-panic-hook", "Rust", _rust_library, _regex(_RUST_PANIC), "sets a panic hook in library code",
         "a failing assertion is a panic: a hook can swallow it or report it as a pass"),
    Rule("rust-test-output", "Rust", _rust_library, _regex(_RUST_OUTPUT),
         "holds libtest's output lines (test result:, ... ok) in library code", "what a forger prints to pass for cargo test"),
    Rule("js-assert-assignment", "JavaScript/TypeScript", _js_library, _js_assert,
         "assigns to an assertion module (node:assert, chai, expect, vitest) outside a test file",
         f"replacing assert's functions makes failing tests pass: {_FORGES}"),
    Rule("js-test-globals", "JavaScript/TypeScript", _js_library, _regex(_JS_GLOBALS),
         "assigns test globals (globalThis.expect, it, describe...) or extends expect outside a test file",
         f"the runner's own functions replaced: {_FORGES}"),
    Rule("js-process-exit", "JavaScript/TypeScript", _js_library, _regex(_JS_EXIT),
         "exits the process at a module's top level (process.exit), or hooks or forces the exit, in a library module",
         "the test runner ends, or reports, with the status the code chooses"),
    Rule("js-test-output", "JavaScript/TypeScript", _js_library, _regex(_JS_OUTPUT),
         "holds a test runner's output lines (TAP ok N, ✓, Tests: N passed) in a library module",
         "what a forger prints to pass for the runner"),
    Rule("mesh-sandbox-probe", "any", _code_outside_tests, _regex(_MESH_PATHS, comment="#"),
         "names mesh's validation sandbox (/mesh/tree, /mesh/report, /mesh/cache) in code outside a test file",
         "code that knows it is being validated can be right there and wrong everywhere else"),
)


def scan_text(path: str, before: str | None, after: str | None, *, imported: bool = False) -> list[Tamper]:
    """What the rules flag in ``after`` (the file as the patch leaves it) that ``before`` did not
    already hold (compared by line text, as many times as it occurs). ``imported``: a Python
    file named like a test module that the code under test imports, read as the code it is."""
    if after is None:
        return []
    found: list[Tamper] = []
    alias = path.rsplit("/", 1)[0] + "/imported_module.py" if "/" in path else "imported_module.py"
    for rule in RULES:
        if not rule.files(path) and not (imported and path.endswith(".py") and rule.files(alias)):
            continue
        old = Counter(text for _, text in rule.find(before)) if before else Counter()
        for number, text in sorted(set(rule.find(after))):
            if old[text] > 0:
                old[text] -= 1
                continue
            found.append(Tamper(rule.rule, path, number, text[:300], rule.what, rule.why))
    return found


_IMPORTS = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+\(?([\w\s,]+)|import\s+([\w., ]+))", re.M)


def _imported_names(text: str) -> set[str]:
    """The last parts of the module names a Python text imports (``from a.b import c`` -> b, c)."""
    names: set[str] = set()
    for found in _IMPORTS.finditer(text):
        if found.group(1):
            names.add(found.group(1).rsplit(".", 1)[-1])
            names.update(name.strip() for name in found.group(2).split(",") if name.strip())
        else:
            names.update(name.strip().split(" as ")[0].rsplit(".", 1)[-1] for name in found.group(3).split(","))
    return names


def scan(changes: Iterable[tuple[str, str | None, str | None]]) -> list[Tamper]:
    """Every finding of every changed file: ``changes`` are (path, text before, text after). A
    Python file named like a test module (``testing_support.py``) that a changed module of the
    code under test imports is read as that code."""
    changes = list(changes)
    imported = set().union(*(_imported_names(after) for path, _, after in changes
                             if after is not None and path.endswith(".py") and not is_test_path(path)))
    return [finding for path, before, after in changes
            for finding in scan_text(path, before, after,
                                     imported=path.endswith(".py") and is_test_path(path)
                                     and path.rsplit("/", 1)[-1][:-3] in imported)]


def markdown_table() -> str:
    """``RULES`` as the Markdown table docs/forged-verdicts.md prints."""
    lines = ["| rule | language | a patch adds code that | why |", "|---|---|---|---|"]
    for row in RULES:
        lines.append(f"| `{row.rule}` | {row.language} | {row.what} | {row.why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
