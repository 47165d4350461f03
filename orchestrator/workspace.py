"""Which tracker a command uses, and what to say when there is none.

The tracker is found the way git finds a repository: the nearest ``.beads/`` at or above a
folder. ``mesh report TASK --repo PATH`` run from another folder means the tracker of PATH,
so the search starts at ``--repo`` when one is given, then at the current folder. When
nothing is found the message names every folder that was looked at and says how to point
mesh at the tracker (``cd``, ``mesh --db FILE``); advising ``mesh tracker init`` there
would make a second, empty tracker beside the real one.
"""

from __future__ import annotations

import os
from pathlib import Path

from tracker.store import DB_NAME, find_workspace

__all__ = ["TrackerNotFound", "tracker_target"]


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
