"""Shared kit of the ``mesh serve`` tests: the real server in a process of its own, runs as
processes of their own (as a person would start them), and a browser (``tests/cdp.py``).
"""

from __future__ import annotations

import http.server
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.cdp import CHROMIUM, Browser
from tests.runkit import MESH
from tests.runkit import human_review_config as config

KEY = "serve-test-key"
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make chromium)")
_URL = re.compile(r"mesh serve: (http://\S+)")


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "MESH_SIGNING_KEY": KEY, **extra}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Server:
    """``mesh serve`` on ``host``:``port`` over the workspace's tracker."""

    def __init__(self, ws, *args: str, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.ws, self.args, self.host = ws, args, host
        self.port = port or free_port(host)
        self.lines: list[str] = []
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([*MESH, "--db", str(self.ws.db), "--actor", "Ada", "serve", "--host", self.host,
                                      "--port", str(self.port), "--repo", str(self.ws.repo), *self.args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env(),
                                     cwd=self.ws.repo)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise AssertionError(f"mesh serve ended: {self.lines}")
            self.lines.append(line)
            match = _URL.search(line)
            if match:
                self.url = match.group(1)
                threading.Thread(target=self._drain, daemon=True).start()
                self._wait_listening()
                return
        raise AssertionError("mesh serve printed no address")

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex((self.host, self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError("mesh serve does not listen")

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def other_site(page: str) -> http.server.HTTPServer:
    """A site of another origin on 127.0.0.1 (another port), serving ``page`` (HTML) for every
    GET, in a thread of its own; ``shutdown()`` stops it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server API)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page.encode())

        def log_message(self, *args) -> None:
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    return site


def start_run(ws, script: dict, *extra: str, name: str = "script.json") -> subprocess.Popen:
    """``mesh run`` (replay, ``--no-land``) as a process of its own."""
    path = ws.write_script(script, name)
    return subprocess.Popen([*MESH, "--db", str(ws.db), "--actor", "runner", "run", "--backend", "replay",
                             "--script", str(path), "--repo", str(ws.repo), "--no-land", "--config", str(config(ws)),
                             "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=ws.repo)


def checkpoint_ids(ws, task: str) -> list[str]:
    """The comment ids of the task's checkpoints, in order, as the page's cards carry them."""
    return [str(cp.comment_id) for cp in ws.checkpoints(task)]


def open_browser(tmp_path: Path) -> Browser:
    return Browser(tmp_path / "chromium-profile")


CARD_IDS = "Array.from(document.querySelectorAll('#runs article.step')).map(e => e.dataset.commentId)"
