"""Candidate cases from a repository's first-parent history, before they are verified.

``history`` walks the first-parent history newest first; ``candidates`` turns each commit into
a ``Case`` (base = its parent, task = its message or the tracker issue it names, hidden tests =
the test files it added or changed, reference = the commit) or into the ``Dropped`` reason it is
none (a merge, too large, a binary file, no test file, tests only); ``is_test_path`` and
``is_test_file`` hold the runners' naming conventions. ``orchestrator.evals.suite`` verifies the
candidates in the sandbox.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

from orchestrator.evals.suite import Case, Dropped, _git

__all__ = ["candidates", "from_git", "hidden_command", "history", "is_test_file", "is_test_path"]

_TEST_PATH = re.compile(
    r"(^|/)(tests?|__tests__|specs?|testing)/"          # a test folder
    r"|(^|/)test_[^/]*\.py$|_test\.py$|(^|/)conftest\.py$|(^|/)tests\.py$"  # pytest, unittest, Django
    r"|_test\.go$"                                        # go test
    r"|\.(test|spec)\.[cm]?[jt]sx?$"                      # jest, vitest, mocha, node --test
    r"|_spec\.rb$|(^|/)test_[^/]*\.rb$",
    re.I)


# A file a runner takes on its command line: test code, not a test's data or helpers.
_TEST_FILE = re.compile(
    r"(^|/)test_[^/]*\.py$|_test\.py$|(^|/)tests?\.py$"          # pytest, unittest, Django's tests.py
    r"|_test\.go$|\.(test|spec)\.[cm]?[jt]sx?$|(^|/)__tests__/[^/]*\.[cm]?[jt]sx?$"
    # node --test's own defaults (any script under test/), and tape's, tap's and mocha's test/*.js
    r"|(^|/)tests?/(?!(.*/)?(fixtures?|data|helpers?|__fixtures__)/)(.*/)?[^./][^/]*\.[cm]?[jt]sx?$"
    r"|[-_]test\.[cm]?js$|(^|/)test-[^/]*\.[cm]?js$|(^|/)test\.[cm]?js$"
    r"|_spec\.rb$|(^|/)test_[^/]*\.rb$",
    re.I)


def is_test_path(path: str) -> bool:
    """A file that holds tests, by the conventions of the mainstream runners."""
    return bool(_TEST_PATH.search(path))


def is_test_file(path: str) -> bool:
    """A test path a runner takes as an argument (not a fixture's data, not a helper module)."""
    return bool(_TEST_FILE.search(path))



def _changes(repo: Path, parent: str, commit: str) -> list[tuple[str, str, int | None]]:
    """(status letter, path, lines added + removed; None for a binary file) of each changed file."""
    statuses = {}
    raw = _git(repo, "diff", "--name-status", "-z", "--no-renames", parent, commit).split(b"\0")
    for status, path in zip(raw[0::2], raw[1::2]):
        statuses[os.fsdecode(path)] = status.decode()[:1]
    out = []
    for line in _git(repo, "diff", "--numstat", "-z", "--no-renames", parent, commit).split(b"\0"):
        if not line.strip():
            continue
        added, removed, path = line.decode("utf-8", "replace").split("\t", 2)
        lines = None if added == "-" else int(added) + int(removed)
        out.append((statuses.get(path, "M"), path, lines))
    return out


def _task_text(message: str, issue_of: Any) -> tuple[str, str]:
    """(title, task) from a commit message, or from the tracker issue it names (``issue_of``:
    a word -> issue dict or None)."""
    if issue_of is not None:
        for word in re.findall(r"\b[a-z][a-z0-9]*-[a-z0-9]+(?:\.[0-9]+)*\b", message):
            issue = issue_of(word)
            if issue:
                body = "\n\n".join(part for part in (issue.get("description"), issue.get("acceptance_criteria"))
                                   if part)
                return issue["title"], f"{issue['title']}\n\n{body}".strip()
    subject = message.strip().splitlines()[0] if message.strip() else "(no message)"
    return subject, message.strip() or subject


def history(repo: Path, *, since: str | None = None, until: str = "HEAD") -> Iterator[tuple[str, list[str], str]]:
    """(commit, parents, message) of the first-parent history of ``until`` after ``since``, newest first."""
    log = _git(repo, "log", "--first-parent", "-z", "--format=%H%x00%P%x00%B", until,
               *([f"^{since}"] if since else []), "--")
    fields = log.decode("utf-8", "replace").split("\0")
    for commit, parents, message in zip(fields[0::3], fields[1::3], fields[2::3]):
        if commit.strip():
            yield commit.strip(), parents.split(), message


def hidden_command(command: str | None, tests: Sequence[str], whole: str | None = None) -> str | None:
    """The command that runs a case's hidden tests: ``command`` with ``{tests}`` standing for the
    test files among ``tests`` (data files and helpers are copied in, not named); when none is
    one (the commit changed a test's data only), ``whole``, the project's whole check, which runs
    the tests that read that data."""
    if not command:
        return None
    if "{tests}" not in command:
        return command
    files = [path for path in tests if is_test_file(path)]
    if files:
        return command.replace("{tests}", " ".join(files))
    return whole


def candidates(repo: Path, *, max_files: int = 20, max_lines: int = 400, command: str | None = None,
               issue_of: Any = None, since: str | None = None, until: str = "HEAD",
               whole: str | None = None) -> Iterator[Case | Dropped]:
    """Each commit of ``history`` (newest first) as a candidate case, before ``verify_case``, or as
    the reason it is none; ``command`` is the hidden command template (``{tests}`` stands for the
    hidden test files; ``whole`` runs a case whose test changes are data only: ``hidden_command``)."""
    for commit, parents, message in history(repo, since=since, until=until):
        subject = message.strip().splitlines()[0] if message.strip() else ""
        if len(parents) != 1:
            yield Dropped(commit, subject, "a merge" if parents else "the root commit (no base)")
            continue
        changes = _changes(repo, parents[0], commit)
        tests = [path for status, path, _ in changes if is_test_path(path) and status in ("A", "M")]
        source = [path for status, path, _ in changes if not is_test_path(path)]
        size = [lines for _, _, lines in changes]
        if None in size:
            why = "it changes a binary file"
        elif len(changes) > max_files or sum(size) > max_lines:
            why = f"too large ({len(changes)} files, {sum(size)} lines; bounds {max_files} and {max_lines})"
        elif not tests:
            why = "it adds or changes no test file"
        elif not source:
            why = "it changes tests only"
        else:
            why = ""
        if why:
            yield Dropped(commit, subject, why)
            continue
        title, task = _task_text(message, issue_of)
        hidden = hidden_command(command, tests, whole)
        yield Case(id=commit[:12], base=parents[0], title=title, task=task, hidden_tests=tests, tests_from=commit,
                   hidden_command=hidden, reference=commit, source="git")


def from_git(repo: Path, *, max_files: int = 20, max_lines: int = 400, command: str | None = None,
             issue_of: Any = None, since: str | None = None, until: str = "HEAD",
             whole: str | None = None) -> tuple[list[Case], list[Dropped]]:
    """Every candidate of ``candidates`` before ``verify``, oldest first, and the commits dropped."""
    found = list(candidates(repo, max_files=max_files, max_lines=max_lines, command=command, issue_of=issue_of,
                            since=since, until=until, whole=whole))[::-1]
    return [c for c in found if isinstance(c, Case)], [d for d in found if isinstance(d, Dropped)]
