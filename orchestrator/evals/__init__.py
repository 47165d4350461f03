"""``mesh eval``: measure on a repository's own history whether a team beats one agent.

Holds evaluation suites (``suite``: cases built from the repository's first-parent history,
each kept only when its hidden tests fail on its base and pass with its reference, in the
validation sandbox; hand-written cases in the same JSONL form; ``builder`` is ``mesh eval suite
--from-git`` as a library), the runs of a suite (``runs``: every (case, arm, trial) as a real
``mesh run`` in a repository holding only the case's base; ``arms``: what is compared, a profile
with its workers; ``matching``: a budget-matched arm's attempts; ``plan``: the eval's arms, trials,
suite and remote; ``launch``: one ``mesh run`` of them, timed; ``shared``: where the plan, claims
and results are kept, the eval's folder or, for an eval many runners share, its PostgreSQL rows; ``cases``: those repositories and the grade of a
finished run), the report (``report``: per arm figures, errors apart, pass@k and
the paired test; ``page``: its offline HTML page) and the statistics it rests on (``stats``:
Wilson intervals, McNemar's exact test, pass@k and pass^k, the sign-flip test).

May import: ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``, ``orchestrator.workspace``,
``orchestrator.config``, ``orchestrator.eval_settings``, ``orchestrator.testruns``, ``orchestrator.sandbox``,
``orchestrator.worktree``, ``orchestrator.toolchains``, ``orchestrator.ledger``, ``orchestrator.protocol``, ``orchestrator.views``.
"""
