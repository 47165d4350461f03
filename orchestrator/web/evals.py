"""The evals of the repository in ``mesh serve``: a list of them, each one's report page (the
same offline page ``mesh eval report`` writes) and the run reports its grid links to.

An eval is a folder of ``<repo>/.mesh/evals/`` holding ``eval.json`` (``orchestrator.evals``). A
shared eval's folder (its ``eval.json`` names its PostgreSQL database) is brought up to the
database's rows first, as ``mesh eval status`` does: the page shows every runner's results and what
each works now; a database out of reach leaves the folder's copy.
Names and paths from the URL are checked against what is there: a folder name of that list, a
run report ``runs/<case>/<arm>[.tK].html`` inside it; nothing else is read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

__all__ = ["eval_list", "eval_page", "run_report"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,120}$")


def _folders(root: Path | None) -> dict[str, Path]:
    if root is None or not root.is_dir():
        return {}
    return {p.parent.name: p.parent for p in sorted(root.glob("*/eval.json")) if _NAME.match(p.parent.name)}


def eval_list(root: Path | None) -> list[dict[str, Any]]:
    """Every eval of ``root``: its name, suite, cases, where it stands (running, stopped, finished:
    runs done of all, running, in error, time and cost left) and per arm resolved/finished and errors."""
    from orchestrator.evals.progress import progress_text, status_data
    from orchestrator.evals.report import ReportError

    out = []
    for name, folder in _folders(root).items():
        try:
            shared = _synced(folder)
            status = status_data(folder, running=shared["running"] if shared else None)
            meta = json.loads((folder / "eval.json").read_text(encoding="utf-8"))
        except (ReportError, OSError, ValueError, KeyError) as exc:
            out.append({"name": name, "error": str(exc)[:200], "arms": [], "cases": 0, "created_at": "",
                        "state": "", "progress": ""})
            continue
        out.append({"name": name, "suite": Path(meta["suite"]).name, "cases": status["cases"],
                    "created_at": meta["created_at"], "error": None, "state": status["state"],
                    "progress": progress_text(status),
                    "arms": [{"arm": row["arm"], "resolved": row["resolved"], "finished": row["finished"],
                              "errors": row["errors"]} for row in status["arms"]]})
    return out


def eval_page(root: Path | None, name: str) -> str | None:
    """The report page of the eval ``name``, None when there is no such eval."""
    from orchestrator.evals.page import render_eval_page
    from orchestrator.evals.report import report_data

    folder = _folders(root).get(name)
    if folder is None:
        return None
    _synced(folder)
    return render_eval_page(report_data(folder))


def _synced(folder: Path) -> dict[str, Any] | None:
    """A shared eval's folder after copying its database's rows in (what runs now), else None."""
    from orchestrator.evals.shared import recorded_db, sync_folder

    db = recorded_db(folder)
    if db is None:
        return None
    try:
        return sync_folder(folder, db)
    except Exception:  # out of reach, no password here, the eval gone: the folder's copy
        return None


def run_report(root: Path | None, name: str, case: str, page: str) -> str | None:
    """A run's report page of the eval ``name`` (``runs/<case>/<page>``), None when there is none."""
    folder = _folders(root).get(name)
    if folder is None or not _NAME.match(case) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}(\.t[0-9]{1,2})?\.html", page):
        return None
    path = folder / "runs" / case / page
    if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(folder.resolve()):
        return None
    return path.read_text(encoding="utf-8", errors="replace")
