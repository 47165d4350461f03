"""``mesh serve``'s guard, attacked for real: tokens, cross-site forms, rebinding, read-only.

127.0.0.2 stands for a non-loopback-default address (the rule: any address but 127.0.0.1 needs
a token). Requests go to the real server over HTTP; the cross-site attack is a real page of
another origin, opened in headless Chromium, whose form posts to the server with the person's
cookie; the outcome checked is the task's state in the tracker.
"""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

from tests.runkit import TASK, make_workspace
from tests.servekit import Server, needs_chromium, open_browser, other_site

TOKEN = "t0ken-for-the-test-0123456789abcdef"


def _request(server: Server, method: str, path: str, headers: dict | None = None, body: str = "") -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        conn.request(method, path, body=body.encode() if body else None, headers=headers or {})
        response = conn.getresponse()
        response.read(200)  # a stream answers forever: its status and headers are enough
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


def _block(ws) -> None:
    with ws.tracker() as t:
        t.update(TASK, status="blocked")


def _status(ws) -> str:
    with ws.tracker() as t:
        return t.get(TASK)["status"]


def test_a_non_loopback_bind_refuses_every_request_without_the_token(tmp_path):
    ws = make_workspace(tmp_path)
    server = Server(ws, "--token", TOKEN, host="127.0.0.2")
    try:
        for path in ("/", f"/task/{TASK}", "/events/changes", "/logs", "/static/mesh.js"):
            assert _request(server, "GET", path)[0] == 401, path
            assert _request(server, "GET", path, {"Authorization": "Bearer wrong"})[0] == 401, path
            assert _request(server, "GET", path, {"Cookie": "mesh_token=wrong"})[0] == 401, path
        assert _request(server, "GET", "/?token=wrong")[0] == 401
        assert _request(server, "GET", "/", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        status, headers = _request(server, "GET", f"/task/{TASK}?token={TOKEN}")
        assert status == 303 and headers["location"] == f"/task/{TASK}"  # the token leaves the address
        assert "httponly" in headers["set-cookie"].lower() and "samesite=strict" in headers["set-cookie"].lower()
        assert _request(server, "GET", f"/task/{TASK}", {"Cookie": f"mesh_token={TOKEN}"})[0] == 200
        # A write with the token still needs to come from a page of the server.
        _block(ws)
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-www-form-urlencoded"}
        assert _request(server, "POST", f"/task/{TASK}/retry", auth)[0] == 403
        assert _request(server, "POST", f"/task/{TASK}/retry", {**auth, "Origin": "http://evil.example"})[0] == 403
        assert _request(server, "POST", f"/task/{TASK}/retry", {**auth, "Sec-Fetch-Site": "same-site"})[0] == 403
        assert _status(ws) == "blocked"
        assert _request(server, "POST", f"/task/{TASK}/retry", {"Origin": server.base})[0] == 401
        assert _status(ws) == "blocked"
        assert _request(server, "POST", f"/task/{TASK}/retry", {**auth, "Origin": server.base})[0] == 303
        assert _status(ws) == "open"
    finally:
        server.stop()


def test_a_token_is_generated_and_printed_when_none_is_given(tmp_path):
    ws = make_workspace(tmp_path)
    server = Server(ws, host="127.0.0.2")
    try:
        query = urlsplit(server.url).query
        assert query.startswith("token=") and len(query) > 30
        assert _request(server, "GET", "/")[0] == 401
        assert _request(server, "GET", "/", {"Authorization": f"Bearer {query[6:]}"})[0] == 200
    finally:
        server.stop()


def test_on_loopback_a_rebound_name_and_a_cross_site_write_are_refused(tmp_path):
    ws = make_workspace(tmp_path)
    server = Server(ws)
    try:
        assert urlsplit(server.url).query == ""  # 127.0.0.1: no token
        assert _request(server, "GET", "/", {"Host": f"evil.example:{server.port}"})[0] == 421
        assert _request(server, "GET", "/", {"Host": f"localhost:{server.port}"})[0] == 200
        _block(ws)
        assert _request(server, "POST", f"/task/{TASK}/retry")[0] == 403
        assert _status(ws) == "blocked"
    finally:
        server.stop()


def test_read_only_serves_no_write_action(tmp_path):
    ws = make_workspace(tmp_path)
    _block(ws)
    server = Server(ws, "--read-only")
    try:
        html_status, _ = _request(server, "GET", f"/task/{TASK}")
        assert html_status == 200
        for path in (f"/task/{TASK}/retry", f"/task/{TASK}/review", "/drain/stop"):
            assert _request(server, "POST", path, {"Origin": server.base})[0] == 403, path
        assert _status(ws) == "blocked"
        page = http.client.HTTPConnection(server.host, server.port, timeout=30)
        page.request("GET", f"/task/{TASK}")
        text = page.getresponse().read().decode()
        page.close()
        assert "<form" not in text and "read-only" in text
    finally:
        server.stop()


@needs_chromium
def test_a_page_of_another_origin_cannot_retry_a_task_through_the_persons_browser(tmp_path):
    ws = make_workspace(tmp_path)
    _block(ws)
    server = Server(ws)
    target = f"{server.base}/task/{TASK}/retry"
    evil = other_site(f'<!DOCTYPE html><form id="f" method="post" action="{target}">'
                      '<button id="go">win</button></form>')
    browser = open_browser(tmp_path)
    try:
        browser.goto(f"{server.base}/task/{TASK}")  # the person has the server open: same browser
        browser.goto(f"http://127.0.0.1:{evil.server_port}/")
        browser.js("document.getElementById('go').click()")
        browser.wait_for("location.port === " + repr(str(server.port)))
        assert "refused" in browser.js("document.body.innerText")
        assert _status(ws) == "blocked"
        # The same button on the server's own page works.
        browser.goto(f"{server.base}/task/{TASK}")
        browser.js("document.getElementById('retry').click()")
        browser.wait_for("document.querySelector('#status .badge') && "
                         "document.querySelector('#status .badge').textContent === 'open'")
        assert _status(ws) == "open"
    finally:
        browser.close()
        evil.shutdown()
        server.stop()
