"""Validation commands: only allowlisted ones run, without a shell, bounded in time and output."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.scrub import REDACTED
from orchestrator.validation import (
    ValidationResult,
    is_allowed,
    parse_allow_entry,
    run_validation,
    safe_env,
)

PY = shlex.quote(sys.executable)


def py(code: str) -> str:
    """A command line running a one-line ``code`` (no shell syntax) with this interpreter."""
    return f"{PY} -c {shlex.quote(code)}"


def script(tmp_path: Path, code: str, name: str = "check.py") -> str:
    """A command line running ``code`` saved as ``name`` in ``tmp_path`` (the cwd)."""
    (tmp_path / name).write_text(code)
    return f"{PY} {name}"


def run(commands, tmp_path, *, allow=None, timeout_s=30.0, **kwargs) -> list[ValidationResult]:
    return run_validation(
        commands, cwd=tmp_path, allow=list(commands) if allow is None else allow, timeout_s=timeout_s, **kwargs
    )


# ---------------------------------------------------------------- allowlist matching


def test_exact_entries_match_token_by_token():
    allow = ["python -m pytest -q", 'python -m pytest -k "not slow"']
    assert is_allowed("python -m pytest -q", allow)
    assert is_allowed("python  -m   pytest   -q", allow)
    assert is_allowed("python -m pytest -k 'not slow'", allow)  # same argv, other quoting
    assert not is_allowed("python -m pytest", allow)
    assert not is_allowed("python -m pytest -q -x", allow)
    assert not is_allowed("python3 -m pytest -q", allow)
    assert not is_allowed("/usr/bin/python -m pytest -q", allow)


def test_path_placeholder_takes_one_relative_path_inside():
    allow = ["python -m pytest {path}"]
    for ok in ("tests", "tests/test_x.py", "tests/test_x.py::test_one[param-1]", ".", "a.b/c_d"):
        assert is_allowed(f"python -m pytest {ok}", allow), ok
    for bad in ("../x", "tests/../../x", "/etc", "-p evil", "--basetemp=/", "'a\\b'", "~/x", "a=b", "@args.txt",
                "'a b'", "*"):
        assert not is_allowed(f"python -m pytest {bad}", allow), bad
    assert not is_allowed("python -m pytest", allow)
    assert not is_allowed("python -m pytest a b", allow)


def test_args_placeholder_takes_any_number_of_plain_arguments():
    allow = ["python -m pytest {args...}"]
    assert is_allowed("python -m pytest", allow)
    assert is_allowed("python -m pytest tests/a.py tests/b.py::test_x", allow)
    for bad in ("-x", "--basetemp=/tmp/x", "-c setup.cfg", "tests/../..", "/abs", "KEY=value", "@file", "~"):
        assert not is_allowed(f"python -m pytest tests {bad}", allow), bad


@pytest.mark.parametrize(
    "command",
    [
        "python -m pytest -q; rm -rf /",
        "python -m pytest -q && touch pwned",
        "python -m pytest -q || true",
        "python -m pytest -q | tee out",
        "python -m pytest -q > out.txt",
        "python -m pytest -q < in.txt",
        "python -m pytest $(whoami)",
        "python -m pytest `whoami`",
        "python -m pytest ${HOME}",
        "python -m pytest -q &",
        "python -m pytest -q\ntouch pwned",
        'python -m pytest "unterminated',
        "",
        "   ",
    ],
)
def test_shell_syntax_and_junk_never_match(command):
    allow = ["python -m pytest -q", "python -m pytest {args...}", "python -m pytest {path}"]
    assert not is_allowed(command, allow)


@pytest.mark.parametrize(
    "entry",
    ["", "   ", "make && make test", "echo $HOME", "a | b", "{path} x", "{args...}", "pytest {args...} -q",
     "pytest --file={path}", 'pytest "unterminated', "pytest {args...}x"],
)
def test_unusable_allow_entries_are_rejected(entry):
    with pytest.raises(ValueError):
        parse_allow_entry(entry)
    assert not is_allowed(entry, [entry])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["tests", "a.py", ";", "&&", "|", ">", "$(id)", "`id`", "-x", "..", "/etc", "x=y", "&",
                         "\n", "@f", "ok", "'q u'", "\\", "*"]),
        max_size=5,
    )
)
def test_template_never_admits_shell_syntax_options_or_escapes(tokens):
    command = "python -m pytest " + " ".join(tokens)
    allowed = is_allowed(command, ["python -m pytest {args...}"])
    plain = {"tests", "a.py", "ok"}
    assert allowed == all(token in plain for token in tokens)


# ---------------------------------------------------------------- what never runs


def test_rejected_commands_are_never_executed(tmp_path):
    marker = tmp_path / "marker"
    commands = [
        f"touch {marker}",
        py(f"open({str(marker)!r}, 'w')"),
        f"{py('pass')}; touch {marker}",
        f"{py('pass')} && touch {marker}",
        'python3 -c "unterminated',
    ]
    allow = [py("pass"), f"{PY} -c {{args...}}"]
    results = run_validation(commands, cwd=tmp_path, allow=allow, timeout_s=10)
    assert not marker.exists()
    assert [r.rejected for r in results] == [True] * 5
    assert [r.reason for r in results] == ["not_allowed"] * 4 + ["unparsable"]
    assert all(r.exit_code is None and not r.passed for r in results)


def test_a_program_in_the_worktree_is_not_found_through_an_empty_path_entry(tmp_path):
    marker = tmp_path / "ran"
    tool = tmp_path / "mytool"
    tool.write_text(f"#!/bin/sh\ntouch {marker}\n")
    tool.chmod(0o755)
    env = {"PATH": f":.:{os.path.dirname(sys.executable)}"}
    [result] = run_validation(["mytool"], cwd=tmp_path, allow=["mytool"], timeout_s=10, env=env)
    assert result.reason == "not_found" and not result.rejected and not result.passed
    assert not marker.exists()


def test_a_path_argument_leaving_through_a_symlink_is_rejected(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(outside)
    [result] = run_validation(
        [f"{PY} -m json.tool link/secret.txt"], cwd=work, allow=[f"{PY} -m json.tool {{path}}"], timeout_s=10
    )
    assert result.rejected and result.reason == "not_allowed"


# ---------------------------------------------------------------- running


def test_pass_fail_and_order(tmp_path):
    results = run([py("print('ok')"), py("raise SystemExit(3)"), py("print('after')")], tmp_path)
    assert [(r.exit_code, r.passed, r.rejected, r.reason) for r in results] == [
        (0, True, False, None), (3, False, False, None), (0, True, False, None)
    ]
    assert results[0].stdout_tail == "ok\n"
    assert results[2].stdout_tail == "after\n"
    assert all(r.duration_s >= 0 for r in results)


def test_runs_in_cwd_without_a_shell(tmp_path):
    [result] = run([py("print(__import__('os').getcwd())")], tmp_path)
    assert Path(result.stdout_tail.strip()).resolve() == tmp_path.resolve()
    [literal] = run([f"{PY} -c 'print(__import__(\"sys\").argv[1:])' '*' '~'"], tmp_path)
    assert literal.stdout_tail.strip() == "['*', '~']"  # no globbing, no tilde expansion


def test_a_missing_program_is_not_found(tmp_path):
    [result] = run(["definitely-not-a-program-xyz --version"], tmp_path)
    assert (result.reason, result.rejected, result.passed, result.exit_code) == ("not_found", False, False, None)
    [relative] = run(["./missing.sh"], tmp_path)
    assert relative.reason == "not_found"


def test_timeout_kills_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    [result] = run([script(tmp_path, code)], tmp_path, timeout_s=1.0)
    assert time.monotonic() - started < 10
    assert (result.reason, result.exit_code, result.passed, result.rejected) == ("timeout", None, False, False)
    grandchild = int(pid_file.read_text())
    assert _gone(grandchild), "the grandchild outlived the timeout"


def test_background_processes_are_reaped_after_a_normal_exit(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('done')\n"
    )
    started = time.monotonic()
    [result] = run([script(tmp_path, code)], tmp_path, timeout_s=30.0)
    assert time.monotonic() - started < 10  # did not wait for the daemon holding the pipes
    assert result.passed and result.stdout_tail == "done\n"
    assert _gone(int(pid_file.read_text()))


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A killed child of an exited parent is reaped by init; a zombie still answers.
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().split(") ", 1)[1].startswith("Z"):
                    return True
        except (FileNotFoundError, IndexError):
            return True
        time.sleep(0.05)
    return False


def test_output_is_cut_to_its_tail(tmp_path):
    code = "import sys\nsys.stdout.write('x' * 300000 + 'END')\nsys.stderr.write('e' * 300000 + 'ERR')\n"
    [result] = run([script(tmp_path, code)], tmp_path, max_output_bytes=1000)
    assert result.passed
    assert result.stdout_tail.endswith("x" * 997 + "END")
    assert result.stdout_tail.startswith("[... 299003 bytes truncated ...]\n")
    assert result.stderr_tail.endswith("ERR") and len(result.stderr_tail) < 1100


def test_secrets_are_not_in_the_environment(tmp_path):
    env = {
        "PATH": os.environ.get("PATH", ""),
        "ANTHROPIC_API_KEY": "a", "MESH_SIGNING_KEY": "b", "GITHUB_TOKEN": "c", "DB_PASSWORD": "d",
        "AWS_SECRET_ACCESS_KEY": "e", "OPENAI_API_KEY": "f", "my_secret": "g", "GIT_DIR": "/elsewhere",
        "GIT_INDEX_FILE": "/elsewhere/index", "KEEP_ME": "yes", "LANG": "C",
    }
    [result] = run([script(tmp_path, "import os, json\nprint(json.dumps(sorted(os.environ)))\n")], tmp_path, env=env)
    names = set(json.loads(result.stdout_tail))
    assert {"KEEP_ME", "LANG", "PATH"} <= names
    assert not names & {"ANTHROPIC_API_KEY", "MESH_SIGNING_KEY", "GITHUB_TOKEN", "DB_PASSWORD",
                        "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "my_secret", "GIT_DIR", "GIT_INDEX_FILE"}


def test_the_default_environment_is_the_process_one_minus_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-xxxxxxxxxxxxxxxxxxxx")
    monkeypatch.setenv("MESH_TEST_VISIBLE", "1")
    assert "ANTHROPIC_API_KEY" not in safe_env()
    code = "import os\nprint(os.environ.get('ANTHROPIC_API_KEY'), os.environ.get('MESH_TEST_VISIBLE'))\n"
    [result] = run([script(tmp_path, code)], tmp_path)
    assert result.stdout_tail == "None 1\n"


def test_output_and_command_are_scrubbed(tmp_path):
    token = "ghp_" + "R4nd0mT0k3nV4lu3xYz" * 2
    command = py(f"print('token is {token}')")
    [result] = run([command], tmp_path)
    assert token not in result.stdout_tail and REDACTED in result.stdout_tail
    assert token not in result.command


def test_to_dict_has_every_field(tmp_path):
    [result] = run([py("pass")], tmp_path)
    assert set(result.to_dict()) == {"command", "exit_code", "passed", "rejected", "reason", "duration_s",
                                     "stdout_tail", "stderr_tail"}


def test_cwd_must_exist(tmp_path):
    with pytest.raises(ValueError):
        run_validation(["true"], cwd=tmp_path / "nope", allow=["true"], timeout_s=1)


def test_nothing_to_run_returns_nothing(tmp_path):
    assert run_validation([], cwd=tmp_path, allow=["true"], timeout_s=1) == []
