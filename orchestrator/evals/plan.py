"""An eval's plan: its arms and their descriptions, their order, the reference arm, the trials,
the suite it runs (path and sha256) and the git remote its case repositories are built from.

``EvalPlan`` is the part of ``orchestrator.evals.runs.EvalRun`` that makes it: from the folder's
``eval.json`` on one machine, or from the shared eval's row in its database (``shared.SharedBoard
.plan``, where every runner's arms meet), merged with this run's arms: an arm run again with other
workers, a changed suite or another remote is refused (``EvalError``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.evals.cases import write_json
from orchestrator.evals.shared import meta_url

__all__ = ["EvalError", "EvalPlan"]


class EvalError(Exception):
    """The eval cannot run (a bad suite, a folder another eval holds, a changed suite or arm): exit 2."""


class EvalPlan:
    """The plan of an ``EvalRun`` (its ``folder``, ``eval_id``, ``board``, ``source``, ``cases``,
    ``arms``, ``config``, ``options`` and ``db``)."""

    def _meta(self, suite: Path) -> dict[str, Any]:
        """The eval's plan with this run's arms in it, written to ``eval.json`` (and, shared, to the
        database first, where every runner's arms meet)."""
        path = self.folder / "eval.json"
        if not self.board.shared:
            found = json.loads(path.read_text()) if path.exists() else None
            if found and found.get("db"):  # a copy of a shared eval: its runs are claimed in its database
                raise EvalError(f"{self.folder} holds a copy of the eval shared through {found['db']}: run it with"
                                f" mesh --db {found['db']} eval run ..., or give another --out")
            meta = self._merged(found, suite)
        else:
            shared = self.board.plan(lambda found: self._merged(found, suite), suite.read_text(encoding="utf-8"))
            meta = {**shared, "suite": str(suite), "source": str(self.source), "db": meta_url(self.db)}
        write_json(path, meta)
        return meta

    def _merged(self, meta: dict | None, suite: Path) -> dict[str, Any]:
        digest = hashlib.sha256(suite.read_bytes()).hexdigest()
        where = "the eval in its database" if self.board.shared else self.folder / "eval.json"
        meta = meta or {
            "eval": self.eval_id, "suite": str(suite), "suite_sha256": digest, "source": str(self.source),
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "arms": {}, "order": [],
            "reference": None, "trials": {}}
        if meta["suite_sha256"] != digest:
            raise EvalError(f"{suite} changed since this eval began ({where}); give another --out for the new suite")
        remote = self.options.remote or meta.get("remote") or (self._default_remote() if self.board.shared else None)
        if self.options.remote and meta.get("remote") and self.options.remote != meta["remote"]:
            raise EvalError(f"--remote {self.options.remote}: this eval builds its cases from {meta['remote']}")
        meta["remote"] = remote
        if "arms" not in meta:  # an eval of an older mesh: its profiles were its arms, their workers unrecorded
            meta.update(arms={p: {"profile": p, "recorded": False} for p in meta.get("profiles", [])},
                        order=list(meta.get("profiles", [])), reference=(meta.get("profiles") or [None])[0],
                        trials={p: 1 for p in meta.get("profiles", [])})
        for arm in self.arms:
            described = arm.description(self.config)
            before = meta["arms"].get(arm.name)
            if before is not None and before.get("recorded", True) and before != described:
                raise EvalError(f"arm {arm.name} ran in this eval with other workers: {_difference(before, described)};"
                                " give the new workers another arm name, or the eval another --out")
            meta["arms"][arm.name] = described
            if arm.name not in meta["order"]:
                meta["order"].append(arm.name)
            meta["trials"][arm.name] = max(int(meta["trials"].get(arm.name, 0)), self.options.trials)
        meta["reference"] = self.options.reference or meta.get("reference") or self.arms[0].name
        if meta["reference"] not in meta["arms"]:
            raise EvalError(f"--reference {meta['reference']}: no such arm in this eval"
                            f" (its arms: {', '.join(meta['order'])})")
        meta["profiles"] = list(meta["order"])  # what an older reader lists
        return meta

    def _default_remote(self) -> str:
        """A shared eval's remote when none is named: the checkout's ``origin``, else the checkout
        itself (a path: runners of this machine, or of a shared file system, reach it)."""
        from orchestrator.evals.cases import _git

        try:
            return _git(self.source, "remote", "get-url", "origin").strip() or str(self.source)
        except ValueError:
            return str(self.source)

    def _origin(self) -> Path:
        """Where this machine fetches the cases' commits from: the checkout itself, or a bare
        mirror of the eval's remote in the folder (``remote.git``, fetched on demand)."""
        from orchestrator.evals.cases import mirror_of

        remote = self.meta.get("remote")
        if not remote or remote == str(self.source):
            return self.source
        try:
            return mirror_of(self.folder / "remote.git", remote,
                             [c for case in self.cases for c in (case.base, case.tests_from) if c])
        except ValueError as exc:
            raise EvalError(f"the eval's remote {remote}: {exc}") from None


def _difference(before: dict, now: dict) -> str:
    keys = sorted(set(before) | set(now))
    return "; ".join(f"{key} was {before.get(key)!r}, now {now.get(key)!r}" for key in keys
                     if before.get(key) != now.get(key))[:500]
