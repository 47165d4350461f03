"""Grading by test, prepared at suite build: which tests a case's run must make pass
(FAIL_TO_PASS), which it must not break (PASS_TO_PASS), and which are left out because their
outcome varied (flaky). The names FAIL_TO_PASS and PASS_TO_PASS are SWE-bench's.

``curate`` runs a candidate's base (with the hidden tests added) and its reference each ``runs``
times in the validation sandbox, with the hidden command and the project's whole check
(``whole_check``) on the same tree copy, and reads their runners' per-test results:

- FAIL_TO_PASS: the hidden command's tests that fail (or do not run) on the base in every run and
  pass on the reference in every run;
- PASS_TO_PASS: the whole check's tests that pass on both in every run;
- flaky: a test whose outcome (passed, skipped, failed) differs between runs of the same commit:
  out of both lists, and named.

A case with no stable FAIL_TO_PASS test is dropped, saying so. Where a runner gives no per-test
results, the case is graded by exit status (``grading == "exit"``, said on its line) instead of
being dropped. A reference that fails because of the environment (a syntax the installed Python
rejects, a plugin the installed pytest refuses, a Go or Node too old) is dropped naming that cause
(``environment_cause``). ``grade_listed`` grades a run's final tree against the lists.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from typing import Any, Callable, Mapping, Sequence

from orchestrator.evals.suite import Case, build_tree, changed_test_files, describe, failure_line, policy_refusal

__all__ = ["curate", "environment_cause", "grade_listed", "kept_note", "whole_check"]

# Verdicts no grade trusts: the run ended before its runner reported, its report cannot be read,
# or the code under test forged its runner's verdicts (mesh's control tests said so).
UNTRUSTED = {"runner_forged": "the code under test forges the test runner's verdicts (mesh's control tests say so)",
             "no_test_report": "the test runner ended without writing its report",
             "test_report_unreadable": "the test runner's report cannot be read"}


def whole_check(settings: Any, detected: Sequence[str], command: str | None) -> str | None:
    """The command whose tests give PASS_TO_PASS: ``validation.check`` (the first one mesh reads
    the tests of), else the detected check ``validation.allow`` admits, else the hidden command's
    own runner with no test named (``python3 -m pytest {tests}`` -> ``python3 -m pytest``; a
    command without ``{tests}`` runs the whole suite already), else the detected check as it is;
    None when there is none."""
    from orchestrator.sandbox.allowlist import split
    from orchestrator.testruns.table import reader_for
    from orchestrator.toolchains.base_check import check_commands

    configured = check_commands(settings, list(detected))
    if configured:
        return next((c for c in configured if reader_for(split(c) or [], None) is not None), configured[0])
    if command:
        words = split(command) or []
        if "{tests}" not in command:
            return command
        if words and words[-1] == "{tests}" and "{tests}" not in " ".join(words[:-1]) \
                and reader_for(words[:-1], None) is not None:
            return shlex.join(words[:-1])
    return next(iter(detected), None)


def _outcome(status: str | None) -> str:
    return "passed" if status == "passed" else "skipped" if status == "skipped" else "failed"


def _outcomes(results: Sequence[Any]) -> list[dict[str, str]]:
    """Per run, each test's outcome (``passed``, ``skipped``, ``failed``: failed or errored)."""
    return [{case.id: _outcome(case.status) for case in result.run.cases} if result.run is not None else {}
            for result in results]


def _varied(runs: Sequence[dict[str, str]]) -> list[str]:
    """The tests whose outcome differs between ``runs`` of one commit (absent counts as failed)."""
    ids = dict.fromkeys(test for run in runs for test in run)
    return [test for test in ids if len({run.get(test, "failed") for run in runs}) > 1]


def _names(ids: Sequence[str], limit: int = 5) -> str:
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _reference_failure(result: Any, timeout_s: float | None, root: Any = "") -> str:
    cause = environment_cause(result, str(root))
    if cause:
        return f"its hidden tests fail with the reference because of {cause}"
    return f"its hidden tests fail with the reference ({describe(result, timeout_s)[1]})"


def curate(repo: Any, case: Case, run: Callable[[str, Sequence[str]], list[Any]], *, whole: str | None,
           runs: int = 3, policy: Any = None) -> tuple[Case | None, str]:
    """(the case with its lists, "") or (None, why it is no case). ``run(commit, commands)`` is
    ``suite.sandbox_results``; ``whole`` the whole check. The base and the reference run ``runs``
    times each, fewer where the outcome cannot change any more (a case dropped on its first
    run), never fewer for a kept case."""
    if not case.hidden_command:
        return None, ("no hidden command (its test changes are data only, and no project check runs the whole"
                      " suite: set validation.check)") if case.hidden_tests else "no hidden command"
    if policy is not None and (refused := policy_refusal(repo, case, policy)):
        return None, refused
    reference = case.reference or ""
    commands = list(dict.fromkeys([case.hidden_command, *([whole] if whole else [])]))
    check = commands.index(whole) if whole else 0
    limit = getattr(run, "timeout_s", None)
    base = build_tree(repo, case, case.base)
    on_base: list[list[Any]] = []
    on_reference: list[list[Any]] = []
    for index in range(runs):
        on_base.append(run(base, commands))
        if on_base[-1][0].passed:
            if index == 0:
                return None, "its hidden tests pass on the base already"
            flaky = _varied(_outcomes([results[0] for results in on_base]))
            # How the earlier run failed: a flaky test's message, or what kept the run from its tests.
            first = describe(on_base[0][0], limit)[1]
            return None, (f"no stable FAIL_TO_PASS test: its hidden tests pass on the base in run {index + 1} of"
                          f" {runs}" + (f" (flaky: {_names(flaky)})" if flaky else "")
                          + f"; run 1 on the base: {first[:300]}")
        on_reference.append(run(reference, commands))
        hidden = on_reference[-1][0]
        if not hidden.passed and (hidden.run is None or hidden.run.collection_errors or not hidden.run.failures()
                                  or hidden.reason in UNTRUSTED):
            # Not a test that failed: the tests could not run (the environment, a crash) on the reference.
            return None, _reference_failure(hidden, limit, repo)
    by_tests = all(results[0].run is not None and results[check].run is not None for results in on_reference)
    if not by_tests:
        return _by_exit(case, on_reference, whole, check, limit)
    hidden_base = _outcomes([results[0] for results in on_base])
    hidden_reference = _outcomes([results[0] for results in on_reference])
    check_base = _outcomes([results[check] for results in on_base])
    check_reference = _outcomes([results[check] for results in on_reference])
    flaky = list(dict.fromkeys([*_varied(hidden_base), *_varied(hidden_reference), *_varied(check_base),
                                *_varied(check_reference)]))
    if any(outcome == "failed" and test not in flaky for test, outcome in hidden_reference[0].items()):
        failing = next(results[0] for results in on_reference if not results[0].passed)
        return None, _reference_failure(failing, limit, repo)
    fail_to_pass = [test for test, outcome in hidden_reference[0].items() if outcome == "passed"
                    and test not in flaky and all(run_.get(test, "failed") == "failed" for run_ in hidden_base)]
    if not fail_to_pass:
        varying = [test for test in flaky if test in hidden_reference[0] or any(test in r for r in hidden_base)]
        if varying:
            return None, f"no stable FAIL_TO_PASS test: the outcome of {_names(varying)} varies between runs (flaky)"
        return None, ("no FAIL_TO_PASS test: every hidden test that passes on the reference passes on the base"
                      f" too (the hidden command fails on the base: {describe(on_base[0][0], limit)[1]})")
    passing = set(fail_to_pass)
    pass_to_pass = [test for test, outcome in check_reference[0].items() if outcome == "passed"
                    and test not in flaky and test not in passing
                    and all(run_.get(test) == "passed" for run_ in check_base)]
    kept = case.model_copy(update={"grading": "tests", "fail_to_pass": fail_to_pass, "pass_to_pass": pass_to_pass,
                                   "check_command": whole, "flaky": flaky})
    return kept.model_copy(update={"rewritten": _rewritten(repo, kept, run, flaky)}), ""


def _rewritten(repo: Any, case: Case, run: Callable[[str, Sequence[str]], list[Any]], flaky: Sequence[str]) -> list[str]:
    """The FAIL_TO_PASS tests of files the reference changed (not added) that fail on the reference
    when those files are put back as the base had them: the old tests the fix breaks, so the case
    is a change of behaviour its task must state. One run of the hidden command, only for a case
    from history whose reference changed a test file the base had."""
    if case.source != "git" or not case.reference or not case.hidden_tests or case.test_patch:
        return []
    changed = changed_test_files(repo, case.base, case.reference, case.hidden_tests)
    if not changed:
        return []
    old = case.model_copy(update={"hidden_tests": changed, "tests_from": case.base, "hidden_files": {}})
    [result] = run(build_tree(repo, old, case.reference), [case.hidden_command or ""])
    if result.run is None:
        return []
    failed = {test for test, outcome in _outcomes([result])[0].items() if outcome == "failed"}
    return [test for test in case.fail_to_pass if test in failed and test not in flaky]


def _by_exit(case: Case, on_reference: list[list[Any]], whole: str | None, check: int,
             limit: float | None) -> tuple[Case | None, str]:
    """A case whose runner gives no per-test results: graded by exit status. The hidden command
    failed on the base and passed on the reference in every run (else ``curate`` returned); the
    whole check judges too when it passed on the reference in every run."""
    for index, results in enumerate(on_reference):
        if not results[0].passed:
            return None, (f"its hidden tests fail with the reference in run {index + 1} of {len(on_reference)}"
                          f" (flaky: {describe(results[0], limit)[1]})")
    judged = whole if whole and all(results[check].passed for results in on_reference) else None
    return case.model_copy(update={"grading": "exit", "check_command": judged}), ""


def kept_note(case: Case) -> str:
    """What a kept case's line adds: its lists, its flaky tests, or that it is graded by exit status."""
    if case.grading == "tests":
        note = f"; {len(case.fail_to_pass)} FAIL_TO_PASS, {len(case.pass_to_pass)} PASS_TO_PASS"
    elif case.grading == "exit":
        note = ("; graded by exit status (its runner gives no per-test results)"
                + ("" if case.check_command else "; the whole check fails on the reference, so only the hidden"
                                                  " tests judge"))
    else:
        return ""
    note += f"; flaky, left out: {_names(case.flaky, 3)}" if case.flaky else ""
    return note + (f"; its reference rewrote {len(case.rewritten)} test(s) its fix breaks as the base had them"
                   f" ({_names(case.rewritten, 3)}): a change of behaviour the task must state"
                   if case.rewritten else "")


# A line of a failing run that says the environment, not the code, is at fault.
_SYNTAX = re.compile(r'File "([^"]+)", line (\d+)(?:\n(?!(?:E\s)?\s*File ").*){0,4}?\n(?:E\s)?\s*SyntaxError: ([^\n]*)')
_PLUGIN = re.compile(r"PluginValidationError: [^\n]*|unknown hook [^\n]*")
_GO = re.compile(r"go\.mod requires go >= ?([\w.]+)[^\n]*")
_NODE = re.compile(r"[^\n]*(?:Unsupported engine|engine \"node\" is incompatible|requires (?:a )?node(?:\.js)?"
                   r" (?:version )?(?:>=|\^|v?\d))[^\n]*", re.I)
_NODE_SYNTAX = re.compile(r"([^\s(]+\.[cm]?[jt]sx?):(\d+)[^\n]*(?:\n.*){0,4}?\n\s*SyntaxError: ([^\n]*)")
# A test that reaches for the network, which a sandbox has none of.
_NETWORK = re.compile(r"Temporary failure in name resolution|Name or service not known|nodename nor servname|"
                      r"getaddrinfo (?:failed|ENOTFOUND|EAI_AGAIN)|Network is unreachable|Could not resolve host|"
                      r"Failed to establish a new connection|urlopen error|ENETUNREACH|EAI_AGAIN|"
                      # pydicom's data manager says only this when its test data cannot be fetched.
                      r"One or more download failures occurred|A download failure occurred while attempting to")
_HOST = re.compile(r"(?:host='|Could not resolve host: |getaddrinfo \w+ |https?://)([A-Za-z0-9.-]+\.[A-Za-z]{2,})")
# pytest 8 no longer calls nose-style ``setup``/``teardown`` methods: their attributes are missing.
_NO_ATTRIBUTE = re.compile(r"AttributeError: '(Test\w*|\w*Test\w*)' object has no attribute '(\w+)'")
_PYTEST_VERSION = re.compile(r"pytest-(\d+)\.")
_NOSE_SETUP = re.compile(r"^\s+def (setup|teardown)\(self\)", re.M)


def environment_cause(result: Any, root: str = "", rev: str | None = None) -> str | None:
    """The environment's fault behind a failing run, as words (None: none found): a syntax the
    installed Python or Node rejects, a pytest plugin or hook the installed pytest refuses, a Go
    or Node older than the project asks for, tests reaching for the network (the sandbox has
    none), a nose-style ``setup()`` pytest 8 no longer calls, a package missing (a module no file of
    the repository's history ever was: not one a commit deleted, nor one a set-up step generates
    beside the tree's own). ``root``: the
    repository's path (a path under it is named relative to it; its test classes are read for
    nose-style set-up); ``rev``: the commit whose tree ran (an instance's base, its gold patch):
    its classes are read there, not in the checkout, whose classes may be years newer."""
    parts = [result.stdout_tail, result.stderr_tail]
    if result.run is not None:
        parts += [message for _, message in result.run.collection_errors]
        parts += [case.message for case in result.run.failures()]
    text = "\n".join(part for part in parts if part)
    if found := _GO.search(text):
        return f"the environment: the installed Go is older than go.mod requires (go >= {found.group(1)})"
    if found := _PLUGIN.search(text):
        where = re.search(r"[^\s'\"]*conftest\.py", text)
        why = re.search(r"Argument\(s\) [^\n]*", text)
        said = " ".join([found.group(0).strip(), *([why.group(0)] if why else [])])
        return ("the environment: the installed pytest refuses a plugin or hook"
                + (f" of {_unrooted(where.group(0), root)}" if where else "") + f" ({_unrooted(said, root)[:300]})")
    if found := _NODE.search(text):
        return f"the environment: the installed Node is not one the project asks for ({found.group(0).strip()[:200]})"
    if found := _SYNTAX.search(text):
        return (f"the environment: the installed Python rejects a syntax of {_unrooted(found.group(1), root)}"
                f" (line {found.group(2)}: SyntaxError: {found.group(3).strip()[:120]})")
    if found := _NODE_SYNTAX.search(text):
        return (f"the environment: the installed Node rejects a syntax of {_unrooted(found.group(1), root)}"
                f" (line {found.group(2)}: SyntaxError: {found.group(3).strip()[:120]})")
    if _NETWORK.search(text):
        host = _HOST.search(text)
        return ("the environment: the tests reach for the network" + (f" ({host.group(1)})" if host else "")
                + ", which the sandbox does not have (a test that downloads data; give it the data, or run it apart)")
    if (found := _NO_ATTRIBUTE.search(text)) and _nose_setup(root, found.group(1), text, rev):
        return (f"the environment: pytest 8 and later no longer call nose-style setup()/teardown() methods, and"
                f" {found.group(1)} defines one ({found.group(1)} object has no attribute {found.group(2)!r}):"
                " pin pytest < 8 for this instance")
    if (found := _MISSING.search(text)) and _foreign(root, module := found.group(1) or found.group(2)):
        return (f"the environment: the package of the module {module!r} is not installed (no file of the"
                " repository's history is that module): install it, or name an environment that has it"
                " ([[eval.env]] packages)")
    return None


# ``No module named 'x.y'``: the first module Python could not import (``python -m x`` says it
# without the quotes).
_MISSING = re.compile(r"No module named '([A-Za-z_][\w.]*)'|No module named ([A-Za-z_][\w.]*[\w])")


def _foreign(root: str, module: str) -> bool:
    """Whether ``module``'s top-level name is no file or folder the repository at ``root`` ever had
    and none it ignores (a third-party package, not a module a commit deleted or a set-up step
    generates in the tree). False when ``root`` cannot be read."""
    if not root:
        return False
    top = module.split(".")[0]
    try:
        named = subprocess.run(["git", "-C", root, "log", "--all", "--format=", "--name-only", "--",
                                f":(glob)**/{top}.py", f":(glob)**/{top}/**", f":(glob)**/{top}.*.so",
                                f":(glob)**/{top}.pyx", f":(glob)**/{top}.c"],
                               capture_output=True, text=True, timeout=60)
        # A module the repository ignores is one its set-up makes (a generated ``_version.py``).
        ignored = subprocess.run(["git", "-C", root, "check-ignore", "--no-index", f"{top}.py", f"{top}/",
                                  f"src/{top}.py", f"src/{top}/"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return named.returncode == 0 and not named.stdout.strip() and ignored.returncode == 1  # 1: none ignored


def _nose_setup(root: str, cls: str, text: str, rev: str | None = None) -> bool:
    """Whether the test class ``cls`` has a nose-style ``setup(self)`` (or ``teardown``) under
    ``root`` (in the commit ``rev`` when given, else in its files) and the run was pytest 8 or
    later (said in the output's header, when it is)."""
    version = _PYTEST_VERSION.search(text)
    if version is not None and int(version.group(1)) < 8:
        return False
    if not root:
        return False
    import os

    head = re.compile(rf"^class {re.escape(cls)}\b", re.M)
    if rev:
        return any(_nose_body(head, source) for source in _sources_at(root, rev, cls))
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "build", "dist")]
        for name in files:
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > 5000:
                return False
            try:
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                    source = handle.read(1 << 20)
            except OSError:
                continue
            if head.search(source) is not None:
                return _nose_body(head, source)
    return False


def _nose_body(head: re.Pattern[str], source: str) -> bool:
    """Whether the class ``head`` finds in ``source`` has a nose-style set-up method."""
    at = head.search(source)
    if at is None:
        return False
    body = source[at.end():].partition("\n")[2]  # the class's lines, after its header
    following = re.search(r"^\S", body, re.M)
    return bool(_NOSE_SETUP.search(body[:following.start()] if following else body))


def _sources_at(root: str, rev: str, cls: str) -> list[str]:
    """The Python files of commit ``rev`` of ``root`` that define the class ``cls`` (at most
    five), read from git; [] when git cannot say."""
    try:
        found = subprocess.run(["git", "-C", root, "grep", "-l", "-E", f"^class {cls}([(:[:space:]]|$)", rev, "--",
                                "*.py"], capture_output=True, text=True, timeout=60)
        sources = []
        for line in found.stdout.splitlines()[:5]:  # REV:path
            shown = subprocess.run(["git", "-C", root, "show", line], capture_output=True, text=True,
                                   errors="replace", timeout=60)
            if shown.returncode == 0:
                sources.append(shown.stdout[:1 << 20])
        return sources
    except (OSError, subprocess.TimeoutExpired):
        return []


def _unrooted(text: str, root: str = "") -> str:
    """``text`` with the sandbox tree's path and the repository's taken out of its paths (a path as
    the repository names it)."""
    from orchestrator.sandbox.bwrap import SANDBOX_TREE

    for prefix in (f"{SANDBOX_TREE}/", f"{root.rstrip('/')}/" if root else None):
        text = text.replace(prefix, "") if prefix else text
    return text


def grade_listed(case: Case, results: Mapping[str, Any], limit: float | None = None) -> tuple[bool, str, dict]:
    """(resolved, detail, per-test outcome) of a run's final tree (hidden tests added) for a case
    curated at suite build; ``results`` are the validation results by command (the hidden command,
    ``check_command``)."""
    hidden = results[case.hidden_command or ""]
    check = results.get(case.check_command or "", hidden) if case.check_command else hidden
    for label, result in (("hidden tests", hidden), ("whole check", check)):
        if result.reason in UNTRUSTED:
            return False, f"not resolved: {UNTRUSTED[result.reason]} in the {label} ({result.reason})", {}
    if case.grading == "exit":
        for label, result in (("the hidden tests fail", hidden),
                              (f"the whole check `{case.check_command}` fails", check)):
            if result is check and not case.check_command:
                continue
            passed, why = describe(result, limit)
            if not passed:
                return False, f"{label} ({why}; graded by exit status: the runner gives no per-test results)", {}
        judged = ("the whole check passes" if case.check_command
                  else "no whole check judges (it failed on the reference)")
        return True, f"the hidden tests pass; {judged} (graded by exit status)", {}
    seen = {c.id: c for c in hidden.run.cases} if hidden.run is not None else {}
    checked = {c.id: c for c in check.run.cases} if check.run is not None else {}
    f2p_failed = [test for test in case.fail_to_pass if test not in seen or seen[test].status != "passed"]
    p2p_failed = [test for test in case.pass_to_pass if test not in checked or checked[test].status != "passed"]
    tests = {"fail_to_pass": {"passed": len(case.fail_to_pass) - len(f2p_failed), "failed": f2p_failed},
             "pass_to_pass": {"checked": len(case.pass_to_pass), "failed": p2p_failed}}
    problems = [part for part in (_failing("FAIL_TO_PASS", f2p_failed, len(case.fail_to_pass), seen, hidden, limit),
                                  _failing("PASS_TO_PASS", p2p_failed, None, checked, check, limit)) if part]
    if problems:
        return False, "; ".join(problems), tests
    left_out = f" ({len(case.flaky)} flaky test(s) left out)" if case.flaky else ""
    return True, (f"the {len(case.fail_to_pass)} FAIL_TO_PASS test(s) pass and none of the"
                  f" {len(case.pass_to_pass)} PASS_TO_PASS tests fails{left_out}"), tests


def _failing(kind: str, failed: Sequence[str], total: int | None, seen: Mapping[str, Any], result: Any,
             limit: float | None) -> str:
    """``the FAIL_TO_PASS test X fails: why`` / ``2 of 3 FAIL_TO_PASS tests fail: X (why), Y (why)``."""
    if not failed:
        return ""
    if len(failed) == 1 and total in (None, 1):
        return f"the {kind} test {failed[0]} fails: {_message(failed[0], seen, result, limit)}"
    shown = ", ".join(f"{test} ({_message(test, seen, result, limit)})" for test in failed[:3])
    more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"{len(failed)}{f' of {total}' if total else ''} {kind} tests fail: {shown}{more}"


def _message(test: str, seen: Mapping[str, Any], result: Any, limit: float | None) -> str:
    if test in seen:
        found = seen[test]
        return failure_line(found.message) or found.status
    errors = result.run.collection_errors if result.run is not None else []
    if errors:
        return f"did not run: {errors[0][0]} could not be collected: {failure_line(errors[0][1])}"
    if result.run is None and not result.passed:  # no report at all: why the command failed
        return f"did not run ({describe(result, limit)[1]})"
    return "did not run"
