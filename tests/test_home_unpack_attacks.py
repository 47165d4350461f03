"""Issue 34, items 1 and 2: nothing a worker hands back is unpacked on the host, and its HOME
is bounded in bytes on disk, in entries and in time.

Each attack is performed for real: a stand-in agent CLI, run through the real worker launcher
(bwrap, the real FIFO), writes its own tar into the way back (``/mesh/home-back``) instead of
the one mesh's carrier would send, and the test looks at what reached the host's disk. The
tars are the known ways out of an extraction folder: the long-path symlink chain that defeats
``os.path.realpath`` (CVE-2025-4517, open on Python before 3.11.13/3.12.11/3.13.4), absolute
and ``..`` names, a symlink followed by a file through it, a hard link to a file outside, a
device node, a set-uid file; and floods of entries and blocks.
"""

from __future__ import annotations

import base64
import io
import os
import stat
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

from orchestrator.sandbox import worker_homes
from orchestrator.sandbox.worker_sandbox import WorkerLimits
from tests.test_worker_contained import Calls, _repo, bwrap  # noqa: F401  (bwrap is a fixture)

# A stand-in agent CLI that answers, then sends its own bytes down the way back and closes it
# before mesh's carrier can (the carrier then finds no reader and gives up).
HOSTILE = r'''
import base64, json, os, sys
order = json.loads(sys.stdin.read() or "{}")
home = os.environ["HOME"]
out = {"home": sorted(os.listdir(home))}
for rel in order.get("mkdirs", []):
    os.makedirs(os.path.join(home, rel), exist_ok=True)
for index in range(order.get("dirs", 0)):
    os.mkdir(os.path.join(home, "d%d" % index))
if order.get("tar"):
    with open("/mesh/home-back", "wb") as back:
        back.write(b"K" + base64.b64decode(order["tar"]))
print(json.dumps(out))
'''


def _hostile(tmp_path: Path, bwrap: str, limits: WorkerLimits = WorkerLimits()) -> Calls:
    calls = Calls(tmp_path, bwrap, limits=limits)
    program = tmp_path / "bin" / "claude"
    program.write_text(f"#!{sys.executable}\n{HOSTILE}")
    return calls


def _tar(build) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        build(tar)
    return base64.b64encode(buffer.getvalue()).decode()


def _file(tar: tarfile.TarFile, name: str, content: bytes = b"pwned", mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(content), mode
    tar.addfile(info, io.BytesIO(content))


def _link(tar: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tar.addfile(info)


def _realpath_overflow(dest: str, targets: dict[str, bytes]) -> str:
    """The CVE-2025-4517 chain, sized for an extraction folder at ``dest``: 16 folders whose
    names fill PATH_MAX once expanded, each reached through a one-letter symlink, a last symlink
    that ``os.path.realpath`` never expands, and through it ``escape`` up to ``/``; then each of
    ``targets`` (absolute paths) written through ``escape``, new or over an existing file (a
    hard link first, then its content)."""
    steps = "abcdefghijklmnop"
    component = "d" * ((os.pathconf("/", "PC_PATH_MAX") - len(dest) - 1) // (len(steps) + 1))

    def build(tar: tarfile.TarFile) -> None:
        path = ""
        for step in steps:
            info = tarfile.TarInfo(os.path.join(path, component))
            info.type, info.mode = tarfile.DIRTYPE, 0o777
            tar.addfile(info)
            _link(tar, os.path.join(path, step), component)
            path = os.path.join(path, component)
        linkpath = os.path.join(*steps, "l" * 254)
        _link(tar, linkpath, os.path.join(*[".."] * len(steps)))
        _link(tar, "escape", os.path.join(linkpath, *[".."] * (len(Path(dest).parts) + 1)))
        for index, (target, content) in enumerate(targets.items()):
            if os.path.exists(target):
                _link(tar, f"over{index}", "escape" + target, tarfile.LNKTYPE)
                _file(tar, f"over{index}", content)
            else:
                _file(tar, "escape" + target, content)
    return _tar(build)


def _classic(outside: Path) -> str:
    """The classic ways out: absolute and ``..`` names, a symlink out and a file through it (in
    one archive and, relative, in two steps), a hard link to a file outside, a device, set-uid."""
    def build(tar: tarfile.TarFile) -> None:
        _file(tar, str(outside / "absolute"))
        _file(tar, "../../../../../../../../../../.." + str(outside / "dotdot"))
        _link(tar, "out", str(outside))
        _file(tar, "out/through-symlink")
        _link(tar, "up", "../../../../../../../../../../../../..")
        _file(tar, "up" + str(outside / "through-relative-symlink"))
        _link(tar, "hard", str(outside / "existing"), tarfile.LNKTYPE)
        _file(tar, "hard", b"overwritten")
        device = tarfile.TarInfo("null")
        device.type, device.devmajor, device.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(device)
        fifo = tarfile.TarInfo("fifo")
        fifo.type = tarfile.FIFOTYPE
        tar.addfile(fifo)
        _file(tar, "setuid", b"#!/bin/sh\n", mode=0o4755)
        _file(tar, ".claude/notes.md", b"kept")
    return _tar(build)


def _everything_under(folder: Path) -> list[Path]:
    return [Path(base) / name for base, dirs, files in os.walk(folder) for name in dirs + files]


@pytest.fixture
def outside(tmp_path):
    """Where the attacks aim: a folder beside the HOMEs, a file already there, a fake
    project's git hooks and a fake virtualenv's site-packages; and the real HOME's canary."""
    folder = tmp_path / "outside"
    (folder / "project" / ".git" / "hooks").mkdir(parents=True)
    (folder / "venv" / "lib" / "site-packages").mkdir(parents=True)
    (folder / "existing").write_text("original")
    canary = Path(os.path.expanduser("~")) / f"mesh-canary-{uuid.uuid4().hex}"
    yield folder, canary
    if canary.exists():
        canary.unlink()


def test_the_long_path_symlink_chain_escapes_this_pythons_own_tarfile_filter(tmp_path):
    """The control: on a Python whose tarfile has the CVE-2025-4517 hole, the same archive
    unpacked in mesh's process with the ``data`` filter writes outside its folder."""
    if sys.version_info >= (3, 13, 4) or (3, 12, 11) <= sys.version_info < (3, 13) or \
            (3, 11, 13) <= sys.version_info < (3, 12):
        pytest.skip(f"Python {sys.version.split()[0]} has the fix: the control attack cannot work here")
    dest = tmp_path / "a" / "b" / "dest"
    dest.mkdir(parents=True)
    target = tmp_path / "planted"
    data = base64.b64decode(_realpath_overflow(str(dest), {str(target): b"pwned"}))
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
        for member in tar:
            try:
                tar.extract(member, dest, filter="data")
            except (tarfile.TarError, OSError):
                continue
    assert target.read_bytes() == b"pwned"


def test_the_long_path_symlink_chain_plants_nothing_from_a_worker(tmp_path, bwrap, outside):
    folder, canary = outside
    repo = _repo(tmp_path / "repo")
    calls = _hostile(tmp_path, bwrap)
    home = worker_homes.home_folder(calls.root, os.path.join(repo, ".git"), "t-1", "proposer", "claude")
    targets = {str(canary): b"planted in the real HOME",
               str(folder / "project" / ".git" / "hooks" / "post-checkout"): b"#!/bin/sh\ntouch /tmp/owned\n",
               str(folder / "venv" / "lib" / "site-packages" / "evil.pth"): b"import os; os.system('touch /tmp/owned')\n",
               str(folder / "existing"): b"overwritten"}
    # Sized for the folder's path on the host and for where the unpacking shows it.
    for dest in (str(home), worker_homes.UNPACK_TARGET):
        answer, detail = calls.ask(repo, "t-1", tar=_realpath_overflow(dest, targets))
        assert answer is not None, detail
    assert not canary.exists()
    assert sorted(p.name for p in _everything_under(folder)) == [
        ".git", "existing", "hooks", "lib", "project", "site-packages", "venv"]
    assert (folder / "existing").read_text() == "original"
    # What stayed in the folder is plain: no path longer than the bound, nothing outside it.
    for path in _everything_under(home):
        assert len(str(path.relative_to(home))) <= worker_homes.MAX_PATH
    # The HOME still works for the task's next call.
    answer, detail = calls.ask(repo, "t-1")
    assert answer is not None, detail


def test_the_classic_tar_tricks_plant_nothing_and_keep_only_plain_files(tmp_path, bwrap, outside):
    folder, _ = outside
    repo = _repo(tmp_path / "repo")
    calls = _hostile(tmp_path, bwrap)
    answer, detail = calls.ask(repo, "t-1", tar=_classic(folder))
    assert answer is not None, detail
    assert sorted(p.name for p in _everything_under(folder)) == [
        ".git", "existing", "hooks", "lib", "project", "site-packages", "venv"]
    assert (folder / "existing").read_text() == "original"
    home = worker_homes.home_folder(calls.root, os.path.join(repo, ".git"), "t-1", "proposer", "claude")
    kept = {str(p.relative_to(home)): p for p in _everything_under(home)}
    assert (home / ".claude" / "notes.md").read_text() == "kept"
    assert "null" not in kept and "fifo" not in kept
    # The links out were refused: what stands at their names is a plain folder of the HOME, made
    # for the files "through" them, which stayed inside.
    assert not (home / "out").is_symlink() and (home / "out" / "through-symlink").is_file()
    assert (home / "hard").read_bytes() == b"overwritten" and not (home / "hard").is_symlink()
    for path in kept.values():
        assert os.path.realpath(path).startswith(str(home) + "/")
        mode = os.lstat(path).st_mode
        assert stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)
        assert not mode & (stat.S_ISUID | stat.S_ISGID)
    # The next call sees what was kept, and nothing outside.
    again, _ = calls.ask(repo, "t-1")
    assert ".claude" in again["home"]


def test_a_flood_of_folders_is_cut_at_the_entry_bound_and_never_reaches_the_host(tmp_path, bwrap):
    repo = _repo(tmp_path / "repo")
    limits = WorkerLimits(home_growth_mb=64, home_files=500)
    calls = _hostile(tmp_path, bwrap, limits)
    # Made in the HOME by the worker (mesh's carrier sends "filled")...
    answer, detail = calls.ask(repo, "t-1", dirs=2000)
    assert answer is None and detail.startswith("home_limit: ") and "500 files" in detail, detail
    # ... and sent straight down the way back (the unpacking stops at the bound).
    def build(tar: tarfile.TarFile) -> None:
        for index in range(3000):
            info = tarfile.TarInfo(f"f{index}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    answer, detail = calls.ask(repo, "t-1", tar=_tar(build))
    assert answer is None and detail.startswith("home_limit: ") and "worker_limits.home_files" in detail, detail
    entries = _everything_under(calls.root)
    assert len(entries) < 50, len(entries)


def test_small_files_count_in_disk_blocks_not_bytes(tmp_path, bwrap):
    repo = _repo(tmp_path / "repo")
    calls = _hostile(tmp_path, bwrap, WorkerLimits(home_growth_mb=4, home_files=100000))
    # 2,000 one-byte files: 2 KB of content, 8 MB of disk blocks, past a 4 MB bound.
    def build(tar: tarfile.TarFile) -> None:
        for index in range(2000):
            _file(tar, f"small{index}", b"x")
    answer, detail = calls.ask(repo, "t-1", tar=_tar(build))
    assert answer is None and detail.startswith("home_limit: ") and "4 MB" in detail, detail
    assert len(_everything_under(calls.root)) < 50


def test_what_a_launcher_does_after_the_call_is_given_what_is_left_of_its_timeout(tmp_path):
    from roles.backends import CommandBackend, WorkerRequest
    from roles.backends.command import Launch
    from roles.prompts import Prompt

    given: list[float] = []

    def launcher(argv, env, cwd):
        return Launch(list(argv), dict(env), finish=lambda left: given.append(left) or None)

    backend = CommandBackend("true", 30, launcher=launcher)
    backend.call(WorkerRequest(role="proposer", round="proposal", task_id="t", run_id="r", attempt=1,
                               prompt=Prompt("x", "")))
    assert len(given) == 1 and 0 < given[0] <= 30
