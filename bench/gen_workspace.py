"""Generate a realistic beads JSONL workspace of N issues (deterministic for a seed).

The mix follows what real beads exports look like: epics with children
(``<epic>.<n>`` ids, ``parent-child`` edges), ``blocks`` edges to earlier
issues (so the graph is acyclic, with chains), about 30% closed, a few
deferred (in the future and in the past), labels with a long tail, comments,
and a sprinkle of gate, agent and molecule beads.

    python bench/gen_workspace.py 10000 -o /tmp/ws.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracker.ids import adaptive_length, hash_id  # noqa: E402

__all__ = ["generate", "write_jsonl", "BENCH_LABEL", "BROAD_LABEL", "PLAN_LABEL", "PLAN_SIZE"]

# The labels the benchmark's ready query filters on. A plan label marks one
# plan's issues: about 1% of the workspace (real beads workspaces show the same:
# their busiest work labels cover 0.5-1.5% of issues). The broad label, on 10%,
# is the stress case where the answer itself is large.
BENCH_LABEL = "plan-alpha"
BROAD_LABEL = "area-broad"
# A plan of the same size whatever the workspace's (every n/300-th issue created, the random
# draws untouched): ready work for it must cost what its answer costs, not what the tracker holds.
PLAN_LABEL = "plan-300"
PLAN_SIZE = 300

_TYPES = ["task"] * 60 + ["bug"] * 15 + ["feature"] * 10 + ["chore"] * 5 + ["gate", "agent", "molecule"] * 2
_STATUSES = ["closed"] * 30 + ["open"] * 55 + ["in_progress"] * 8 + ["blocked"] * 4 + ["deferred"] * 3
_LABELS = [f"area-{i}" for i in range(40)] + [f"team-{i}" for i in range(10)] + ["urgent", "tech-debt", "docs"]
_BASE = datetime(2025, 1, 1, tzinfo=timezone.utc)


def _ts(moment: datetime, rng: random.Random) -> str:
    # Real exports mix local offsets and Z; ordering must survive both.
    if rng.random() < 0.5:
        return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
    return moment.astimezone(timezone(timedelta(hours=-8))).isoformat(timespec="microseconds")


def generate(n: int, *, seed: int = 7, prefix: str = "bm", now: datetime | None = None) -> list[dict]:
    """``n`` issue objects in beads' JSONL shape, sorted by id."""
    rng = random.Random(seed)
    now = now or datetime.now(timezone.utc)
    length = adaptive_length(n)
    issues: list[dict] = []
    seen: set[str] = set()
    epics: list[tuple[dict, list[int]]] = []
    span = (now - _BASE).total_seconds()
    i = 0
    while len(issues) < n:
        created = _BASE + timedelta(seconds=span * len(issues) / n + rng.random())
        parent = None
        if epics and rng.random() < 0.35:
            parent, counter = rng.choice(epics[-50:])
            counter[0] += 1
            issue_id = f"{parent['id']}.{counter[0]}"
        else:
            nonce = 0
            while True:
                issue_id = hash_id(prefix, f"{seed}|{i}", length, nonce)
                if issue_id not in seen:
                    break
                nonce += 1
        i += 1
        seen.add(issue_id)
        issue_type = "epic" if parent is None and rng.random() < 0.05 else rng.choice(_TYPES)
        status = rng.choice(_STATUSES)
        issue: dict = {
            "id": issue_id,
            "title": f"Issue {len(issues)}: {rng.choice(['fix', 'add', 'refactor', 'document'])} {rng.choice(_LABELS)}",
            "description": "Generated for the tracker benchmark. " * rng.randint(1, 4),
            "status": status,
            "priority": rng.choice([0, 1, 1, 2, 2, 2, 2, 3, 3, 4]),
            "issue_type": issue_type,
            "created_at": _ts(created, rng),
            "created_by": rng.choice(["alice", "bob", "carol", "agent-7"]),
            "updated_at": _ts(created + timedelta(hours=rng.randint(0, 500)), rng),
        }
        if status == "in_progress":
            issue["assignee"] = rng.choice(["alice", "bob", "agent-7"])
        if status == "closed":
            issue["closed_at"] = issue["updated_at"]
            issue["close_reason"] = "done"
        if rng.random() < 0.04:
            delta = timedelta(days=rng.randint(1, 60))
            issue["defer_until"] = _ts(now + delta if rng.random() < 0.6 else now - delta, rng)
        labels = rng.sample(_LABELS, rng.choice([0, 1, 1, 2, 3]))
        if rng.random() < 0.01:
            labels.append(BENCH_LABEL)
        if rng.random() < 0.10:
            labels.append(BROAD_LABEL)
        if len(issues) % max(n // PLAN_SIZE, 1) == 0 and len(issues) // max(n // PLAN_SIZE, 1) < PLAN_SIZE:
            labels.append(PLAN_LABEL)
        if labels:
            issue["labels"] = labels
        deps = []
        if parent is not None:
            deps.append(_dep(issue_id, parent["id"], "parent-child", issue["created_at"]))
        if issues and rng.random() < 0.25:
            # Edges only to earlier issues keep the blocks graph acyclic; recent ones make chains.
            for target in {rng.choice(issues[-200:])["id"] for _ in range(rng.randint(1, 2))}:
                if target != (parent or {}).get("id"):
                    deps.append(_dep(issue_id, target, "blocks", issue["created_at"]))
        if issues and rng.random() < 0.05:
            deps.append(_dep(issue_id, rng.choice(issues)["id"], "related", issue["created_at"]))
        if deps:
            issue["dependencies"] = deps
        ncomments = rng.choice([0, 0, 1, 1, 2, 3])
        if ncomments:
            issue["comments"] = [
                {"id": len(issues) * 4 + k, "issue_id": issue_id, "author": rng.choice(["alice", "bob"]),
                 "text": f"Progress note {k}.", "created_at": issue["updated_at"]}
                for k in range(ncomments)
            ]
        issues.append(issue)
        if issue_type == "epic":
            epics.append((issue, [0]))
    issues.sort(key=lambda x: x["id"])
    return issues


def _dep(issue_id: str, target: str, dep_type: str, at: str) -> dict:
    return {"issue_id": issue_id, "depends_on_id": target, "type": dep_type, "created_at": at, "created_by": "alice"}


def write_jsonl(issues: list[dict], path: Path) -> None:
    """Write ``issues`` one per line (compact, like bd)."""
    with open(path, "w", encoding="utf-8") as fh:
        for issue in issues:
            fh.write(json.dumps(issue, separators=(",", ":")))
            fh.write("\n")


def main(argv: list[str] | None = None) -> None:
    """Command line: ``gen_workspace.py N -o FILE [--seed S]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="number of issues")
    parser.add_argument("-o", "--output", type=Path, required=True, help="JSONL file to write")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    args = parser.parse_args(argv)
    write_jsonl(generate(args.n, seed=args.seed), args.output)


if __name__ == "__main__":
    main()
