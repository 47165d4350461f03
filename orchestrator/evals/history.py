"""Candidate cases from a repository's first-parent history, before they are verified.

``history`` walks the first-parent history newest first; ``candidates`` turns each commit into
a ``Case`` (base = its parent, task = its message or the tracker issue it names, hidden tests =
the test files it added or changed, reference = the commit) or into the ``Dropped`` reason it is
none (a merge unless ``merges``, too large, a binary file, no test file, tests only); a merge
with ``merges`` is a case of its first parent and its diff against it. ``is_test_path`` and
``is_test_file`` hold the runners' naming conventions. ``orchestrator.evals.suite`` verifies the
candidates in the sandbox.

Cases are sealed: nothing a worker reads names the reference. ``seal`` numbers them
(``case-001``, oldest first) instead of naming them after the commit; ``task_text`` takes out a
message's trailers (``Signed-off-by``, ``Change-Id``, ...), cherry-pick lines, a merge's own line
(``Merge pull request #12 from ...``, ``See merge request g/p!3``), a squash merge's ``(#12)``,
and every hex string that names a commit after the base. ``ranges`` gives a case the setup
command and environment of the ``[[eval.history]]`` range its base belongs to.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from orchestrator.evals.suite import Case, Dropped, _git

__all__ = ["TASK_TEXTS", "Range", "candidates", "clean_message", "from_git", "hidden_command", "history",
           "is_test_file", "is_test_path", "ranges_of", "seal", "task_text"]

TASK_TEXTS = ("message", "subject", "issue")

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


# A trailer's token anywhere in a message: who signed, reviewed, co-wrote it; a review's or a
# change's id (Gerrit's Change-Id, Phabricator's Differential Revision, git-svn-id, PiperOrigin-RevId).
_KNOWN_TRAILER = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9-]*-(by|id|on)|differential revision|cc)\s*:\s*\S", re.I)
# Any "Token: value" line (git's trailer form): the last paragraph of such lines is a trailer block.
_TRAILER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,40}\s*:\s*\S")
_CHERRY_PICK = re.compile(r"^\s*\(cherry picked from commit [0-9a-f]+\)\s*$", re.I)
# A merge's own words: its subject line, GitLab's link to its merge request, a squash merge's "(#12)".
_MERGE_LINE = re.compile(r"^Merge\b")
_MERGE_REQUEST = re.compile(r"^\s*See merge request \S+\s*$")
_REQUEST_NUMBER = re.compile(r"\s*\((#|!|GH-)\d+\)\s*$")
_HEX = re.compile(r"\b[0-9a-fA-F]{7,40}\b")
_ISSUE_WORD = re.compile(r"\b[a-z][a-z0-9]*-[a-z0-9]+(?:\.[0-9]+)*\b")


def clean_message(message: str, *, merge: bool = False) -> str:
    """``message`` without its trailers (the last paragraph's ``Token: value`` lines; a known
    trailer such as ``Signed-off-by`` or ``Change-Id`` anywhere), its cherry-pick lines, and the
    number of the pull request that made it (``(#12)`` at the end of the subject). For a merge
    (``merge``) also its merge line (``Merge pull request #12 from ada/fix``, ``Merge branch 'x'
    into 'y'``: the body's first line, a pull request's title, becomes the subject) and GitLab's
    ``See merge request group/project!12``."""
    lines = message.strip().splitlines()
    if merge and lines and _MERGE_LINE.match(lines[0]):
        lines = lines[1:]
    lines = [line for line in lines if not (_KNOWN_TRAILER.match(line) or _CHERRY_PICK.match(line)
                                            or (merge and _MERGE_REQUEST.match(line)))]
    paragraphs = [part for part in re.split(r"\n\s*\n", "\n".join(lines).strip()) if part.strip()]
    if len(paragraphs) > 1:
        last = paragraphs[-1].splitlines()
        if all(_TRAILER.match(line) or (line[:1].isspace() and index) for index, line in enumerate(last)):
            paragraphs.pop()
    if paragraphs:
        first, *rest = paragraphs[0].split("\n", 1)
        paragraphs[0] = "\n".join([_REQUEST_NUMBER.sub("", first), *rest])
    return "\n\n".join(part.strip("\n") for part in paragraphs).strip()


def _git_ok(repo: Path, *args: str) -> bool:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, stdin=subprocess.DEVNULL,
                          env=env).returncode == 0


def _later_commit(repo: Path, word: str, base: str, reference: str) -> bool:
    """Whether the hex string ``word`` names the reference or a commit that is not in the base's history."""
    word = word.lower()
    if reference.startswith(word):
        return True
    return (_git_ok(repo, "rev-parse", "--verify", "-q", "--end-of-options", f"{word}^{{commit}}")
            and not _git_ok(repo, "merge-base", "--is-ancestor", word, base))


def _unnamed(repo: Path, text: str, base: str, reference: str) -> str:
    """``text`` without the hex strings that name the reference or any commit after ``base``."""
    later = {word for word in set(_HEX.findall(text)) if _later_commit(repo, word, base, reference)}
    if not later:
        return text
    # The word goes with the space before it: "as abc1234 did" reads "as did".
    return re.sub(r" ?\b[0-9a-fA-F]{7,40}\b", lambda m: "" if m.group(0).strip() in later else m.group(0), text)


def task_text(repo: Path, message: str, base: str, reference: str, *, mode: str = "message",
              issue_of: Any = None, merge: bool = False) -> tuple[str, str] | str:
    """(title, task) of the case a commit makes, sealed (``clean_message``, no hex string naming a
    commit after the base); or why there is none. ``mode``: ``message`` (the tracker issue the
    message names, else the message), ``subject`` (its first line alone), ``issue`` (the issue
    alone: a commit naming none is no case). ``issue_of``: a word -> issue dict or None."""
    if mode not in TASK_TEXTS:
        raise ValueError(f"task text {mode!r}: one of {', '.join(TASK_TEXTS)}")
    if mode != "subject" and issue_of is not None:
        for word in dict.fromkeys(_ISSUE_WORD.findall(message)):
            issue = issue_of(word)
            if issue:
                body = "\n\n".join(part for part in (issue.get("description"), issue.get("acceptance_criteria"))
                                   if part)
                title = _unnamed(repo, issue["title"], base, reference)
                return title, _unnamed(repo, f"{issue['title']}\n\n{body}".strip(), base, reference)
    if mode == "issue":
        return "it names no tracker issue (--task-text issue)"
    text = _unnamed(repo, clean_message(message, merge=merge), base, reference).strip()
    if not text:
        return ("a merge whose message is its merge line alone: no task to give" if merge
                else "its message is empty once its trailers are out: no task to give")
    subject = text.splitlines()[0].strip()
    return subject, subject if mode == "subject" else text


@dataclass(frozen=True)
class Range:
    """An ``[[eval.history]]`` entry with its ``before`` resolved to a commit."""

    before: str
    commit: str
    setup: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def ranges_of(repo: Path, entries: Iterable[Any]) -> list[Range]:
    """The ``[[eval.history]]`` entries (``HistoryRange``: ``before``, ``setup``, ``env``) of the
    config, their revisions resolved in ``repo``; ValueError naming one that names no commit."""
    out = []
    for entry in entries:
        try:
            commit = _git(repo, "rev-parse", "--verify", "-q", "--end-of-options",
                          f"{entry.before}^{{commit}}").decode().strip()
        except ValueError:
            raise ValueError(f"[[eval.history]] before = {entry.before!r} names no commit of {repo}") from None
        out.append(Range(entry.before, commit, entry.setup, dict(entry.env)))
    return out


def range_for(repo: Path, base: str, ranges: Sequence[Range]) -> Range | None:
    """The first range whose ``before`` comes strictly after ``base`` (base is its ancestor)."""
    for entry in ranges:
        if base != entry.commit and _git_ok(repo, "merge-base", "--is-ancestor", base, entry.commit):
            return entry
    return None


def seal(cases: Sequence[Case]) -> list[Case]:
    """The cases (oldest first) named ``case-001``, ``case-002``, ...: an id that says nothing of the
    reference (a worker reads its case's id in its path and its environment)."""
    width = max(3, len(str(len(cases))))
    return [case.model_copy(update={"id": f"case-{index:0{width}d}"}) for index, case in enumerate(cases, 1)]


def history(repo: Path, *, since: str | None = None, until: str = "HEAD") -> Iterator[tuple[str, list[str], str]]:
    """(commit, parents, message) of the first-parent history of ``until`` after ``since``, newest first."""
    log = _git(repo, "log", "--first-parent", "-z", "--format=%H%x00%P%x00%B", until,
               *([f"^{since}"] if since else []), "--")
    fields = log.decode("utf-8", "replace").split("\0")
    for commit, parents, message in zip(fields[0::3], fields[1::3], fields[2::3]):
        if commit.strip():
            yield commit.strip(), parents.split(), message


def hidden_command(command: str | None, tests: Sequence[str], whole: str | None = None, *,
                   chosen: bool = False) -> str | None:
    """The command that runs a case's hidden tests: ``command`` with ``{tests}`` standing for the
    test files among ``tests`` (data files and helpers are copied in, not named; ``chosen``: the
    ``tests`` are the files to name); when none is one (the commit changed a test's data only),
    ``whole``, the project's whole check, which runs the tests that read that data."""
    if not command:
        return None
    if "{tests}" not in command:
        return command
    files = list(tests) if chosen else [path for path in tests if is_test_file(path)]
    if files:
        return command.replace("{tests}", " ".join(files))
    return whole


def candidates(repo: Path, *, max_files: int = 20, max_lines: int = 400, command: str | None = None,
               issue_of: Any = None, since: str | None = None, until: str = "HEAD",
               whole: str | None = None, merges: bool = False, task: str = "message",
               ranges: Sequence[Range] = ()) -> Iterator[Case | Dropped]:
    """Each commit of ``history`` (newest first) as a candidate case, before ``verify_case``, or as
    the reason it is none; ``command`` is the hidden command template (``{tests}`` stands for the
    hidden test files; ``whole`` runs a case whose test changes are data only: ``hidden_command``).
    ``merges``: a merge is a case too (base: its first parent); ``task``: ``task_text``'s mode;
    ``ranges``: the resolved ``[[eval.history]]`` entries (``ranges_of``). A candidate's id is
    provisional (``candidate-N``): ``seal`` names the kept ones."""
    for number, (commit, parents, message) in enumerate(history(repo, since=since, until=until), 1):
        subject = message.strip().splitlines()[0] if message.strip() else ""
        if not parents or (len(parents) > 1 and not merges):
            yield Dropped(commit, subject, "a merge; --merges makes cases of merges" if parents
                          else "the root commit (no base)")
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
        text = why or task_text(repo, message, parents[0], commit, mode=task, issue_of=issue_of,
                                merge=len(parents) > 1)
        if isinstance(text, str):
            yield Dropped(commit, subject, text)
            continue
        title, task_ = text
        hidden = hidden_command(command, tests, whole)
        where = range_for(repo, parents[0], ranges)
        yield Case(id=f"candidate-{number}", base=parents[0], title=title, task=task_, hidden_tests=tests,
                   tests_from=commit, hidden_command=hidden, reference=commit, source="git",
                   **({"setup": where.setup, "env": where.env} if where else {}))


def from_git(repo: Path, *, max_files: int = 20, max_lines: int = 400, command: str | None = None,
             issue_of: Any = None, since: str | None = None, until: str = "HEAD",
             whole: str | None = None, merges: bool = False, task: str = "message",
             ranges: Sequence[Range] = ()) -> tuple[list[Case], list[Dropped]]:
    """Every candidate of ``candidates`` before ``verify``, oldest first and sealed, and the commits dropped."""
    found = list(candidates(repo, max_files=max_files, max_lines=max_lines, command=command, issue_of=issue_of,
                            since=since, until=until, whole=whole, merges=merges, task=task, ranges=ranges))[::-1]
    return seal([c for c in found if isinstance(c, Case)]), [d for d in found if isinstance(d, Dropped)]
