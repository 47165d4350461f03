"""Views: what a person reads of runs, read from the tracker's checkpoints.

Holds ``mesh show`` (``show``), ``mesh status`` (``status``), the text and HTML reports
(``report``, ``report_html``) and what ``mesh drain`` shows while it works (``live``).

May import: everything below it: ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``,
``orchestrator.config``, ``orchestrator.sandbox``, ``orchestrator.worktree``,
``orchestrator.ledger``, ``orchestrator.protocol``, ``orchestrator.landing``. Never the command
modules or ``cli``.
"""
