"""go test: ``-json`` added after ``test`` (the JSON event stream of ``go tool test2json`` on
standard output; what a person reads is its ``Output`` text again, which is ``go test -v``'s
output). A test is ``<package>.<Test>`` (a subtest ``<package>.<Test>/<sub>``); its message is
the output it printed; a package that failed with no test reported (a build or set-up failure,
a ``TestMain`` that exited) is a collection error. Lines that are not events (``go:
downloading``) are passed over.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from orchestrator.testruns.commands import program
from orchestrator.testruns.model import MAX_MESSAGE_CHARS, Run

__all__ = ["READER"]

_KEEP_CHARS = 4 * MAX_MESSAGE_CHARS
_FRAMING = ("=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- FAIL", "--- SKIP")
_STATUS = {"pass": "passed", "fail": "failed", "skip": "skipped"}


# go test before 1.24 prints a package that did not build as plain text, not as an event.
_NOT_BUILT = re.compile(rb"^FAIL\t(\S+) \[(build|setup) failed\]$")


def _events(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.splitlines():
        not_built = _NOT_BUILT.match(line)
        if not_built:
            package = not_built.group(1).decode("utf-8", errors="replace")
            yield {"Action": "output", "Package": package, "Output": f"{package} [{not_built.group(2).decode()} failed]"}
            yield {"Action": "fail", "Package": package}
            continue
        if not line.startswith(b"{"):
            continue
        try:
            event = json.loads(line)
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(event, dict) and isinstance(event.get("Action"), str):
            yield event


class GoTest:
    name = "go test"
    source = "stdout"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        return program(argv) == "go" and argv[1:2] == ["test"] and not any(
            arg in ("-c", "-i", "-list") or arg.startswith(("-list=", "-c=")) for arg in argv[2:])

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        if "-json" in argv[2:]:
            return list(argv)
        return [argv[0], "test", "-json", *argv[2:]]

    def select(self, argv: Sequence[str], test_id: str) -> list[str] | None:
        """``-run`` anchored on each level of the test's name (``^TestX$/^sub$``), in its package."""
        package, _, name = test_id.rpartition(".")
        if not package or not name.startswith(("Test", "Example", "Fuzz")):
            return None
        pattern = "/".join(f"^{re.escape(part)}$" for part in name.split("/"))
        return [argv[0], "test", *[a for a in argv[2:] if not a.startswith(("./", "."))], "-run", pattern, package]

    def read(self, data: bytes, root: str = "") -> Run:
        run = Run(self.name)
        output: dict[tuple[str, str], list[str]] = {}
        tested: set[str] = set()
        run.reported = False
        for event in _events(data):
            run.reported = True
            package = str(event.get("Package") or "")
            test = event.get("Test")
            action = event["Action"]
            key = (package, test if isinstance(test, str) else "")
            if action == "output" and isinstance(event.get("Output"), str):
                parts = output.setdefault(key, [])
                if sum(len(p) for p in parts) < _KEEP_CHARS and not event["Output"].lstrip().startswith(_FRAMING):
                    parts.append(event["Output"])
            elif action in _STATUS and isinstance(test, str):
                tested.add(package)
                elapsed = event.get("Elapsed")
                run.add(f"{package}.{test}" if package else test, _STATUS[action],
                        float(elapsed) if isinstance(elapsed, (int, float)) else None,
                        "".join(output.pop(key, [])) if action == "fail" else "")
                output.pop(key, None)
            elif action == "fail" and package not in tested:
                run.collection_error(package, "".join(output.pop(key, [])) or f"the package {package} failed")
        return run

    def shown(self, data: bytes, hidden: frozenset[str] = frozenset()) -> str:
        """What ``go test -v`` would have printed: the events' output, and any other line as it
        was. The events of the ``hidden`` tests (mesh's own, and their subtests) are left out;
        a package whose only failures were theirs reads as passed."""
        parts: list[tuple[str | None, str, str]] = []  # (package, test, output)
        failed_own: set[str] = set()
        for line in data.splitlines(keepends=True):
            if line.startswith(b"{"):
                try:
                    event = json.loads(line)
                except (UnicodeDecodeError, ValueError):
                    event = None
                if isinstance(event, dict):
                    test = event.get("Test") if isinstance(event.get("Test"), str) else ""
                    package = event.get("Package") if isinstance(event.get("Package"), str) else ""
                    if test and test.split("/", 1)[0] in hidden:
                        continue
                    if test and event.get("Action") == "fail":
                        failed_own.add(package)
                    if isinstance(event.get("Output"), str):
                        parts.append((package, test, event["Output"]))
                    continue
            parts.append((None, "", line.decode("utf-8", errors="replace")))
        if not hidden:
            return "".join(text for _, _, text in parts)
        out = []
        for package, test, text in parts:
            if package is not None and not test and package not in failed_own:
                if text == "FAIL\n":
                    text = "PASS\n"
                elif text.startswith(f"FAIL\t{package}\t"):
                    text = "ok  \t" + text[len("FAIL\t"):]
            out.append(text)
        return "".join(out)


READER = GoTest()
