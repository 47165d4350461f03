"""Grade test logs with SWE-bench's own functions (run as a program by tests/test_swebench_agreement.py).

Loads ``swebench`` from its wheel (``make eval-wheels``: the wheel and unidiff's, nothing else)
without running its packages' ``__init__`` (which imports Docker's client and Hugging Face's
datasets, which grading does not use), then, for each job read as JSON lines from stdin
(``log``: the test command's output; ``FAIL_TO_PASS``, ``PASS_TO_PASS``: the instance's lists),
prints SWE-bench's status map, its report (``get_eval_tests_report``) and its resolution
(``get_resolution_status``) as one JSON line.

Usage: python tests/swebench_grade.py WHEELS_FOLDER < jobs.jsonl
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path


def load(folder: Path):
    wheel = next(folder.glob("swebench-*.whl"))
    sys.path[:0] = [str(path) for path in folder.glob("*.whl")]
    for name, inner in (("swebench", "swebench"), ("swebench.harness", "swebench/harness")):
        package = types.ModuleType(name)
        package.__path__ = [f"{wheel}/{inner}"]  # zipimport reads inside the wheel
        sys.modules[name] = package
    from swebench.harness import grading
    from swebench.harness.log_parsers.python import parse_log_pytest

    return grading, parse_log_pytest


def main() -> None:
    grading, parse_log_pytest = load(Path(sys.argv[1]))
    for line in sys.stdin:
        job = json.loads(line)
        status = parse_log_pytest(job["log"], None)
        report = grading.get_eval_tests_report(status, {"FAIL_TO_PASS": job["FAIL_TO_PASS"],
                                                        "PASS_TO_PASS": job["PASS_TO_PASS"]})
        print(json.dumps({"status": status, "report": report, "resolution": grading.get_resolution_status(report)}))


if __name__ == "__main__":
    main()
