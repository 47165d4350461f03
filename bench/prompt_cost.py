"""Benchmark: what the demo run sends to the Messages API, and how much of it is cacheable.

Runs the demo task (``demo-7kq.1``, the scripted answers of ``examples/demo-script.json``:
one review cycle with a MUST_FIX finding, then approval) with ``--backend anthropic``
through the official SDK against the fake Messages API of ``tests/fake_anthropic.py`` on
127.0.0.1, with the default models, prices and ``[anthropic]`` settings. Then it reads
back every request the fake received and prints:

- input tokens sent per round and per role;
- the share of input tokens behind a cache breakpoint (the prefix up to the last
  ``cache_control`` mark: tools, the shared system block, and during tool turns the
  earlier turns), and the share the fake's prompt cache actually served as reads;
- tokens spent on orchestration itself: API requests made for no role (the orchestrator
  is code, so there are none).

Tokens are the fake server's count: ``ceil(chars / 4)`` of each text segment sent (tool
definitions, system blocks, message blocks). The structured-output schema in
``output_config`` is not counted (the real API adds its own tokens for it).

Usage: python bench/prompt_cost.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.demo import prepare_demo  # noqa: E402
from orchestrator.runner import RunOptions, run  # noqa: E402
from roles.definitions import ALL_ROLES, ROUNDS  # noqa: E402
from tests.fake_anthropic import FakeAnthropic, RoleScript, count_tokens, segments  # noqa: E402

CACHE_TARGET = 0.70


def measure() -> dict:
    """Run the demo over the fake API and return the figures."""
    with tempfile.TemporaryDirectory(prefix="mesh-bench-") as tmp:
        repo, db, script_path = prepare_demo(Path(tmp))
        config = Path(tmp) / "mesh.toml"
        config.write_text((repo / "mesh.toml").read_text() + "\n[anthropic]\nmax_retries = 0\n")
        responder = RoleScript(json.loads(script_path.read_text()))
        with FakeAnthropic(responder) as fake:
            saved = {name: os.environ.get(name) for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")}
            os.environ.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="bench-dummy-key")
            try:
                report = run(RunOptions(label="plan:demo", backend="anthropic", repo=repo, db=db,
                                        config_file=config, actor="mesh-bench"), echo=lambda line: None)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
        if responder.problems or report.outcome != "closed":
            raise SystemExit(f"the demo run did not go as scripted: {report.outcome} {responder.problems}")
        requests = fake.message_requests

    by_round: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_role: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    matrix: dict[tuple[str, str], int] = defaultdict(int)
    totals = defaultdict(int)
    orchestration = 0
    for req in requests:
        parts = segments(req.body)
        tokens = sum(count_tokens(text) for text, _ in parts)
        marks = [i for i, (_, marked) in enumerate(parts) if marked]
        behind = sum(count_tokens(text) for text, _ in parts[: marks[-1] + 1]) if marks else 0
        usage = req.usage or {}
        if req.role is None:
            orchestration += tokens
            continue
        for table, key in ((by_round, req.round), (by_role, req.role)):
            table[key]["requests"] += 1
            table[key]["input_tokens"] += tokens
            table[key]["behind_breakpoint"] += behind
            table[key]["cache_read"] += usage.get("cache_read_input_tokens", 0)
        matrix[(req.round, req.role)] += tokens
        totals["requests"] += 1
        totals["input_tokens"] += tokens
        totals["behind_breakpoint"] += behind
        totals["cache_read"] += usage.get("cache_read_input_tokens", 0)
        totals["cache_write"] += usage.get("cache_creation_input_tokens", 0)
        totals["uncached"] += usage.get("input_tokens", 0)
        totals["output_tokens"] += usage.get("output_tokens", 0)
    return {
        "task": report.task["id"],
        "outcome": report.outcome,
        # Profile order, not arrival order: concurrent critics and voters arrive in any order.
        "by_round": {k: dict(by_round[k]) for k in ROUNDS if k in by_round},
        "by_role": {k: dict(by_role[k]) for k in ALL_ROLES if k in by_role},
        "matrix": {f"{round_name}/{role}": matrix[(round_name, role)] for round_name in ROUNDS for role in ALL_ROLES
                   if (round_name, role) in matrix},
        "totals": dict(totals),
        "behind_breakpoint_share": totals["behind_breakpoint"] / totals["input_tokens"],
        "cache_read_share": totals["cache_read"] / totals["input_tokens"],
        "orchestration_tokens": orchestration,
        "report_usage": report.usage,
    }


def render(figures: dict) -> str:
    """The figures as text tables."""
    lines = [f"Prompt cost of the demo run ({figures['task']}, outcome {figures['outcome']}), anthropic backend"
             " against the fake Messages API",
             "tokens: ceil(chars/4) per text segment sent (the fake server's count; output_config schema not"
             " counted)", ""]

    def table(title: str, rows: dict[str, dict[str, int]]) -> None:
        lines.append(f"{title:<14} {'requests':>8} {'input tokens':>13} {'behind bp':>10} {'share':>6}"
                     f" {'cache read':>11}")
        for key, row in rows.items():
            share = row["behind_breakpoint"] / row["input_tokens"]
            lines.append(f"{key:<14} {row['requests']:>8} {row['input_tokens']:>13} {row['behind_breakpoint']:>10}"
                         f" {share:>6.1%} {row['cache_read']:>11}")
        lines.append("")

    table("round", figures["by_round"])
    table("role", figures["by_role"])
    totals = figures["totals"]
    lines += [
        f"total: {totals['requests']} requests, {totals['input_tokens']} input tokens sent,"
        f" {totals['output_tokens']} output tokens",
        f"behind a cache breakpoint: {totals['behind_breakpoint']} tokens ="
        f" {figures['behind_breakpoint_share']:.1%} of input (target >= {CACHE_TARGET:.0%})",
        f"served from the prompt cache (fake's simulation): {totals['cache_read']} read,"
        f" {totals['cache_write']} written, {totals['uncached']} uncached = {figures['cache_read_share']:.1%} read",
        f"orchestration tokens: {figures['orchestration_tokens']} (no request is made for anything but a role)",
        f"cost at the default prices: ${figures['report_usage']['cost_usd']:.4f} (the run's report)",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = measure()
    print(json.dumps(figures, indent=2) if args.json else render(figures))
    return 0 if figures["behind_breakpoint_share"] >= CACHE_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
