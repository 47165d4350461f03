"""Issue 34, item 7: bounded answers. A field of 3.9 MB in one proposal was carried into every
later prompt and scrubbed each time (97 s, 57 s of mesh's CPU, 224 MB). An answer past a bound
(``roles.bounds``: a field, the whole answer, the patch) is now refused as ``invalid_shape``, so
no later prompt carries it; and the scrubber reads random base64 in one C call per alignment.

The whole-run tests drive ``mesh run`` with the command backend and ``tests/bulky_worker.py``,
which writes down the size of every prompt it is given. Speed is measured in
``bench/bulky_answer.py`` (docs/benchmarks-runs.md); here only counts and sizes are held.
"""

from __future__ import annotations

import base64
import json
import random
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import redact
from orchestrator.config import ConfigError, load_config
from orchestrator.ledger.calls import calls_for
from redact import REDACTED, scrub
from redact.windows import _b32_stream, _fill
from roles.bounds import DEFAULT_BOUNDS, PATCH_TOO_LARGE, AnswerBounds, oversize
from roles.parsing import ParseError, parse_response
from tests.runkit import PATCH_FEATURE, TASK, VALIDATE, make_workspace, proposal, r, synthesis

BULK = 3_900_000
BOUND = DEFAULT_BOUNDS.max_answer_chars


# ---------------------------------------------------------------------------- the bounds


def test_a_field_past_its_bound_is_named_with_its_size_and_the_bound():
    bounds = AnswerBounds(max_field_chars=10, max_answer_chars=100, max_patch_bytes=50)
    assert oversize({"plan": ["x" * 10], "risk": "low"}, bounds=bounds) is None  # at the bound: taken
    message = oversize({"plan": ["ok", "x" * 11], "risk": "low"}, bounds=bounds)
    assert message == ("answer too large: plan[1] is 11 characters, at most 10 a field"
                       " (answers.max_field_chars); shorten it")
    finding = {"finding_id": "F1", "evidence": "e" * 12}
    assert "findings[1].evidence is 12 characters" in oversize({"findings": [{"finding_id": "F0"}, finding]},
                                                                bounds=bounds)
    assert "outbox[0].message is 11 characters" in oversize({"plan": ["a"]}, [{"to": "skeptic", "message": "m" * 11}],
                                                            bounds=bounds)


def test_the_answer_total_counts_every_field_and_the_outbox_but_not_the_patch():
    bounds = AnswerBounds(max_field_chars=10, max_answer_chars=25, max_patch_bytes=50)
    assert oversize({"plan": ["x" * 10, "y" * 10], "risk": "low"}, bounds=bounds) is None  # 23 characters
    message = oversize({"plan": ["x" * 10, "y" * 10], "risk": "low"}, [{"to": "skeptic", "message": "m" * 5}],
                       bounds=bounds)
    assert message == ("answer too large: its fields hold 28 characters (the patch aside), at most 25 an answer"
                       " (answers.max_answer_chars); be briefer")
    patch = "p" * 50
    assert oversize({"patch": patch, "validation_commands": ["make"]}, bounds=bounds) is None
    # The patch has its own bound, in UTF-8 bytes: "é" is two.
    message = oversize({"patch": "é" * 26, "validation_commands": ["make"]}, bounds=bounds)
    assert message.startswith(PATCH_TOO_LARGE) and "52 bytes, at most 50 (patch.max_bytes)" in message


def test_bounds_must_be_positive():
    with pytest.raises(ValueError):
        AnswerBounds(max_field_chars=0)


@pytest.mark.parametrize("strict", [False, True])
def test_the_parser_refuses_an_answer_past_its_bounds_as_invalid_shape(strict):
    artifact = {"plan": ["Add it"], "assumptions": ["a" * (DEFAULT_BOUNDS.max_field_chars + 1)], "risk": "low"}
    text = json.dumps({"role": "proposer", "task_id": "t-1", "artifact": artifact} if strict else artifact)
    with pytest.raises(ParseError) as caught:
        parse_response(text, "proposal", role="proposer", task_id="t-1", strict=strict)
    assert caught.value.kind == "invalid_shape"
    assert caught.value.message.startswith("answer too large: assumptions[0] is 16,001 characters, at most 16,000")
    # A smaller bound of the caller's own, and the same answer under a larger one.
    small = AnswerBounds(max_field_chars=5)
    with pytest.raises(ParseError):
        parse_response(json.dumps({"plan": ["123456"], "assumptions": [], "risk": "low"}), "proposal",
                       role="proposer", task_id="t-1", strict=False, bounds=small)
    parse_response(text, "proposal", role="proposer", task_id="t-1", strict=strict,
                   bounds=AnswerBounds(max_field_chars=20_000))


def test_what_is_measured_is_what_later_prompts_carry():
    # A vote keeps its reason's first line: the 100,000 characters after it are never carried.
    text = json.dumps({"vote": "agree", "reason": "fine\n" + "x" * 100_000})
    parsed = parse_response(text, "vote", role="skeptic", task_id="t-1", strict=False)
    assert parsed.artifact.model_dump() == {"vote": "agree", "reason": "fine"}
    # A patch of 200,000 bytes is a patch, not a field: taken.
    body = "".join(f"+line {n}\n" for n in range(20_000))
    patch = f"--- a/f.py\n+++ b/f.py\n@@ -0,0 +1,20000 @@\n{body}"
    parsed = parse_response(json.dumps(synthesis(patch)), "synthesis", role="synthesizer", task_id="t-1",
                            strict=False)
    assert len(parsed.artifact.patch) > 150_000


def test_the_bounds_are_configured_in_answers_and_the_patch_by_patch_max_bytes(tmp_path):
    assert load_config(tmp_path).answer_bounds == DEFAULT_BOUNDS
    (tmp_path / "mesh.toml").write_text("[answers]\nmax_field_chars = 4000\nmax_answer_chars = 20000\n"
                                        "[patch]\nmax_bytes = 300000\n")
    assert load_config(tmp_path).answer_bounds == AnswerBounds(4000, 20000, 300000)
    (tmp_path / "mesh.toml").write_text("[answers]\nmax_field_chars = 0\n")
    with pytest.raises(ConfigError, match="max_field_chars"):
        load_config(tmp_path)


def test_a_persons_review_is_held_to_the_same_bounds():
    from orchestrator.protocol.human_review import LineComment, ReviewRefused, review_artifact

    lines = {"temperature.py": {8: "    return celsius * 9 / 5 + 32"}}
    comment = LineComment("temperature.py", 8, "x" * 18_000, severity="High")
    with pytest.raises(ReviewRefused) as caught:
        review_artifact("request_changes", "See the comment.", [comment], lines)
    assert caught.value.field == "review"
    assert "findings[0].issue is 18,000 characters, at most 16,000" in str(caught.value)


# ---------------------------------------------------------------------------- the scrubber


def test_the_base32_stream_holds_each_runs_own_decoding():
    rnd = random.Random(3)
    runs = [base64.b32encode(rnd.randbytes(rnd.randrange(15, 40))).decode().rstrip("=") for _ in range(60)]
    for offset in range(8):
        stream, at = _b32_stream(runs, offset), 0
        for run in runs:
            filled = _fill(run[offset:], 8, "A", (1, 3, 6))
            own = base64.b32decode(_fill(run[offset:], 8, "=", (1, 3, 6)))
            assert stream[at:at + len(own)] == own
            at += len(filled) * 5 // 8
        assert at == len(stream)
    assert _b32_stream([], 0) == b"" and _b32_stream(["AB"], 4) == b""


def test_a_base32_key_amid_megabytes_of_random_base64_is_still_redacted(monkeypatch):
    key = "sk-ant-api03-" + "Qm7Zr2Xv9Lp4Tn8Wk3Hs6Dj1Fb5Gc0YaUe2Ri9Ot4Np7Sw3Kx1-Vb8Hy5AA"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    noise = base64.b64encode(random.Random(5).randbytes(1_500_000)).decode()
    leaked = base64.b32encode(key[4:].encode()).decode()
    out = scrub(f"{noise[:1_000_000]} {leaked} {noise[1_000_000:]}")
    assert leaked not in out and REDACTED in out
    assert scrub(noise) == noise  # the random text itself holds nothing


# ---------------------------------------------------------------------------- whole runs


def _bulky_worker(root: Path, home: Path, bulk: dict) -> tuple[str, Path]:
    """The command of ``tests/bulky_worker.py`` with ``bulk``, and the file its prompt sizes go to."""
    script = root / "bulky_worker.py"
    shutil.copy(Path(__file__).with_name("bulky_worker.py"), script)
    log = home / "prompts.jsonl"
    plan = root / "bulky-plan.json"
    plan.write_text(json.dumps({"log": str(log), "patch": PATCH_FEATURE, "commands": [VALIDATE], "bulk": bulk}))
    return " ".join(shlex.quote(str(part)) for part in (sys.executable, script, plan)), log


def _prompts(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_an_enormous_field_is_refused_and_no_later_prompt_carries_it(tmp_path, monkeypatch):
    """The attack review's run, in-process: the proposer's first answer holds 3.9 MB of random
    base64 in one assumption, critic_a's critiques both hold one in a finding. Each is refused
    (``invalid_shape``, naming the field and the bound): the proposer's follow-up answer is taken,
    critic_a's critique is dropped, the task closes; no prompt carries any of it, and mesh scrubs
    each enormous answer once (when it logs it), never again."""
    from tests.test_attack_sandbox import CANARY_API

    ws = make_workspace(tmp_path)
    home = tmp_path / "worker-home"
    home.mkdir()
    config = ws.repo / "mesh.toml"
    config.write_text('worker_home = "real"\n' + config.read_text())
    command, log = _bulky_worker(tmp_path, home, {"chars": BULK, "kind": "base64",
                                                  "rounds": {"proposal": [1], "critic_a:critique": [1, 2]}})
    scrubbed: list[int] = []
    real_pass = redact._scrub_once

    def counted(text: str) -> str:
        scrubbed.append(len(text))
        return real_pass(text)

    monkeypatch.setattr(redact, "_scrub_once", counted)
    started = time.process_time()
    res = ws.mesh("run", "--label", "plan:demo", "--backend", "command", "--worker-cmd", command, "--repo",
                  str(ws.repo), "--json", "--no-land", env={"HOME": str(home), "ANTHROPIC_API_KEY": CANARY_API})
    cpu = time.process_time() - started
    report = json.loads(res.stdout)
    assert report["outcome"] == "closed", res.output

    prompts = _prompts(log)
    asked = sorted((p["round"], p["role"], p["attempt"]) for p in prompts)
    assert asked.count(("proposal", "proposer", 2)) == asked.count(("critique", "critic_a", 2)) == 1
    assert len(asked) == 2 + 4 + 1 + 5 + 1  # proposal twice, critiques (critic_a's twice), synthesis, votes, review
    assert not any(p["bulk"] for p in prompts)
    assert max(p["chars"] for p in prompts) < BOUND, prompts

    with ws.tracker() as t:
        calls = calls_for(t, task_id=TASK)
    refused = [c for c in calls if (c["error"] or "").startswith("rejected: invalid_shape: answer too large")]
    assert [(c["role"], c["round"], c["attempt"]) for c in refused] == [
        ("proposer", "proposal", 1), ("critic_a", "critique", 1), ("critic_a", "critique", 2)]
    assert "assumptions[0] is 3,900,000 characters, at most 16,000 a field" in refused[0]["error"]
    assert "findings[0] is 3,900,000 characters" in refused[1]["error"]
    # The follow-up told the proposer why, in a prompt of its usual size.
    follow_up = next(c for c in calls if (c["round"], c["attempt"]) == ("proposal", 2))
    assert "answer too large: assumptions[0]" in follow_up["prompt"] and len(follow_up["prompt"]) < 10_000
    checkpoints = ws.checkpoints()
    assert sorted(cp.payload["role"] for cp in checkpoints if cp.kind == "critique") == ["critic_b", "skeptic"]
    assert max(len(json.dumps(cp.payload)) for cp in checkpoints) < BOUND

    # Scrubbing: each enormous answer once, when logged; everything else together is small.
    large = [n for n in scrubbed if n > 1_000_000]
    assert len(large) == 3, (large, f"mesh's CPU: {cpu:.1f} s")
    assert sum(scrubbed) - sum(large) < 1_000_000, f"{sum(scrubbed):,} characters scrubbed; CPU {cpu:.1f} s"


def test_a_worker_that_keeps_answering_enormous_fields_blocks_the_run_typed(tmp_path):
    """The same field on both attempts, through the real CLI process with mesh's secrets set:
    the run blocks ``proposal_unparsable`` with the refusal's reason, after two calls."""
    from tests.test_attack_sandbox import MESH, mesh_env

    ws = make_workspace(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    command, log = _bulky_worker(tmp_path, home, {"chars": BULK, "kind": "base64", "rounds": {"proposal": [1, 2]}})
    config = tmp_path / "mesh.toml"
    config.write_text(f'worker_home = "real"\n[validation]\nallow = ["{VALIDATE}"]\n')
    done = subprocess.run(
        [MESH, "--db", str(ws.db), "--actor", "t", "run", "--label", "plan:demo", "--backend", "command",
         "--worker-cmd", command, "--repo", str(ws.repo), "--config", str(config), "--json", "--no-land"],
        env=mesh_env(home), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["outcome"] == "blocked", done.stderr
    assert report["block_reason"] == "proposal_unparsable"
    assert report["block_detail"].startswith("answer too large: assumptions[0] is 3,900,000 characters, at most"
                                             " 16,000 a field (answers.max_field_chars)")
    prompts = _prompts(log)
    assert [(p["round"], p["attempt"]) for p in prompts] == [("proposal", 1), ("proposal", 2)]
    assert max(p["chars"] for p in prompts) < 10_000 and not any(p["bulk"] for p in prompts)
    assert "invalid_shape: answer too large" in done.stderr
    assert [cp.kind for cp in ws.checkpoints()] == ["preflight", "run-head", "outcome"]


def test_a_patch_past_patch_max_bytes_is_refused_before_any_vote(tmp_path):
    """The patch has its own bound: past ``patch.max_bytes`` the synthesis is refused (one
    follow-up), no voter is shown it, and the run blocks ``patch_refused`` (``too_large``) as
    the patch check would have."""
    ws = make_workspace(tmp_path)
    config = ws.repo / "mesh.toml"
    config.write_text(config.read_text() + "\n[patch]\nmax_bytes = 600\n")
    big = r("synthesis", synthesis())
    script = {"proposer": [r("proposal", proposal())], "critic_a": [r("critique", _critique())],
              "critic_b": [r("critique", _critique())], "skeptic": [r("critique", _critique())],
              "synthesizer": [big, big]}
    code, report, res = ws.run(script)
    assert report["outcome"] == "blocked", res.output
    assert report["block_reason"] == "patch_refused"
    assert report["block_detail"].startswith(f"too_large: {PATCH_TOO_LARGE} {len(PATCH_FEATURE.encode()):,} bytes,"
                                             " at most 600 (patch.max_bytes)")
    assert "vote" not in ws.kinds()


def _critique() -> dict:
    return {"findings": ["fine"], "must_fix": [], "vote_flip_conditions": [], "risk": "low"}
