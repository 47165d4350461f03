"""GitLab (gitlab.com or a self-managed instance: ``api_url = "https://HOST/api/v4"``) merge
requests, through its REST API v4: list a project's merge requests by source and target branch,
create, update (``PUT``), get and merge one; a head's checks are its latest pipeline's jobs (a
failed job's log is its trace); reviews are approvals and reviewers' unresolved line comments
(diff notes). The token is sent as ``PRIVATE-TOKEN``; a merge request's number is its ``iid``.

May import: ``orchestrator.forges``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from orchestrator.forges.api import Api
from orchestrator.forges.model import Check, ForgeError, LineNote, ListedPulls, PullRequest, Review, check_state

__all__ = ["GitLab"]

_LOG_TAIL = 4000
_STATES = {"opened": "open", "closed": "closed", "merged": "merged", "locked": "open"}


class GitLab(ListedPulls):
    name = "gitlab"
    noun = "merge request"
    open_state = "opened"

    def __init__(self, repository: str, api_url: str, token: str, *, transport: Any = None) -> None:
        if not repository.strip("/") or repository.startswith("/"):
            raise ForgeError(f"forge.repository {repository!r}: GitLab's is the project's path, GROUP/NAME")
        self.api = Api(api_url, {"PRIVATE-TOKEN": token}, transport=transport)
        self._project = f"/projects/{quote(repository, safe='')}"
        self._mrs = f"{self._project}/merge_requests"

    def _pull(self, raw: Any) -> PullRequest:
        if not isinstance(raw, dict) or not isinstance(raw.get("iid"), int):
            raise ForgeError("GitLab answered with something that is not a merge request")
        state = _STATES.get(str(raw.get("state")), str(raw.get("state")))
        sha = raw.get("merge_commit_sha") or raw.get("squash_commit_sha")
        return PullRequest(raw["iid"], str(raw.get("web_url") or ""), str(raw.get("source_branch") or ""),
                           str(raw.get("target_branch") or ""), state, str(raw.get("title") or ""),
                           sha if state == "merged" and isinstance(sha, str) else None,
                           raw.get("sha") if isinstance(raw.get("sha"), str) else None)

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

    def checks(self, sha: str) -> list[Check]:
        pipelines = self.api.call("GET", f"{self._project}/pipelines",
                                  params={"sha": sha, "order_by": "id", "sort": "desc", "per_page": 1})
        if not isinstance(pipelines, list) or not pipelines or not isinstance(pipelines[0], dict):
            return []
        pipeline = pipelines[0]
        jobs = self.api.call("GET", f"{self._project}/pipelines/{int(pipeline['id'])}/jobs", params={"per_page": 100})
        out = []
        for job in jobs if isinstance(jobs, list) else []:
            if not isinstance(job, dict) or not isinstance(job.get("id"), int):
                continue
            state = check_state(job.get("status"))
            if state == "failed" and job.get("allow_failure"):
                state = "passed"  # the pipeline itself passes with it
            log = ""
            if state == "failed":
                log = self.api.text("GET", f"{self._project}/jobs/{job['id']}/trace", tail=_LOG_TAIL)
            out.append(Check(str(job.get("name") or "job"), state, str(job.get("status") or ""),
                             str(job.get("web_url") or ""), log))
        if not out:  # a pipeline without jobs the token can read: the pipeline is the check
            word = str(pipeline.get("status") or "")
            out.append(Check("pipeline", check_state(word), word, str(pipeline.get("web_url") or "")))
        return out

    def reviews(self, number: int) -> list[Review]:
        out = []
        approvals = self.api.call("GET", f"{self._mrs}/{number}/approvals")
        for entry in (approvals or {}).get("approved_by") or [] if isinstance(approvals, dict) else []:
            login = str(((entry or {}).get("user") or {}).get("username") or "")
            if login:
                out.append(Review(f"approval:{login}", login, "approved"))
        discussions = self.api.call("GET", f"{self._mrs}/{number}/discussions", params={"per_page": 100})
        for discussion in discussions if isinstance(discussions, list) else []:
            for note in (discussion or {}).get("notes") or [] if isinstance(discussion, dict) else []:
                if not isinstance(note, dict):
                    continue
                position = note.get("position") if isinstance(note.get("position"), dict) else {}
                line, path = position.get("new_line"), position.get("new_path")
                if note.get("system") or note.get("resolved") or not isinstance(line, int) or not isinstance(path, str):
                    continue
                login = str((note.get("author") or {}).get("username") or "")
                out.append(Review(f"note:{note.get('id')}", login, "changes_requested", "",
                                  position.get("head_sha") if isinstance(position.get("head_sha"), str) else None,
                                  (LineNote(str(note.get("id")), path, line, str(note.get("body") or "")),)))
        return out

    def merge(self, number: int, sha: str) -> None:
        self.api.call("PUT", f"{self._mrs}/{number}/merge", body={"sha": sha, "auto_merge": True})
