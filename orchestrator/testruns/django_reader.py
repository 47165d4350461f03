"""Django's test runner: ``python manage.py test``, ``django-admin test``, ``python -m django
test``, and a project's own script that runs it (a ``runtests.py`` calling
``execute_from_command_line`` or ``DiscoverRunner``/``get_runner``), as reusable apps do.

Django runs unittest's tests through ``DiscoverRunner``, whose ``test_runner`` is unittest's
``TextTestRunner`` and which prints no report of its own (its closing lines are stderr a test can
print). So the command runs through a few lines given with ``-c`` (``SHIM``): they put mesh's
counting runner (``unittest_reader.RESULT_CODE``, the one mesh's unittest shim uses, mixed with
the result class Django asks for: ``--debug-sql``, ``--pdb``) in place of ``TextTestRunner``
before Django is imported, then run the script, ``django`` or ``django-admin`` as Python would,
with the command's own arguments. Tests run in parallel (``--parallel``) are reported by their
workers to the main process's result, so they are counted too; without tblib (which Django needs
to send a failure's traceback from a worker, and crashes without) a worker sends each failure's
traceback as text, so a failing test, the project's or mesh's own control, does not end the run. A test is its ``id()``
(``app.tests.TestCase.test_name``), as Django names it in its labels: a flaky test is run again
alone with ``-k``, Django's own selection.

``unittest_args`` gives the tests a Django command runs in unittest's terms (its labels, or
discovery from where it starts with its pattern), for mesh's control tests and twins.

Not read: a ``TEST_RUNNER`` whose runner does not go through unittest's ``TextTestRunner`` (an
XML runner, for example): the command then writes no report, and mesh says so.

May import the standard library and ``orchestrator.testruns`` only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from orchestrator.testruns.commands import module_run, program, script_run
from orchestrator.testruns.unittest_reader import RESULT_CODE, Unittest

__all__ = ["READER", "SHIM", "django_command", "unittest_args"]

SHIM = RESULT_CODE + """\
import os, runpy, traceback
mode = sys.argv.pop(1)
class RemoteTraceback(Exception):
    pass
RemoteTraceback.__module__ = "unittest"
unittest.RemoteTraceback = RemoteTraceback
def mesh_plain_errors():
    remote = getattr(sys.modules.get("django.test.runner"), "RemoteTestResult", None)
    if remote is None or getattr(remote, "mesh_plain", False):
        return
    try:
        import tblib.pickling_support
        return
    except ImportError:
        pass
    def plain(err):
        if err is None:
            return err
        kind, value, tb = err
        frames = []
        while tb is not None:
            frames.append((tb.tb_frame, tb.tb_lineno))
            tb = tb.tb_next
        while frames and "__unittest" in frames[0][0].f_globals:
            frames.pop(0)
        cut = next((i for i, (frame, _) in enumerate(frames) if "__unittest" in frame.f_globals), len(frames))
        text = "Traceback (most recent call last):\\n" + "".join(traceback.StackSummary.extract(iter(frames[:cut])).format())
        text += "".join(traceback.format_exception_only(kind, value))
        return (RemoteTraceback, RemoteTraceback(text.rstrip()), None)
    def wrap(name, at):
        real = getattr(remote, name)
        def method(self, *args):
            args = list(args)
            args[at] = plain(args[at])
            return real(self, *args)
        setattr(remote, name, method)
    for name, at in (("addError", 1), ("addFailure", 1), ("addExpectedFailure", 1), ("addSubTest", 2)):
        wrap(name, at)
    remote.mesh_plain = True
class MeshDjangoRunner(MeshCountingRunner):
    def run(self, test):
        mesh_plain_errors()
        return super().run(test)
unittest.TextTestRunner = unittest.runner.TextTestRunner = MeshDjangoRunner
if mode == "script":
    del sys.argv[0]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")
elif mode == "module":
    sys.argv[0] = "django"
    runpy.run_module("django", run_name="__main__", alter_sys=True)
else:
    from django.core.management import execute_from_command_line
    execute_from_command_line(["django-admin", *sys.argv[1:]])
"""

# What a project's own test script holds when it runs Django's runner.
_RUNS_DJANGO = re.compile(rb"execute_from_command_line|DiscoverRunner|get_runner\s*\(|call_command\(\s*['\"]test['\"]")
_SCRIPT_BYTES = 256 << 10
# Django's test options that take a value, and those whose value is optional.
_WITH_VALUE = frozenset({"-p", "--pattern", "-t", "--top-level-directory", "-k", "--tag", "--exclude-tag",
                         "--settings", "--pythonpath", "--testrunner", "-v", "--verbosity", "--durations"})
_OPTIONAL_VALUE = frozenset({"--parallel", "--shuffle"})
_SELECTING = frozenset({"-k", "--tag", "--exclude-tag"})
_STOPPING = frozenset({"--failfast"})


def _runs_django(tree: Path | str | None, script: str) -> bool:
    if tree is None or os.path.isabs(script) or ".." in Path(script).parts:
        return False
    try:
        with open(os.path.join(tree, script), "rb") as handle:
            return _RUNS_DJANGO.search(handle.read(_SCRIPT_BYTES)) is not None
    except OSError:
        return False


def django_command(argv: Sequence[str], tree: Path | str | None) -> tuple[list[str], str, list[str], list[str]] | None:
    """(interpreter words, mode, what the shim runs before the arguments, Django's test
    arguments) when ``argv`` runs Django's test runner; None otherwise. ``mode`` is ``script``
    (``manage.py test``, a project's runtests script), ``module`` (``python -m django test``) or
    ``admin`` (``django-admin test``)."""
    found = module_run(argv)
    if found is not None:
        module, python, args = found
        return (python, "module", ["test"], args[1:]) if module == "django" and args[:1] == ["test"] else None
    if argv and program(argv) in ("django-admin", "django-admin.py") and list(argv[1:2]) == ["test"]:
        folder = os.path.dirname(argv[0])
        return [os.path.join(folder, "python") if folder else "python"], "admin", ["test"], list(argv[2:])
    script = script_run(argv)
    if script is None:
        return None
    python, path, args = script
    if os.path.basename(path) == "manage.py":
        return (python, "script", [path, "test"], args[1:]) if args[:1] == ["test"] else None
    return (python, "script", [path], args) if _runs_django(tree, path) else None


def unittest_args(argv: Sequence[str], root: Path | str | None) -> list[str] | None:
    """The tests the Django command ``argv`` runs, as ``python -m unittest`` arguments would
    name them (its labels; ``discover -s START -p PATTERN`` for a folder or package label, or
    none); with ``-k`` or ``--failfast`` kept when it selects or stops. None when ``argv`` is not
    one."""
    found = django_command(argv, root)
    if found is None:
        return None
    args = found[3]
    labels: list[str] = []
    flags: list[str] = []
    pattern = "test*.py"
    index = 0
    while index < len(args):
        arg = args[index]
        name, _, inline = arg.partition("=")
        if arg.startswith("-"):
            if name in _WITH_VALUE and not inline:
                value = args[index + 1] if index + 1 < len(args) else ""
                index += 1
            else:
                value = inline
            if name in _OPTIONAL_VALUE and not inline and index + 1 < len(args) \
                    and (args[index + 1].isdigit() or args[index + 1] == "auto"):
                index += 1
            if name in ("-p", "--pattern"):
                pattern = value
            elif name in _SELECTING or name in _STOPPING:
                flags.append("-k" if name in _SELECTING else "--failfast")
        else:
            labels.append(arg)
        index += 1
    if not labels:
        return ["discover", "-s", ".", "-p", pattern, *flags]
    out: list[str] = []
    for label in labels:
        folder = label if "/" in label or label in (".", "..") else label.replace(".", "/")
        if root is not None and os.path.isdir(os.path.join(root, folder)):
            if len(labels) == 1:
                return ["discover", "-s", folder, "-p", pattern, *flags]
            continue  # several labels, one a folder: its tests are not named
        out.append(label)
    return [*out, *flags]


class Django(Unittest):
    """Django's runner, read as mesh's unittest shim reads unittest (``model.Reader``)."""

    name = "django"

    def recognises(self, argv: Sequence[str], tree: Path | None) -> bool:
        return django_command(argv, tree) is not None

    def instrument(self, argv: Sequence[str], report: str, tree: Path | None) -> list[str]:
        found = django_command(argv, tree)
        if found is None:
            return list(argv)
        python, mode, head, args = found
        return [*python, "-c", SHIM, report, mode, *head, *args]


READER = Django()
