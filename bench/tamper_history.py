"""The tamper check's false positives on real projects' own histories (issue 43, item 3).

Every commit of each repository given (a bare clone or mirror) is scanned as if it were a
task's patch: ``tamper.scan`` over the files it changes against its first parent. A project's
own commits are not forgeries, so every finding is a false positive to look at. Printed: per
repository, the commits scanned, those flagged, and each finding (commit, rule, line).

Usage: python bench/tamper_history.py GIT_DIR [GIT_DIR...] [--limit N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.worktree.gitops import _git, changed_texts  # noqa: E402
from orchestrator.worktree.tamper import scan  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repos", nargs="+", type=Path)
    parser.add_argument("--limit", type=int, default=5000)
    args = parser.parse_args()
    for repo in args.repos:
        commits = _git(repo, "rev-list", "--no-merges", f"--max-count={args.limit}", "HEAD").stdout.split()
        flagged = 0
        findings = []
        for commit in commits:
            parents = _git(repo, "rev-list", "--parents", "-n", "1", commit).stdout.split()[1:]
            if not parents:
                continue
            found = scan(changed_texts(repo, parents[0], commit))
            if found:
                flagged += 1
                findings += [(commit[:10], item) for item in found]
        print(f"{repo}: {len(commits)} commits, {flagged} flagged")
        for commit, item in findings[:50]:
            print(f"  {commit} {item.rule} {item.location}: {item.text[:120]}")


if __name__ == "__main__":
    main()
