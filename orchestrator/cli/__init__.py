"""The ``mesh`` command line: a thin layer of click commands over the libraries.

Holds the commands (``main``: the ``mesh`` group, its entry point ``orchestrator.cli.main:main``),
``mesh drain``'s command (``drain_cli``) and ``mesh schema`` (``schema_cli``). Each command
imports what it needs when it runs, so ``mesh --help`` stays fast.

May import: everything.
"""
