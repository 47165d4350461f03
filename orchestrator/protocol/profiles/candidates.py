"""``candidates``: several authors, each validated, the passing one kept.

The roles of ``[profiles] candidates`` (three by default; each answers with its own
``models.<role>`` or ``workers.<role>``, so candidates come from different models or agent
CLIs) each write a synthesis at the same time, from the task alone (phase ``k``). Each
candidate is checked by the patch policy and validated aside: on a commit no branch points at
(``Worktree.commit_aside``), so the task branch only ever holds the one kept. The one whose
validation passes is kept; when several pass the reviewer chooses (round ``choice``; a person
reviewing takes the first in order); when none passes, the one with most commands passing
(then the first in order) goes on, and the review gate's validation finding sends it back.
There is no vote: the kept candidate stands (``consensus_ok``). A review that requests changes
is answered by one revision written straight from it.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from typing import Any

from roles.definitions import REVIEWER
from roles.parsing import ParseError, ParsedResponse

from orchestrator.protocol.outcomes import Attempt, Blocked
from orchestrator.protocol.profiles.base import answer_review, synthesis_line, with_reviewer
from orchestrator.protocol.proof import Proof
from orchestrator.protocol.validation_findings import allowed_commands_check

__all__ = ["Candidates"]

PHASE = "k"


class Candidates:
    name = "candidates"

    def roles(self, config) -> list[str]:
        return with_reviewer(list(config.profiles.candidates))

    def decide(self, engine: Any) -> None:
        cfg = engine.config.validation
        authors = list(engine.config.profiles.candidates)
        results = engine._ask_many(authors, "synthesis", {"allowed_commands": cfg.allow}, kind="synthesis",
                                   phase=PHASE, validate=allowed_commands_check(cfg.allow, cfg.required))
        written: dict[str, dict] = {}
        failures: list[Attempt] = []
        for role in authors:
            res = results[role]
            artifact = res if isinstance(res, dict) else (res.parsed.artifact.model_dump() if res.parsed else None)
            if artifact is None:
                failures.append(res)
                engine.bus.note("candidate_dropped", {"failure": res.failure, "error": res.parse_error.message
                                                      if res.parse_error else None}, role)
                continue
            engine._checkpoint("synthesis", role, PHASE, f"candidate of {role}: {synthesis_line(artifact)}",
                               artifact, attempt=res)
            written[role] = artifact
        if not written:
            unparsable = [a for a in failures if a.failure == "unparsable"]
            if unparsable:
                engine._unparsable_patch(unparsable[0])  # the allowlist admits none: a config mistake
            raise Blocked("no_response", f"none of {', '.join(authors)} wrote a candidate")
        engine.candidates = written
        engine.bus.set_synthesis(next(iter(written.values())))
        engine.consensus_ok = True

    def first_patch(self, engine: Any) -> None:
        written: dict[str, dict] = engine.candidates
        proofs = _proofs(engine, written)
        passing = [role for role in written if proofs[role]["passed"]]
        if len(passing) == 1:
            chosen, why = passing[0], "the only candidate whose validation passes"
        elif passing:
            chosen, why = _choose(engine, passing, written, proofs)
        else:
            applied = [role for role in written if not proofs[role].get("refused")]
            if not applied:
                raise Blocked("patch_refused", "; ".join(f"{role}: {proofs[role]['refused']}" for role in written))
            chosen = max(applied, key=lambda role: (sum(bool(r.get("passed")) for r in proofs[role]["results"]),
                                                    -applied.index(role)))
            why = "no candidate passes: the one with most commands passing goes on to the review"
        engine.bus.note("candidate_chosen", {"role": chosen, "why": why, "passing": passing})
        engine.bus.set_synthesis(written[chosen])
        engine._integrate(written[chosen], phase="c", step_name="synthesis")
        stored = engine._stored("proof", None, "r0")
        if stored is not None:
            engine.validation, engine.validation_pass = stored["artifact"]["results"], stored["artifact"]["passed"]
            return
        # The kept candidate's tree is the one it was validated on: its proof stands for the branch.
        kept = proofs[chosen]
        proof = Proof(results=kept["results"], passed=kept["passed"],
                      ran=sum(1 for r in kept["results"] if not r.get("rejected")), commit=engine.worktree.head(),
                      base_tests=engine.base_tests)
        engine.validation, engine.validation_pass = proof.results, proof.passed
        engine._checkpoint("proof", None, "r0", proof.summary(), {**proof.artifact(), "candidate": chosen},
                           details=proof.details())
        engine.watch.validation(proof.results)

    def revise(self, engine: Any, review: Mapping[str, Any]) -> None:
        cycle = engine.bus.review_cycle
        answer_review(engine, review, phase=f"r{cycle}", summary=f"revision for review cycle {cycle}")


def _proofs(engine: Any, written: Mapping[str, dict]) -> dict[str, dict]:
    """Each candidate's validation on a commit of its own (``[orch:proof]`` of its role, phase k):
    validated at the same time (one after the other with ``validation.compare_base``, whose base
    counts are shared), checkpointed in the authors' order."""
    from orchestrator.worktree.gitops import GitError

    proofs = {role: stored["artifact"] for role in written if (stored := engine._stored("proof", role, PHASE))}
    commits: dict[str, str] = {}
    for role in [r for r in written if r not in proofs]:
        patch = written[role]["patch"]
        try:
            if patch.startswith("NO_DIFF:"):
                commits[role] = engine.worktree.head()
            else:
                policy = engine._checked_patch(patch)
                commits[role] = engine.worktree.commit_aside(
                    patch, f"mesh: candidate of {role} for {engine.task['id']}", policy=policy)
        except (Blocked, GitError) as exc:
            why = f"{exc.reason}: {exc.detail}" if isinstance(exc, Blocked) else f"{exc.reason}: {exc}"
            proofs[role] = {"results": [], "passed": False, "commit": None, "base_tests": None, "refused": why}
            engine._checkpoint("proof", role, PHASE, f"candidate of {role} refused: {why}", proofs[role])

    def validate(role: str) -> Proof:
        return engine._validate_head(list(written[role].get("validation_commands") or []), head=commits[role])

    at_once = len(commits) > 1 and not engine.config.validation.compare_base
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(commits) if at_once else 1) as pool:
        running = {role: pool.submit(validate, role) for role in commits}
        for role in written:
            if role in running:
                proof = running[role].result()
                proofs[role] = proof.artifact()
                engine._checkpoint("proof", role, PHASE, f"candidate of {role}: {proof.summary()}", proofs[role],
                                   details=proof.details())
    return proofs


def _choose(engine: Any, passing: list[str], written: Mapping[str, dict],
            proofs: Mapping[str, dict]) -> tuple[str, str]:
    """The reviewer's choice between several passing candidates (round ``choice``)."""
    if engine.human_review:
        return passing[0], "several pass and a person reviews: the first in order"

    def known(parsed: ParsedResponse) -> None:
        if parsed.artifact.choice not in passing:
            raise ParseError("invalid_shape", f"choice must be one of {', '.join(passing)}")

    inputs = {"candidates": {role: {"patch": written[role]["patch"], "validation": proofs[role]["results"]}
                             for role in passing}}
    artifact, attempt = engine._ask_one(REVIEWER, "choice", inputs, kind="choice", phase=PHASE, validate=known)
    if artifact is None:
        failure = attempt.failure if attempt else "none"
        return passing[0], f"the reviewer's choice failed ({failure}): the first in order"
    engine._checkpoint("choice", REVIEWER, PHASE, f"chose {artifact['choice']}", artifact, attempt=attempt,
                       details=artifact["reason"])
    return artifact["choice"], f"the reviewer's choice: {artifact['reason']}"
