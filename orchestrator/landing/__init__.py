"""Landing: approved work onto an integration branch, once, through a queue across machines.

Holds the lander (``lander``: the one-at-a-time landing queue), what a landing leaves behind
(``records``: the integration branch's name, a landing's result, ``[orch:land]`` checkpoints,
``Mesh-Run`` commits; read by views without the lander),
named locks shared by every runner of a tracker (``locks``), the integration branch following
its base before a task is cut (``follow``), closed work landing before its dependents start
(``catch_up``), and the CI gate: ``mesh ci-close`` (``ci_close``), the
configuration it reads from the protected branch (``ci_config``) and whether a checkout holds the
approved tree (``binding``); the pull requests landed work becomes on a forge (``pull_requests``).

May import: ``tracker``, ``redact``, ``roles``, ``orchestrator.safe_text``, ``orchestrator.config``,
``orchestrator.sandbox``, ``orchestrator.worktree``, ``orchestrator.toolchains``,
``orchestrator.ledger``, ``orchestrator.protocol``, ``orchestrator.forges``. Never ``views``, ``cli`` or the command modules.
"""
