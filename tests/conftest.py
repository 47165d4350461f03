"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

# ----------------------------------------------------------------- tracker

BEADS_REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "beads-real"


def beads_real_files() -> list[Path]:
    """The real beads exports (empty when ../shared/data/beads-real/ is absent)."""
    return sorted(BEADS_REAL.glob("*.jsonl")) if BEADS_REAL.is_dir() else []


@pytest.fixture
def tracker(tmp_path):
    """A fresh tracker workspace (prefix ``tt``) in a temporary folder."""
    from tracker.store import Tracker

    t = Tracker.init(tmp_path, prefix="tt", actor="tester")
    yield t
    t.close()


# ----------------------------------------------------------------- worktrees


@pytest.fixture(autouse=True, scope="session")
def _private_cache_home(tmp_path_factory):
    """Task worktrees live under the user's cache directory: keep the tests' out of ~/.cache.

    Session-wide (and in os.environ, so that subprocesses a test starts inherit it); a test
    that checks the location sets its own with monkeypatch.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield
