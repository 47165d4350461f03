"""Shared pytest fixtures, and the Hypothesis profiles the property tests run under."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# ----------------------------------------------------------------- hypothesis

# "ci" (the default) runs the same examples on every run: a property test never fails at
# random in CI, and what it found once is pinned as an @example. "fuzz" (`make fuzz`,
# HYPOTHESIS_PROFILE=fuzz) searches long and at random for new counterexamples. A test's own
# @settings(max_examples=...) wins over both.
settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None, print_blob=True)
settings.register_profile("fuzz", derandomize=False, max_examples=20_000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# ----------------------------------------------------------------- tracker

BEADS_REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "beads-real"


def bench_module(name: str):
    """A script of bench/ as a module, loaded from its file: bench/ on sys.path would shadow
    installed packages with its scripts' names (bench/mcp_status.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", Path(__file__).resolve().parents[1] / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def beads_real_files() -> list[Path]:
    """The real beads exports (empty when ../shared/data/beads-real/ is absent)."""
    return sorted(BEADS_REAL.glob("*.jsonl")) if BEADS_REAL.is_dir() else []


ENGINES = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def pg_server():
    """A throwaway PostgreSQL server for the session (tests/pgserver.py), or a skip with the
    reason; with MESH_REQUIRE_POSTGRES=1 (CI, ``make test``) a missing server is a failure."""
    import os

    from tests.pgserver import start_server

    server, why = start_server()
    if server is None:
        if os.environ.get("MESH_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here (MESH_REQUIRE_POSTGRES=1): {why}")
        pytest.skip(why)
    yield server
    server.stop()


_databases = iter(range(1, 1 << 30))


@pytest.fixture
def pg_url(pg_server):
    """The URL of a new, empty database on the session's server (dropped afterwards)."""
    name = f"t{next(_databases)}"
    url = pg_server.create_database(name)
    yield url
    pg_server.drop_database(name)


@pytest.fixture(params=ENGINES)
def engine(request):
    """Each engine in turn: the tracker tests run on SQLite and on PostgreSQL."""
    return request.param


@pytest.fixture
def db_target(engine, tmp_path, request):
    """Where a test's tracker lives on ``engine``: None (the workspace's SQLite file) or a
    PostgreSQL URL of a fresh database."""
    if engine == "sqlite":
        return None
    return request.getfixturevalue("pg_url")


@pytest.fixture
def tracker(tmp_path, db_target):
    """A fresh tracker workspace (prefix ``tt``) in a temporary folder, on each engine."""
    from tracker.store import Tracker

    t = Tracker.init(tmp_path, prefix="tt", actor="tester", db_path=db_target)
    yield t
    t.close()
    if db_target is None:
        # Every write a test made kept SQLite's figures of ``bd stats`` (``tracker.tallies``) as
        # the tables say: a write that moves them wrongly fails here, whatever it tested.
        from tracker.tallies import stale

        with Tracker(tmp_path / ".beads" / "mesh.db") as check:
            assert stale(check.db) == [], "the kept stats figures differ from the tables"
    if db_target is not None:
        # Every write a test made kept PostgreSQL's open label rows (``open_labels``) as its
        # labels and issues say: a write path that forgets them fails here, whatever it tested.
        from tracker.pg_functions import STALE_OPEN_LABELS

        with Tracker(db_target) as check:
            assert check.db.read(STALE_OPEN_LABELS)[0][0] == 0, "open_labels differs from labels and issues"


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


@pytest.fixture(autouse=True, scope="session")
def _private_config_home(tmp_path_factory):
    """Config loading reads the user's stored price table (``mesh prices --update-from``):
    keep a developer's ~/.config/mesh out of the tests' configs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
        yield
