"""Issue 34, item 5: workers reach only the hosts they need. Real connections from a real worker
in its sandbox (bwrap, pasta) to an allowed and a refused host, both on loopback addresses of
this machine (127.0.0.2 and 127.0.0.3: the tests never reach beyond loopback)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.sandbox import egress
from orchestrator.sandbox.bwrap import require_bwrap
from orchestrator.sandbox.worker_sandbox import network_problem, worker_launcher
from roles.backends import CommandBackend, WorkerRequest
from roles.prompts import Prompt

WORKER = r'''
import json, os, socket, sys, urllib.request, urllib.error
order = json.loads(sys.stdin.read())
out = {"env_proxy": os.environ.get("HTTPS_PROXY")}
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return None, str(exc)
out["allowed"] = fetch(order["allowed"])
out["refused"] = fetch(order["refused"])
# Around the proxy, straight to each host.
for name, (host, port) in order["direct"].items():
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, port))
        s.sendall(b"GET /direct HTTP/1.0\r\n\r\n")
        out[name] = "reached: " + s.recv(100).decode(errors="replace")
    except OSError as exc:
        out[name] = "error: " + (exc.strerror or str(exc))
# A tunnel (as HTTPS clients use) to each.
proxy_port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
for name, target in order["tunnel"].items():
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    reply = ""
    while "\r\n\r\n" not in reply and (chunk := s.recv(4096)):
        reply += chunk.decode(errors="replace")
    if " 200 " in reply.split("\r\n")[0]:
        s.sendall(b"GET /tunnel HTTP/1.0\r\n\r\n")
        while chunk := s.recv(4096):  # HTTP/1.0: the server closes after its answer
            reply += chunk.decode(errors="replace")
    out[name] = reply
print(json.dumps(out))
'''


class _Hits(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.server.hits.append(self.path)
        body = f"hello from {self.server.server_address[0]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def hosts():
    servers = []
    for address in ("127.0.0.2", "127.0.0.3"):
        server = http.server.ThreadingHTTPServer((address, 0), _Hits)
        server.hits = []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def _ask(tmp_path: Path, order: dict, egress_hosts: list[str]) -> tuple[dict, str]:
    bwrap = require_bwrap()
    if network_problem(bwrap):
        pytest.skip(f"no network namespace for workers here: {network_problem(bwrap)}")
    program = tmp_path / "bin" / "worker"
    program.parent.mkdir(exist_ok=True)
    program.write_text(f"#!{sys.executable}\n{WORKER}")
    program.chmod(0o755)
    launcher = worker_launcher(bwrap, private_root=tmp_path / "homes", network="isolated", egress_hosts=egress_hosts)
    backend = CommandBackend(str(program), 120, launcher=launcher)
    response = backend.call(WorkerRequest(role="proposer", round="proposal", task_id="t-1", run_id="r", attempt=1,
                                          prompt=Prompt(json.dumps(order), "")))
    assert response.text, response.detail
    return json.loads(response.text), response.detail or ""


def test_a_worker_reaches_an_allowed_host_and_no_other(tmp_path, hosts):
    allowed, refused = hosts
    a, r = allowed.server_address, refused.server_address
    order = {"allowed": f"http://{a[0]}:{a[1]}/via-proxy", "refused": f"http://{r[0]}:{r[1]}/via-proxy",
             "direct": {"direct_allowed": list(a), "direct_refused": list(r)},
             "tunnel": {"tunnel_allowed": f"{a[0]}:{a[1]}", "tunnel_refused": f"{r[0]}:{r[1]}"}}
    out, detail = _ask(tmp_path, order, [f"{a[0]}:{a[1]}"])
    assert out["allowed"] == [200, "hello from 127.0.0.2"]
    assert out["refused"][0] == 403 and "not among the hosts this worker may reach" in out["refused"][1]
    assert "hello from 127.0.0.2" in out["tunnel_allowed"]
    assert out["tunnel_refused"].startswith("HTTP/1.1 403")
    # Around the proxy there is no route: neither host is reached straight.
    assert out["direct_allowed"].startswith("error: ") and out["direct_refused"].startswith("error: ")
    assert allowed.hits == ["/via-proxy", "/tunnel"]
    assert refused.hits == []
    # The call's detail (the calls log, a failed call's line) names what was refused, and how to allow it.
    assert f"mesh egress: refused {r[0]}:{r[1]}" in detail and "worker_egress" in detail


def test_the_preflight_line_says_what_workers_may_reach(tmp_path, hosts):
    from orchestrator.sandbox.worker_sandbox import egress_note

    assert "every host" in egress_note(["*"])
    assert "model APIs" in egress_note([]) and "pypi.org" in egress_note(["pypi.org"])


def test_a_name_that_resolves_to_this_machine_is_refused_unless_named_as_an_address(hosts, monkeypatch):
    allowed, _ = hosts
    port = allowed.server_address[1]
    monkeypatch.setattr(egress, "_resolve",
                        lambda host, port, **kw: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.2", port))])
    proxy = egress.EgressProxy(egress.Allowlist([f"rebind.example:{port}"]))
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            client.sendall(f"CONNECT rebind.example:{port} HTTP/1.1\r\n\r\n".encode())
            reply = client.recv(4096).decode()
        assert reply.startswith("HTTP/1.1 403") and "resolves to an address of this machine" in reply
        assert allowed.hits == []
    finally:
        proxy.close()


def test_the_allowlist_of_a_call():
    listed = egress.allowlist_for("claude", {"ANTHROPIC_BASE_URL": "https://gateway.example:8443/v1",
                                             "LOCAL": "http://127.0.0.1:9999"}, ["*.pypi.org", "files.example"])
    assert listed.allows("api.anthropic.com", 443) and not listed.allows("api.anthropic.com", 22)
    assert listed.allows("gateway.example", 8443) and not listed.allows("gateway.example", 443)
    assert listed.allows("files.pypi.org", 443) and not listed.allows("pypi.org.evil.example", 443)
    assert listed.allows("files.example", 80) and not listed.allows("github.com", 443)
    assert not listed.allows("127.0.0.1", 9999)  # loopback endpoints are forwarded, not proxied
    assert egress.allowlist_for("worker", {}, []).entries == ()
    assert egress.Allowlist(["*"]).everything
