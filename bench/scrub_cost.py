"""Benchmark: what scrubbing costs on a megabyte, with and without known secrets.

scrub runs on every text mesh stores or prints (prompts and answers reach megabytes). The
text is a mixed megabyte (source code, log lines with credentials to
redact, so scrub makes its second, confirming pass), the same as one JSON string (escapes
everywhere: the escape views are read in full), and a megabyte of base64 of random bytes (tens
of thousands of short base32 and hex runs inside it, each a candidate encoding of a secret: the
costliest text per megabyte, and what a worker's enormous answer may well be). "known
secrets" sets an Anthropic-shaped key and a value with spaces and symbols, which turns on the
window search of redact.windows.

Every figure is the best of N runs (default 5). The second table repeats pathological units
(the starts of tokens the patterns look for) to 25,000 and 200,000 characters: linear work
takes about 8x as long on the larger, quadratic work 64x.

Usage: python bench/scrub_cost.py [--runs N]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from redact import scrub  # noqa: E402

JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-api03-" + "Qm7Zr2Xv9Lp4Tn8Wk3Hs6Dj1Fb5Gc0Ya" * 3,
           "DEPLOY_SERVICE_TOKEN": "Zq8vLm3x Tr9w/Kp2+sNf7h!"}


def _mixed_megabyte() -> str:
    source = (ROOT / "orchestrator" / "sandbox" / "validation.py").read_text()
    log = (
        "2024-05-01 INFO GET /api/v1/items?page=2 200 12ms\n"
        f"export API_KEY=abc123def456 token=9f8e7d6c5b4a Authorization: Bearer {JWT}\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
    )
    block = source + log * 20
    return (block * (1_000_000 // len(block) + 1))[:1_000_000]


def best(text: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        scrub(text)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    mixed = _mixed_megabyte()
    noise = base64.b64encode(random.Random(1).randbytes(750_000)).decode()
    texts = {"mixed megabyte": mixed, "as one JSON string": json.dumps({"log": mixed}), "random base64": noise}
    for name in SECRETS:
        os.environ.pop(name, None)
    for label in ("no known secret", "known secrets"):
        if label == "known secrets":
            os.environ.update(SECRETS)
        for name, text in texts.items():
            print(f"{label:16} {name:20} {len(text) / 1e6:.2f} MB  {best(text, runs) * 1000:7.1f} ms")


PATHOLOGICAL = ["sk-a", "eyJa.", "token=", "token:", "-token ", 'password="', "x.y", "a:b@", "://a:", "AKIA",
                "bearer ", "authorization: ", "a" * 50, "-" * 50, "key="]


def pathological(runs: int) -> None:
    print(f"{'unit':18} {'25K ms':>8} {'200K ms':>8} {'ratio':>6}  (linear ~8x)")
    for unit in PATHOLOGICAL:
        small = (unit * (25_000 // len(unit) + 1))[:25_000]
        large = (unit * (200_000 // len(unit) + 1))[:200_000]
        t_small, t_large = best(small, runs), best(large, max(1, runs // 2))
        print(f"{unit[:18]!r:18} {t_small * 1000:8.1f} {t_large * 1000:8.1f} {t_large / max(t_small, 1e-6):6.1f}")


if __name__ == "__main__":
    main()
    pathological(3)
