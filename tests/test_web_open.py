"""``mesh serve --open`` opens the board in the person's browser: the browser named by
``$BROWSER`` (here a small program that records the address it is given and loads it) gets the
board's address, token included, and the page it loads is the board. A browser command that only
returns when it is closed does not hold up the server's start."""

from __future__ import annotations

import stat
import subprocess
import sys
import time

from tests.runkit import make_workspace
from tests.runkit import MESH
from tests.servekit import env, free_port


def test_open_hands_the_board_to_the_browser_which_loads_it(tmp_path):
    ws = make_workspace(tmp_path)
    seen = tmp_path / "browser.txt"
    browser = tmp_path / "browser"
    # Like a browser, it keeps the cookie the token's first visit sets, and follows the redirect.
    browser.write_text(f"#!{sys.executable}\nimport http.cookiejar, sys, urllib.request\n"
                       f"opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor("
                       f"http.cookiejar.CookieJar()))\n"
                       f"page = opener.open(sys.argv[1], timeout=30).read().decode()\n"
                       f"open({str(seen)!r}, 'w').write(sys.argv[1] + '\\n' + page)\n")
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    port = free_port("127.0.0.2")
    proc = subprocess.Popen([*MESH, "--db", str(ws.db), "serve", "--host", "127.0.0.2", "--port", str(port),
                             "--token", "s3cret-token", "--open", "--repo", str(ws.repo)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env(BROWSER=f"{browser} %s", DISPLAY=""), cwd=ws.repo)
    try:
        deadline = time.monotonic() + 60
        while not (seen.exists() and seen.read_text().count("\n")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert seen.exists(), proc.stderr.read()
    url, _, page = seen.read_text().partition("\n")
    assert url == f"http://127.0.0.2:{port}/?token=s3cret-token"
    assert "Board" in page and "<script" in page  # the board itself, not a refusal
