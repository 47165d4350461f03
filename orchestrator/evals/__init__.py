"""``mesh eval``: measure on a repository's own history whether a team beats one agent.

Holds evaluation suites (``suite``: cases built from the repository's first-parent history,
each kept only when its hidden tests fail on its base and pass with its reference, in the
validation sandbox; hand-written cases in the same JSONL form) and the statistics a report
rests on (``stats``: Wilson intervals, McNemar's exact test); ``builder`` is ``mesh eval suite
--from-git`` as a library.

May import: ``tracker``, ``redact``, ``roles``, ``orchestrator.workspace``, ``orchestrator.config``,
``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.toolchains``.
"""
