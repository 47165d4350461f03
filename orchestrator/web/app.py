"""The server: Starlette routes over the page functions, the guard, the streams.

Every route reads the tracker in a worker thread (the tracker library is synchronous and
thread-safe behind its own lock); pages are Jinja2 templates rendered with autoescape and
``StrictUndefined``; fragments (``/board/fragment``, ``/task/ID/status``...) are what htmx fetches
again when a stream says something changed. Write actions are POSTs of plain forms, each one a
call of the library (``submit_review``, ``retry_task``, ``request_stop``) followed by a redirect;
with ``--read-only`` there are none (no button is drawn and the guard refuses every POST).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from redact import scrub
from tracker.changes import change_seq
from tracker.errors import NotFoundError, TrackerError
from tracker.store import Tracker

from orchestrator.config import PriceTable
from orchestrator.protocol.human_review import ReviewRefused, submit_review, waiting_review
from orchestrator.safe_text import printable
from orchestrator.web.board import board, drain_view, parse_scope, scope_choices
from orchestrator.web.changes import ChangeFeed
from orchestrator.web.events import TaskCards, change_stream, last_event_id, task_stream
from orchestrator.web.times import when
from orchestrator.web.evals import eval_list, eval_page, run_report
from orchestrator.web.ledger_pages import call_page, logs_page, usage_page
from orchestrator.web.security import COOKIE, SECURITY_HEADERS, STANDALONE_CSP, WEBHOOK, Guard, body_limit
from orchestrator.web.task import review_from_form, review_page, task_page, task_status

__all__ = ["Settings", "create_app", "git_user_name"]

HERE = Path(__file__).resolve().parent


@dataclass
class Settings:
    """How the server was started: its tracker, who acts, where it listens, what it allows."""

    target: Path | str
    actor: str
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    read_only: bool = False
    prices: PriceTable | None = None
    key: bytes | None = None
    # Whom a review given in the browser is from unless the form says: the person (their git
    # user.name), else the actor.
    reviewer: str | None = None
    # Where the repository's evals are (``<repo>/.mesh/evals``), None when serving no repository.
    evals: Path | None = None
    # The forge's webhook: (provider, secret, the sync of a branch), None when not served.
    webhook: tuple[str, str, Any] | None = None


class _Guarded:
    """The ASGI layer in front of every route: the guard's verdict, and the security headers on
    every answer (pages, fragments, streams, static files and refusals alike)."""

    def __init__(self, app: Any, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        verdict = self.guard.check(request.method, request.url.path, dict(request.query_params),
                                   {k.lower(): v for k, v in request.headers.items()}, request.cookies)

        limit, taken = body_limit(request.url.path), [0]

        async def limited_receive() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                taken[0] += len(message.get("body") or b"")
                if taken[0] > limit:
                    # Starlette answers it (413); what was read so far is dropped with the request.
                    raise HTTPException(413, f"refused: a request body here is {limit} bytes at most")
            return message

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                present = {name.lower() for name, _ in headers}  # a page's own stricter policy stays
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()
                            if k.lower().encode() not in present]
                message = {**message, "headers": headers}
            await send(message)

        if verdict.set_cookie is not None:
            response: Response = RedirectResponse(verdict.location or "/", status_code=303)
            response.set_cookie(COOKIE, verdict.set_cookie, httponly=True, samesite="strict")
            await response(scope, receive, send_with_headers)
        elif verdict.status:
            await PlainTextResponse(verdict.reason + "\n", status_code=verdict.status)(scope, receive, send_with_headers)
        else:
            await self.app(scope, limited_receive, send_with_headers)


def git_user_name(repo: Path) -> str | None:
    """The person at this keyboard as git knows them (``git config user.name`` in ``repo``); None
    when git has no name for them."""
    from orchestrator.worktree.gitops import _git

    name = _git(repo, "config", "--get", "user.name", check=False).stdout.strip()
    return name or None


def create_app(settings: Settings) -> Any:
    """The ASGI application of ``mesh serve``."""
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = when  # relative times, the exact one on hover
    state: dict[str, Any] = {}

    def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(read_only=settings.read_only, **context)
        return HTMLResponse(html, status_code=status)

    def tracker() -> Tracker:
        return state["tracker"]

    def card_html(card: dict[str, Any]) -> str:
        return env.get_template("_card.html.j2").render(card=card)

    def problem(status: int, message: str) -> HTMLResponse:
        return page("problem.html.j2", status, message=printable(scrub(message)))

    async def read(fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(fn, *args, **kwargs)

    async def form_of(request: Request) -> dict[str, str]:
        # At most MAX_BODY_BYTES: the guard's layer refuses a larger body before it is read whole.
        body = await request.body()
        return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))

    # ------------------------------------------------------------------ the board and the drain view

    def typed_scope(request: Request) -> Response | None:
        """``?label=NAME`` or ``?epic=ID``, as a person types them, redirected to ``?scope=...``."""
        params = request.query_params
        if "scope" in params or not (params.get("label") or params.get("epic")):
            return None
        scope = f"label:{params['label']}" if params.get("label") else f"epic:{params['epic']}"
        return RedirectResponse(f"{request.url.path}?" + urlencode({"scope": scope}), status_code=303)

    async def board_page(request: Request) -> Response:
        if (moved := typed_scope(request)) is not None:
            return moved
        scope = parse_scope(request.query_params.get("scope"))
        # The newest change before the page's reads: one committed while they run comes again
        # through the stream (a refresh), where read after them it would be lost for good.
        seq = await read(change_seq, tracker())
        try:
            data = await read(board, tracker(), scope)
        except NotFoundError as exc:
            return problem(404, str(exc))
        choices = await read(scope_choices, tracker())
        return page("board.html.j2", board=data, choices=choices, last_event_id=seq)

    async def board_fragment(request: Request) -> Response:
        try:
            data = await read(board, tracker(), parse_scope(request.query_params.get("scope")))
        except NotFoundError as exc:
            return problem(404, str(exc))
        return page("_board.html.j2", board=data)

    async def drain_page(request: Request) -> Response:
        if (moved := typed_scope(request)) is not None:
            return moved
        scope = parse_scope(request.query_params.get("scope"))
        seq = await read(change_seq, tracker())  # before the reads, as for the board
        choices = await read(scope_choices, tracker())
        try:
            data = await read(drain_view, tracker(), scope, prices=settings.prices) if scope else None
        except NotFoundError as exc:
            return problem(404, str(exc))
        return page("drain.html.j2", drain=data, choices=choices, last_event_id=seq,
                    scope=request.query_params.get("scope") or "")

    async def drain_fragment(request: Request) -> Response:
        scope = parse_scope(request.query_params.get("scope"))
        if scope is None:
            return problem(400, "pick a scope")
        try:
            return page("_drain.html.j2", drain=await read(drain_view, tracker(), scope, prices=settings.prices))
        except NotFoundError as exc:
            return problem(404, str(exc))

    async def drain_stop(request: Request) -> Response:
        from orchestrator.drain import request_stop

        form = await form_of(request)
        scope = parse_scope(form.get("scope"))
        if scope is None:
            return problem(400, "pick a scope to stop its drains")
        await read(request_stop, tracker(), scope, by=f"{settings.actor} (mesh serve)")
        return RedirectResponse("/drain?" + urlencode({"scope": form["scope"]}), status_code=303)

    # ------------------------------------------------------------------ a task

    async def task_view(request: Request) -> Response:
        task_id = request.path_params["task"]
        try:
            data = await read(task_page, tracker(), task_id, settings.key, prices=settings.prices)
        except NotFoundError:
            return problem(404, f"no task {task_id}")
        return page("task.html.j2", **data)

    async def task_fragment(request: Request) -> Response:
        task_id = request.path_params["task"]
        try:
            data = await read(task_status, tracker(), task_id, prices=settings.prices)
        except NotFoundError:
            return problem(404, f"no task {task_id}")
        return page("_task_status.html.j2", **data)

    async def task_events(request: Request) -> Response:
        task_id = request.path_params["task"]
        after = last_event_id(request.headers, request.query_params) or 0
        stream = task_stream(state["cards"], state["feed"], task_id, after)
        return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def retry(request: Request) -> Response:
        from orchestrator.retry import RetryRefused, retry_task

        task_id = request.path_params["task"]
        try:
            await read(retry_task, tracker(), task_id)
        except NotFoundError:
            return problem(404, f"no task {task_id}")
        except RetryRefused as exc:
            return problem(409, str(exc))
        return RedirectResponse(f"/task/{task_id}", status_code=303)

    async def review_get(request: Request) -> Response:
        task_id = request.path_params["task"]
        wait = await read(_waiting, tracker(), task_id, settings.key)
        if wait is None:
            return problem(404, f"{task_id} has no run waiting for a person's review")
        return page("review.html.j2", review=review_page(wait), error=None, actor=settings.reviewer or settings.actor)

    async def review_post(request: Request) -> Response:
        task_id = request.path_params["task"]
        form = await form_of(request)
        wait = await read(_waiting, tracker(), task_id, settings.key)
        if wait is None:
            return problem(409, f"{task_id} has no run waiting for a person's review (reviewed already?)")
        try:
            decision, summary, comments = review_from_form(form, wait)
            await read(lambda: submit_review(tracker(), task_id, decision=decision, summary=summary,
                                             comments=comments, author=form.get("reviewer") or settings.reviewer or settings.actor,
                                             key=settings.key))
        except ReviewRefused as exc:
            return page("review.html.j2", 400, review=review_page(wait), actor=settings.reviewer or settings.actor,
                        error=printable(scrub(f"review refused ({exc.field}): {exc}")))
        return RedirectResponse(f"/task/{task_id}", status_code=303)

    # ------------------------------------------------------------------ usage and logs

    async def usage(request: Request) -> Response:
        return page("usage.html.j2", usage=await read(usage_page, tracker(), settings.prices))

    async def logs(request: Request) -> Response:
        query = request.query_params.get("q") or ""
        data = await read(logs_page, tracker(), settings.prices, query=query, task=request.query_params.get("task"))
        name = "_calls.html.j2" if request.headers.get("hx-request") else "logs.html.j2"
        return page(name, logs=data)

    async def call(request: Request) -> Response:
        record = await read(call_page, tracker(), settings.prices, request.path_params["call"])
        if record is None:
            return problem(404, "no such call")
        return page("call.html.j2", call=record)

    # ------------------------------------------------------------------ streams and reports

    async def changes(request: Request) -> Response:
        after = last_event_id(request.headers, request.query_params)
        return StreamingResponse(change_stream(tracker(), state["feed"], after), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    # ------------------------------------------------------------------ evals

    async def evals(request: Request) -> Response:
        return page("evals.html.j2", evals=await read(eval_list, settings.evals))

    async def eval_view(request: Request) -> Response:
        name = request.path_params["name"]
        if not request.url.path.endswith("/"):  # the page's links to run reports are relative to the folder
            return RedirectResponse(f"/evals/{quote(name)}/", status_code=303)
        html = await read(eval_page, settings.evals, name)
        return standalone(html) if html is not None else problem(404, "no such eval")

    async def eval_run(request: Request) -> Response:
        p = request.path_params
        html = await read(run_report, settings.evals, p["name"], p["case"], p["page"])
        return standalone(html) if html is not None else problem(404, "no such run report")

    def standalone(html: str) -> HTMLResponse:
        return HTMLResponse(html, headers={"Content-Security-Policy": STANDALONE_CSP})

    async def forge_webhook(request: Request) -> Response:
        from orchestrator.landing.forge_hook import event_branch, verify

        provider, secret, sync_branch = settings.webhook
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not verify(provider, secret, headers, body):
            return PlainTextResponse("refused: the delivery does not carry the webhook's secret\n", status_code=401)
        branch = event_branch(provider, headers, body)
        if branch is None:
            return PlainTextResponse("ignored: not an event mesh waits on\n", status_code=202)
        synced = await read(sync_branch, tracker(), branch)
        return JSONResponse({"branch": branch, "synced": synced,
                             "summary": f"synced {len(synced)} scope(s) of {printable(branch, one_line=True)}"})

    async def csp_report(request: Request) -> Response:
        body = (await request.body())[:4000].decode("utf-8", "replace")
        print(printable(scrub(f"mesh serve: CSP report: {body}"), one_line=True), file=sys.stderr, flush=True)
        return Response(status_code=204)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        state["tracker"] = Tracker(settings.target, actor=settings.actor)
        feed = ChangeFeed(settings.target)
        feed.start()
        state["feed"] = feed
        state["cards"] = TaskCards(state["tracker"], settings.key, card_html)
        try:
            yield
        finally:
            feed.stop()
            state["tracker"].close()

    writes = [] if settings.read_only else [
        Route("/task/{task}/review", review_post, methods=["POST"]),
        Route("/task/{task}/retry", retry, methods=["POST"]),
        Route("/drain/stop", drain_stop, methods=["POST"]),
    ]
    routes = [
        Route("/", board_page),
        Route("/board/fragment", board_fragment),
        Route("/drain", drain_page),
        Route("/drain/fragment", drain_fragment),
        Route("/task/{task}", task_view),
        Route("/task/{task}/status", task_fragment),
        Route("/task/{task}/review", review_get),
        Route("/events/task/{task}", task_events),
        Route("/events/changes", changes),
        Route("/usage", usage),
        Route("/evals", evals),
        Route("/evals/{name}", eval_view),
        Route("/evals/{name}/", eval_view),
        Route("/evals/{name}/runs/{case}/{page}", eval_run),
        Route("/logs", logs),
        Route("/logs/{call:int}", call),
        Route("/csp-report", csp_report, methods=["POST"]),
        *writes,
        *([Route(WEBHOOK, forge_webhook, methods=["POST"])] if settings.webhook else []),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    guard = Guard(host=settings.host, port=settings.port, token=settings.token, read_only=settings.read_only,
                  webhook=settings.webhook is not None)
    return _Guarded(app, guard)


def _waiting(tracker: Tracker, task_id: str, key: bytes | None) -> Any:
    try:
        return waiting_review(tracker, task_id, key)
    except (NotFoundError, TrackerError):
        return None
