"""Which tracker and which configuration file a command uses, and what to say when there is none.

The tracker is found the way git finds a repository: the nearest ``.beads/`` at or above a
folder. ``mesh report TASK --repo PATH`` run from another folder means the tracker of PATH,
so the search starts at ``--repo`` when one is given, then at the current folder. When
nothing is found the message names every folder that was looked at and says how to point
mesh at the tracker (``cd``, ``mesh --db FILE``); advising ``mesh tracker init`` there
would make a second, empty tracker beside the real one.

The configuration file is found the same way (``config_table``): this module reads it as
TOML and stops there, so that read-only views (``mesh status``) need not import the validated
model of ``orchestrator.config`` (pydantic and the roles: a few hundred milliseconds).
"""

from __future__ import annotations

import os
from pathlib import Path

from tracker.store import DB_NAME, Tracker, find_workspace

TYPE_CHECKING = False  # typing and tomllib cost `mesh logs` a tenth of its start when no file is read
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DOCTOR_HINT", "ConfigError", "TrackerNotFound", "TrackerUnavailable", "config_folders", "config_table",
           "open_found_tracker", "read_toml", "tracker_target"]

DOCTOR_HINT = "run 'mesh tracker doctor --fix'"


class ConfigError(Exception):
    """A configuration file or override is unreadable or invalid; the message is one line."""


class TrackerUnavailable(Exception):
    """The tracker is not found, or found and unusable (the message says which and what to do)."""


class TrackerNotFound(Exception):
    """No tracker is named and none is found from the folders searched (the message says which)."""


def tracker_target(db: Path | str | None, repo: Path | str | None = None, url: str | None = None) -> Path | str | None:
    """The tracker to open: ``db`` (``mesh --db``), else None when ``MESH_DB`` names one (the
    tracker library reads it), else ``url`` (the config's ``tracker.url``), else the
    workspace's file found from ``repo`` and then from the current folder."""
    if db:
        return db
    if os.environ.get("MESH_DB"):
        return None
    if url:
        return url
    starts = list(dict.fromkeys(Path(p).resolve() for p in (repo, Path.cwd()) if p is not None))
    for start in starts:
        root = find_workspace(start)
        if root is not None:
            return root / ".beads" / DB_NAME
    looked = " nor ".join(f"in {start} or any folder above it" for start in starts)
    raise TrackerNotFound(
        f"no tracker found: no .beads/ folder {looked}. cd into the project's folder, or name the"
        f" tracker: mesh --db PATH/.beads/{DB_NAME} COMMAND ... (or set MESH_DB)")


def open_found_tracker(db: Path | str | None, actor: str | None, url: str | None = None, *,
                       repo: Path | str | None = None) -> Tracker:
    """Open the tracker ``tracker_target`` names (``db``, else ``MESH_DB``, else ``url``, else the
    workspace's file found from ``repo``, then from the current folder) and run the prechecks
    (``where``, a read of the issues table); TrackerUnavailable when it is not found or unusable."""
    try:
        db = tracker_target(db, repo, url)
    except TrackerNotFound as exc:
        raise TrackerUnavailable(str(exc)) from None
    tracker = None
    try:
        tracker = Tracker.open(db, actor=actor or os.environ.get("MESH_ACTOR") or "mesh")
        tracker.where()
        # One read of the issues table: a damaged file or a table it lacks fails here, and a
        # command that cannot use the tracker says so before it starts (not its whole status:
        # that is 8 ms at 10,000 issues, a tenth of a `mesh logs`).
        tracker.db.read("SELECT count(*) FROM issues")
    except Exception as exc:  # a damaged file (sqlite errors from the first query), a refused server, a newer schema
        if tracker is not None:
            tracker.close()
        raise TrackerUnavailable(f"tracker unavailable: {exc}; {DOCTOR_HINT}") from None
    return tracker


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's table; ConfigError naming the file when it is missing, unreadable or invalid."""
    import tomllib

    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def config_folders(start: Path | None = None) -> list[Path]:
    """The folders whose config applies to ``start`` (default: the current directory), nearest
    first: ``start`` and each folder above it up to the repository's root (the folder holding
    ``.git``) or the folder holding the tracker's ``.beads/``, whichever is higher, the way the
    tracker itself is found from a subfolder. Outside both, ``start`` alone."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    chain = [here, *here.parents]
    git = next((i for i, folder in enumerate(chain) if (folder / ".git").exists()), 0)
    beads = next((i for i, folder in enumerate(chain) if (folder / ".beads").is_dir()), 0)
    return chain[:max(git, beads) + 1]


def config_text(table: dict[str, Any], source: str, section: str, key: str) -> str | None:
    """``[section] key`` of a raw config ``table``: a string or None; ConfigError (naming the
    file and the key, as the full validation would) for anything else."""
    part = table.get(section, {})
    if not isinstance(part, dict):
        raise ConfigError(f"{source}: {section}: must be a table")
    value = part.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{source}: {section}.{key}: must be a string")
    return value


def config_table(repo: Path | None = None, config_file: Path | None = None) -> tuple[dict[str, Any], str]:
    """The raw table of the configuration that applies to ``repo`` and where it comes from.

    An explicit ``config_file`` (shaped like ``mesh.toml``) wins; else the nearest of
    ``config_folders(repo)`` that holds a ``mesh.toml`` or a ``pyproject.toml`` with a
    ``[tool.mesh]`` table (a ``mesh.toml`` before a ``pyproject.toml`` of the same folder);
    else ``({}, "defaults")``. Nothing is validated here but the file's TOML.
    """
    if config_file is not None:
        return read_toml(Path(config_file)), str(config_file)
    for folder in config_folders(repo):
        mesh_toml = folder / "mesh.toml"
        if mesh_toml.is_file():
            return read_toml(mesh_toml), str(mesh_toml)
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            data = read_toml(pyproject)
            tool = data.get("tool")
            if isinstance(tool, dict) and "mesh" in tool:
                if not isinstance(tool["mesh"], dict):
                    raise ConfigError(f"{pyproject}: [tool.mesh] must be a table")
                return tool["mesh"], f"{pyproject} [tool.mesh]"
    return {}, "defaults"
