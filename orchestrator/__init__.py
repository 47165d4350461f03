"""mesh's orchestrator: an LLM team takes a beads task from ready to closed and lands it.

A house with rooms by concern; ``docs/architecture.md`` walks through it. Lowest first, each
room may import only the rooms its line names (and ``tracker``, ``redact``, ``roles`` where
named); ``tests/test_layering.py`` reads these lines and checks every import against them.

Subpackages (each ``__init__`` says what it holds):

- ``testruns`` (each test runner's results, test by test: one reader per runner): may import
  ``redact``.
- ``mutants`` (twins of a project's own tests, each expecting another value, that a runner
  must report failed: one module per language): may import ``orchestrator.testruns``.
- ``sandbox``: may import ``redact``, ``roles``, ``orchestrator.testruns``, ``orchestrator.mutants``.
- ``forges`` (pull requests on GitHub and GitLab: one module per forge): may import ``redact``.
- ``worktree``: may import ``tracker``, ``redact``.
- ``toolchains`` (what validation needs of each ecosystem: dependencies, caches, generated
  files, the base check and the base's results by test): may import ``redact``, ``roles``,
  ``orchestrator.testruns``, ``orchestrator.sandbox``, ``orchestrator.worktree``.
- ``evals`` (``mesh eval``: suites from a repository's history, runs of a suite under several
  profiles, their grades, the report and its page): may import ``tracker``, ``redact``, ``roles``,
  ``orchestrator.safe_text``, ``orchestrator.workspace``, ``orchestrator.config``,
  ``orchestrator.eval_settings``, ``orchestrator.testruns``,
  ``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.toolchains``,
  ``orchestrator.ledger``, ``orchestrator.protocol``, ``orchestrator.views``.
- ``ledger``: may import ``tracker``, ``redact``, ``orchestrator.safe_text``, ``orchestrator.price_rows``,
  ``orchestrator.config``.
- ``protocol``: may import ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``,
  ``orchestrator.config``, ``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.toolchains``,
  ``orchestrator.ledger``.
- ``landing``: may import ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``,
  ``orchestrator.config``, ``orchestrator.sandbox``, ``orchestrator.worktree``,
  ``orchestrator.toolchains``,
  ``orchestrator.ledger``, ``orchestrator.protocol``, ``orchestrator.forges``.
- ``views``: may import ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``,
  ``orchestrator.config``, ``orchestrator.sandbox``, ``orchestrator.worktree``,
  ``orchestrator.ledger``, ``orchestrator.protocol``, ``orchestrator.landing``.
- ``mcp_server`` (``mesh mcp``): may import ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``,
  ``orchestrator.workspace``, ``orchestrator.config``, ``orchestrator.sandbox``, ``orchestrator.worktree``,
  ``orchestrator.ledger``, ``orchestrator.protocol``, ``orchestrator.landing``, ``orchestrator.views``,
  ``orchestrator.runner``, ``orchestrator.drain``, ``orchestrator.stopping``.
- ``web`` (``mesh serve``, the live web view where a person takes part): may import ``tracker``,
  ``redact``, ``roles``, ``orchestrator.safe_text``, ``orchestrator.workspace``, ``orchestrator.config``,
  ``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.ledger``, ``orchestrator.protocol``,
  ``orchestrator.landing``, ``orchestrator.views``, ``orchestrator.runner``, ``orchestrator.drain``,
  ``orchestrator.retry``, ``orchestrator.evals``.
- ``cli``: may import anything.

Modules directly here:

- ``safe_text`` (untrusted text made safe for a terminal): may import ``tracker``.
- ``workspace`` (which tracker and which config file a command uses, read as plain TOML): may
  import ``tracker``.
- ``price_rows`` (model prices as plain data, and a price table read without pydantic when it is
  plainly valid): may import nothing.
- ``eval_settings`` (the ``[eval]`` table: arms and history ranges, plain models): may import nothing.
- ``config`` (``mesh.toml`` validated): may import ``redact``, ``roles``, ``orchestrator.sandbox``,
  ``orchestrator.worktree``, ``orchestrator.workspace``, ``orchestrator.price_rows``,
  ``orchestrator.eval_settings``, ``orchestrator.forges``.
- ``runner`` (``mesh run``/``resume`` as a library: the tracker, config, backend, sandbox and
  lease put together into an engine): may import ``tracker``, ``redact``, ``roles``,
  ``orchestrator.safe_text``, ``orchestrator.workspace``, ``orchestrator.config``,
  ``orchestrator.sandbox``, ``orchestrator.worktree``,
  ``orchestrator.toolchains``, ``orchestrator.ledger``,
  ``orchestrator.protocol``, ``orchestrator.landing``.
- ``drain`` (``mesh drain`` as a library: a scope's tasks, ``--jobs`` at a time, landed in
  order): may import what ``runner`` may, and ``orchestrator.runner``, ``orchestrator.views``.
- ``retry`` (``mesh retry``): may import what ``runner`` may, and ``orchestrator.runner``.
- ``stopping`` (a run stops at its next checkpoint on the first SIGINT or SIGTERM): may import
  ``orchestrator.views``.
- ``project_init`` (``mesh init``: a project set up for ``mesh run``): may import ``tracker``,
  ``orchestrator.workspace``, ``orchestrator.toolchains``.
- ``demo`` (``mesh demo``): may import what ``runner`` may, and ``orchestrator.runner``,
  ``orchestrator.views``.
"""
