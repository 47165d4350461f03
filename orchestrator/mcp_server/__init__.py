"""``mesh mcp``: mesh as a Model Context Protocol server, so an agent session can hand work to it.

Modules, one concern each:

- ``jobs``: background runs and drains: each is a detached ``mesh run``/``mesh drain``
  process (its own session: it outlives the MCP session and the client) with a small JSON
  record under the repository's ``.mesh/jobs/``, found again by any later session;
- ``service``: what the tools do, as a library over the tracker and the orchestrator
  (scope views, task creation, starting and following jobs, transcripts, reports, usage),
  with ``InputProblem``: bad input named by its field, with the fix;
- ``tools``: the MCP tools and resources: typed inputs, structured results, progress
  notifications while ``status`` waits;
- ``server``: the FastMCP server over stdio or Streamable HTTP.

Nothing imports it but ``orchestrator.cli.mcp_cli`` (the ``mesh mcp`` command, which imports it,
and with it the MCP SDK, only when the command runs).

May import: ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``, ``orchestrator.workspace``,
``orchestrator.config``, ``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.ledger``,
``orchestrator.protocol``, ``orchestrator.landing``, ``orchestrator.views``, ``orchestrator.runner``,
``orchestrator.drain``, ``orchestrator.stopping``.
"""
