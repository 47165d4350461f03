"""GitLab (gitlab.com or a self-managed instance: ``api_url = "https://HOST/api/v4"``) merge
requests, through its REST API v4: list a project's merge requests by source and target branch,
create, update (``PUT``) and get one. The token is sent as ``PRIVATE-TOKEN``; a merge request's
number is its ``iid``.

May import: ``orchestrator.forges``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from orchestrator.forges.api import Api
from orchestrator.forges.model import ForgeError, ListedPulls, PullRequest

__all__ = ["GitLab"]

_STATES = {"opened": "open", "closed": "closed", "merged": "merged", "locked": "open"}


class GitLab(ListedPulls):
    name = "gitlab"
    noun = "merge request"
    open_state = "opened"

    def __init__(self, repository: str, api_url: str, token: str, *, transport: Any = None) -> None:
        if not repository.strip("/") or repository.startswith("/"):
            raise ForgeError(f"forge.repository {repository!r}: GitLab's is the project's path, GROUP/NAME")
        self.api = Api(api_url, {"PRIVATE-TOKEN": token}, transport=transport)
        self._mrs = f"/projects/{quote(repository, safe='')}/merge_requests"

    def _pull(self, raw: Any) -> PullRequest:
        if not isinstance(raw, dict) or not isinstance(raw.get("iid"), int):
            raise ForgeError("GitLab answered with something that is not a merge request")
        state = _STATES.get(str(raw.get("state")), str(raw.get("state")))
        sha = raw.get("merge_commit_sha") or raw.get("squash_commit_sha")
        return PullRequest(raw["iid"], str(raw.get("web_url") or ""), str(raw.get("source_branch") or ""),
                           str(raw.get("target_branch") or ""), state, str(raw.get("title") or ""),
                           sha if state == "merged" and isinstance(sha, str) else None)

    def _list(self, head: str, base: str, state: str) -> list[PullRequest]:
        found = self.api.call("GET", self._mrs, params={"state": state, "source_branch": head, "target_branch": base,
                                                         "order_by": "created_at", "sort": "desc", "per_page": 10})
        pulls = [self._pull(raw) for raw in found] if isinstance(found, list) else []
        return [pull for pull in pulls if pull.head == head and pull.base == base]

    def open(self, head: str, base: str, title: str, body: str) -> PullRequest:
        return self._pull(self.api.call("POST", self._mrs, body={"source_branch": head, "target_branch": base,
                                                                  "title": title, "description": body,
                                                                  "remove_source_branch": False},
                                        expect=(201,)))

    def update(self, number: int, title: str, body: str) -> PullRequest:
        return self._pull(self.api.call("PUT", f"{self._mrs}/{number}", body={"title": title, "description": body}))

    def get(self, number: int) -> PullRequest:
        return self._pull(self.api.call("GET", f"{self._mrs}/{number}"))
