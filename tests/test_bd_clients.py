"""beads clients on a mesh tracker, with the ``bd`` shim first on their PATH.

beads-mcp (the MCP server agents use to talk to beads) is started over stdio and
driven with the ``mcp`` client, every tool it lists; beadsflow runs an epic to
completion; beads-ui's server is driven over its WebSocket protocol, as its
browser page would. What they did is read back through the tracker library, so a
client that only thinks it worked fails here.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tracker.store import Tracker

try:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    import beads_mcp  # noqa: F401  (the server under test, started as a subprocess)
    import beadsflow  # noqa: F401
    import websockets
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"beads clients not installed ({exc.name}): run make install", allow_module_level=True)

BD = Path(sys.executable).with_name("bd")
if not BD.exists():  # pragma: no cover - depends on the environment
    pytest.skip(f"the bd entry point is not installed beside {sys.executable}: run make install",
                allow_module_level=True)

# beads-ui as the Makefile's beads-ui target installs it beside the venv.
BEADS_UI = Path(sys.executable).parent.parent / "beads-ui" / "node_modules" / "beads-ui" / "server" / "index.js"
# Every tool beads-mcp lists; one it adds in a new release fails the first test until driven there.
TOOLS = {"discover_tools", "get_tool_info", "context", "ready", "list", "show", "create", "claim", "update",
         "close", "reopen", "dep", "comment", "comments", "note", "stats", "blocked", "admin"}
ACTOR = "agent-7"
# A hung server must not hang the suite; this bounds the whole session, it asserts no speed.
SESSION_LIMIT = 300


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """The client's environment: our bd first on PATH, a private HOME, bd's actor variable."""
    env = {"PATH": f"{BD.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
           "BEADS_ACTOR": ACTOR}
    env.update(extra)
    return env


class Mcp:
    """One beads-mcp session: ``call`` returns a tool's result, ``fail`` its error text."""

    def __init__(self, session: ClientSession):
        self.session = session

    async def _raw(self, tool: str, args: dict):
        res = await self.session.call_tool(tool, args)
        return res, " ".join(getattr(c, "text", "") for c in res.content)

    async def call(self, tool: str, **args):
        res, text = await self._raw(tool, args)
        assert not res.isError, f"{tool}({args}): {text}"
        found = res.structuredContent
        if found is None:
            return text
        return found["result"] if set(found) == {"result"} else found

    async def fail(self, tool: str, **args) -> str:
        res, text = await self._raw(tool, args)
        assert res.isError, f"{tool}({args}) should have failed: {text}"
        return text


def drive(tmp_path: Path, cwd: Path, env: dict[str, str], scenario) -> None:
    """Start beads-mcp (``python -m beads_mcp``) in ``cwd`` with ``env`` and run ``scenario``."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "beads_mcp"], env=env, cwd=str(cwd))

    async def main() -> None:
        with open(tmp_path / "beads-mcp.log", "w") as log:
            async with stdio_client(params, errlog=log) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await scenario(Mcp(session))

    try:
        asyncio.run(asyncio.wait_for(main(), SESSION_LIMIT))
    except BaseExceptionGroup as group:
        # anyio wraps a failed assertion in two task groups; report the assertion itself.
        failure: BaseException = group
        while isinstance(failure, BaseExceptionGroup) and len(failure.exceptions) == 1:
            failure = failure.exceptions[0]
        raise failure from None


def ids(items: list[dict]) -> list[str]:
    return [i["id"] for i in items]


def test_every_beads_mcp_tool_works_on_a_mesh_workspace(tmp_path):
    proj, home = tmp_path / "proj", tmp_path / "home"
    proj.mkdir(), home.mkdir()
    db = proj / ".beads" / "mesh.db"

    def tracker() -> Tracker:
        return Tracker.open(db)

    async def scenario(c: Mcp) -> None:
        assert {t.name for t in (await c.session.list_tools()).tools} == TOOLS

        # context: set on a folder without a tracker, init it through bd init, set again.
        assert "Context not set" in await c.call("context")
        assert "Not found" in await c.call("context", workspace_root=str(proj))
        assert "prefix: mc" in await c.call("context", action="init", prefix="mc")
        assert f"Database: {db}" in await c.call("context", action="set", workspace_root=str(proj))
        assert f"Database: {db}" in await c.call("context", action="show")
        with tracker() as t:
            assert t.prefix == "mc"

        # create (brief and full), with labels, an explicit id and dependencies.
        epic = await c.call("create", title="Epic", issue_type="epic", priority=1, brief=False)
        assert (epic["issue_type"], epic["priority"]) == ("epic", 1)
        a = await c.call("create", title="A", description="do A", design="dz", acceptance="ok when",
                         external_ref="gh-1", labels=["ui"], priority=0)
        assert a["action"] == "created"
        b = await c.call("create", title="B", id="mc-b", deps=[a["id"]], labels=["api"], assignee="ann")
        assert b["id"] == "mc-b"
        assert "Added dependency" in await c.call("dep", issue_id="mc-b", depends_on_id=epic["id"],
                                                  dep_type="parent-child")
        with tracker() as t:
            got = t.get(a["id"])
            assert (got["description"], got["design"], got["acceptance_criteria"], got["external_ref"]) == (
                "do A", "dz", "ok when", "gh-1")
            assert got["labels"] == ["ui"] and got["created_by"] == ACTOR
            assert {(d["depends_on_id"], d["type"]) for d in t.get("mc-b")["dependencies"]} == {
                (a["id"], "blocks"), (epic["id"], "parent-child")}

            # list and ready, with each filter beads-mcp passes, against the library's answers.
            assert ids(await c.call("list")) == ids(t.list())
            assert ids(await c.call("list", status="open", issue_type="task")) == ids(
                t.list(status="open", issue_type="task"))
            assert ids(await c.call("list", labels=["ui"])) == [a["id"]]
            assert set(ids(await c.call("list", labels_any=["ui", "api"]))) == {a["id"], "mc-b"}
            assert ids(await c.call("list", query="b", assignee="ann")) == ["mc-b"]
            assert ids(await c.call("list", unassigned=True, priority=1)) == [epic["id"]]
            assert ids(await c.call("ready")) == ids(t.ready())
            assert ids(await c.call("ready", priority=0, labels=["ui"], unassigned=True)) == [a["id"]]
            assert set(ids(await c.call("ready", sort_policy="oldest", limit=5))) == set(ids(t.ready()))

        # show: the dependencies/dependents nesting, brief and full.
        shown = await c.call("show", issue_id="mc-b", brief_deps=True)
        assert {(d["id"], d["dependency_type"]) for d in shown["dependencies"]} == {
            (a["id"], "blocks"), (epic["id"], "parent-child")}
        full = await c.call("show", issue_id=a["id"])
        assert [(d["id"], d["dependency_type"]) for d in full["dependents"]] == [("mc-b", "blocks")]
        assert full["labels"] == ["ui"] and full["external_ref"] == "gh-1"
        assert (await c.call("show", issue_id=epic["id"], brief=True))["title"] == "Epic"
        [blocked] = await c.call("blocked")
        assert (blocked["id"], blocked["blocked_by"]) == ("mc-b", [a["id"]])

        # claim, update (fields; status open releases), comments and notes.
        assert (await c.call("claim", issue_id=a["id"]))["action"] == "claimed"
        with tracker() as t:
            assert (t.get(a["id"])["status"], t.get(a["id"])["assignee"]) == ("in_progress", ACTOR)
        updated = await c.call("update", issue_id=a["id"], priority=1, title="A2", notes="n1", description="dA",
                               design="d2", acceptance_criteria="ac2", external_ref="gh-2", brief=False)
        assert (updated["title"], updated["priority"]) == ("A2", 1)
        await c.call("update", issue_id=a["id"], status="open")
        assert "Added comment" in await c.call("comment", issue_id=a["id"], text="started; tests red")
        assert "Appended note" in await c.call("note", issue_id=a["id"], text="n2")
        with tracker() as t:
            got = t.get(a["id"])
            assert (got["status"], got["title"], got["notes"], got["description"], got["design"]) == (
                "open", "A2", "n1\nn2", "dA", "d2")
            assert (got["acceptance_criteria"], got["external_ref"]) == ("ac2", "gh-2")
            library_comments = t.comments(a["id"])
        listed = await c.call("comments", issue_id=a["id"])
        assert [(x["id"], x["author"], x["text"]) for x in listed] == [
            (str(x["id"]), x["author"], x["text"]) for x in library_comments]
        assert listed[0]["author"] == ACTOR

        # close (direct and through update), reopen with a reason.
        [closed] = await c.call("close", issue_id=a["id"], reason="done")
        assert closed == {"id": a["id"], "action": "closed", "message": "done"}
        await c.call("update", issue_id="mc-b", status="closed")
        reopened = await c.call("reopen", issue_ids=["mc-b"], reason="one more case", brief=False)
        assert reopened[0]["status"] == "open"
        with tracker() as t:
            assert (t.get(a["id"])["status"], t.get(a["id"])["close_reason"]) == ("closed", "done")
            assert t.get("mc-b")["status"] == "open"
            assert [x["text"] for x in t.comments("mc-b")] == ["one more case"]
            expected = t.status()["summary"]

        # stats and every admin action.
        summary = (await c.call("stats"))["summary"]
        for key in ("total_issues", "open_issues", "in_progress_issues", "closed_issues", "ready_issues"):
            assert summary[key] == expected[key], key
        assert (await c.call("admin", action="validate"))["overall_ok"] is True
        assert (await c.call("admin", action="repair", fix=True))["orphans_found"] == 0
        assert (await c.call("admin", action="schema"))["schema"]["detected_prefix"] == "mc"
        assert (await c.call("admin", action="migration"))["current_state"]["db_exists"] is True
        assert (await c.call("admin", action="pollution"))["polluted_count"] == 0
        assert f"BEADS_DB env var: {db}" in await c.call("admin", action="debug")

        # discovery tools and the quickstart resource.
        catalog = await c.call("discover_tools")
        assert catalog["count"] == len(catalog["tools"])
        assert (await c.call("get_tool_info", tool_name="show"))["name"] == "show"
        quickstart = await c.session.read_resource("beads://quickstart")
        assert "bd ready" in quickstart.contents[0].text

    drive(tmp_path, proj, client_env(home), scenario)


def test_beads_mcp_reports_bd_errors_on_a_workspace_named_by_env(tmp_path):
    proj, home, elsewhere = tmp_path / "proj", tmp_path / "home", tmp_path / "elsewhere"
    for folder in (proj, home, elsewhere):
        folder.mkdir()
    with Tracker.init(proj, prefix="er", actor="owner") as t:
        first = t.create("first")["id"]
        held = t.create("held")["id"]
        t.claim(held, actor="someone-else")
        waiting = t.create("waiting")["id"]
        t.add_dependency(waiting, first)
    db = proj / ".beads" / "mesh.db"

    async def scenario(c: Mcp) -> None:
        # No context call: BEADS_WORKING_DIR and BEADS_DB say where the tracker is.
        assert ids(await c.call("list")) == [first, held, waiting]
        assert "not_found" in await c.fail("show", issue_id="er-nope")
        assert "conflict" in await c.fail("claim", issue_id=held)
        assert "open blockers" in await c.fail("close", issue_id=waiting)
        assert "invalid_value" in await c.fail("create", title="x", issue_type="saga")
        # beads-mcp turns a failed dep add into an "Error: ..." answer rather than a tool error.
        assert "no issue 'er-nope'" in await c.call("dep", issue_id=first, depends_on_id="er-nope")

    drive(tmp_path, elsewhere, client_env(home, BEADS_WORKING_DIR=str(proj), BEADS_DB=str(db)), scenario)
    with Tracker.open(db) as t:
        assert [i["status"] for i in t.list()] == ["open", "in_progress", "open"]
        assert "dependencies" not in t.get(first)


def test_beads_mcp_context_init_on_a_live_workspace_is_refused(tmp_path):
    """Issue 16, item 6: ``context init`` after ``context set`` on a populated workspace runs
    ``bd init --prefix`` there (with that workspace's ``BEADS_DB``): refused, prefix kept."""
    proj, home = tmp_path / "proj", tmp_path / "home"
    home.mkdir()
    with Tracker.init(proj, prefix="aa", actor="owner") as t:
        live = t.create("live work")["id"]
    db = proj / ".beads" / "mesh.db"

    async def scenario(c: Mcp) -> None:
        assert f"Database: {db}" in await c.call("context", action="set", workspace_root=str(proj))
        assert "This workspace is already initialized." in await c.fail("context", action="init", prefix="bb")
        assert ids(await c.call("list")) == [live]

    drive(tmp_path, proj, client_env(home), scenario)
    with Tracker.open(db) as t:
        assert t.prefix == "aa" and t.create("next")["id"].startswith("aa-")


def test_beadsflow_runs_an_epic_to_completion(tmp_path):
    proj, home = tmp_path / "proj", tmp_path / "home"
    proj.mkdir(), home.mkdir()
    with Tracker.init(proj, prefix="bf", actor="planner") as t:
        epic = t.create("Epic", issue_type="epic")["id"]
        first = t.create("First", parent=epic, priority=1)["id"]
        second = t.create("Second", parent=epic, priority=0)["id"]
        t.add_dependency(second, first)  # beadsflow must take First first despite Second's priority
    # beadsflow's profiles are commands; these play an implementer and a reviewer through bd.
    (proj / "beadsflow.toml").write_text(
        '[implementers.impl]\ncommand = "bd comment {issue_id} \'Ready for review: done\'"\n'
        '[reviewers.rev]\ncommand = "bd comment {issue_id} LGTM"\n', encoding="utf-8")
    env = {**client_env(home), "BD_ACTOR": "beadsflow"}
    env.pop("BEADS_ACTOR")
    done = subprocess.run(
        [sys.executable, "-m", "beadsflow", "run", epic, "--implementer", "impl", "--reviewer", "rev",
         "--interval", "0", "--max-iterations", "12"],
        cwd=proj, env=env, capture_output=True, text=True, timeout=SESSION_LIMIT,
    )
    assert done.returncode == 0, done.stderr
    assert "Epic complete." in done.stderr
    with Tracker.open(proj / ".beads" / "mesh.db") as t:
        assert [t.get(i)["status"] for i in (first, second)] == ["closed", "closed"]
        for child in (first, second):
            assert [(c["author"], c["text"]) for c in t.comments(child)] == [
                ("beadsflow", "Ready for review: done"), ("beadsflow", "LGTM")]
        closes = [e for e in t.events() if e["event_type"] == "closed"]
        assert [e["issue_id"] for e in closes] == [first, second]


class BeadsUi:
    """A beads-ui server (node) in a workspace, and requests over its WebSocket protocol."""

    def __init__(self, proj: Path, env: dict[str, str]):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.proc = subprocess.Popen([shutil.which("node"), str(BEADS_UI)], cwd=proj, text=True,
                                     env={**env, "HOST": "127.0.0.1", "PORT": str(self.port)},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for line in self.proc.stdout:  # the server says when it listens (or dies, ending the loop)
            if "listening on" in line:
                break
        assert self.proc.poll() is None, "beads-ui did not start"
        self._ids = itertools.count()

    async def request(self, ws, kind: str, payload: dict) -> dict:
        """Send one request; return its reply, keeping the snapshots pushed meanwhile."""
        rid = f"r{next(self._ids)}"
        await ws.send(json.dumps({"id": rid, "type": kind, "payload": payload}))
        while True:
            msg = json.loads(await ws.recv())
            if msg.get("type") == "snapshot":
                self.snapshots[msg["payload"]["id"]] = msg["payload"]["issues"]
            if msg.get("id") == rid:
                return msg

    def run(self, scenario) -> None:
        self.snapshots: dict[str, list[dict]] = {}

        async def main() -> None:
            async with websockets.connect(f"ws://127.0.0.1:{self.port}/ws") as ws:
                await scenario(ws)

        try:
            asyncio.run(asyncio.wait_for(main(), SESSION_LIMIT))
        finally:
            self.proc.terminate()
            self.proc.wait()
            self.proc.stdout.close()


@pytest.mark.skipif(not (BEADS_UI.exists() and shutil.which("node")),
                    reason="beads-ui is not installed beside the venv: run make install (needs npm)")
def test_beads_ui_server_reads_and_writes_through_bd(tmp_path):
    proj, home = tmp_path / "proj", tmp_path / "home"
    proj.mkdir(), home.mkdir()
    with Tracker.init(proj, prefix="ui", actor="planner") as t:
        epic = t.create("Epic", issue_type="epic")["id"]
        a = t.create("A", parent=epic)["id"]
        b = t.create("B")["id"]
        t.add_dependency(b, a)
        done = t.create("Done")["id"]
        t.close_issue(done)
    ui = BeadsUi(proj, client_env(home))

    async def scenario(ws) -> None:
        ok = {}
        # Every list beads-ui's views subscribe to: its initial snapshot comes from bd --json.
        for view, spec in [("all", {"type": "all-issues"}), ("epics", {"type": "epics"}),
                           ("blocked", {"type": "blocked-issues"}), ("ready", {"type": "ready-issues"}),
                           ("closed", {"type": "closed-issues"}), ("detail", {"type": "issue-detail", "params": {"id": b}})]:
            ok[view] = (await ui.request(ws, "subscribe-list", {"id": view, **spec}))["ok"]
            await ui.request(ws, "unsubscribe-list", {"id": view})
        assert all(ok.values()), ok
        seen = {view: [i["id"] for i in issues] for view, issues in ui.snapshots.items()}
        assert seen == {"all": [epic, a, b], "epics": [epic], "blocked": [b], "ready": [epic, a],
                        "closed": [done], "detail": [b]}
        assert ui.snapshots["detail"][0]["dependencies"][0]["id"] == a

        async def edit(kind: str, **payload) -> dict:
            reply = await ui.request(ws, kind, payload)
            assert reply["ok"], (kind, reply.get("error"))
            return reply["payload"]

        assert await edit("create-issue", title="From UI", type="bug", priority=1, description="seen in UI")
        [shown] = await edit("update-status", id=a, status="in_progress")
        assert shown["status"] == "in_progress"
        await edit("update-priority", id=a, priority=0)
        for field, value in [("title", "A2"), ("description", "d"), ("acceptance", "acc"), ("notes", "n"),
                             ("design", "g")]:
            await edit("edit-text", id=a, field=field, value=value)
        await edit("update-assignee", id=a, assignee="ann")
        await edit("label-add", id=a, label="ui")
        [shown] = await edit("dep-add", a=epic, b=b)
        assert [d["id"] for d in shown["dependencies"]] == [b]
        await edit("dep-remove", a=epic, b=b)
        assert [c["text"] for c in await edit("add-comment", id=a, text="looks right")] == ["looks right"]
        await edit("update-status", id=b, status="closed")
        # beads-ui deletes with `bd delete ID --force`: the issue becomes a tombstone, as in bd.
        deleted = await ui.request(ws, "delete-issue", {"id": done})
        assert deleted["ok"], deleted.get("error")

    ui.run(scenario)
    with Tracker.open(proj / ".beads" / "mesh.db") as t:
        got = t.get(a)
        assert (got["title"], got["status"], got["priority"], got["assignee"], got["labels"]) == (
            "A2", "in_progress", 0, "ann", ["ui"])
        assert (got["description"], got["acceptance_criteria"], got["notes"], got["design"]) == ("d", "acc", "n", "g")
        assert t.get(b)["status"] == "closed" and t.get(done)["status"] == "tombstone"
        assert done not in [i["id"] for i in t.list(status="closed")]
        [bug] = t.list(issue_type="bug")
        assert (bug["title"], bug["priority"], bug["description"]) == ("From UI", 1, "seen in UI")
        assert "dependencies" not in t.get(epic)
