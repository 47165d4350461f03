"""Issue 45, items 1 and 2: a forge is configuration, and landed work becomes a pull request, opened
once and kept current. Against fake GitHub and GitLab APIs on loopback whose every request and
answer is checked against the forge's published OpenAPI description (``tests/forgekit.py``), with
pushes to a real bare git remote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest

from orchestrator.config import MeshConfig
from orchestrator.forges.api import check_api_url
from orchestrator.forges.model import ForgeError
from orchestrator.forges.table import connect
from orchestrator.forges.text import neutral
from tests.forgekit import serve
from tests.runkit import MESH, TASK, happy_script, make_workspace, r, synthesis

TOKEN = "ghp_mesh0test0forge0token0value0000001"


@contextmanager
def served(kind: str):
    """A fake ``kind`` forge for the block; it must have seen no request of the wrong shape."""
    state, url, server = serve(kind, TOKEN)
    try:
        yield state, url
    finally:
        server.shutdown()
    assert state.problems == [], state.problems


@pytest.fixture(params=["github", "gitlab"])
def forge(request):
    with served(request.param) as (state, url):
        yield request.param, state, url


def test_model_text_pings_nobody_and_closes_nothing():
    text = neutral("Fixes #12, thanks @alice and @acme/team; closes acme/w#3; resolved group/p!4; GH-7; a@b.com")
    visible = text.replace("\u2060", "")
    assert visible == "Fixes #12, thanks @alice and @acme/team; closes acme/w#3; resolved group/p!4; GH-7; a@b.com"
    for acting in ("@alice", "@acme", "#12", "#3", "!4", "GH-7", "Fixes", "closes", "resolved"):
        assert acting not in text, acting
    assert "a@b.com" in text  # an address is not a mention
    assert neutral("\x1b[31mred\x1b[0m") == "red"


def test_an_api_url_in_clear_is_refused_unless_loopback():
    assert check_api_url("https://api.github.com") is None
    assert check_api_url("http://127.0.0.1:8080/api/v4") is None and check_api_url("http://[::1]:9/") is None
    assert "in clear" in check_api_url("http://github.example.com/api/v3")
    with pytest.raises(ValueError, match="in clear"):
        MeshConfig.model_validate({"forge": {"provider": "github", "repository": "acme/widgets",
                                             "api_url": "http://10.0.0.5/api/v3"}})
    with pytest.raises(ValueError, match="may not be passed to workers"):
        MeshConfig.model_validate({"forge": {"provider": "gitlab", "repository": "acme/widgets"},
                                   "worker_env": ["GITLAB_TOKEN"]})
    with pytest.raises(ValueError, match="may not be passed"):
        MeshConfig.model_validate({"forge": {"provider": "github", "repository": "acme/widgets",
                                             "token_env": "MY_TOKEN"}, "validation": {"env": ["MY_TOKEN"]}})


def test_the_client_finds_opens_updates_and_reads_a_pull_request(forge):
    kind, state, url = forge
    client = connect(kind, "acme/widgets", url, "FORGE_TOKEN", {"FORGE_TOKEN": TOKEN})
    assert client.find_open("mesh/land/x", "main") is None
    opened = client.open("mesh/land/x", "main", "mesh: plan:x", "body one")
    assert (opened.number, opened.head, opened.base, opened.state) == (1, "mesh/land/x", "main", "open")
    assert client.find_open("mesh/land/x", "main") == opened
    updated = client.update(1, "mesh: plan:x", "body two")
    assert updated.number == 1 and state.pulls[0].body == "body two"
    assert client.get(1).url == opened.url
    with pytest.raises(ForgeError) as refused:
        client.open("mesh/land/x", "main", "again", "dup")  # the forge holds one open per head and base
    assert TOKEN not in str(refused.value)
    client.api.close()
    # The token went in its header only, never in a URL.
    assert all(TOKEN not in path for _, path, _ in state.requests)
    with pytest.raises(ForgeError, match="export FORGE_TOKEN"):
        connect(kind, "acme/widgets", url, "FORGE_TOKEN", {})
    bad = connect(kind, "acme/widgets", url, "FORGE_TOKEN", {"FORGE_TOKEN": "wrong"})
    with pytest.raises(ForgeError, match="401"):
        bad.find_open("a", "b")


def _forge_workspace(tmp_path, kind: str, url: str, close_mode: str = "local"):
    ws = make_workspace(tmp_path)
    remote = tmp_path / "remote.git"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True, env=env)
    ws.git("remote", "add", "origin", str(remote))
    ws.git("push", "-q", "origin", "main")
    config = f'close_mode = "{close_mode}"\n' + (ws.repo / "mesh.toml").read_text()
    config += (f'\n[forge]\nprovider = "{kind}"\nrepository = "acme/widgets"\napi_url = "{url}"\n'
               'token_env = "FORGE_TOKEN"\n')
    (ws.repo / "mesh.toml").write_text(config)
    ws.git("add", "mesh.toml")
    ws.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "forge")
    ws.git("push", "-q", "origin", "main")
    return ws, remote


NOTES_PATCH = ("diff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES.md\n"
               "@@ -0,0 +1 @@\n+Conversions are rounded to two decimals.\n")


def test_landed_work_opens_the_scopes_pull_request_once_and_later_landings_update_it(tmp_path, forge, monkeypatch):
    kind, state, url = forge
    monkeypatch.setenv("FORGE_TOKEN", TOKEN)
    ws, remote = _forge_workspace(tmp_path, kind, url)
    code, report, res = ws.run(happy_script(), "--onto", "mesh/land/demo")
    assert code == 0 and report["outcome"] == "closed", res.output
    assert len(state.pulls) == 1
    pull = state.pulls[0]
    with ws.tracker() as t:
        epic = t.get(t.get(TASK)["parent"])["title"]  # the scope's epic names it
    assert (pull.head, pull.base, pull.title) == ("mesh/land/demo", "main", epic)
    assert TASK in pull.body and "opened and updated by mesh" in pull.body.lower()
    landed = ws.git("rev-parse", "mesh/land/demo").strip()
    assert landed[:12] in pull.body
    # The branch went to the real remote.
    pushed = subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "mesh/land/demo"], capture_output=True,
                            text=True).stdout.strip()
    assert pushed == landed
    [cp] = [cp for cp in ws.checkpoints() if cp.kind == "pull-request"]
    assert cp.payload["artifact"]["number"] == 1 and cp.payload["artifact"]["action"] == "opened"
    # The cost of a task's runs goes in its line (replay workers cost nothing: none is said).
    from orchestrator.landing.pull_requests import body_for

    with ws.tracker() as t:
        priced = body_for(t, ws.repo, "mesh/land/demo", "main", running={TASK: {"a-run": 0.4235}})
    assert "$0.42 spent" in priced and "spent" not in pull.body
    # A second task of the scope lands: the same pull request, its body now holding both tasks.
    script = happy_script()
    script["synthesizer"][0] = r("synthesis", synthesis(NOTES_PATCH))
    code, report, res = ws.run(script, "--onto", "mesh/land/demo")
    second = report["task"]["id"]
    assert code == 0 and report["outcome"] == "closed" and second != TASK, res.output
    assert len(state.pulls) == 1 and TASK in state.pulls[0].body and second in state.pulls[0].body
    [cp] = [cp for cp in ws.checkpoints(second) if cp.kind == "pull-request"]
    assert cp.payload["artifact"]["action"] == "updated"
    # mesh forge status asks the forge: the scope's branch and its pull request.
    shown = ws.mesh("forge", "status", "--repo", str(ws.repo), "--json")
    assert shown.exit_code == 0, shown.output
    [row] = json.loads(shown.stdout)
    assert (row["branch"], row["base"], row["pull_request"]["number"], row["pull_request"]["state"]) == (
        "mesh/land/demo", "main", 1, "open")
    # The token is nowhere a person, a worker or a log can read it: not in the tracker, the
    # repository, the remote, mesh's own files or the run's output.
    assert TOKEN not in res.output
    for root in (ws.root,):
        for path in root.rglob("*"):
            if path.is_file() and path.stat().st_size < 50 << 20:
                assert TOKEN.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("point", ["forge-pushed", "forge-opened"])
def test_a_run_killed_between_push_creation_and_checkpoint_resumes_with_one_pull_request(tmp_path, point):
    with served("github") as (state, url):
        ws, _remote = _forge_workspace(tmp_path, "github", url)
        script = ws.write_script(happy_script())
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "FORGE_TOKEN": TOKEN}
        argv = [*MESH, "--db", str(ws.db), "--actor", "tester", "run", "--label", "plan:demo", "--backend", "replay",
                "--script", str(script), "--repo", str(ws.repo), "--json", "--onto", "mesh/land/demo"]
        killed = subprocess.run(argv, capture_output=True, text=True, env={**env, "MESH_CRASH_AT": point}, timeout=300)
        assert killed.returncode == -9, killed.stderr[-2000:]
        assert len(state.pulls) == (1 if point == "forge-opened" else 0)
        # The same command again continues the killed run.
        resumed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        report = json.loads(resumed.stdout) if resumed.stdout.strip().startswith("{") else None
        assert report is not None and report["outcome"] == "closed", resumed.stdout[-2000:] + resumed.stderr[-2000:]
        assert len(state.pulls) == 1, state.pulls
        cps = [cp for cp in ws.checkpoints() if cp.kind == "pull-request"]
        assert len(cps) == 1 and cps[0].payload["artifact"]["number"] == 1


def test_a_forge_that_fails_leaves_the_task_landed_and_says_so(tmp_path, monkeypatch):
    with served("github") as (state, url):
        monkeypatch.setenv("FORGE_TOKEN", "not-the-token")
        ws, _remote = _forge_workspace(tmp_path, "github", url)
        code, report, res = ws.run(happy_script(), "--onto", "mesh/land/demo")
        assert code == 0 and report["outcome"] == "closed", res.output
        assert any("pull request not published" in m and "401" in m for m in report["mutations"]), report["mutations"]
        assert state.pulls == [] and "not-the-token" not in res.output


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


@pytest.mark.parametrize("kind, path, body", [
    ("github", "/repos/acme/widgets/pulls", {"title": "t", "head": "h", "base": "b", "labels": ["x"]}),
    ("github", "/repos/acme/widgets/pulls", {"title": "t", "base": "b"}),
    ("gitlab", "/api/v4/projects/acme%2Fwidgets/merge_requests", {"source_branch": "h", "target_branch": 3,
                                                                  "title": "t"}),
])
def test_the_fakes_refuse_a_request_the_published_description_does_not_allow(kind, path, body):
    """The checks are real: an unknown field, a missing required one, a mistyped one."""
    import httpx

    state, url, server = serve(kind, TOKEN)
    try:
        root = url.removesuffix("/api/v4")
        headers = {"Authorization": f"Bearer {TOKEN}"} if kind == "github" else {"PRIVATE-TOKEN": TOKEN}
        answer = httpx.post(root + path, json=body, headers=headers)
        assert answer.status_code == 422 and state.problems and state.pulls == [], (answer.text, state.problems)
    finally:
        server.shutdown()


def _awaiting_ci(tmp_path, monkeypatch, kind: str, url: str):
    """The demo task landed with close_mode = "ci": its pull request open, the task waiting."""
    monkeypatch.setenv("FORGE_TOKEN", TOKEN)
    ws, remote = _forge_workspace(tmp_path, kind, url, close_mode="ci")
    code, report, res = ws.run(happy_script(), "--onto", "mesh/land/demo")
    assert code == 0 and report["outcome"] == "awaiting_ci", res.output
    return ws, remote


def _sync(ws) -> tuple[int, dict]:
    res = ws.mesh("forge", "sync", "--label", "plan:demo", "--repo", str(ws.repo), "--json")
    return res.exit_code, json.loads(res.stdout)


def test_a_merged_pull_request_closes_its_tasks_bound_to_the_merge_commit(tmp_path, forge, monkeypatch):
    kind, state, url = forge
    ws, remote = _awaiting_ci(tmp_path, monkeypatch, kind, url)
    assert len(state.pulls) == 1
    # Open: nothing changes.
    code, found = _sync(ws)
    assert code == 0 and found["action"] == "open"
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "in_progress"
    # Merged by someone, as a fast-forward of main on the remote: the task closes, bound to it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    tip = subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "mesh/land/demo"], capture_output=True,
                         text=True, env=env, check=True).stdout.strip()
    subprocess.run(["git", "--git-dir", str(remote), "update-ref", "refs/heads/main", tip], check=True, env=env)
    state.pulls[0].merged(tip)
    code, found = _sync(ws)
    assert code == 0 and found["action"] == "closed", found
    assert [(c["task_id"], c["result"]) for c in found["tasks"]] == [(TASK, "closed")]
    with ws.tracker() as t:
        assert t.get(TASK)["status"] == "closed"
    code, found = _sync(ws)  # again: nothing more to do
    assert code == 0 and found["tasks"] == [] and found["action"] == "nothing_waiting"


def test_a_merge_whose_tree_lacks_the_approved_one_closes_nothing(tmp_path, monkeypatch):
    with served("github") as (state, url):
        ws, _remote = _awaiting_ci(tmp_path, monkeypatch, "github", url)
        # "Merged" as a commit of main that never held the approved work (someone reverted it in the merge).
        main = ws.git("rev-parse", "main").strip()
        state.pulls[0].merged(main)
        code, found = _sync(ws)
        assert code == 1 and found["action"] == "none_closed", found
        [check] = found["tasks"]
        assert check["result"] == "refused" and check["problems"], check
        with ws.tracker() as t:
            assert t.get(TASK)["status"] == "in_progress"


def test_a_pull_request_closed_unmerged_leaves_its_tasks_open_and_says_so_once(tmp_path, monkeypatch):
    with served("gitlab") as (state, url):
        ws, _remote = _awaiting_ci(tmp_path, monkeypatch, "gitlab", url)
        state.pulls[0].state = "closed"
        for _ in range(2):
            code, found = _sync(ws)
            assert code == 0 and found["action"] == "closed_unmerged" and found["told"] == [TASK], found
        with ws.tracker() as t:
            assert t.get(TASK)["status"] == "in_progress"
            told = [c for c in t.comments(TASK) if "was closed without being merged" in c["text"]]
        assert len(told) == 1
