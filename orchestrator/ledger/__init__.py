"""The ledger: every worker call, what it cost, and the logs of it.

Holds the calls log (``calls``), usage by task, role and model (``usage``), model prices
(``prices``) and ``mesh logs`` with its full-text search (``logs``).

May import: ``tracker``, ``redact``, ``orchestrator.safe_text``, ``orchestrator.price_rows``,
``orchestrator.config``.
"""
