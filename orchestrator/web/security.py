"""Who may read and who may change: the token, the same-origin check, the page's headers.

- Bound to 127.0.0.1 (the default) the server needs no token, but answers only requests whose
  ``Host`` names that address (or ``localhost``) and its port: a page of another site that
  rebinds its own name to 127.0.0.1 is refused.
- Bound to any other address it needs a token (``--token``, else one generated and printed):
  every request carries it, as ``Authorization: Bearer``, as the ``mesh_token`` cookie, or once
  as ``?token=`` on a page, which sets the cookie (HttpOnly, SameSite=Strict) and redirects
  to the same page without it, so the token does not stay in the address bar or the history.
- Every state-changing request (POST) must also come from a page of this server: the browser's
  ``Sec-Fetch-Site: same-origin``, else an ``Origin`` equal to this server's. A form of another
  site, even one the person's browser submits with the cookie, is refused. So is a CSP report
  of another site's page (the browser sends its own reports ``same-origin``).
- No request body is read beyond its limit (``body_limit``: 16 KiB for a CSP report, 1 MiB for
  a form): a ``Content-Length`` above it is refused (413) before anything is read, and a body
  sent without one (chunked) is counted while it streams in and refused when it passes it.
- The forge's webhook (``/forge/webhook``, served only when ``[forge] webhook_secret_env`` names
  a secret that is set) needs no token and no same-origin: the delivery must carry the secret
  (GitHub's HMAC signature of the body, GitLab's token), checked before the body is used.
- Every answer carries a Content-Security-Policy without inline script or style (scripts and
  styles only from this server, no frame, no plugin, no base change, forms only to this server,
  connections only to this server) and ``nosniff``, ``no-referrer`` and ``DENY`` for framing.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

__all__ = ["WEBHOOK", "CSP", "STANDALONE_CSP", "COOKIE", "CSP_REPORT_BYTES", "Guard", "MAX_BODY_BYTES", "SECURITY_HEADERS", "Verdict", "body_limit",
           "needs_token", "new_token"]

LOOPBACK = "127.0.0.1"
COOKIE = "mesh_token"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self';"
       " form-action 'self'; base-uri 'none'; frame-ancestors 'none'; report-uri /csp-report")
# The self-contained pages served as they are (an eval's page, a run's report page): their CSS is
# inline and they have no script at all, so the policy their own meta tag states, framing refused.
STANDALONE_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none';"
                  " form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


MAX_BODY_BYTES = 1 << 20
# Where a forge delivers its events (``[forge] webhook_secret_env``).
WEBHOOK = "/forge/webhook"
CSP_REPORT_BYTES = 16 << 10


def body_limit(path: str) -> int:
    """The most of a request body the server reads for ``path``."""
    return CSP_REPORT_BYTES if path == "/csp-report" else MAX_BODY_BYTES


def needs_token(host: str) -> bool:
    """Any address but 127.0.0.1 needs a token (``0.0.0.0``, a LAN address, another loopback)."""
    return host != LOOPBACK


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Verdict:
    """What to do with a request: let it through (``status`` 0), refuse it with ``status`` and
    ``reason``, or (``set_cookie``) set the token cookie and redirect to ``location``."""

    status: int = 0
    reason: str = ""
    set_cookie: str | None = None
    location: str | None = None


@dataclass(frozen=True)
class Guard:
    """The server's rules, from how it was started."""

    host: str
    port: int
    token: str | None
    read_only: bool = False
    # A forge's webhook is served (``[forge] webhook_secret_env`` names a set secret).
    webhook: bool = False

    def _token_ok(self, given: str | None) -> bool:
        return bool(given) and self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def check(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
              cookies: Mapping[str, str]) -> Verdict:
        """The verdict on one request (header names lower-case)."""
        if path == WEBHOOK and self.webhook:
            # The forge's delivery: it has no token of this server and comes from no page of
            # it; the webhook's secret (checked by the route, before the body is read) stands in.
            if method != "POST":
                return Verdict(405, "the forge's webhook takes POST only")
            length = headers.get("content-length")
            if length is None or not length.strip().isdigit() or int(length) > MAX_BODY_BYTES:
                return Verdict(413, f"refused: a delivery here is {MAX_BODY_BYTES} bytes at most, with its length")
            return Verdict()
        if self.token is None:
            host = (headers.get("host") or "").lower()
            if host not in (f"{LOOPBACK}:{self.port}", f"localhost:{self.port}"):
                return Verdict(421, "this server answers only to its own address")
        else:
            bearer = headers.get("authorization") or ""
            given = bearer[7:] if bearer.lower().startswith("bearer ") else None
            if not (self._token_ok(given) or self._token_ok(cookies.get(COOKIE))):
                if method == "GET" and self._token_ok(query.get("token")):
                    rest = urlencode({k: v for k, v in query.items() if k != "token"})
                    return Verdict(set_cookie=self.token, location=path + (f"?{rest}" if rest else ""))
                return Verdict(401, "a token is needed: open the address mesh serve printed")
        length = headers.get("content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > body_limit(path)):
            return Verdict(413, f"refused: a request body here is {body_limit(path)} bytes at most")
        if method not in ("GET", "HEAD"):
            if path == "/csp-report":
                # The browser's own report of what a page of this server blocked: nothing changes.
                if self.same_origin(headers):
                    return Verdict()
                return Verdict(403, "refused: not a report of this server's page")
            if self.read_only:
                return Verdict(403, "this server is read-only (mesh serve --read-only)")
            if not self.same_origin(headers):
                return Verdict(403, "refused: the request does not come from a page of this server")
        return Verdict()

    def same_origin(self, headers: Mapping[str, str]) -> bool:
        """True when the browser says the request comes from this server's own page."""
        site = headers.get("sec-fetch-site")
        if site is not None:
            return site == "same-origin"
        origin = headers.get("origin")
        if not origin:
            return False
        parts = urlsplit(origin)
        return parts.scheme == "http" and parts.netloc.lower() == (headers.get("host") or "").lower()
