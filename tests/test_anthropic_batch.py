"""Batch mode of the ``anthropic`` backend (``[anthropic] batch = true``): the official SDK
against the fake Messages API's Message Batches endpoints on 127.0.0.1, no mocks.

A whole ``mesh run`` of the demo task is scripted per role exactly as an unbatched one
(``RoleScript``); the tests check that a round's critics and voters share one batch, that the
run costs half, that errored and expired batch requests take the engine's normal paths, that
tool turns go into the next batch, and that the key is written nowhere. Backend-level tests
cover the batch's own limits: its total wait, cancelling on close, refused creation.
"""

from __future__ import annotations

import concurrent.futures
import json
import signal
import threading
import time

import anthropic
import pytest

from orchestrator.config import ConfigError, MeshConfig
from roles.backends.anthropic import AnthropicBackend
from roles.backends.base import BackendError
from roles.backends.batching import BatchCollector
from tests.fake_anthropic import api_error, batch_result, message, serving, tool_use
from tests.runkit import TASK, demo_script, happy_script, make_workspace, proposal, r
from tests.test_anthropic_backend import KEY as BACKEND_KEY, PROPOSAL, config, request
from tests.test_anthropic_run import KEY, assert_key_written_nowhere, calls, run_anthropic

# Short gathering window and polls: a round's threads start within milliseconds of each other.
BATCH = {"batch": "true", "batch_window_s": 0.3, "batch_poll_s": 0.05}


@pytest.fixture
def ws(tmp_path):
    return make_workspace(tmp_path)


def batch_shapes(fake) -> list[tuple[str, int]]:
    """(round, number of requests) of each batch, in order; a batch is always of one round."""
    shapes = []
    for batch in fake.batches:
        assert len(batch.rounds) == 1, batch.rounds
        shapes.append((next(iter(batch.rounds)), batch.size))
    return shapes


def call_log(ws) -> list[tuple]:
    return [(c["role"], c["round"], c["attempt"], (c["error"] or "").split(":")[0] or None) for c in calls(ws)]


# ------------------------------------------------------------------ whole runs


def test_a_batched_demo_run_closes_one_batch_a_round_at_half_the_cost(tmp_path):
    plain_ws, batch_ws = make_workspace(tmp_path / "plain"), make_workspace(tmp_path / "batch")
    code, plain, res, plain_fake = run_anthropic(plain_ws, demo_script())
    assert code == 0, res.output
    code, report, res, fake = run_anthropic(batch_ws, demo_script(), anthropic=BATCH, batch_polls=2)
    assert code == 0, res.output
    assert report["outcome"] == "closed" and report["task"]["final_status"] == "closed"
    assert report["review"]["cycles"] == plain["review"]["cycles"] == 2

    # Nothing went to the plain endpoint; every request went in a batch, polled until it ended.
    assert fake.message_requests == [] and plain_fake.batches == []
    assert len(fake.batched_requests) == len(plain_fake.message_requests) == report["usage"]["calls"]
    shapes = batch_shapes(fake)
    assert [size for round_name, size in shapes if round_name == "critique"] == [3, 3]
    assert [size for round_name, size in shapes if round_name == "vote"] == [5, 5]
    assert all(size == 1 for round_name, size in shapes if round_name not in ("critique", "vote"))
    looks = [req for req in fake.requests if req.method == "GET" and not req.path.endswith("/results")]
    assert len(looks) >= 3 * len(fake.batches)  # two looks in progress, one ended (and the SDK's own)
    # A batched request is the plain request's body: schema, cached system blocks, tools.
    batched = {(req.role, req.round): req.body for req in fake.batched_requests}
    for req in plain_fake.message_requests:
        assert batched[(req.role, req.round)].keys() == req.body.keys()

    # The same tokens at half the price, in the report and in the calls log.
    for kind in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert report["usage"][kind] == plain["usage"][kind] > 0
    # (the report rounds to the micro-dollar)
    assert report["usage"]["cost_usd"] == pytest.approx(plain["usage"]["cost_usd"] / 2, abs=1e-6)
    assert sum(c["usage"]["cost_usd"] for c in calls(batch_ws)) == pytest.approx(report["usage"]["cost_usd"], abs=1e-6)
    assert_key_written_nowhere(batch_ws, res)
    assert not any(KEY.encode() in req.raw for req in fake.requests + fake.batched_requests)


def test_the_batch_flag_of_mesh_run_sends_every_call_in_a_batch(ws):
    """``mesh run --batch`` with no batch setting in the config: every call goes in a batch."""
    quick = {key: value for key, value in BATCH.items() if key != "batch"}  # the window and polls, not the key
    code, report, res, fake = run_anthropic(ws, happy_script(), anthropic=quick, args=("--batch",))
    assert code == 0, res.output
    assert fake.message_requests == [] and len(fake.batched_requests) == report["usage"]["calls"] > 0


def test_a_run_killed_while_its_batch_runs_takes_that_batchs_answers_when_resumed(ws):
    """SIGKILL while a batch runs leaves it running on the API's side (billed all the same): the
    resumed run finds its requests in the batch journal and takes their answers from that batch;
    no request is sent in a batch twice."""
    import os
    import subprocess
    import sys

    from tests.fake_anthropic import FakeAnthropic, RoleScript
    from tests.test_anthropic_run import config_text

    cfg = ws.root / "mesh-batch.toml"
    cfg.write_text(config_text(ws, anthropic=BATCH))
    responder = RoleScript(demo_script())
    base = [sys.executable, "-c", "from orchestrator.cli.main import main; main()", "--db", str(ws.db), "--actor",
            "tester"]
    with FakeAnthropic(responder, batch_polls=10**6) as fake:
        # A cache of its own: the journal then holds this test's batches only (the fake's batch
        # ids repeat from one test to the next).
        env = {**{k: v for k, v in os.environ.items() if k != "MESH_CRASH_AT"}, "ANTHROPIC_BASE_URL": fake.url,
               "ANTHROPIC_API_KEY": KEY, "XDG_CACHE_HOME": str(ws.root / "cache")}
        proc = subprocess.Popen([*base, "run", "--label", "plan:demo", "--backend", "anthropic", "--repo",
                                 str(ws.repo), "--config", str(cfg), "--no-land", "--json"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        journal = ws.root / "cache" / "mesh-batches" / "journal.jsonl"
        deadline = time.monotonic() + 60
        # Killed once the batch is noted in the journal (right after it was created).
        while not (fake.batches and journal.exists() and fake.batches[0].id in journal.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "no batch was created and noted"
            time.sleep(0.02)
        proc.kill()
        proc.wait(timeout=30)
        [first] = fake.batches
        assert not first.canceled and first.status == "in_progress"  # left running, as after a crash
        for batch in fake.batches:
            batch.polls_left = 0
        fake.batch_polls = 0
        done = subprocess.run([*base, "resume", TASK, "--force", "--backend", "anthropic", "--repo", str(ws.repo),
                               "--config", str(cfg), "--no-land", "--json"], env=env, capture_output=True, text=True,
                              timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "closed"
    # The first batch's request was answered once and taken by the resumed run, not sent again.
    assert len(fake.batched_requests) == len(calls(ws))
    later = [json.dumps(req.body, sort_keys=True) for batch in fake.batches[1:] for req in batch.requests]
    assert all(json.dumps(req.body, sort_keys=True) not in later for req in first.requests)
    assert fake.message_requests == []


def test_an_errored_or_expired_batch_request_takes_the_engines_retry(ws):
    script = happy_script()
    script["critic_b"][:0] = [api_error(500, "api_error", "boom")]
    script["reviewer"][:0] = [batch_result("expired")]
    code, report, res, fake = run_anthropic(ws, script, anthropic=BATCH)
    assert code == 0, res.output
    assert report["outcome"] == "closed" and "Traceback" not in res.output
    log = call_log(ws)
    # errored -> no_response, expired -> timeout: the profile's one retry, in a batch of its own.
    assert ("critic_b", "critique", 1, "no_response") in log and ("critic_b", "critique", 2, None) in log
    assert ("reviewer", "review", 1, "timeout") in log and ("reviewer", "review", 2, None) in log
    errored = next(c for c in calls(ws) if c["role"] == "critic_b" and c["attempt"] == 1)
    assert "errored: api_error: boom" in errored["error"] and "msgbatch_" in errored["error"]
    assert batch_shapes(fake) == [("proposal", 1), ("critique", 3), ("critique", 1), ("synthesis", 1),
                                  ("vote", 5), ("review", 1), ("review", 1)]
    assert_key_written_nowhere(ws, res)


def test_tool_turns_go_into_the_next_batch(ws):
    script = happy_script()
    script["critic_a"][:0] = [tool_use("read_file", {"path": "temperature.py"})]
    code, report, res, fake = run_anthropic(ws, script, anthropic=BATCH)
    assert code == 0, res.output
    assert report["outcome"] == "closed"
    # The critics answer together; critic_a's turn after its tool result is a batch of one.
    assert batch_shapes(fake)[1:3] == [("critique", 3), ("critique", 1)]
    [continued] = fake.batches[2].requests
    assert continued.role == "critic_a" and len(continued.body["messages"]) == 3
    assert "def celsius_to_fahrenheit" in continued.body["messages"][2]["content"][0]["content"]
    critique_calls = [c for c in calls(ws) if c["round"] == "critique"]
    assert len(critique_calls) == 3 and all(c["error"] is None for c in critique_calls)


def test_a_refused_key_on_batch_creation_exits_2_with_one_message(ws):
    refused = [api_error(401, "authentication_error", "invalid x-api-key")]
    code, report, res, fake = run_anthropic(ws, {"proposer": [r("proposal", proposal())]}, anthropic=BATCH,
                                            batch_create_errors=refused)
    assert code == 2
    assert "ANTHROPIC_API_KEY" in res.stderr and "Traceback" not in res.output
    assert fake.batches == [] and KEY not in res.output


# ------------------------------------------------------------------ the backend's own limits


@pytest.fixture
def fake(monkeypatch):
    yield from serving(monkeypatch, BACKEND_KEY)


def batched(**settings) -> AnthropicBackend:
    return AnthropicBackend(config(batch=True, batch_window_s=0.2, batch_poll_s=0.05, **settings))


def test_a_journal_entry_of_a_batch_the_api_no_longer_has_is_passed_over(fake, tmp_path):
    """The journal names a batch the API does not know (deleted, another account's): the request
    goes out in a new batch, and the entry is not looked for again."""
    from roles.backends.batch_journal import BatchJournal

    path = tmp_path / "journal.jsonl"
    fake.push(message(json.dumps(PROPOSAL)), message(json.dumps(PROPOSAL)))
    backend = AnthropicBackend(config(batch=True, batch_window_s=0.05, batch_poll_s=0.05), batch_journal=path)
    assert backend.call(request()).error is None
    backend.close()
    # As if that batch had never been read: its entry unused, its id one the API never gave.
    [entry] = [json.loads(line) for line in path.read_text().splitlines() if "key" in json.loads(line)]
    path.write_text(json.dumps({**entry, "batch": "msgbatch_gone"}) + "\n")
    backend = AnthropicBackend(config(batch=True, batch_window_s=0.05, batch_poll_s=0.05), batch_journal=path)
    response = backend.call(request())
    backend.close()
    assert response.error is None and json.loads(response.text)["plan"] == PROPOSAL["plan"]
    assert len(fake.batches) == 2
    assert any(req.method == "GET" and req.path.endswith("/msgbatch_gone") for req in fake.requests)
    assert BatchJournal(path).pending(entry["key"]) is None


def test_concurrent_calls_share_a_batch_and_each_gets_its_own_answer(fake):
    answers = [{**PROPOSAL, "plan": [f"plan {n}"]} for n in range(4)]
    fake.push(*(message(json.dumps(answer)) for answer in answers))
    backend = batched()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(backend.call, [request() for _ in range(4)]))
    backend.close()
    assert [b.size for b in fake.batches] == [4]
    # Results are matched by custom_id: each thread got the answer to its own request.
    assert sorted(json.loads(resp.text)["plan"][0] for resp in responses) == [f"plan {n}" for n in range(4)]
    assert all(resp.error is None and resp.usage.cost_usd > 0 for resp in responses)


def test_cost_and_worst_case_are_half_the_plain_price(fake):
    usage = {"input_tokens": 1000, "output_tokens": 100, "cache_read_input_tokens": 2000,
             "cache_creation_input_tokens": 500}
    fake.push(message(json.dumps(PROPOSAL), usage=usage), message(json.dumps(PROPOSAL), usage=usage))
    plain, half = AnthropicBackend(config()), batched()
    full, batch = plain.call(request()), half.call(request())
    assert len(fake.message_requests) == len(fake.batched_requests) == 1
    assert batch.usage.input_tokens == full.usage.input_tokens == 1000
    assert batch.usage.cache_read_tokens == full.usage.cache_read_tokens == 2000
    assert full.usage.cost_usd > 0 and batch.usage.cost_usd == pytest.approx(full.usage.cost_usd / 2)
    assert half.worst_case(request()).cost_usd == pytest.approx(plain.worst_case(request()).cost_usd / 2)
    assert half.worst_case(request()).input_tokens == plain.worst_case(request()).input_tokens
    plain.close()
    half.close()


def test_a_batch_past_its_timeout_is_cancelled_and_the_call_times_out(fake):
    fake.batch_polls = 10**6  # never ends by itself
    backend = batched(batch_timeout_s=0.4)
    started = time.monotonic()
    response = backend.call(request())
    assert time.monotonic() - started < 5
    assert response.error == "timeout" and "batch_timeout_s=0.4s" in response.detail
    [batch] = fake.batches
    assert batch.canceled and batch.status == "canceling"
    cancels = [req.path for req in fake.requests if req.path.endswith("/cancel")]
    assert cancels == [f"/v1/messages/batches/{batch.id}/cancel"]
    backend.close()


def test_close_cancels_a_running_batch(fake):
    fake.batch_polls = 10**6
    backend = batched(timeout_s=SLOW_MACHINE_S)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(backend.call, request())
        wait_for_a_batch(fake)
        backend.close()
        response = waiting.result(timeout=SLOW_MACHINE_S)
    assert fake.batches[0].canceled
    assert response.error == "no_response" and "closed" in response.detail
    assert BACKEND_KEY not in response.detail


# The client's timeout in the tests that close a running batch: a create answered late on a
# loaded machine is not sent again (a second batch, the first never cancelled).
SLOW_MACHINE_S = 120.0


def wait_for_a_batch(fake) -> None:
    """Until the backend looked at its batch: it has the batch's id then, so close() cancels it
    (the create request merely received by the fake may not have been answered yet)."""
    deadline = time.monotonic() + SLOW_MACHINE_S  # a bound on a hang only
    while not any(req.method == "GET" and req.path.startswith("/v1/messages/batches/") for req in list(fake.requests)):
        assert time.monotonic() < deadline, "the backend never looked at a batch"
        time.sleep(0.02)


def test_a_batch_interrupted_by_ctrl_c_is_cancelled_on_close(fake):
    fake.batch_polls = 10**6
    backend = batched(timeout_s=SLOW_MACHINE_S)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    def press_ctrl_c():
        wait_for_a_batch(fake)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        threading.Thread(target=press_ctrl_c, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):  # the call waits in this, the main, thread
            backend.call(request())
    finally:
        signal.signal(signal.SIGALRM, previous)
    [batch] = fake.batches
    assert not batch.canceled
    backend.close()  # what mesh run's clean-up does
    assert batch.canceled


@pytest.mark.parametrize("status, error_type", [(401, "authentication_error"), (404, "not_found_error")])
def test_a_refused_batch_creation_raises_in_every_waiting_thread(fake, status, error_type):
    fake.batch_create_errors.append(api_error(status, error_type, "no"))
    backend = batched()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(backend.call, request()) for _ in range(2)]
        for future in futures:
            with pytest.raises(BackendError, match=f"HTTP {status}"):
                future.result()
    assert fake.batches == []
    backend.close()


def test_an_unreachable_api_fails_every_request_of_the_batch(fake, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    backend = batched(max_retries=0)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        responses = list(pool.map(backend.call, [request(), request()]))
    assert [resp.error for resp in responses] == ["no_response"] * 2
    assert all(resp.detail.startswith("the batch was not created: connection failed") for resp in responses)
    assert responses[0] is not responses[1]
    backend.close()


# ------------------------------------------------------------------ the parts


def test_the_collector_gathers_a_window_and_passes_errors_to_every_thread():
    sent = []

    def send(items):
        sent.append(list(items))
        if "bad" in items:
            raise RuntimeError("refused")
        return [item.upper() for item in items]

    collector = BatchCollector(send, window_s=0.2)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        assert list(pool.map(collector.submit, ["a", "b", "c"])) == ["A", "B", "C"]
        futures = [pool.submit(collector.submit, item) for item in ("x", "bad")]
        for future in futures:
            with pytest.raises(RuntimeError, match="refused"):
                future.result()
    assert collector.submit("lone") == "LONE"
    assert sorted(map(sorted, sent)) == [["a", "b", "c"], ["bad", "x"], ["lone"]]


def test_the_fake_batch_endpoints_speak_the_sdks_shapes(fake):
    fake.batch_polls = 1
    fake.push(message("hello"), api_error(529, "overloaded_error", "busy"), batch_result("canceled"))
    client = anthropic.Anthropic(api_key=BACKEND_KEY, base_url=fake.url, max_retries=0)
    params = {"model": "claude-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    created = client.messages.batches.create(requests=[{"custom_id": f"c{n}", "params": params} for n in range(3)])
    assert created.processing_status == "in_progress" and created.results_url is None
    assert created.request_counts.processing == 3
    assert client.messages.batches.retrieve(created.id).processing_status == "in_progress"
    ended = client.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended" and ended.results_url.endswith(f"/{created.id}/results")
    assert ended.request_counts.succeeded == ended.request_counts.errored == ended.request_counts.canceled == 1
    results = {line.custom_id: line.result for line in client.messages.batches.results(created.id)}
    assert results["c0"].type == "succeeded" and results["c0"].message.content[0].text == "hello"
    assert results["c0"].message.usage.input_tokens > 0
    assert results["c1"].type == "errored" and results["c1"].error.error.type == "overloaded_error"
    assert results["c2"].type == "canceled"

    fake.batch_polls = 10**6
    running = client.messages.batches.create(requests=[{"custom_id": "only", "params": params}])
    assert client.messages.batches.cancel(running.id).processing_status == "canceling"
    assert client.messages.batches.retrieve(running.id).processing_status == "ended"
    [line] = client.messages.batches.results(running.id)
    assert line.result.type == "canceled"
    assert [b.size for b in fake.batches] == [3, 1] and fake.message_requests == []
    client.close()


@pytest.mark.parametrize("settings, key", [
    ({"batch_window_s": 0}, "anthropic.batch_window_s"),
    ({"batch_poll_s": 20, "batch_timeout_s": 10}, "anthropic"),
    ({"batch": "maybe"}, "anthropic.batch"),
])
def test_batch_settings_are_validated(settings, key):
    with pytest.raises(ConfigError, match=key):
        MeshConfig().with_overrides(**{f"anthropic__{name}": value for name, value in settings.items()})
    assert MeshConfig().anthropic.batch is False
