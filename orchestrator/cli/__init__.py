"""The ``mesh`` command line: a thin layer of click commands over the libraries.

Holds the commands (``main``: the ``mesh`` group), the console script ``start`` (the hot tracker
reads answered before click is imported, everything else handed to ``main``), ``mesh bd``
(``bd_cli``), ``mesh drain``'s command (``drain_cli``) and ``mesh schema`` (``schema_cli``). Each command
imports what it needs when it runs, so ``mesh --help`` stays fast.

May import: everything.
"""
