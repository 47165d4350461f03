"""The HTTP client the forge modules share: JSON over httpx, the token in one header.

The token is read by the caller from the variable the configuration names and handed here; it
goes in the header the forge wants (``Authorization: Bearer``, GitLab's ``PRIVATE-TOKEN``) of
requests to the API's own host, never in a URL. Redirects are not followed (a redirect to
another host would carry nothing, but is refused outright). Errors name the call and the
forge's message, scrubbed, never a header.

May import: ``redact``, ``orchestrator.forges``.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any, Mapping
from urllib.parse import urlsplit

from orchestrator.forges.model import ForgeError
from redact import scrub

__all__ = ["Api", "check_api_url"]

_TIMEOUT_S = 30.0


def check_api_url(url: str) -> str | None:
    """Why ``url`` cannot be a forge API's URL (None: it can): https, or http to a loopback
    address (a forge on this machine, as the tests' are)."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname:
        host = parts.hostname
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if loopback:
            return None
        return f"{url}: an http:// API URL would send the token in clear; use https (http only for loopback)"
    return f"{url}: not an http(s) URL"


class Api:
    """JSON requests to one forge API (``base``: its root URL) with ``headers`` (the token's)."""

    def __init__(self, base: str, headers: Mapping[str, str], *, transport: Any = None) -> None:
        problem = check_api_url(base)
        if problem is not None:
            raise ForgeError(problem)
        import httpx

        self.base = base.rstrip("/")
        self._client = httpx.Client(base_url=self.base, headers={"User-Agent": "mesh", **headers},
                                    timeout=_TIMEOUT_S, follow_redirects=False, transport=transport)

    def close(self) -> None:
        self._client.close()

    def text(self, method: str, path: str, *, tail: int) -> str:
        """The last ``tail`` characters of a plain-text answer (a job's log); ForgeError as ``call``."""
        return self._send(method, path, {}, None, (200,)).text[-tail:]

    def call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
             body: Mapping[str, Any] | None = None, expect: tuple[int, ...] = (200,)) -> Any:
        """The decoded JSON answer of ``method path``; ForgeError when the forge answers another
        status than ``expect`` or cannot be reached."""
        response = self._send(method, path, params, body, expect)
        what = f"{method} {path}"
        if not response.content:
            return None
        try:
            return response.json()
        except (ValueError, json.JSONDecodeError):
            raise ForgeError(f"{what}: the answer is not JSON") from None

    def _send(self, method: str, path: str, params: Mapping[str, Any] | None, body: Mapping[str, Any] | None,
              expect: tuple[int, ...]) -> Any:
        import httpx

        what = f"{method} {path}"
        try:
            response = self._client.request(method, path, params=dict(params or {}),
                                            json=dict(body) if body is not None else None)
        except httpx.HTTPError as exc:
            raise ForgeError(f"{what}: {scrub(type(exc).__name__)}: {scrub(str(exc))[:300]}") from None
        if response.status_code not in expect:
            raise ForgeError(f"{what}: HTTP {response.status_code}: {_message(response.text)}")
        return response


def _message(text: str) -> str:
    """The forge's own error message of an answer (GitHub's ``message`` and ``errors``, GitLab's
    ``message``/``error``), one line, scrubbed."""
    try:
        data = json.loads(text)
    except ValueError:
        return scrub(" ".join(text.split()))[:300] or "(no body)"
    if isinstance(data, dict):
        parts = [str(data.get(key)) for key in ("message", "error") if data.get(key)]
        errors = data.get("errors")
        if isinstance(errors, list):
            parts += [str(e.get("message") or e) if isinstance(e, dict) else str(e) for e in errors[:3]]
        if parts:
            return scrub(" ".join("; ".join(parts).split()))[:300]
    return scrub(" ".join(text.split()))[:300]
