"""The run protocol: one task through the profile's rounds, checkpointed into the tracker.

Holds the engine (``engine`` drives a run; ``rounds``, ``review`` and ``closing`` are its
rounds, its review cycles and its close), what a run produces and is told (``outcomes``: block
reasons, the run report, the typed exceptions), the checkpoints (``checkpoint``: the one place
that formats, signs, parses, reads and writes ``[orch:*]`` comments; ``runhead``: the signed run
head), the bus of mail between roles, leases, scope and task selection, the context pack, role
agents, faults for the crash harness, what a run shows while it happens (``watch``), the proof of
a validation and its findings, and why nothing was runnable (``idle``).

May import: ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``, ``orchestrator.config``,
``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.toolchains``, ``orchestrator.ledger``. Never ``landing``,
``views``, ``cli`` or the command modules above them.
"""
