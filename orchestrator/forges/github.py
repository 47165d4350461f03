"""GitHub (and GitHub Enterprise Server: ``api_url = "https://HOST/api/v3"``) pull requests,
through its REST API (version 2022-11-28): ``pulls/list`` filtered by head and base, ``pulls/create``,
``pulls/update``, ``pulls/get``. The token is sent as ``Authorization: Bearer``.

May import: ``orchestrator.forges``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from orchestrator.forges.api import Api
from orchestrator.forges.model import ForgeError, ListedPulls, PullRequest

__all__ = ["GitHub"]


class GitHub(ListedPulls):
    name = "github"
    noun = "pull request"

    def __init__(self, repository: str, api_url: str, token: str, *, transport: Any = None) -> None:
        owner, _, repo = repository.partition("/")
        if not owner or not repo or "/" in repo:
            raise ForgeError(f"forge.repository {repository!r}: GitHub's is OWNER/NAME")
        self.owner, self.repo = owner, repo
        self.api = Api(api_url, {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                                 "X-GitHub-Api-Version": "2022-11-28"}, transport=transport)
        self._pulls = f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}/pulls"

    def _pull(self, raw: Any) -> PullRequest:
        if not isinstance(raw, dict) or not isinstance(raw.get("number"), int):
            raise ForgeError("GitHub answered with something that is not a pull request")
        merged = bool(raw.get("merged_at") or raw.get("merged"))
        sha = raw.get("merge_commit_sha")
        return PullRequest(raw["number"], str(raw.get("html_url") or ""), str((raw.get("head") or {}).get("ref") or ""),
                           str((raw.get("base") or {}).get("ref") or ""), "merged" if merged else str(raw.get("state") or ""),
                           str(raw.get("title") or ""), sha if merged and isinstance(sha, str) else None)

    def _list(self, head: str, base: str, state: str) -> list[PullRequest]:
        found = self.api.call("GET", self._pulls, params={"state": state, "head": f"{self.owner}:{head}", "base": base,
                                                           "sort": "created", "direction": "desc", "per_page": 10})
        pulls = [self._pull(raw) for raw in found] if isinstance(found, list) else []
        return [pull for pull in pulls if pull.head == head and pull.base == base]

    def open(self, head: str, base: str, title: str, body: str) -> PullRequest:
        return self._pull(self.api.call("POST", self._pulls, body={"title": title, "head": head, "base": base,
                                                                    "body": body, "maintainer_can_modify": False},
                                        expect=(201,)))

    def update(self, number: int, title: str, body: str) -> PullRequest:
        return self._pull(self.api.call("PATCH", f"{self._pulls}/{number}", body={"title": title, "body": body}))

    def get(self, number: int) -> PullRequest:
        return self._pull(self.api.call("GET", f"{self._pulls}/{number}"))
