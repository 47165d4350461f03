"""Issue 43, item 6: mesh's egress proxy lets a request through only under the name it was asked
for. Real sockets, all on loopback: an upstream server the allowlist names, the proxy, a client
sending a mismatched ``Host`` header, a ``CONNECT`` whose TLS ClientHello (made by Python's ssl
module) names another server, and the same with matching names as controls."""

from __future__ import annotations

import random
import socket
import socketserver
import ssl
import threading
import time

import pytest

from orchestrator.sandbox import egress


class _Recorder(socketserver.BaseRequestHandler):
    """Keeps every byte a connection brings; answers a plain request's head with ``200 ok``."""

    def handle(self) -> None:
        got = b""
        self.request.settimeout(3)
        try:
            while chunk := self.request.recv(65536):
                got += chunk
                if got[:1].isalpha() and b"\r\n\r\n" in got:
                    self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    break
        except OSError:
            pass
        self.server.seen.append(got)


@pytest.fixture
def upstream():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Recorder)
    server.daemon_threads = True
    server.seen = []
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(upstream):
    port = upstream.server_address[1]
    made = egress.EgressProxy(egress.Allowlist([f"127.0.0.1:{port}", f"localhost:{port}"]))
    yield made
    made.close()


def _seen(server, count: int) -> list[bytes]:
    """What the upstream's connections brought, once ``count`` of them ended."""
    deadline = time.monotonic() + 10
    while len(server.seen) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)  # and no other one came
    return list(server.seen)


def _ask(proxy, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
        client.sendall(data)
        reply = b""
        while chunk := client.recv(65536):
            reply += chunk
        return reply


def _tunnel(proxy, target: str) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += client.recv(1)
    assert reply.startswith(b"HTTP/1.1 200 "), reply
    return client


def _client_hello(name: str | None) -> bytes:
    """The first flight of Python's TLS client asking for ``name`` (SNI)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    if name is None:
        context.check_hostname = False
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _closed(client: socket.socket) -> bool:
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True


# ---------------------------------------------------------------- plain requests: Host against the URL


@pytest.mark.parametrize("headers", [
    "Host: other.example",
    "Host: 127.0.0.1:1",  # another port
    "Host: 127.0.0.1:{port}\r\nhost: other.example",  # two of them, the second another host
    "Host: 127.0.0.1:{port}\r\n other.example",  # a folded line a server may join
])
def test_a_plain_request_naming_another_host_is_refused_and_never_sent(upstream, proxy, headers):
    port = upstream.server_address[1]
    head = headers.format(port=port)
    reply = _ask(proxy, f"GET http://127.0.0.1:{port}/secret HTTP/1.1\r\n{head}\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 403 ") and f"not 127.0.0.1:{port} the request is for".encode() in reply, reply
    assert b"mesh egress: " in reply
    assert _seen(upstream, 0) == []  # the upstream never even got a connection
    assert proxy.refused and f"127.0.0.1:{port}" in proxy.refused[-1]


def test_a_bare_line_feed_smuggling_a_host_header_is_refused(upstream, proxy):
    port = upstream.server_address[1]
    reply = _ask(proxy, f"GET http://127.0.0.1:{port}/ HTTP/1.1\nHost: other.example\n\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert _seen(upstream, 0) == []


def test_a_plain_request_naming_its_own_host_goes_through(upstream, proxy):
    port = upstream.server_address[1]
    for host in (f"127.0.0.1:{port}", f"LOCALHOST.:{port}"):
        target = "127.0.0.1" if host.startswith("127") else "localhost"
        reply = _ask(proxy, f"GET http://{target}:{port}/fine HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert reply.startswith(b"HTTP/1.0 200 ") and reply.endswith(b"ok"), reply
    reply = _ask(proxy, f"GET http://127.0.0.1:{port}/no-host HTTP/1.0\r\n\r\n".encode())  # HTTP/1.0: none
    assert reply.startswith(b"HTTP/1.0 200 ")
    seen = _seen(upstream, 3)
    assert sorted(got.split(b"\r\n", 1)[0] for got in seen) == [b"GET /fine HTTP/1.1", b"GET /fine HTTP/1.1",
                                                                b"GET /no-host HTTP/1.0"]
    assert proxy.refused == []


# ---------------------------------------------------------------- tunnels: CONNECT, the SNI, a tunnelled Host


def test_a_connect_whose_host_header_names_another_host_is_refused(upstream, proxy):
    port = upstream.server_address[1]
    reply = _ask(proxy, f"CONNECT localhost:{port} HTTP/1.1\r\nHost: other.example:{port}\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 403 ") and b"other.example" in reply
    assert _seen(upstream, 0) == []


def test_a_tls_client_asking_for_another_server_is_cut_off_and_the_upstream_gets_nothing(upstream, proxy):
    port = upstream.server_address[1]
    # Python's own TLS client, through the tunnel, naming another server than the CONNECT did.
    raw = _tunnel(proxy, f"localhost:{port}")
    context = ssl.create_default_context()
    with pytest.raises((ssl.SSLError, OSError)):
        context.wrap_socket(raw, server_hostname="other.example", do_handshake_on_connect=True)
    raw.close()
    # The same by hand, split over two records and two sends (as a client may), and a trailing
    # dot or case change does not hide a third name.
    for name in ("other.example", "localhost.evil.example", "Other.Example."):
        hello = _client_hello(name)
        body = hello[5:]
        records = b"".join(b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part for part in (body[:40], body[40:]))
        with _tunnel(proxy, f"localhost:{port}") as client:
            client.sendall(records[:30])
            time.sleep(0.2)
            client.sendall(records[30:])
            assert _closed(client)
    assert _seen(upstream, 4) == [b""] * 4  # connections made before the 200, never a byte through
    assert sum("(named in a tunnel to localhost:" in entry for entry in proxy.refused) == 4
    assert any(entry.startswith("other.example ") for entry in proxy.refused)


def test_a_tls_client_asking_for_the_tunnels_host_goes_through_unchanged(upstream, proxy):
    port = upstream.server_address[1]
    sent = []
    for target, name in ((f"localhost:{port}", "LocalHost."), (f"127.0.0.1:{port}", None)):  # an address: no SNI
        hello = _client_hello(name)
        sent.append(hello)
        with _tunnel(proxy, target) as client:
            client.sendall(hello)
            client.shutdown(socket.SHUT_WR)
            while client.recv(4096):
                pass
    # The upstream may note a connection after the client saw the next one start: order apart.
    assert sorted(_seen(upstream, 2)) == sorted(sent)
    assert proxy.refused == []


def test_a_tunnelled_plain_request_naming_another_host_gets_403_and_is_never_sent(upstream, proxy):
    port = upstream.server_address[1]
    for head in ("Host: other.example", f"Host: localhost:{port}\r\nHost: other.example", "HOST:other.example"):
        with _tunnel(proxy, f"localhost:{port}") as client:
            client.sendall(f"GET /secret HTTP/1.1\r\n{head}\r\n\r\n".encode())
            reply = b""
            while chunk := client.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 403 ") and f"not localhost:{port} this tunnel is for".encode() in reply
    # Control: its own name (any case, a trailing dot, no port) and no Host at all.
    for head in (f"Host: localhost:{port}", "Host: LOCALHOST.", ""):
        with _tunnel(proxy, f"localhost:{port}") as client:
            client.sendall(f"GET /fine HTTP/1.1\r\n{head}\r\n\r\n".replace("\r\n\r\n\r\n", "\r\n\r\n").encode())
            reply = b""
            while chunk := client.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.0 200 ") and reply.endswith(b"ok"), reply
    seen = _seen(upstream, 6)
    assert sum(got == b"" for got in seen) == 3
    assert sum(got.startswith(b"GET /fine ") for got in seen) == 3 and not any(b"/secret" in got for got in seen)


def test_a_client_hello_sent_too_slowly_to_check_is_refused(upstream, proxy, monkeypatch):
    monkeypatch.setattr(egress, "_CONNECT_TIMEOUT_S", 1.0)
    port = upstream.server_address[1]
    hello = _client_hello("other.example")
    with _tunnel(proxy, f"localhost:{port}") as client:
        client.sendall(hello[:20])
        # The rest is held back until the proxy has given up on it (by its clock, not the test's):
        # it closes the tunnel, and the rest, naming another host, never goes through unread.
        assert _closed(client)
        try:
            client.sendall(hello[20:])
        except OSError:
            pass
    assert _seen(upstream, 1) == [b""]
    assert proxy.refused[-1].startswith(f"localhost:{port} (") and "could not be checked" in proxy.refused[-1]


def test_other_protocols_and_malformed_hellos_pass_unchanged(upstream, proxy):
    port = upstream.server_address[1]
    hello = _client_hello("other.example")
    broken = hello[:5] + b"\x01\x00\x00\x03abc" + hello[12:]  # a handshake that claims 3 bytes
    broken = broken[:3] + (len(broken) - 5).to_bytes(2, "big") + broken[5:]
    sent = [b"SSH-2.0-OpenSSH_9.6\r\n", broken]
    for data in sent:
        with _tunnel(proxy, f"localhost:{port}") as client:
            client.sendall(data)
            client.shutdown(socket.SHUT_WR)
            while client.recv(4096):
                pass
    assert sorted(_seen(upstream, 2)) == sorted(sent)  # each passed unchanged, in whichever order noted


def test_the_client_hello_reader_never_raises_on_cut_or_damaged_input():
    hello = _client_hello("api.example")
    assert egress._client_hello_names(hello) == ["api.example"]
    assert all(egress._client_hello_names(hello[:cut]) is None for cut in range(len(hello)))
    chance = random.Random(43)
    for _ in range(5000):
        damaged = bytearray(hello)
        for _ in range(chance.randint(1, 8)):
            damaged[chance.randrange(len(damaged))] = chance.randrange(256)
        found = egress._client_hello_names(bytes(damaged[:chance.randrange(1, len(damaged) + 1)]))
        assert found is None or isinstance(found, list)
    assert egress._client_hello_names(b"\x16\x03\x01\x00\x00" * 10) is None  # empty records: wait for more


def test_names_are_compared_normalised():
    normal = egress._normal_host
    assert normal("API.Example.") == normal("api.example") == "api.example"
    assert normal("bücher.example") == normal("xn--bcher-kva.example")
    assert normal("[::1]") == normal("0:0::1") == "::1"
    assert egress._host_problem(["Host: [::1]:8080"], "::1", 8080, 80) is None
    assert egress._host_problem(["Host: ::1"], "::1", 8080, 80) is not None
