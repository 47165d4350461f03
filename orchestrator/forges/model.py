"""What a forge is to mesh: a pull request, the protocol every forge module follows, its errors.

May import the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Check", "Forge", "ForgeError", "LineNote", "ListedPulls", "PullRequest", "Review", "check_state"]


class ForgeError(Exception):
    """A forge call that failed: its message says which call and why, never the token."""


@dataclass(frozen=True)
class PullRequest:
    """A pull request (GitHub) or merge request (GitLab): its ``number`` (GitLab's ``iid``), web
    ``url``, ``head`` and ``base`` branches, ``state`` (``open``, ``closed``, ``merged``) and title."""

    number: int
    url: str
    head: str
    base: str
    state: str
    title: str = ""
    # The commit its merge made on the base (a merge, squash or rebase commit), once merged.
    merge_commit: str | None = None
    # The commit its head branch is at, when the forge said.
    head_sha: str | None = None

    def to_dict(self) -> dict:
        out = {"number": self.number, "url": self.url, "head": self.head, "base": self.base, "state": self.state}
        if self.merge_commit:
            out["merge_commit"] = self.merge_commit
        return out


# A check's conclusion as mesh reads it: each forge's words mapped onto pending, passed, failed.
_CHECK_STATES = {
    # GitHub check runs (status, then conclusion) and commit statuses
    "queued": "pending", "in_progress": "pending", "requested": "pending", "waiting": "pending",
    "pending": "pending", "expected": "pending",
    "success": "passed", "neutral": "passed", "skipped": "passed",
    "failure": "failed", "error": "failed", "timed_out": "failed", "cancelled": "failed",
    "action_required": "failed", "startup_failure": "failed", "stale": "failed",
    # GitLab pipelines and jobs
    "created": "pending", "waiting_for_resource": "pending", "preparing": "pending", "running": "pending",
    "scheduled": "pending", "manual": "pending", "failed": "failed", "canceled": "failed", "canceling": "pending",
}


def check_state(word: str | None) -> str:
    """``pending``, ``passed`` or ``failed`` for a forge's word for a check's state (an unknown
    word is pending: mesh does not take what it cannot read for a pass)."""
    return _CHECK_STATES.get(str(word or "").lower(), "pending")


@dataclass(frozen=True)
class Check:
    """One check on a commit: a GitHub check run or commit status, a GitLab pipeline's job.
    ``state`` is ``pending``, ``passed`` or ``failed``; ``conclusion`` the forge's own word;
    ``log`` the tail of what it said (a check run's output, a job's log), forge text."""

    name: str
    state: str
    conclusion: str
    url: str = ""
    log: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "state": self.state, "conclusion": self.conclusion, "url": self.url}


@dataclass(frozen=True)
class LineNote:
    """A reviewer's comment on a line of the pull request's diff (new side): ``path``, ``line``."""

    id: str
    path: str
    line: int
    body: str


@dataclass(frozen=True)
class Review:
    """A person's review of a pull request: ``id`` (stable: mesh takes each once), ``login``,
    ``state`` (``approved``, ``changes_requested``, ``commented``), its text, the commit it was
    given on (None when the forge does not say) and its line comments."""

    id: str
    login: str
    state: str
    body: str = ""
    commit: str | None = None
    notes: tuple[LineNote, ...] = ()


class Forge(Protocol):
    """One forge's pull requests, for one repository."""

    name: str
    # What the forge calls them: "pull request", "merge request".
    noun: str

    def find_open(self, head: str, base: str) -> PullRequest | None:
        """The open pull request from ``head`` into ``base``, or None."""

    def latest(self, head: str, base: str) -> PullRequest | None:
        """The most recent pull request from ``head`` into ``base``, whatever its state, or None."""

    def open(self, head: str, base: str, title: str, body: str) -> PullRequest:
        """Open a pull request from ``head`` into ``base``."""

    def update(self, number: int, title: str, body: str) -> PullRequest:
        """Set the title and body of pull request ``number``."""

    def get(self, number: int) -> PullRequest:
        """Pull request ``number`` as it is now."""

    def checks(self, sha: str) -> list[Check]:
        """The checks of commit ``sha`` (the pull request's head), failed ones with their log's tail."""

    def reviews(self, number: int) -> list[Review]:
        """The reviews given on pull request ``number``, oldest first."""

    def merge(self, number: int, sha: str) -> None:
        """Merge pull request ``number`` if its head is still ``sha``, as the forge's own merge
        does (branch protection applies: a refusal is a ForgeError)."""


class ListedPulls:
    """``find_open`` and ``latest`` of a forge module whose ``_list(head, base, state)`` lists the
    pull requests from ``head`` into ``base`` in one of its states (``open_state``: the forge's
    word for open; ``"all"``: any)."""

    open_state = "open"

    def _list(self, head: str, base: str, state: str) -> list[PullRequest]:
        raise NotImplementedError

    def find_open(self, head: str, base: str) -> PullRequest | None:
        return next(iter(self._list(head, base, self.open_state)), None)

    def latest(self, head: str, base: str) -> PullRequest | None:
        listed = self._list(head, base, "all")
        return max(listed, key=lambda pull: pull.number) if listed else None
