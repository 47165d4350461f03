"""JUnit-style XML reports (pytest's ``--junitxml``, node's ``junit`` reporter, mocha's
``xunit``), read with expat alone: a DOCTYPE, and with it every entity declaration, is refused,
so no entity is ever expanded; nesting is bounded; each message is bounded while it is read.

May import the standard library and ``orchestrator.testruns.model`` only.
"""

from __future__ import annotations

import xml.parsers.expat
from typing import Any, Callable

from orchestrator.testruns.model import MAX_MESSAGE_CHARS, ReportError, Run

__all__ = ["parse_xml", "read_junit"]

_MAX_DEPTH = 64
# What is kept of one test's message text while reading (bounded again when stored).
_KEEP_CHARS = 4 * MAX_MESSAGE_CHARS


def parse_xml(data: bytes, start: Callable[[str, dict[str, str]], None], end: Callable[[str], None],
              text: Callable[[str], None] | None = None) -> None:
    """Parse ``data`` with expat and nothing else, calling ``start``/``end`` per element and
    ``text`` per character run: a DOCTYPE or entity declaration is refused (ReportError)."""
    parser = xml.parsers.expat.ParserCreate()
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    depth = [0]

    def refuse(*_args: Any) -> None:
        raise ReportError("the report declares a DOCTYPE or an entity")

    def opened(name: str, attrs: dict[str, str]) -> None:
        depth[0] += 1
        if depth[0] > _MAX_DEPTH:
            raise ReportError("the report nests deeper than any JUnit report")
        start(name, attrs or {})

    def closed(name: str) -> None:
        depth[0] -= 1
        end(name)

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse
    parser.StartElementHandler = opened
    parser.EndElementHandler = closed
    if text is not None:
        parser.CharacterDataHandler = text
    try:
        parser.Parse(data, True)
    except xml.parsers.expat.ExpatError as exc:
        raise ReportError(f"the report is not well-formed XML ({xml.parsers.expat.ErrorString(exc.code)})") from None


def read_junit(data: bytes, runner: str, test_id: Callable[[dict[str, Any]], str],
               collection: Callable[[dict[str, Any], str], bool] = lambda attrs, message: False,
               outcomes: dict[tuple[str, str], str] | None = None) -> Run:
    """The run a JUnit XML report describes: a ``testcase`` with a ``failure`` child failed, one
    with an ``error`` child errored, one with a ``skipped`` child was skipped; its message is
    the child's ``message`` attribute and text. ``test_id`` names a case from its attributes;
    ``collection`` tells a case that stands for a module that could not be collected. The
    attributes ``test_id`` gets hold, under ``"\\0suites"``, the names of the enclosing
    ``testsuite`` elements. ``outcomes``, when given, gets each case's outcome as pytest's
    report marks it (``passed``, ``failed``, ``errors``, ``skipped``, ``xfail``), keyed by (the
    last part of its class name, its name), from the same parse."""
    run = Run(runner)
    # The open testcase: its attributes, the outcome children seen, their message parts.
    case: list[tuple[dict[str, Any], set[str], list[str]]] = []
    in_outcome = [False]
    suites: list[str] = []  # the open testsuite elements' names, outermost first

    def start(name: str, attrs: dict[str, str]) -> None:
        if name == "testsuite":
            suites.append(str(attrs.get("name", "")))
        elif name == "testcase":
            case.append(({**attrs, "\0suites": list(suites)}, set(), []))
        elif case and name in ("failure", "error", "skipped"):
            marks, parts = case[-1][1], case[-1][2]
            marks.add("xfail" if name == "skipped" and attrs.get("type") == "pytest.xfail" else name)
            if name != "skipped":
                in_outcome[0] = True
                if attrs.get("message"):
                    # The attribute, then the text on a line of its own (never glued to it).
                    parts.append(str(attrs["message"]).rstrip("\n") + "\n")

    def text(chunk: str) -> None:
        if in_outcome[0] and case:
            parts = case[-1][2]
            if sum(len(p) for p in parts) < _KEEP_CHARS:
                parts.append(chunk)

    def end(name: str) -> None:
        if name == "testsuite" and suites:
            suites.pop()
        if name in ("failure", "error"):
            in_outcome[0] = False
            if case:
                case[-1][2].append("\n")
        if name != "testcase" or not case:
            return
        attrs, marks, parts = case.pop()
        if outcomes is not None:
            key = (str(attrs.get("classname", "")).rsplit(".", 1)[-1], str(attrs.get("name", "")))
            outcomes[key] = ("failed" if "failure" in marks else "errors" if "error" in marks
                             else "xfail" if "xfail" in marks else "skipped" if "skipped" in marks else "passed")
        message = _dedupe("".join(parts))
        try:
            duration: float | None = float(attrs.get("time", ""))
        except ValueError:
            duration = None
        if "error" in marks and collection(attrs, message):
            run.collection_error(test_id(attrs), message)
            return
        status = ("failed" if "failure" in marks else "errored" if "error" in marks
                  else "skipped" if marks & {"skipped", "xfail"} else "passed")
        run.add(test_id(attrs), status, duration, message)

    parse_xml(data, start, end, text)
    return run


def _dedupe(message: str) -> str:
    """A message whose first line (the ``message`` attribute) is repeated as the text's first
    line keeps it once."""
    first, _, rest = message.partition("\n")
    rest = rest.lstrip("\n")
    return rest if first and rest.startswith(first) else message
