"""The board and the drain view give their page the newest change from *before* they read the
tracker: a change committed while a page is being built reaches it through the change stream.
Read after, as it once was, such a change was skipped by the stream and the page stayed stale
for good (a drain's first task waiting for a review never showed in tests/test_web_drain.py,
once in a while). Here the change is made to land exactly there, every time."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

import orchestrator.web.app as web
from tracker.store import Tracker


@pytest.mark.parametrize("path,view", [("/drain?scope=label:plan", "drain_view"), ("/?scope=label:plan", "board")])
def test_a_change_made_while_the_page_reads_is_after_its_last_event(tmp_path, monkeypatch, path, view):
    tracker = Tracker.init(tmp_path, prefix="ws")
    task = tracker.create("a task", labels=["plan"])["id"]
    tracker.close()
    real = getattr(web, view)
    made: list[int] = []

    def reads_then_a_change_lands(t, *args, **kwargs):
        answer = real(t, *args, **kwargs)
        with Tracker(t.path, actor="runner") as other:  # another process's write, mid-page
            other.add_comment(task, "a checkpoint")
            made.append(other.db.read("SELECT MAX(id) FROM events")[0][0])
        return answer

    monkeypatch.setattr(web, view, reads_then_a_change_lands)
    settings = web.Settings(target=tmp_path / ".beads" / "mesh.db", actor="Ada")
    with TestClient(web.create_app(settings), base_url=f"http://127.0.0.1:{settings.port}") as client:
        html = client.get(path).text
    last = int(re.search(r'data-last-event="(\d+)"', html).group(1))
    assert made and last < made[0]  # the stream will send that change to the page
