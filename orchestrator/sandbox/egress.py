"""The workers' egress: the hosts a command worker may reach, enforced outside its control.

A worker runs in a network namespace of its own (``worker_sandbox``, pasta) that has **no
route out**: pasta only forwards chosen loopback ports of the namespace to the host's
loopback. One of them leads to an ``EgressProxy``, an HTTP(S) proxy in mesh's own process on
the host's loopback, and the worker is given ``HTTPS_PROXY`` / ``HTTP_PROXY`` naming it. The
proxy lets a connection through (``CONNECT host:port``, or a plain HTTP request with an
absolute URL) only to a host of the call's ``Allowlist``; anything else gets ``403`` and a
line saying why. A worker that ignores the proxy variables reaches nothing: there is no route.

What is allowed by default: the model API hosts of the preset's CLI (``PRESET_HOSTS``), the
hosts of the URLs in the variables the worker is passed (its own ``*_BASE_URL``), and what
the user lists in ``worker_egress`` (``*`` restores the whole internet, announced). A name
that resolves to a loopback, private, link-local or otherwise special address is refused
unless the allowlist names that address itself (DNS rebinding onto the host's own services).

**The name a request carries must be the one it was let through for** (an allowed host's server
may serve other sites too: a CDN's, a shared host's). A plain request whose ``Host`` header names
another host or port than its URL, or that has more than one, gets ``403``; so does a ``CONNECT``
whose ``Host`` header names another host (or port, when it names one). In a tunnel, what the
client sends first is read (``_opening``: at most ``_OPENING_LIMIT`` bytes and
``_CONNECT_TIMEOUT_S``) before anything is forwarded: a TLS ClientHello whose server name (SNI)
is another host closes both sides, and a plaintext request whose ``Host`` header is another host
gets ``403``. When a bound is reached before a whole ClientHello or request head (or anything)
came, the tunnel is refused alike; one the client cut short by closing its side, or that is
malformed, counts as naming no host, and so does whatever is neither TLS nor HTTP. Names are
compared in lower case, IDNA form, without a trailing dot or IPv6 brackets. A request head with a
bare CR or LF, or a folded header line, is refused. Not seen: the later requests of a kept-alive
plaintext connection (and cleartext HTTP/2's), a protocol whose server speaks first (reading stops
there: SMTP's STARTTLS), and anything inside TLS, where the HTTP ``Host`` a CDN may route by
(domain fronting) is encrypted.

This module may import only the standard library.
"""

from __future__ import annotations

import ipaddress
import re
import select
import socket
import socketserver
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

__all__ = ["Allowlist", "EgressProxy", "PRESET_HOSTS", "allowlist_for", "is_loopback", "proxy_env", "url_hosts"]

# What each agent CLI preset needs to answer: its model APIs (and login refresh), nothing else
# (their telemetry and update checks are off or fail harmlessly).
PRESET_HOSTS: dict[str, tuple[str, ...]] = {
    "claude": ("api.anthropic.com",),
    "codex": ("api.openai.com", "chatgpt.com", "auth.openai.com"),
    "opencode": ("api.anthropic.com", "api.openai.com", "models.dev"),
}
_DEFAULT_PORTS = frozenset({80, 443})
_HEAD_LIMIT = 16384
_OPENING_LIMIT = 65536  # what a tunnel's first bytes may take before they can be checked
_VERSION = re.compile(r"HTTP/[0-9]\.[0-9]")
_METHOD = re.compile(rb"[A-Za-z]{1,16}")
# A request line as lenient servers read one (any case, tabs and runs of blanks between its words).
_REQUEST_LINE = re.compile(rb"[A-Za-z]{1,16}[ \t][^\r\n]*HTTP/[0-9]", re.IGNORECASE)
_BLANK_LINE = re.compile(rb"\n\r?\n")
_CONNECT_TIMEOUT_S = 20.0
_IDLE_TIMEOUT_S = 600.0
_MAX_CONNECTIONS = 64
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
_resolve = socket.getaddrinfo  # the proxy's resolver (a test puts a rebinding one in its place)


def _host_port(entry: str) -> tuple[str, int | None]:
    entry = entry.strip().lower()
    if entry.startswith("["):  # [::1]:8080
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host, int(port)
    return entry, None


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class Allowlist:
    """Hosts a worker may reach: ``host`` (ports 80 and 443), ``host:port``, ``*.suffix`` (any
    name below it), ``*`` (everything: no proxy at all)."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.entries = tuple(dict.fromkeys(entry.strip().lower() for entry in entries if entry.strip()))
        self.everything = "*" in self.entries
        self._rules = [_host_port(entry) for entry in self.entries if entry != "*"]

    def __bool__(self) -> bool:
        return bool(self.entries)

    def allows(self, host: str, port: int) -> bool:
        """True when ``host:port`` is on the list."""
        host = host.strip().lower().rstrip(".")
        if self.everything:
            return True
        for rule, rule_port in self._rules:
            ports = {rule_port} if rule_port is not None else _DEFAULT_PORTS
            if port not in ports:
                continue
            if rule == host or (rule.startswith("*.") and host.endswith(rule[1:]) and len(host) > len(rule) - 1):
                return True
        return False

    def names_address(self, host: str) -> bool:
        """True when the list names ``host`` as an address (or ``localhost``) itself: then it may
        resolve to a loopback or private address."""
        host = host.strip().lower()
        return any(rule == host for rule, _ in self._rules) and (_literal(host) or host in _LOOPBACK_NAMES)


def url_hosts(env: Mapping[str, str]) -> list[tuple[str, int | None, str]]:
    """(host, port or None, scheme) of every URL value in ``env``."""
    found = []
    for value in env.values():
        if "://" not in value:
            continue
        try:
            parts = urlsplit(value.strip())
            host, port = parts.hostname, parts.port
        except ValueError:
            continue
        if host:
            found.append((host, port, parts.scheme))
    return found


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and the loopback addresses."""
    host = host.strip("[]").lower()
    return host in _LOOPBACK_NAMES or (_literal(host) and ipaddress.ip_address(host).is_loopback)


def allowlist_for(program: str, env: Mapping[str, str], configured: Sequence[str]) -> Allowlist:
    """The allowlist of one call: the preset's hosts, the hosts of URLs in its environment, and
    ``configured`` (``worker_egress``)."""
    entries: list[str] = list(PRESET_HOSTS.get(program, ()))
    entries += [f"{host}:{port}" if port else host for host, port, _ in url_hosts(env) if not is_loopback(host)]
    return Allowlist([*entries, *configured])


def _special(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_unspecified
            or ip.is_reserved or getattr(ip, "ipv4_mapped", None) is not None)


class _Handler(socketserver.BaseRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        client: socket.socket = self.request
        client.settimeout(_CONNECT_TIMEOUT_S)
        if not self.server.slots.acquire(blocking=False):
            self._refuse(client, 503, "too many connections through mesh's egress proxy")
            return
        try:
            self._serve(client)
        except OSError:
            pass
        finally:
            self.server.slots.release()

    def _serve(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                return
            head += chunk
            if len(head) > _HEAD_LIMIT:
                self._refuse(client, 431, "request head too large")
                return
        head, _, rest = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        words = lines[0].split(" ")
        if len(words) != 3 or not _VERSION.fullmatch(words[2]) or any("\r" in line or "\n" in line for line in lines):
            self._refuse(client, 400, "not an HTTP request (or a bare CR or LF in its head)")
            return
        method, target, version = words
        tunnel = method.upper() == "CONNECT"
        if tunnel:
            host, port = _host_port(target)
            forward, default = rest, None  # a tunnel's Host header names the port, or its port is not compared
        else:
            try:
                parts = urlsplit(target)
                host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError:
                host, port = "", None
            if not host or parts.scheme not in ("http", "https"):
                self._refuse(client, 400, "a proxy request needs an absolute http:// URL")
                return
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            forward = "\r\n".join([f"{method} {path} {version}", *lines[1:]]).encode("latin-1") + b"\r\n\r\n" + rest
            default = 443 if parts.scheme == "https" else 80
        if port is None or not self.server.allowlist.allows(host, port):
            self.server.note_refused(f"{host}:{port}")
            self._refuse(client, 403, f"{host}:{port} is not among the hosts this worker may reach (worker_egress)")
            return
        named = _host_problem(lines[1:], host, port, default)
        if named is not None:
            self.server.note_refused(_noted(named, "a request", host, port))
            self._refuse(client, 403, f"{named[1]}, not {host}:{port} the request is for")
            return
        upstream = self._connect(client, host, port)
        if upstream is None:
            return
        with upstream:
            if tunnel:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                forward, cut = _opening(client, upstream, forward)
                if not self._opening_matches(client, forward, cut, host, port):
                    return  # both sides closed, nothing forwarded
            if forward:
                upstream.sendall(forward)
            _pipe(client, upstream)

    def _opening_matches(self, client: socket.socket, opening: bytes, cut: bool, host: str, port: int) -> bool:
        """True when what a tunnel's client sent first (``_opening``) names the tunnel's host (a TLS
        ClientHello's server name, a plaintext request's Host header) or names none; False when it
        names another, or was ``cut`` before it could be checked: then it is noted as refused and
        the client is sent a 403 when it speaks plain HTTP (a TLS client just sees the close)."""
        kind = _opening_kind(opening)
        named: tuple[str, str] | None = None  # (the host it names, why it is refused)
        if cut:
            named = ("", f"what came first through this tunnel was not whole within {_OPENING_LIMIT} bytes and"
                         f" {_CONNECT_TIMEOUT_S:g}s, and could not be checked")
        elif kind == "tls":
            other = next((name for name in _client_hello_names(opening) or []
                          if _normal_host(name) != _normal_host(host)), None)
            named = None if other is None else (other, f"the TLS server name is {other[:200]!r}")
        elif kind == "http" and _opening_whole(opening):
            head = opening[:_head_end(opening)].decode("latin-1").split("\r\n")
            named = (("", "a bare CR or LF in the request head") if any("\r" in line or "\n" in line for line in head)
                     else _host_problem(head[1:], host, port, None))
        if named is None:
            return True
        self.server.note_refused(_noted(named, "a tunnel", host, port))
        if kind == "http":
            self._refuse(client, 403, f"{named[1]}, not {host}:{port} this tunnel is for")
        return False

    def _connect(self, client: socket.socket, host: str, port: int) -> socket.socket | None:
        try:
            found = _resolve(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            self._refuse(client, 502, f"cannot resolve {host}")
            return None
        addresses = [info for info in found
                     if self.server.allowlist.names_address(host) or not _special(info[4][0])]
        if not addresses:
            self.server.note_refused(f"{host}:{port}")
            self._refuse(client, 403, f"{host} resolves to an address of this machine or a private network")
            return None
        for family, kind, proto, _name, address in addresses:
            upstream = socket.socket(family, kind, proto)
            upstream.settimeout(_CONNECT_TIMEOUT_S)
            try:
                upstream.connect(address)
                return upstream
            except OSError:
                upstream.close()
        self._refuse(client, 502, f"cannot connect to {host}:{port}")
        return None

    @staticmethod
    def _refuse(client: socket.socket, status: int, why: str) -> None:
        body = f"mesh egress: {why}\n".encode()
        reason = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large",
                  502: "Bad Gateway", 503: "Service Unavailable"}[status]
        try:
            client.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                           f"Connection: close\r\n\r\n".encode() + body)
        except OSError:
            pass


def _normal_host(host: str) -> str:
    """``host`` as compared: lower case, without IPv6 brackets or a trailing dot, an address in its
    canonical form, a name in IDNA (``xn--``) form."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.rstrip(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return host.encode("idna").decode("ascii").lower()
    except (UnicodeError, ValueError):
        return host


def _host_problem(headers: Sequence[str], host: str, port: int, default: int | None) -> tuple[str, str] | None:
    """(what it names, why it is refused) when the ``Host`` header among ``headers`` (a request
    head's lines) names another host, or another port (``default`` when it names none; None: the
    port is not compared then), than ``host:port``, or when there is more than one (or a folded
    line, which a server may join to one); None when there is none or it names the same."""
    values = []
    for line in headers:
        if line[:1] in (" ", "\t"):
            return "", "a folded header line (obsolete line folding)"
        name, colon, value = line.partition(":")
        if colon and name.strip().lower() == "host":
            values.append(value.strip())
    if len(values) > 1:
        return values[1], "more than one Host header"
    if not values:
        return None
    named, named_port = _host_port(values[0])
    wanted = named_port if named_port is not None else default
    if _normal_host(named) != _normal_host(host) or (wanted is not None and wanted != port):
        return values[0], f"the Host header names {values[0][:200]!r}"
    return None


def _noted(named: tuple[str, str], where: str, host: str, port: int) -> str:
    """How a request or tunnel refused for the name it carried shows in ``refused``."""
    return f"{named[0][:200]} (named in {where} to {host}:{port})" if named[0] else f"{host}:{port} ({named[1]})"


def _head_end(data: bytes) -> int:
    """Where the head of the request at the start of ``data`` ends (its last line's CR left out:
    a head whose lines end in a bare LF is cut there too, and refused), or -1."""
    found = _BLANK_LINE.search(data)
    return -1 if found is None else found.start() - (data[found.start() - 1:found.start()] == b"\r")


def _opening_kind(data: bytes) -> str | None:
    """What a tunnel's first bytes are: ``"tls"`` (a handshake record), ``"http"`` (a request
    line), ``"other"``, or None while too few came to tell."""
    if not data:
        return None
    if data[0] == 0x16:
        return "tls"
    method = _METHOD.match(data)
    if method is None or data[method.end():method.end() + 1] not in (b" ", b"\t", b""):
        return "other"
    line, newline, _ = data.partition(b"\n")
    if not newline:
        return None
    return "http" if _REQUEST_LINE.match(line) else "other"


def _opening_whole(data: bytes) -> bool:
    """True when ``data`` holds all a tunnel's check needs: a whole ClientHello, a whole request
    head, or enough to tell it is neither."""
    kind = _opening_kind(data)
    if kind == "tls":
        return _client_hello_names(data) is not None
    if kind == "http":
        return _head_end(data) >= 0
    return kind is not None


def _opening(client: socket.socket, upstream: socket.socket, data: bytes) -> tuple[bytes, bool]:
    """What a tunnel's client sends first (after ``data``, already read), read until it can be
    checked (``_opening_whole``), and whether it was cut: ``_OPENING_LIMIT`` bytes or
    ``_CONNECT_TIMEOUT_S`` seconds passed first. Reading stops early, uncut, when the client
    closes its side (nothing can follow) or the upstream speaks first (a protocol whose server
    talks first is neither TLS nor HTTP)."""
    deadline = time.monotonic() + _CONNECT_TIMEOUT_S
    while not _opening_whole(data):
        left = deadline - time.monotonic()
        if len(data) >= _OPENING_LIMIT or left <= 0:
            return data, True
        ready = select.select([client, upstream], [], [], left)[0]
        if upstream in ready:
            return data, False
        if ready:
            chunk = client.recv(_OPENING_LIMIT - len(data))
            if not chunk:
                return data, False
            data += chunk
    return data, False


def _client_hello_names(data: bytes) -> list[str] | None:
    """The server names (SNI, host_name entries) of the TLS ClientHello at the start of ``data``
    (its handshake message gathered from the records it spans); None while it is not whole; an
    empty list for one without them, and for whatever is not a well-formed ClientHello (never an
    error)."""
    message = b""
    at = 0
    while len(message) < 4 or len(message) < 4 + int.from_bytes(message[1:4], "big"):
        if len(data) < at + 5:
            return None
        if data[at] != 0x16:
            return []
        size = int.from_bytes(data[at + 3:at + 5], "big")
        if len(data) < at + 5 + size:
            return None
        message += data[at + 5:at + 5 + size]
        at += 5 + size
    try:
        return _server_names(message)
    except (IndexError, ValueError):
        return []


def _server_names(message: bytes) -> list[str]:
    """The host names of a ClientHello handshake message's server_name extensions (raises
    IndexError on one cut short)."""
    if message[0] != 0x01:
        return []
    body = message[4:4 + int.from_bytes(message[1:4], "big")]
    at = 2 + 32  # version, random
    at += 1 + body[at]  # session id
    at += 2 + int.from_bytes(body[at:at + 2], "big")  # cipher suites
    at += 1 + body[at]  # compression methods
    if at + 2 > len(body):
        return []  # no extensions
    end = min(len(body), at + 2 + int.from_bytes(body[at:at + 2], "big"))
    at += 2
    names = []
    while at + 4 <= end:
        kind, size = int.from_bytes(body[at:at + 2], "big"), int.from_bytes(body[at + 2:at + 4], "big")
        extension = body[at + 4:at + 4 + size]
        at += 4 + size
        if kind != 0:  # server_name
            continue
        place, last = 2, min(len(extension), 2 + int.from_bytes(extension[0:2], "big"))
        while place + 3 <= last:
            length = int.from_bytes(extension[place + 1:place + 3], "big")
            if extension[place] == 0:  # host_name
                names.append(extension[place + 3:place + 3 + length].decode("latin-1"))
            place += 3 + length
    return names


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until either side closes or nothing moves for ``_IDLE_TIMEOUT_S``."""
    a.setblocking(False)
    b.setblocking(False)
    peers = {a: b, b: a}
    while True:
        ready, _, _ = select.select(list(peers), [], [], _IDLE_TIMEOUT_S)
        if not ready:
            return
        for source in ready:
            try:
                data = source.recv(65536)
            except BlockingIOError:
                continue
            if not data:
                return
            target = peers[source]
            target.setblocking(True)
            target.settimeout(_IDLE_TIMEOUT_S)
            target.sendall(data)
            target.setblocking(False)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, allowlist: Allowlist) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.allowlist = allowlist
        self.slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        self.refused: list[str] = []
        self._lock = threading.Lock()

    def note_refused(self, target: str) -> None:
        with self._lock:
            self.refused = [*self.refused[-19:], target]


class EgressProxy:
    """One proxy on the host's loopback for one allowlist, serving in a daemon thread: one per
    worker call (what it refused is that call's), closed when the call ends."""

    def __init__(self, allowlist: Allowlist) -> None:
        self.allowlist = allowlist
        self._server = _Server(allowlist)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="mesh-egress")
        self._thread.start()

    @property
    def refused(self) -> list[str]:
        """The last hosts this proxy refused (``host:port``), newest last."""
        return list(self._server.refused)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def proxy_env(port: int) -> dict[str, str]:
    """The variables that send a worker's HTTP(S) clients through the proxy on ``port`` (loopback
    endpoints, forwarded by pasta, stay direct)."""
    url = f"http://127.0.0.1:{port}"
    direct = "127.0.0.1,localhost,::1"
    return {"HTTPS_PROXY": url, "https_proxy": url, "HTTP_PROXY": url, "http_proxy": url, "ALL_PROXY": url,
            "all_proxy": url, "NO_PROXY": direct, "no_proxy": direct}
