"""`mesh demo`: what a new user sees in the first minutes."""

from __future__ import annotations


def test_the_demo_tells_the_story_and_the_next_commands_not_json(tmp_path, monkeypatch):
    from orchestrator.demo import run_demo

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lines: list[str] = []
    assert run_demo(echo=lines.append) == 0
    text = "\n".join(lines)
    assert not any(line.startswith("{") for line in lines)  # no JSON report
    assert text.count("orch_preflight") == 1 and "preflight: run " in text  # as it happens; then read as text
    assert "consensus cycle" in text and "review cycle" in text
    assert "mesh show demo-7kq.1" in text and "mesh report demo-7kq.1" in text and "mesh demo --keep" in text


def test_the_project_metadata_uses_a_license_expression():
    """setuptools warns about a ``project.license`` table on every install: an SPDX string."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
