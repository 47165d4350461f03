"""Fake GitHub and GitLab REST APIs on 127.0.0.1 for the pull request tests.

No forge server can be installed here, so each fake serves the few endpoints mesh calls, keeps
its pull requests in memory, and checks every request it gets and every answer it gives against
the forge's published OpenAPI description, trimmed to those operations
(``tests/fixtures/forges/``; its README says where each came from): a request of the wrong
shape (an unknown or mistyped query parameter, a body missing a required field or with a field
the operation does not take) is answered 422 and recorded in ``problems``, which every test
checks is empty. The token each fake expects is checked on every request.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import jsonschema

FIXTURES = Path(__file__).parent / "fixtures" / "forges"


def _nullable(schema: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: ``nullable: true`` becomes a null type."""
    if isinstance(schema, dict):
        out = {key: _nullable(value) for key, value in schema.items() if key not in ("nullable", "example",
                                                                                      "examples", "x-github")}
        if schema.get("nullable") is True:
            if isinstance(out.get("enum"), list) and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]  # OpenAPI 3.0: nullable admits null beside the enum
            kind = out.get("type")
            if isinstance(kind, str):
                out["type"] = [kind, "null"]
            elif "type" not in out:
                out = {"anyOf": [out, {"type": "null"}]}
        return out
    if isinstance(schema, list):
        return [_nullable(item) for item in schema]
    return schema


def _or_list(schema: Any) -> Any:
    """``schema`` where each object may also come as a list of such objects: GitLab's published
    description gives list answers (discussions, an approval's ``approved_by``) as one entity
    (its generator drops grape's ``is_array``), while the server sends lists."""
    if isinstance(schema, dict):
        out = {key: _or_list(value) for key, value in schema.items()}
        if out.get("type") == "object" or "properties" in out:
            return {"anyOf": [out, {"type": "array", "items": out}]}
        return out
    if isinstance(schema, list):
        return [_or_list(item) for item in schema]
    return schema


class OpenApi:
    """A trimmed OpenAPI (3.x) or Swagger (2.0) description, to check requests and answers by.
    ``lists``: an entity in an answer may come as a list of them (GitLab's, see ``_or_list``)."""

    def __init__(self, path: Path, prefix: str = "", *, lists: bool = False) -> None:
        self.lists = lists
        self.doc = json.loads(path.read_text())
        self.prefix = prefix.rstrip("/")
        self.swagger = "swagger" in self.doc
        self.routes = []
        base = self.doc.get("basePath", "").rstrip("/") if self.swagger else ""
        for template, item in self.doc["paths"].items():
            pattern = re.sub(r"\\\{[^}]+\\\}", r"([^/]+)", re.escape(base + template))
            names = re.findall(r"\{([^}]+)\}", template)
            self.routes.append((re.compile(f"^{pattern}$"), names, item))

    def _resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            target: Any = self.doc
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    def _schema(self, schema: Any) -> Any:
        """``schema`` with its refs inlined (components or definitions)."""
        schema = self._resolve(schema)
        if isinstance(schema, dict):
            return {key: self._schema(value) for key, value in schema.items()}
        if isinstance(schema, list):
            return [self._schema(item) for item in schema]
        return schema

    def operation(self, method: str, path: str) -> tuple[dict, dict[str, str]] | None:
        path = path[len(self.prefix):] if self.prefix and path.startswith(self.prefix) else path
        for pattern, names, item in self.routes:
            found = pattern.match(path)
            if found and method.lower() in item:
                operation = dict(item[method.lower()])
                operation["parameters"] = [*item.get("parameters", []), *operation.get("parameters", [])]
                return operation, dict(zip(names, (unquote(v) for v in found.groups())))
        return None

    def check_request(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> list[str]:
        found = self.operation(method, path)
        if found is None:
            return [f"{method} {path}: no such operation in the description"]
        operation, _ = found
        problems = []
        params = [self._resolve(p) for p in operation["parameters"]]
        known = {p["name"]: p for p in params if p.get("in") == "query"}
        for name, values in query.items():
            if name not in known:
                problems.append(f"{method} {path}: query parameter {name!r} is not the operation's")
                continue
            schema = self._schema(known[name].get("schema") or {k: v for k, v in known[name].items()
                                                                   if k in ("type", "enum")})
            value: Any = values[-1]
            if schema.get("type") == "integer":
                value = int(value) if re.fullmatch(r"-?\d+", value) else value
            elif schema.get("type") == "boolean":
                value = {"true": True, "false": False}.get(value, value)
            try:
                jsonschema.validate(value, _nullable(schema))
            except jsonschema.ValidationError as exc:
                problems.append(f"{method} {path}: query {name}: {exc.message}")
        for p in params:
            if p.get("in") == "query" and p.get("required") and p["name"] not in query:
                problems.append(f"{method} {path}: query parameter {p['name']!r} is required")
        schema = None
        if self.swagger:
            body_params = [p for p in params if p.get("in") == "body"]
            form = [p for p in params if p.get("in") == "formData"]
            if body_params:
                schema = self._schema(body_params[0]["schema"])
            elif form:
                schema = {"type": "object", "properties": {p["name"]: {k: v for k, v in p.items()
                                                                       if k in ("type", "enum", "items")}
                                                           for p in form},
                          "required": [p["name"] for p in form if p.get("required")]}
        else:
            content = (operation.get("requestBody") or {}).get("content") or {}
            if "application/json" in content:
                schema = self._schema(content["application/json"].get("schema") or {})
        if schema is not None and body is not None:
            strict = copy.deepcopy(_nullable(schema))
            if strict.get("type") == "object" and "properties" in strict and "additionalProperties" not in strict:
                strict["additionalProperties"] = False  # a field the operation does not take is a mistake here
            try:
                jsonschema.validate(body, strict)
            except jsonschema.ValidationError as exc:
                problems.append(f"{method} {path}: body: {exc.message}")
        elif body is not None and method in ("POST", "PATCH", "PUT"):
            problems.append(f"{method} {path}: the operation takes no JSON body")
        return problems

    def check_response(self, method: str, path: str, status: int, body: Any) -> list[str]:
        found = self.operation(method, path)
        if found is None:
            return []
        operation, _ = found
        response = self._resolve(operation.get("responses", {}).get(str(status)))
        if response is None:
            return [f"{method} {path}: status {status} is not one the operation answers"]
        schema = response.get("schema") if self.swagger else \
            ((response.get("content") or {}).get("application/json") or {}).get("schema")
        if schema is None or isinstance(body, str):
            # A plain-text answer (GitLab's job log: its description gives the job entity, the
            # server sends the log as text/plain) is checked for its status only.
            return []
        schema = _nullable(self._schema(schema))
        try:
            jsonschema.validate(body, _or_list(schema) if self.lists else schema)
        except jsonschema.ValidationError as exc:
            return [f"{method} {path}: answer {status}: {exc.message}"]
        return []


@dataclass
class Pull:
    number: int
    head: str
    base: str
    title: str
    body: str
    state: str = "open"  # open, closed (unmerged) or merged
    merge_sha: str | None = None

    def merged(self, sha: str) -> None:
        """As the forge records a merge by someone: ``sha`` is the commit it made on the base."""
        self.state, self.merge_sha = "merged", sha


@dataclass
class Round:
    """What the fake forge says of one pushed head (the n-th distinct commit whose checks are
    asked): its ``checks`` as (name, conclusion or None while running, log), and the ``reviews``
    given on it as (login, state, body, [(path, line, comment), ...]), state one of
    ``approved``, ``changes_requested``, ``commented``."""

    checks: list[tuple[str, str | None, str]] = field(default_factory=list)
    reviews: list[tuple[str, str, str, list[tuple[str, int, str]]]] = field(default_factory=list)
    # Asks of the checks answered "running" before the conclusions show.
    running_for: int = 0


@dataclass
class FakeForge:
    """The state of a fake forge: its pull requests, the requests it got, what was wrong."""

    token: str
    pulls: list[Pull] = field(default_factory=list)
    # What each pushed head gets, in the order heads are asked about (the last one repeats).
    rounds: list[Round] = field(default_factory=list)
    heads: list[str] = field(default_factory=list)
    asked: dict[str, int] = field(default_factory=dict)
    merges: list[tuple[int, str]] = field(default_factory=list)
    # The bare remote branches are pushed to: a pull request's head commit is read there.
    remote: Path | None = None
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    headers_seen: list[dict[str, str]] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    forge: FakeForge
    api: OpenApi
    kind: str

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(self, status: int, body: Any) -> None:
        method, path = self.command, urlsplit(self.path).path
        if status < 300:
            self.forge.problems.extend(self.api.check_response(method, path, status, body))
        text = isinstance(body, str)  # a job's log is plain text
        data = body.encode() if text else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        query = parse_qs(parts.query)
        with self.forge.lock:
            self.forge.requests.append((self.command, self.path, body))
            self.forge.headers_seen.append(dict(self.headers))
            if not self._authorised():
                return self._reply(401, {"message": "Bad credentials"})
            problems = self.api.check_request(self.command, parts.path, query, body)
            if problems:
                self.forge.problems.extend(problems)
                return self._reply(422, {"message": "; ".join(problems)})
            _, params = self.api.operation(self.command, parts.path)
            status, answer = _answer(self.kind, self.forge, self.command, params, query, body, parts.path)
            self._reply(status, answer)

    def _authorised(self) -> bool:
        if self.kind == "github":
            return self.headers.get("Authorization") == f"Bearer {self.forge.token}"
        return self.headers.get("PRIVATE-TOKEN") == self.forge.token

    do_GET = do_POST = do_PATCH = do_PUT = _handle


def _head_sha(forge: FakeForge, pull: Pull) -> str:
    if forge.remote is None:
        return "0" * 40
    import subprocess

    found = subprocess.run(["git", "--git-dir", str(forge.remote), "rev-parse", "--verify", f"refs/heads/{pull.head}"],
                           capture_output=True, text=True)
    return found.stdout.strip() or "0" * 40


def _github_pull(forge: FakeForge, pull: Pull) -> dict:
    return {"number": pull.number, "html_url": f"{forge.url}/pull/{pull.number}",
            "state": "open" if pull.state == "open" else "closed",
            "title": pull.title, "body": pull.body, "head": {"ref": pull.head, "sha": _head_sha(forge, pull)},
            "base": {"ref": pull.base}, "merged": pull.state == "merged",
            "merged_at": "2026-12-06T12:00:00Z" if pull.state == "merged" else None, "merge_commit_sha": pull.merge_sha,
            "id": 1000 + pull.number, "mergeable_state": "clean",
            "user": {"login": "mesh-bot"}}


def _gitlab_mr(forge: FakeForge, pull: Pull) -> dict:
    return {"id": 5000 + pull.number, "iid": pull.number, "web_url": f"{forge.url}/-/merge_requests/{pull.number}",
            "state": {"open": "opened"}.get(pull.state, pull.state), "title": pull.title, "description": pull.body,
            "source_branch": pull.head, "target_branch": pull.base, "sha": _head_sha(forge, pull),
            **({"merge_commit_sha": pull.merge_sha} if pull.merge_sha else {})}


@dataclass(frozen=True)
class _Words:
    """How one forge names what the fakes share: the number's path parameter, the update
    method, the body's text field, the list's and the creation's branch fields, its answers."""

    number: str
    update: str
    text: str
    head_query: str
    base_query: str
    head: str
    base: str
    render: Any
    duplicate: tuple[int, Any]
    missing: Any


_WORDS = {
    "github": _Words("pull_number", "PATCH", "body", "head", "base", "head", "base", _github_pull,
                     (422, {"message": "Validation Failed", "errors": [{"message": "A pull request already exists."}]}),
                     {"message": "Not Found"}),
    "gitlab": _Words("merge_request_iid", "PUT", "description", "source_branch", "target_branch", "source_branch",
                     "target_branch", _gitlab_mr,
                     (409, {"message": ["Another open merge request already exists for this source branch"]}),
                     {"message": "404 Not found"}),
}


def _round(forge: FakeForge, sha: str, ask: bool) -> tuple[int, Round]:
    """The round of head ``sha`` (a head asked about for the first time starts the next);
    ``ask``: this is a new look at its checks."""
    if sha not in forge.heads:
        forge.heads.append(sha)
    index = forge.heads.index(sha)
    rounds = forge.rounds or [Round()]
    forge.asked[sha] = forge.asked.get(sha, 0) + (1 if ask else 0)
    return index, rounds[min(index, len(rounds) - 1)]


def _checks(forge: FakeForge, sha: str, ask: bool = True) -> list[tuple[int, str, str | None, str]]:
    """(id, name, conclusion or None while running, log) of head ``sha``'s checks."""
    index, found = _round(forge, sha, ask)
    running = forge.asked[sha] <= found.running_for
    return [(100 * (index + 1) + n, name, None if running else conclusion, log)
            for n, (name, conclusion, log) in enumerate(found.checks)]


def _reviews(forge: FakeForge) -> tuple[str, list[tuple[int, str, str, str, list[tuple[int, str, int, str]]]]]:
    """The latest head and the reviews given on it: (id, login, state, body, [(id, path, line, text)])."""
    if not forge.heads:
        return "", []
    sha = forge.heads[-1]
    index = len(forge.heads) - 1
    rounds = forge.rounds or [Round()]
    found = rounds[min(index, len(rounds) - 1)] if index < len(rounds) else Round()
    return sha, [(1000 * (index + 1) + n, login, state, body,
                  [(1000 * (index + 1) + 10 * n + k, path, line, text) for k, (path, line, text) in enumerate(notes)])
                 for n, (login, state, body, notes) in enumerate(found.reviews)]


def _github_extra(forge: FakeForge, method: str, path: str, params: dict) -> tuple[int, Any] | None:
    if path.endswith("/check-runs"):
        runs = [{"id": cid, "head_sha": params["ref"], "name": name, "html_url": f"{forge.url}/runs/{cid}",
                 "details_url": f"{forge.url}/runs/{cid}", "status": "in_progress" if conclusion is None else "completed",
                 "conclusion": conclusion, "output": {"title": name, "summary": f"{name}: {conclusion or 'running'}",
                                                      "text": log or None},
                 "app": {"slug": "github-actions"}} for cid, name, conclusion, log in _checks(forge, params["ref"])]
        return 200, {"total_count": len(runs), "check_runs": runs}
    if path.endswith("/status"):
        return 200, {"state": "pending", "sha": params["ref"], "total_count": 0, "statuses": []}
    if path.endswith("/reviews"):
        sha, reviews = _reviews(forge)
        return 200, [{"id": rid, "user": {"login": login}, "body": body, "commit_id": sha,
                      "state": {"approved": "APPROVED", "changes_requested": "CHANGES_REQUESTED"}.get(state, "COMMENTED"),
                      "html_url": f"{forge.url}/review/{rid}", "submitted_at": "2026-12-06T12:00:00Z"}
                     for rid, login, state, body, _ in reviews]
    if path.endswith("/comments") and method == "GET":
        sha, reviews = _reviews(forge)
        return 200, [{"id": nid, "pull_request_review_id": rid, "diff_hunk": "@@", "path": npath, "commit_id": sha,
                      "user": {"login": login}, "body": text, "html_url": f"{forge.url}/c/{nid}", "line": line,
                      "original_line": line, "side": "RIGHT", "start_line": None}
                     for rid, login, _, _, notes in reviews for nid, npath, line, text in notes]
    if path.endswith("/merge"):
        pull = next(p for p in forge.pulls if p.number == int(params["pull_number"]))
        forge.merges.append((pull.number, forge.heads[-1] if forge.heads else ""))
        pull.merged("1" * 40)
        return 200, {"sha": "1" * 40, "merged": True, "message": "Pull Request successfully merged"}
    return None


def _gitlab_extra(forge: FakeForge, method: str, path: str, params: dict, query: dict) -> tuple[int, Any] | None:
    if path.endswith("/pipelines") and "sha" in query:
        sha = query["sha"][-1]
        checks = _checks(forge, sha)
        index = forge.heads.index(sha)
        state = ("running" if any(c is None for _, _, c, _ in checks)
                 else "failed" if any(c == "failure" for _, _, c, _ in checks) else "success")
        return 200, [{"id": 700 + index, "iid": index + 1, "sha": sha, "status": state,
                      "web_url": f"{forge.url}/-/pipelines/{700 + index}"}]
    if path.endswith("/jobs"):
        index = int(params["pipeline_id"]) - 700
        sha = forge.heads[index]
        return 200, [{"id": cid, "name": name, "stage": "test", "allow_failure": False,
                      "status": {None: "running", "failure": "failed"}.get(conclusion, conclusion),
                      "web_url": f"{forge.url}/-/jobs/{cid}"} for cid, name, conclusion, _ in _checks(forge, sha, False)]
    if path.endswith("/trace"):
        job = int(params["job_id"])
        for sha in forge.heads:
            for cid, _name, _conclusion, log in _checks(forge, sha, False):
                if cid == job:
                    return 200, log
        return 404, {"message": "404 Not found"}
    if path.endswith("/approvals"):
        _, reviews = _reviews(forge)
        return 200, {"approved": any(state == "approved" for _, _, state, _, _ in reviews),
                     "approved_by": [{"user": {"username": login}} for _, login, state, _, _ in reviews
                                     if state == "approved"]}
    if path.endswith("/discussions"):
        sha, reviews = _reviews(forge)
        return 200, [{"id": f"d{nid}", "notes": [{"id": nid, "body": text, "author": {"username": login},
                                                   "system": False, "resolvable": True, "resolved": False,
                                                   "position": {"new_path": npath, "new_line": line, "head_sha": sha}}]}
                     for _, login, _, _, notes in reviews for nid, npath, line, text in notes]
    if path.endswith("/merge"):
        forge.merges.append((int(params["merge_request_iid"]), forge.heads[-1] if forge.heads else ""))
        pull = next(p for p in forge.pulls if p.number == int(params["merge_request_iid"]))
        pull.merged("1" * 40)
        return 200, _gitlab_mr(forge, pull)
    return None


def _answer(kind: str, forge: FakeForge, method: str, params: dict, query: dict, body: Any,
            path: str = "") -> tuple[int, Any]:
    words = _WORDS[kind]
    extra = _github_extra(forge, method, path, params) if kind == "github" else \
        _gitlab_extra(forge, method, path, params, query)
    if extra is not None:
        return extra
    if words.number in params:
        pull = next((p for p in forge.pulls if p.number == int(params[words.number])), None)
        if pull is None:
            return 404, words.missing
        if method == words.update:
            pull.title = body.get("title", pull.title)
            pull.body = body.get(words.text, pull.body)
        return 200, words.render(forge, pull)
    if method == "GET":
        state = {"opened": "open"}.get(query.get("state", ["all"])[-1], query.get("state", ["all"])[-1])
        head = query.get(words.head_query, [""])[-1].split(":", 1)[-1]
        base = query.get(words.base_query, [""])[-1]
        return 200, [words.render(forge, p) for p in forge.pulls
                     if (state == "all" or p.state == state or (state == "closed" and p.state == "merged"))
                     and (not head or p.head == head) and (not base or p.base == base)]
    if any(p.head == body[words.head] and p.base == body[words.base] and p.state == "open" for p in forge.pulls):
        return words.duplicate
    pull = Pull(len(forge.pulls) + 1, body[words.head], body[words.base], body.get("title", ""),
                body.get(words.text) or "")
    forge.pulls.append(pull)
    return 201, words.render(forge, pull)


def serve(kind: str, token: str) -> tuple[FakeForge, str, ThreadingHTTPServer]:
    """A fake ``kind`` ("github", "gitlab") on 127.0.0.1 expecting ``token``: (its state, its
    API URL, the server to shut down)."""
    forge = FakeForge(token)
    fixture = FIXTURES / f"{kind}.openapi.json"
    api = OpenApi(fixture, lists=kind == "gitlab")
    handler = type(f"{kind}Handler", (_Handler,), {"forge": forge, "api": api, "kind": kind})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{server.server_address[1]}"
    forge.url = root
    return forge, (root if kind == "github" else f"{root}/api/v4"), server
