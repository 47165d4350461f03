"""The ``llm`` backend through llm's own OpenAI plugin and the real ``openai`` SDK, pointed
by llm's ``extra-openai-models.yaml`` at a fake Chat Completions server on 127.0.0.1: the
schema reaches the wire, the SDK's usage and error classes map as documented, and the key
from llm's keys.json goes to the server and nowhere else."""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.config import DEFAULT_ROLES, MeshConfig
from roles.backends import BackendError, WorkerRequest, get_backend
from roles.backends.llm_backend import output_schema
from roles.prompts import Prompt
from roles.schemas import ARTIFACT_SCHEMAS

KEY = "sk-local-test-3f9a1c77d2e04b"
PROPOSAL = {"plan": ["Add it"], "assumptions": [], "risk": "low"}


class FakeChat:
    """Answers POST /v1/chat/completions from a queue of (status, body); records requests."""

    def __init__(self, replies):
        self.replies = deque(replies)
        self.requests: list[tuple[dict, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status, reply = fake.replies.popleft() if fake.replies else (500, {"error": {"message": "empty"}})
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def completion(text: str, *, prompt_tokens: int = 1000, cached: int = 0) -> dict:
    return {"id": "c1", "object": "chat.completion", "created": 1, "model": "local-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 12, "total_tokens": prompt_tokens + 12,
                      "prompt_tokens_details": {"cached_tokens": cached}}}


def error(message: str, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


@pytest.fixture
def backend_for(tmp_path, monkeypatch):
    """A function: fake server -> llm backend whose every role uses the fake's model."""
    home = tmp_path / "llm-user"
    home.mkdir()
    monkeypatch.setenv("LLM_USER_PATH", str(home))
    (home / "keys.json").write_text(json.dumps({"local": KEY}))

    def make(fake: FakeChat):
        (home / "extra-openai-models.yaml").write_text(
            f"- model_id: local-chat\n  model_name: local-model\n  api_base: {fake.url}\n"
            f"  api_key_name: local\n  supports_schema: true\n")
        config = MeshConfig.model_validate({
            "models": {role: "openai:local-chat" for role in DEFAULT_ROLES},
            "prices": {"as_of": "2026-11-01", "models": {"local-chat": {"input": 1.0, "output": 2.0}}}})
        return get_backend("llm", config=config)

    return make


def request() -> WorkerRequest:
    return WorkerRequest(role="proposer", round="proposal", task_id="t-1", run_id="r-1", attempt=1,
                         prompt=Prompt(shared="# Round: proposal\nshared\n", role_part="# Your role: proposer\n"),
                         schema=ARTIFACT_SCHEMAS["proposal"])


def test_the_schema_goes_out_and_openai_usage_comes_back_priced(backend_for):
    with FakeChat([(200, completion(json.dumps(PROPOSAL), cached=768))]) as fake:
        response = backend_for(fake).call(request())
    assert response.error is None and json.loads(response.text) == PROPOSAL and response.detail is None
    headers, body = fake.requests[0]
    assert headers["authorization"] == f"Bearer {KEY}"
    assert body["model"] == "local-model"
    assert body["messages"][0] == {"role": "system", "content": "# Round: proposal\nshared"}
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "output", "schema": output_schema(ARTIFACT_SCHEMAS["proposal"], "proposal", False)[1]}}
    usage = response.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (232, 768, 12)
    # No cache_read price row: 0.1 x input.
    assert usage.cost_usd == pytest.approx((232 * 1.0 + 768 * 0.1 + 12 * 2.0) / 1e6)
    assert response.model == "local-chat"


def test_an_sdk_status_error_is_no_response_with_one_line(backend_for):
    with FakeChat([(400, error("context too long\nfor this model"))]) as fake:
        response = backend_for(fake).call(request())
    assert response.error == "no_response"
    assert response.detail.startswith("HTTP 400 BadRequestError: Error code: 400 - ") and "\n" not in response.detail


def test_a_refused_key_stops_the_run_without_the_key(backend_for):
    with FakeChat([(401, error(f"Incorrect API key provided: {KEY}", "authentication_error"))]) as fake:
        with pytest.raises(BackendError) as raised:
            backend_for(fake).call(request())
    message = str(raised.value)
    assert message.startswith("the provider refused the API key of model 'openai:local-chat' (HTTP 401)")
    assert KEY not in message and "[REDACTED]" in message
