"""The backend interface and the replay backend: order, exhaustion, delays, rounds, threads."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from roles.backends import (
    BackendError,
    ReplayBackend,
    ReplayMismatch,
    Usage,
    WorkerRequest,
    WorkerResponse,
    get_backend,
)
from roles.prompts import Prompt


def request(role="proposer", round="proposal", attempt=1) -> WorkerRequest:
    return WorkerRequest(
        role=role, round=round, task_id="bd-1", run_id="run-1", attempt=attempt, prompt=Prompt("shared\n", "role\n")
    )


# --------------------------------------------------------------------- interface


def test_usage_adds_up_and_serialises():
    total = Usage(input_tokens=10, output_tokens=2, cost_usd=0.5) + Usage(
        input_tokens=1, cache_read_tokens=7, cache_write_tokens=3, cost_usd=0.25
    )
    assert total.to_dict() == {
        "input_tokens": 11,
        "output_tokens": 2,
        "cache_read_tokens": 7,
        "cache_write_tokens": 3,
        "cost_usd": 0.75,
    }
    assert sum([Usage(output_tokens=1)] * 3, Usage()).output_tokens == 3


def test_worker_response_rejects_unknown_error_kinds():
    assert WorkerResponse(text=None, error="refusal").error == "refusal"
    with pytest.raises(ValueError):
        WorkerResponse(text=None, error="exploded")


def test_get_backend_builds_replay_and_ignores_options_left_as_none(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"proposer": ["hello"]}))
    backend = get_backend("replay", script=script, worker_cmd=None)
    assert isinstance(backend, ReplayBackend) and backend.name == "replay"
    assert backend.call(request()).text == "hello"
    assert backend.worst_case(request()) == Usage()


def test_get_backend_errors():
    with pytest.raises(BackendError, match="unknown backend 'gpt'"):
        get_backend("gpt")
    with pytest.raises(BackendError, match="bad options for the replay backend"):
        get_backend("replay", script={"proposer": []}, worker_cmd="cat")
    with pytest.raises(BackendError, match="bad options for the replay backend"):
        get_backend("replay")


def test_importing_roles_does_not_import_the_anthropic_sdk():
    code = "import sys, roles, roles.backends; assert 'anthropic' not in sys.modules, 'SDK imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------ replay


def test_responses_are_consumed_in_order_per_role():
    backend = ReplayBackend({"proposer": ["p1", "p2"], "skeptic": ["s1"]})
    assert backend.call(request()).text == "p1"
    assert backend.call(request("skeptic", "critique")).text == "s1"
    assert backend.call(request()).text == "p2"
    assert backend.remaining() == {"proposer": 0, "skeptic": 0}


def test_exhausted_or_unscripted_roles_get_no_response():
    backend = ReplayBackend({"proposer": ["only"]})
    backend.call(request())
    for response in (backend.call(request()), backend.call(request("critic_b", "critique"))):
        assert (response.text, response.error) == (None, "no_response")
        assert "replay script" in response.detail


def test_object_responses_text_json_and_errors():
    artifact = {"vote": "agree", "reason": "fine ✓"}
    backend = ReplayBackend(
        {
            "skeptic": [
                {"text_json": artifact, "round": "vote"},
                {"error": "timeout"},
                {"error": "no_response", "round": "vote"},
                {"text": "raw", "round": "vote"},
            ]
        }
    )
    first = backend.call(request("skeptic", "vote"))
    assert json.loads(first.text) == artifact and "✓" in first.text
    assert first.model == "replay" and first.error is None
    assert backend.call(request("skeptic", "vote")).error == "timeout"
    assert backend.call(request("skeptic", "vote")).error == "no_response"
    assert backend.call(request("skeptic", "vote")).text == "raw"


def test_delay_sleeps_before_answering():
    backend = ReplayBackend({"proposer": [{"text": "late", "delay_s": 0.2}]})
    started = time.monotonic()
    response = backend.call(request())
    assert response.text == "late"
    assert time.monotonic() - started >= 0.2
    assert response.duration_s >= 0.2


def test_round_mismatch_raises_with_role_rounds_and_index():
    backend = ReplayBackend({"critic_a": [{"text": "a", "round": "critique"}, {"text": "b", "round": "vote"}]})
    backend.call(request("critic_a", "critique"))
    with pytest.raises(ReplayMismatch) as info:
        backend.call(request("critic_a", "critique"))
    error = info.value
    assert isinstance(error, BackendError)
    assert (error.role, error.expected, error.got, error.index) == ("critic_a", "vote", "critique", 1)
    assert "critic_a" in str(error) and "'vote'" in str(error) and "'critique'" in str(error)


def test_concurrent_calls_to_one_role_take_each_response_exactly_once():
    texts = [f"r{i}" for i in range(200)]
    backend = ReplayBackend({"proposer": texts})
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: backend.call(request()).text, range(200)))
    assert sorted(answers) == sorted(texts)
    assert backend.call(request()).error == "no_response"


def test_delays_of_different_roles_overlap():
    roles = ("critic_a", "critic_b", "skeptic")
    backend = ReplayBackend({role: [{"text": role, "delay_s": 0.4}] for role in roles})
    barrier = threading.Barrier(len(roles))

    def call(role):
        barrier.wait()
        return backend.call(request(role, "critique")).text

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(roles)) as pool:
        assert list(pool.map(call, roles)) == list(roles)
    # Serialised calls would take 1.2 s.
    assert time.monotonic() - started < 1.0


# ------------------------------------------------------------- script validation


def test_script_file_is_loaded(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"proposer": [{"text_json": {"plan": ["a"]}}]}), encoding="utf-8")
    assert json.loads(ReplayBackend(path).call(request()).text) == {"plan": ["a"]}
    assert ReplayBackend(str(path)).remaining() == {"proposer": 1}


def test_unreadable_and_invalid_script_files(tmp_path):
    with pytest.raises(BackendError, match="cannot read replay script"):
        ReplayBackend(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"proposer": [}')
    with pytest.raises(BackendError, match="not valid JSON"):
        ReplayBackend(bad)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BackendError, match="not UTF-8"):
        ReplayBackend(binary)


@pytest.mark.parametrize(
    "script, message",
    [
        ([], "must be a JSON object"),
        ({"proposer": "text"}, "must be a list"),
        ({"": ["x"]}, "non-empty strings"),
        ({"proposer": [3]}, r"proposer\[0\] must be a string or an object"),
        ({"proposer": ["ok", {"txt": "typo"}]}, r"proposer\[1\] has unknown key\(s\) txt"),
        ({"proposer": [{"text": "a", "text_json": {}}]}, "both text and text_json"),
        ({"proposer": [{"round": "proposal"}]}, "needs text, text_json or error"),
        ({"proposer": [{"text": {"a": 1}}]}, "text must be a string"),
        ({"proposer": [{"text_json": {1, 2}}]}, "not serialisable"),
        ({"proposer": [{"error": "crash"}]}, "error must be one of"),
        ({"proposer": [{"text": "a", "delay_s": -1}]}, "delay_s must be"),
        ({"proposer": [{"text": "a", "delay_s": "1"}]}, "delay_s must be"),
        ({"proposer": [{"text": "a", "delay_s": True}]}, "delay_s must be"),
        ({"proposer": [{"text": "a", "round": "implementation"}]}, "round must be one of"),
    ],
)
def test_bad_scripts_are_rejected_on_load(script, message):
    with pytest.raises(BackendError, match=message):
        ReplayBackend(script)
