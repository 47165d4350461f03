"""Issue 29, item 5: ``mesh serve`` reads no request body beyond its limit, and ``/csp-report``
takes only reports of its own pages. Each attack is sent to the real server (a process of its
own) and the server's peak memory (``VmHWM``, read from /proc) is checked afterwards; one is
sent by a real Chromium page of another origin."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path

from tests.runkit import TASK, make_workspace
from tests.servekit import Server, needs_chromium, open_browser, other_site

MB = 1 << 20


def _peak_mb(server: Server) -> int:
    """The server's peak resident memory so far, in MiB."""
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) >> 10


def _send(server: Server, path: str, headers: dict[str, str], total_mb: int, *, chunked: bool) -> int | None:
    """POST ``total_mb`` of zeros, as fast as the server takes them; the status it answered
    (None when it closed the connection without one)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    chunk = b"\0" * MB
    try:
        conn.putrequest("POST", path)
        for name, value in headers.items():
            conn.putheader(name, value)
        if chunked:
            conn.putheader("Transfer-Encoding", "chunked")
        else:
            conn.putheader("Content-Length", str(total_mb * MB))
        conn.endheaders()
        try:
            for _ in range(total_mb):
                conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed: the rest is never read
        try:
            return conn.getresponse().status
        except (OSError, http.client.HTTPException):
            return None
    finally:
        conn.close()


def _status(server: Server, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> int:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        conn.request(method, path, body=body or None, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_huge_body_is_never_read_and_memory_stays_bounded(tmp_path):
    ws = make_workspace(tmp_path)
    server = Server(ws)
    same = {"Sec-Fetch-Site": "same-origin", "Content-Type": "application/csp-report"}
    try:
        before = _peak_mb(server)
        # Announced: refused before a byte is read.
        assert _send(server, "/csp-report", same, 400, chunked=False) == 413
        # Streamed without a length (chunked): counted as it comes, refused past 16 KiB.
        assert _send(server, "/csp-report", same, 200, chunked=True) in (413, None)
        # A form past 1 MiB, both ways, on a route that reads one.
        assert _send(server, f"/task/{TASK}/review", {"Origin": server.base}, 64, chunked=True) in (413, None)
        assert _send(server, f"/task/{TASK}/review", {"Origin": server.base}, 64, chunked=False) == 413
        assert _peak_mb(server) - before < 48, (before, _peak_mb(server))
        # The server still answers, and a report of its own page within the limit is taken.
        assert _status(server, "GET", "/", {}) == 200
        assert _status(server, "POST", "/csp-report", same, b'{"csp-report": {"blocked-uri": "inline"}}') == 204
    finally:
        server.stop()
    assert any("CSP report" in line and "blocked-uri" in line for line in server.lines)


def test_a_report_from_another_origin_is_refused(tmp_path):
    ws = make_workspace(tmp_path)
    server = Server(ws)
    try:
        body = b'{"csp-report": {"blocked-uri": "forged"}}'
        for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}, {}):
            assert _status(server, "POST", "/csp-report", headers, body) == 403, headers
    finally:
        server.stop()
    assert not any("forged" in line for line in server.lines)


def _flood_page(target: str) -> str:
    """A page of another site whose script posts 200 MB to the server's report endpoint, then a
    small forged report."""
    script = (f"const big = new Blob([new Uint8Array({200 * MB})]);"
              f"fetch('{target}', {{method: 'POST', mode: 'no-cors', body: big}})"
              ".catch(() => null).then(() => fetch("
              f"'{target}', {{method: 'POST', mode: 'no-cors', body: '{{\"csp-report\": \"forged\"}}'}}))"
              ".catch(() => null).then(() => {document.title = 'done';});")
    return f"<!DOCTYPE html><title>flood</title><script>{script}</script>"


@needs_chromium
def test_a_page_of_another_origin_cannot_flood_the_report_endpoint(tmp_path):
    ws = make_workspace(tmp_path)
    server = Server(ws)
    evil = other_site(_flood_page(f"{server.base}/csp-report"))
    browser = open_browser(tmp_path)
    try:
        before = _peak_mb(server)
        browser.goto(f"http://127.0.0.1:{evil.server_port}/")
        browser.wait_for("document.title === 'done'")
        assert _peak_mb(server) - before < 48, (before, _peak_mb(server))
        with socket.create_connection((server.host, server.port), timeout=30):
            pass  # still listening
    finally:
        browser.close()
        evil.shutdown()
        server.stop()
    assert not any("CSP report" in line for line in server.lines), server.lines
