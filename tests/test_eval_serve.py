"""``mesh serve`` shows the repository's evals: the list, each eval's page (the same offline page
``mesh eval report`` writes) with its grid's links to the runs' report pages, in a real headless
Chromium; a path that is not one of an eval's run reports is refused."""

from __future__ import annotations

import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from orchestrator.evals.suite import read_suite
from tests.evalkit import git, make_library, mesh, write_worker
from tests.servekit import Server, needs_chromium, open_browser

pytestmark = pytest.mark.slow


@needs_chromium
def test_the_evals_page_lists_the_eval_and_its_grid_opens_each_run(tmp_path):
    repo = make_library(tmp_path)
    suite = tmp_path / "small.jsonl"
    assert mesh("eval", "suite", "--from-git", "--runs", "1", "--limit", "2", "--command", "python3 -m unittest {tests}",
                "-o", str(suite), cwd=repo).returncode == 0
    cases = read_suite(suite)
    command = write_worker(tmp_path, repo, cases, {"single": [cases[0].id]})
    done = mesh("eval", "run", str(suite), "--profile", "single", "--worker-cmd", command, "--yes", cwd=repo)
    assert done.returncode == 0, done.stderr
    folder = repo / ".mesh" / "evals" / "small"
    assert git(repo, "status", "--porcelain") == ""  # mesh's own folder stays out of git
    server = Server(SimpleNamespace(db=folder / "tracker.db", repo=repo))
    browser = open_browser(tmp_path)
    try:
        browser.goto(f"{server.base}/evals")
        assert browser.wait_for("document.querySelector('a[href=\"/evals/small/\"]') !== null")
        row = browser.js("document.querySelector('table.grid tbody tr').innerText")
        assert "small" in row and "single 1/2" in row
        browser.js("document.querySelector('a[href=\"/evals/small/\"]').click()")
        assert browser.wait_for("location.pathname === '/evals/small/' && document.querySelector('svg') !== null")
        links = browser.js("Array.from(document.querySelectorAll('a[href^=\"runs/\"]')).map(a => a.href)")
        assert len(links) == 2
        browser.goto(links[0])
        assert browser.wait_for("document.title.length > 0 && document.body.innerText.includes('single')")
        assert browser.problems() == []
    finally:
        browser.close()
        server.stop()
    server.start()
    try:
        for path in ("/evals/small/runs/..%2F..%2Feval.json/x.html", "/evals/nope/", "/evals/small/runs/a/b.html",
                     "/evals/small/runs/..%2Ftracker.db/single.html"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(server.base + path, timeout=30)
            assert refused.value.code == 404, path
    finally:
        server.stop()
