"""Validation commands: only allowlisted ones run, without a shell, bounded in time and output."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.sandbox.bwrap import SANDBOX_HOME, SANDBOX_TREE
from redact import REDACTED
from orchestrator.sandbox.validation import (
    ValidationResult,
    is_allowed,
    parse_allow_entry,
    run_validation,
)

PY = shlex.quote(sys.executable)


def py(code: str) -> str:
    """A command line running a one-line ``code`` (no shell syntax) with this interpreter."""
    return f"{PY} -c {shlex.quote(code)}"


def script(tmp_path: Path, code: str, name: str = "check.py") -> str:
    """A command line running ``code`` saved as ``name`` in ``tmp_path`` (the cwd)."""
    (tmp_path / name).write_text(code)
    return f"{PY} {name}"


def commit_all(repo: Path) -> None:
    """Commit everything in ``repo`` (made a git repository on first use): bwrap runs the committed tree."""
    if not (repo / ".git").exists():
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "state"], check=True)


def run(commands, tmp_path, *, allow=None, timeout_s=30.0, sandbox="bwrap", **kwargs) -> list[ValidationResult]:
    commit_all(tmp_path)
    return run_validation(
        commands, cwd=tmp_path, allow=list(commands) if allow is None else allow, timeout_s=timeout_s,
        sandbox=sandbox, **kwargs
    )


@pytest.fixture(params=["bwrap", "none"])
def mode(request) -> str:
    """Each running test runs sandboxed and unsandboxed: both must keep every promise."""
    return request.param


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` (a sandbox's processes included)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read()
                with open(f"/proc/{entry}/stat") as handle:
                    zombie = handle.read().rsplit(")", 1)[1].split()[0] == "Z"
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if marker.encode() in cmdline and not zombie:
                found.append(int(entry))
    return found


def gone(marker: str) -> bool:
    """True once no live process carries ``marker`` (a killed one may take a moment to go, longer
    on a loaded machine: a minute at most, a tenth of the 600 s the tests' processes sleep)."""
    deadline = time.monotonic() + 60
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not host_processes_with(marker)


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


def test_rejected_commands_are_never_executed(tmp_path, mode):
    marker = tmp_path / "marker"
    commands = [
        f"touch {marker}",
        py(f"open({str(marker)!r}, 'w')"),
        f"{py('pass')}; touch {marker}",
        f"{py('pass')} && touch {marker}",
        'python3 -c "unterminated',
    ]
    allow = [py("pass"), f"{PY} -c {{args...}}"]
    results = run(commands, tmp_path, allow=allow, timeout_s=10, sandbox=mode)
    assert not marker.exists()
    assert [r.rejected for r in results] == [True] * 5
    assert [r.reason for r in results] == ["not_allowed"] * 4 + ["unparsable"]
    assert all(r.exit_code is None and not r.passed for r in results)


def test_a_program_in_the_worktree_is_not_found_through_an_empty_path_entry(tmp_path, mode):
    marker = tmp_path / "ran"
    tool = tmp_path / "mytool"
    tool.write_text(f"#!/bin/sh\ntouch {marker}\n")
    tool.chmod(0o755)
    env = {"PATH": f":.:{os.path.dirname(sys.executable)}"}
    [result] = run(["mytool"], tmp_path, allow=["mytool"], timeout_s=10, env=env, sandbox=mode)
    assert result.reason == "not_found" and not result.rejected and not result.passed
    assert not marker.exists()


def test_a_path_argument_leaving_through_a_symlink_is_rejected(tmp_path, mode):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(outside)
    [result] = run(
        [f"{PY} -m json.tool link/secret.txt"], work, allow=[f"{PY} -m json.tool {{path}}"], timeout_s=10, sandbox=mode
    )
    assert result.rejected and result.reason == "not_allowed"


# ---------------------------------------------------------------- running


def test_pass_fail_and_order(tmp_path, mode):
    results = run([py("print('ok')"), py("raise SystemExit(3)"), py("print('after')")], tmp_path, sandbox=mode)
    assert [(r.exit_code, r.passed, r.rejected, r.reason) for r in results] == [
        (0, True, False, None), (3, False, False, None), (0, True, False, None)
    ]
    assert results[0].stdout_tail == "ok\n"
    assert results[2].stdout_tail == "after\n"
    assert all(r.duration_s >= 0 for r in results)


def test_runs_in_the_tree_without_a_shell(tmp_path, mode):
    [result] = run([py("print(__import__('os').getcwd())")], tmp_path, sandbox=mode)
    expected = Path(SANDBOX_TREE) if mode == "bwrap" else tmp_path.resolve()
    assert Path(result.stdout_tail.strip()).resolve() == expected
    [literal] = run([f"{PY} -c 'print(__import__(\"sys\").argv[1:])' '*' '~'"], tmp_path, sandbox=mode)
    assert literal.stdout_tail.strip() == "['*', '~']"  # no globbing, no tilde expansion


def test_a_missing_program_is_not_found(tmp_path, mode):
    [result] = run(["definitely-not-a-program-xyz --version"], tmp_path, sandbox=mode)
    assert (result.reason, result.rejected, result.passed, result.exit_code) == ("not_found", False, False, None)
    [relative] = run(["./missing.sh"], tmp_path, sandbox=mode)
    assert relative.reason == "not_found"
    # A bare name says where it was looked for: a shell finds programs (a pyenv shim) the sandbox does not.
    assert "looked for on the sandbox's PATH /" in result.stderr_tail
    assert "looked for" not in relative.stderr_tail


def test_a_python_the_sandbox_lacks_names_python3_when_that_is_there(tmp_path):
    """``mesh init`` on a machine whose ``python`` is a shim outside the sandbox's PATH (pyenv):
    the failure says which name the sandbox has."""
    import shutil

    if shutil.which("python", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip("this machine has a python on the sandbox's PATH")
    [result] = run(["python -m unittest"], tmp_path)
    assert result.reason == "not_found"
    assert "python3 is there: name it in the command and in validation.allow" in result.stderr_tail


def test_timeout_kills_every_process_the_command_started(tmp_path, mode):
    marker = f"grandchild-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])\n"
        "time.sleep(600)\n"
    )
    [result] = run([script(tmp_path, code)], tmp_path, timeout_s=1.0, sandbox=mode)
    assert (result.reason, result.exit_code, result.passed, result.rejected) == ("timeout", None, False, False)
    assert gone(marker), "the grandchild outlived the timeout"


def test_background_processes_are_reaped_after_a_normal_exit(tmp_path, mode):
    marker = f"daemon-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])\n"
        "print('done')\n"
    )
    # The daemon holds the output pipes: returning at all shows it was not waited for.
    [result] = run([script(tmp_path, code)], tmp_path, timeout_s=120.0, sandbox=mode)
    assert result.passed and result.stdout_tail == "done\n" and result.reason is None
    assert gone(marker)


def test_output_is_cut_to_its_tail(tmp_path, mode):
    code = "import sys\nsys.stdout.write('x' * 300000 + 'END')\nsys.stderr.write('e' * 300000 + 'ERR')\n"
    [result] = run([script(tmp_path, code)], tmp_path, max_output_bytes=1000, sandbox=mode)
    assert result.passed
    assert result.stdout_tail.endswith("x" * 997 + "END")
    assert result.stdout_tail.startswith("[... 299003 bytes truncated ...]\n")
    assert result.stderr_tail.endswith("ERR") and len(result.stderr_tail) < 1100


def test_the_environment_is_the_allowlist_only(tmp_path, mode):
    env = {
        "PATH": os.environ.get("PATH", ""),
        "ANTHROPIC_API_KEY": "a", "MESH_SIGNING_KEY": "b", "GITHUB_TOKEN": "c", "DB_PASSWORD": "d",
        "AWS_SECRET_ACCESS_KEY": "e", "OPENAI_API_KEY": "f", "my_secret": "g", "GIT_DIR": "/elsewhere",
        "GIT_INDEX_FILE": "/elsewhere/index", "KEEP_ME": "yes", "UNLISTED": "no", "LANG": "C",
    }
    code = "import os, json\nprint(json.dumps(dict(os.environ)))\n"
    [result] = run([script(tmp_path, code)], tmp_path, env=env, sandbox=mode,
                   env_names=["KEEP_ME", "MESH_SIGNING_KEY", "GIT_DIR"])
    seen = json.loads(result.stdout_tail)
    # PWD comes from bwrap's --chdir, LC_CTYPE from Python's own C-locale coercion (PEP 538).
    assert set(seen) - {"PWD", "LC_CTYPE"} == {"PATH", "LANG", "HOME", "PYTHONDONTWRITEBYTECODE", "KEEP_ME"}
    assert (seen["KEEP_ME"], seen["LANG"]) == ("yes", "C")
    assert seen["HOME"] == SANDBOX_HOME if mode == "bwrap" else seen["HOME"] != os.environ.get("HOME")


def test_the_default_source_is_the_process_environment(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-xxxxxxxxxxxxxxxxxxxx")
    monkeypatch.setenv("MESH_TEST_VISIBLE", "1")
    code = "import os\nprint(os.environ.get('ANTHROPIC_API_KEY'), os.environ.get('MESH_TEST_VISIBLE'))\n"
    [result] = run([script(tmp_path, code)], tmp_path, sandbox=mode, env_names=["MESH_TEST_VISIBLE"])
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
                                     "stdout_tail", "stderr_tail", "limit", "tests"}


def test_cwd_must_exist(tmp_path):
    with pytest.raises(ValueError):
        run_validation(["true"], cwd=tmp_path / "nope", allow=["true"], timeout_s=1)


def test_a_sandboxed_run_needs_a_git_checkout(tmp_path):
    with pytest.raises(ValueError, match="git"):
        run_validation(["true"], cwd=tmp_path, allow=["true"], timeout_s=1)


def test_nothing_to_run_returns_nothing(tmp_path):
    assert run_validation([], cwd=tmp_path, allow=["true"], timeout_s=1) == []


@pytest.mark.parametrize("command, allow, why", [
    ("pytest -q", ["pytest {args...}"], "token 2 '-q' is an option, and {args...} never matches options"),
    ("pytest tests/a.py extra", ["pytest {path}"], "'extra' and what follows are more arguments"),
    ("pytest ../x.py", ["pytest {path}"], "'../x.py' leaves the worktree"),
    ("make deploy", ["make test", "pytest"], "closest entry 'make test': token 2 'deploy' is not 'test'"),
    ("pytest; rm -rf /", ["pytest"], "shell syntax"),
    ("pytest", [], "validation.allow is empty"),
])
def test_a_refused_command_says_which_token_fell_outside_which_entry(command, allow, why):
    from orchestrator.sandbox.allowlist import explain

    assert why in explain(command, allow)
