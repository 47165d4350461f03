"""``mesh eval``: measure on a repository's own history whether a team beats one agent.

Holds evaluation suites (``suite``: cases built from the repository's first-parent history,
each kept only when its hidden tests fail on its base and pass with its reference, in the
validation sandbox; hand-written cases in the same JSONL form; ``builder`` is ``mesh eval suite
--from-git`` as a library), the runs of a suite (``runs``: every (case, profile) as a real
``mesh run`` in a repository holding only the case's base; ``cases``: those repositories and the
grade of a finished run), the report (``report``: per profile figures and the paired test;
``page``: its offline HTML page) and the statistics it rests on (``stats``: Wilson intervals,
McNemar's exact test).

May import: ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``, ``orchestrator.workspace``,
``orchestrator.config``, ``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.toolchains``,
``orchestrator.ledger``, ``orchestrator.protocol``, ``orchestrator.views``.
"""
