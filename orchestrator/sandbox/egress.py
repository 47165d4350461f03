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

This module may import only the standard library.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import socketserver
import threading
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
        if len(words) != 3:
            self._refuse(client, 400, "not an HTTP request")
            return
        method, target, version = words
        if method.upper() == "CONNECT":
            host, port = _host_port(target)
            forward = rest
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
        if port is None or not self.server.allowlist.allows(host, port):
            self.server.note_refused(f"{host}:{port}")
            self._refuse(client, 403, f"{host}:{port} is not among the hosts this worker may reach (worker_egress)")
            return
        upstream = self._connect(client, host, port)
        if upstream is None:
            return
        with upstream:
            if method.upper() == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if forward:
                upstream.sendall(forward)
            _pipe(client, upstream)

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
