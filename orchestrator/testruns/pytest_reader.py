"""pytest: ``--junitxml=REPORT`` added right after the program (a later ``--junitxml`` of the
command wins and leaves mesh's file missing, which fails). A test is
``<classname>::<name>``; pytest's entry for a module it could not import or collect is a
collection error; an expected failure (xfail) counts as skipped, as pytest counts it.

mesh's plugin (``PLUGIN``, loaded with ``-p`` from the report's folder, put on ``PYTHONPATH``
after the environment's own entries) does two things, to every test alike:

- it hands a test id longer than mesh keeps to the JUnit report already cut as mesh cuts it
  (``model.bounded_id``), computed with pytest's own naming of the report (``mangle_test_address``,
  ``bin_xml_escape``): a test named by its data (python-multipart names two by 10 MB of bytes each)
  costs neither pytest a 20 MB report nor mesh reading it, and mesh reads the same id either way
  (pytest's own lines, ``-rA``'s summary, name such a test by its cut id too);
- it keeps the parse of a module for the run where pytest parses it again for each failure it
  formats (``getstatementrange_ast``): mesh's twins and control tests fail by design, and each
  failure in a 2,000-line test module cost a parse and a walk of it (17 twins of python-multipart:
  half a second).

An interpreter started with ``-E`` or ``-I`` ignores ``PYTHONPATH``: it gets no plugin.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from orchestrator.testruns import model
from orchestrator.testruns.commands import module_run, program
from orchestrator.testruns.model import Run
from orchestrator.testruns.xml_reports import read_junit

__all__ = ["PLUGIN", "READER", "plugin_text"]

PLUGIN = "mesh_pytest_ids"
_PLUGIN_CODE = '''
_prefix = [None]  # --junit-prefix
_worker = [False]  # an xdist worker
_cuts = {}  # nodeid: its cut form, or None
_ascii = getattr(str, "isascii", None)  # Python 3.7


def _cut(nodeid):
    from _pytest.junitxml import bin_xml_escape, mangle_test_address

    prefix = [_prefix[0]] if _prefix[0] else []
    names = mangle_test_address(nodeid)
    last = names[-1]
    if not nodeid.endswith(last):
        return None
    classname = ".".join(prefix + names[:-1])
    name = bin_xml_escape(last)
    read = (classname + "::" + name).lstrip(":")
    if len(read) <= MAX_ID_CHARS:
        return None
    cut = bounded_id(read)
    lead = read[:len(read) - len(name)]
    if not cut.startswith(lead):
        return None
    shorter = nodeid[:len(nodeid) - len(last)] + cut[len(lead):]
    again = mangle_test_address(shorter)
    if ".".join(prefix + again[:-1]) != classname or bin_xml_escape(again[-1]) != cut[len(lead):]:
        return None
    return shorter


def pytest_configure(config):
    _prefix[0] = getattr(config.option, "junitprefix", None)
    # An xdist worker's reports are matched to its items by their ids: the controller, which
    # writes the report, cuts them as they arrive.
    _worker[0] = hasattr(config, "workerinput")


def _short(nodeid):
    """Whether the report's id of ``nodeid`` stays within ``MAX_ID_CHARS`` whatever pytest does to
    it (its path's separators become dots, a character XML cannot hold 6 characters at most)."""
    room = MAX_ID_CHARS - len(_prefix[0] or "") - 2
    if len(nodeid) * 6 <= room:
        return True
    return len(nodeid) <= room and _ascii is not None and _ascii(nodeid) and nodeid.isprintable()


def pytest_runtest_logreport(report):
    nodeid = report.nodeid
    if _worker[0] or _short(nodeid):
        return
    if nodeid not in _cuts:  # a test's three phases: one cut
        try:
            _cuts[nodeid] = _cut(nodeid)
        except Exception:
            _cuts[nodeid] = None
    if _cuts[nodeid] is not None:
        report.nodeid = _cuts[nodeid]


def _parse_once():
    """pytest parses a module whole for each failure it formats (each failure gets a new cache),
    and mesh's twins and control tests fail by design: the parse of a module's text is kept for
    the run, keyed by that text, for every failure alike."""
    from _pytest._code import code

    original = code.getstatementrange_ast
    kept = {}

    def getstatementrange_ast(lineno, source, assertion=False, astnode=None):
        if astnode is not None:
            return original(lineno, source, assertion, astnode)
        text = str(source)
        astnode = kept.get(text)
        if astnode is not None:
            return original(lineno, source, assertion, astnode)
        found = original(lineno, source, assertion)
        if len(kept) >= 64:
            kept.pop(next(iter(kept)))
        kept[text] = found[0]
        return found

    code.getstatementrange_ast = getstatementrange_ast


try:
    import pytest

    pytest_runtest_logreport = pytest.hookimpl(tryfirst=True)(pytest_runtest_logreport)
    _parse_once()
except Exception:
    pass
'''
_text: list[str] = []


def plugin_text() -> str:
    """The source of mesh's pytest plugin: ``model.bounded_id`` itself (its source and constants),
    the hook that cuts a report's long test id before any other plugin reads it, and the kept parse
    of a module pytest formats failures in."""
    if not _text:
        import inspect

        constants = "".join(f"{name} = {getattr(model, name)!r}\n"
                            for name in ("MAX_ID_CHARS", "_CUT_AT", "_CUT_MARK", "_PARAMETERS_SHOWN"))
        body = f"{constants}\n\n{inspect.getsource(model.bounded_id)}{_PLUGIN_CODE}"
        # The body is Python 3.6's (f-strings): an older interpreter (SWE-bench keeps some) loads
        # the module all the same, and the plugin does nothing there.
        _text.append(f'"""mesh\'s pytest plugin: a test id past {model.MAX_ID_CHARS} characters reaches the JUnit'
                     f' report cut as mesh keeps it; a module\'s parse is kept for the failures pytest formats."""\n\n'
                     f"_BODY = {body!r}\n\ntry:\n    exec(compile(_BODY, __file__, 'exec'))\nexcept Exception:\n    pass\n")
    return _text[0]


def _reads_pythonpath(argv: Sequence[str]) -> bool:
    """Whether the interpreter of ``python [options] -m pytest`` reads ``PYTHONPATH`` (no ``-E``, ``-I``)."""
    options = (module_run(argv) or ("", [], []))[1][1:]
    skip = False
    for option in options:
        if skip:
            skip = False
            continue
        if option in ("-W", "-X"):
            skip = True
        elif option.startswith("-") and not option.startswith(("--", "-W", "-X")) and (
                "E" in option or "I" in option):
            return False
    return True


class Pytest:
    name = "pytest"
    source = "file"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        found = module_run(argv)
        return program(argv) in ("pytest", "py.test") or (found is not None and found[0] == "pytest")

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        junit = [f"--junitxml={report}", *(("-p", PLUGIN) if self.files(argv) else ())]
        if program(argv) in ("pytest", "py.test"):
            return [argv[0], *junit, *argv[1:]]
        _module, python, args = module_run(argv) or ("", [], [])
        return [*python, "-m", "pytest", *junit, *args]

    def files(self, argv: Sequence[str]) -> dict[str, str]:
        """mesh's plugin, put beside the report (none for an interpreter that ignores ``PYTHONPATH``)."""
        if program(argv) not in ("pytest", "py.test") and not _reads_pythonpath(argv):
            return {}
        try:
            return {f"{PLUGIN}.py": plugin_text()}
        except (OSError, TypeError):  # mesh installed without its sources (bytecode only): no plugin
            return {}

    def environment(self, argv: Sequence[str], report: str, tree: Path | None) -> dict[str, str]:
        """The report's folder on ``PYTHONPATH`` (after the environment's own entries) for mesh's plugin."""
        return {"PYTHONPATH": os.path.dirname(report)} if self.files(argv) else {}

    def select(self, argv: Sequence[str], test_id: str) -> list[str] | None:
        """``-k`` with the test's class and name (a parametrized test's base name: ``-k`` takes no brackets)."""
        owner, _, name = test_id.rpartition("::")
        name = name.split("[", 1)[0]
        words = [word for word in (owner.rsplit(".", 1)[-1], name) if word]
        if not name or not all(word.isidentifier() for word in words):
            return None
        return [*argv, "-k", " and ".join(words)]

    def read(self, data: bytes, root: str = "", outcomes: dict[tuple[str, str], str] | None = None) -> Run:
        """The run of pytest's JUnit report ``data``; ``outcomes``, when given, gets each case's
        outcome by (class, name), xfail told apart, from the same parse (``read_junit``)."""
        return read_junit(
            data, self.name,
            lambda attrs: f"{attrs.get('classname', '')}::{attrs.get('name', '')}".lstrip(":"),
            lambda attrs, message: message.startswith("collection failure"), outcomes)


READER = Pytest()
