"""A headless Chromium driven over the DevTools protocol, for the ``mesh serve`` tests.

Debian's chromium runs with the flags of ``tests/test_report_html.py`` plus a debugging port; the
test talks to one page target over a WebSocket (``websockets``' sync client). Everything the page
does that a test may want to see is recorded as it happens: console messages and uncaught
exceptions (``Runtime``), browser log entries such as CSP violations (``Log``), every request
the page makes, to any address (``Network``), and any dialog a script opened (``Page``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")
# axe-core, installed beside the venv by `make chromium` (npm); the axe checks skip without it. Evaluate
# AXE's text in the page with ``Browser.js`` (the debugger is not held by the page's CSP), then AXE_RUN:
# the violations, one line each.
AXE = Path(__file__).resolve().parents[1] / ".venv" / "axe-core" / "node_modules" / "axe-core" / "axe.min.js"
AXE_RUN = ("axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => v.id + ': '"
           " + v.help + ' (' + v.nodes.map(n => n.target.join(' ')).slice(0, 3).join(', ') + ')'))")
_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-extensions", "--remote-allow-origins=*")
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium_env(tmp: str) -> dict[str, str]:
    """Chromium's environment: its temporary folder ``tmp``, one of the test's own that the test
    removes, where the folder of its singleton socket stays when the browser is killed (a short
    path: a socket's path is at most 107 bytes, so not inside pytest's deep ``tmp_path``)."""
    return {**os.environ, "TMPDIR": tmp}


class Browser:
    """One headless Chromium with one page; ``close()`` ends it."""

    def __init__(self, profile: Path) -> None:
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="cdp-")
        self.proc = subprocess.Popen([CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                      "--window-size=1400,1000", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=chromium_env(self.tmp))
        try:
            browser_ws = self._wait_for_endpoint()
            port = int(browser_ws.split(":")[2].split("/")[0])
            page = next(t for t in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                                                     timeout=30)) if t["type"] == "page")
            # Entered by hand: the connection lives as long as this object, closed by close().
            self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30).__enter__()
        except BaseException:  # no browser object to close: none left running, nothing left in /tmp
            self.proc.kill()
            self.proc.wait(timeout=30)
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        self.ids = itertools.count(1)
        self.replies: dict[int, dict] = {}
        self.events: list[dict] = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(f"{domain}.enable")

    def _wait_for_endpoint(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            match = _LISTENING.search(line or "")
            if match:
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()  # keep draining
                return match.group(1)
            if not line and self.proc.poll() is not None:
                break
        raise AssertionError("chromium did not open its debugging port")

    def _read(self) -> None:
        try:
            for raw in self.ws:
                message = json.loads(raw)
                with self.cond:
                    if "id" in message:
                        self.replies[message["id"]] = message
                    else:
                        self.events.append(message)
                    self.cond.notify_all()
        except Exception:  # the browser went away: waiting calls time out and say so
            return

    def call(self, method: str, **params: Any) -> dict:
        """One DevTools command; its result (AssertionError on an error or no answer)."""
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        with self.cond:
            if not self.cond.wait_for(lambda: ident in self.replies, timeout=60):
                raise AssertionError(f"no answer to {method}")
            reply = self.replies.pop(ident)
        assert "error" not in reply, (method, reply["error"])
        return reply.get("result", {})

    def goto(self, url: str) -> None:
        """Load ``url`` and wait until its DOM is ready."""
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href === " + json.dumps(url))

    def js(self, expression: str) -> Any:
        """The value of ``expression`` in the page (JSON-serialisable values)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 120.0) -> Any:
        """Wait until ``expression`` is truthy in the page; its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.js(expression)
            except AssertionError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"never true in the page: {expression}")
            time.sleep(0.1)

    def problems(self) -> list[str]:
        """Console messages, uncaught exceptions, log entries (CSP violations among them) and
        dialogs the page produced so far."""
        out = []
        with self.cond:
            events = list(self.events)
        for e in events:
            method, params = e["method"], e.get("params", {})
            if method == "Runtime.consoleAPICalled":
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(params["exceptionDetails"])[:500])
            elif method == "Log.entryAdded":
                out.append(f"log ({params['entry'].get('source')}): {params['entry'].get('text')}")
            elif method == "Page.javascriptDialogOpening":
                out.append("dialog: " + params.get("message", ""))
        return out

    def requests(self) -> list[str]:
        """Every URL the page asked for."""
        with self.cond:
            return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: Path) -> None:
        import base64

        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png",
                                                    captureBeyondViewport=True)["data"]))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait(timeout=30)
            shutil.rmtree(self.tmp, ignore_errors=True)
