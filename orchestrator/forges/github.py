"""GitHub (and GitHub Enterprise Server: ``api_url = "https://HOST/api/v3"``) pull requests,
through its REST API (version 2022-11-28): ``pulls/list`` filtered by head and base, ``pulls/create``,
``pulls/update``, ``pulls/get``, ``pulls/merge``; a head's checks from ``checks/list-for-ref``
(check runs, a failed one's output as its log) and ``repos/get-combined-status-for-ref`` (commit
statuses); reviews from ``pulls/list-reviews`` with their line comments from
``pulls/list-review-comments``. The token is sent as ``Authorization: Bearer``.

May import: ``orchestrator.forges``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from orchestrator.forges.api import Api
from orchestrator.forges.model import Check, ForgeError, LineNote, ListedPulls, PullRequest, Review, check_state

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
        head = raw.get("head") or {}
        return PullRequest(raw["number"], str(raw.get("html_url") or ""), str(head.get("ref") or ""),
                           str((raw.get("base") or {}).get("ref") or ""), "merged" if merged else str(raw.get("state") or ""),
                           str(raw.get("title") or ""), sha if merged and isinstance(sha, str) else None,
                           head.get("sha") if isinstance(head.get("sha"), str) else None)

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

    def checks(self, sha: str) -> list[Check]:
        repo = self._pulls.removesuffix("/pulls")
        found = self.api.call("GET", f"{repo}/commits/{quote(sha, safe='')}/check-runs", params={"per_page": 100})
        out = []
        for run in (found or {}).get("check_runs") or []:
            if not isinstance(run, dict):
                continue
            word = run.get("conclusion") if run.get("status") == "completed" else run.get("status")
            output = run.get("output") or {}
            log = "\n".join(str(output.get(key)) for key in ("title", "summary", "text") if output.get(key))
            out.append(Check(str(run.get("name") or "check"), check_state(word), str(word or ""),
                             str(run.get("html_url") or run.get("details_url") or ""), log))
        status = self.api.call("GET", f"{repo}/commits/{quote(sha, safe='')}/status", params={"per_page": 100})
        for entry in (status or {}).get("statuses") or []:
            if isinstance(entry, dict):
                word = str(entry.get("state") or "")
                out.append(Check(str(entry.get("context") or "status"), check_state(word), word,
                                 str(entry.get("target_url") or ""), str(entry.get("description") or "")))
        return out

    def reviews(self, number: int) -> list[Review]:
        raw_reviews = self.api.call("GET", f"{self._pulls}/{number}/reviews", params={"per_page": 100})
        comments = self.api.call("GET", f"{self._pulls}/{number}/comments", params={"per_page": 100})
        notes: dict[int, list[LineNote]] = {}
        for c in comments if isinstance(comments, list) else []:
            # An outdated comment (its line gone from the diff) has no ``line``: it was on older work.
            line = c.get("line") if isinstance(c, dict) else None
            if isinstance(line, int) and isinstance(c.get("path"), str):
                notes.setdefault(c.get("pull_request_review_id") or 0, []).append(
                    LineNote(str(c.get("id")), c["path"], line, str(c.get("body") or "")))
        out = []
        for raw in raw_reviews if isinstance(raw_reviews, list) else []:
            if not isinstance(raw, dict) or not isinstance(raw.get("id"), int):
                continue
            state = {"APPROVED": "approved", "CHANGES_REQUESTED": "changes_requested"}.get(str(raw.get("state")),
                                                                                          "commented")
            out.append(Review(str(raw["id"]), str((raw.get("user") or {}).get("login") or ""), state,
                              str(raw.get("body") or ""), raw.get("commit_id") if isinstance(raw.get("commit_id"), str)
                              else None, tuple(notes.get(raw["id"], ()))))
        return out

    def merge(self, number: int, sha: str) -> None:
        self.api.call("PUT", f"{self._pulls}/{number}/merge", body={"sha": sha, "merge_method": "merge"})
