"""``mesh serve``: the live web view of a tracker, where a person follows runs and takes part.

Server-rendered pages (Starlette, Jinja2 with autoescape, a little htmx) over the same tracker
the runs write to, SQLite or PostgreSQL: the board of a scope, a task's runs as a transcript
that grows while they run, the drains of a scope, usage and the logged calls, and the person's
side: the review of a run that waits for one, retrying a blocked task, stopping a scope's
drains from starting new tasks.

One module per concern: ``app`` (routes), ``board``, ``task`` and ``ledger_pages`` (what each page
shows, plain functions over the tracker returning dicts, testable without a server), ``chart``
(the usage chart as SVG), ``events`` (Server-Sent Events whose ids come from the tracker, so a
page resumes after a restart without a gap or a repeat), ``changes`` (waking streams when the
tracker changed), ``security`` (token, same-origin check, Content-Security-Policy), and
``templates/`` and ``static/`` (htmx vendored with its license: nothing is fetched from the
internet). Starlette and uvicorn are imported only when the server runs.

May import: ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``, ``orchestrator.workspace``,
``orchestrator.config``, ``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.ledger``,
``orchestrator.protocol``, ``orchestrator.landing``, ``orchestrator.views``, ``orchestrator.runner``,
``orchestrator.drain``, ``orchestrator.retry``, ``orchestrator.evals``.
"""
