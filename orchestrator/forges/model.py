"""What a forge is to mesh: a pull request, the protocol every forge module follows, its errors.

May import the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Forge", "ForgeError", "ListedPulls", "PullRequest"]


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

    def to_dict(self) -> dict:
        out = {"number": self.number, "url": self.url, "head": self.head, "base": self.base, "state": self.state}
        if self.merge_commit:
            out["merge_commit"] = self.merge_commit
        return out


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
