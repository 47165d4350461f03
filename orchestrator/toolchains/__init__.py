"""The project's toolchains: what validation needs beyond the committed tree, per ecosystem.

One module per toolchain (``python``, ``node``, ``go``, ``rust``), each a ``Toolchain``
(``base``): it recognises the project from its manifests and lockfiles, refuses a project whose
declared dependencies are not installed (``DependenciesMissing``, with the one command that
installs them), and says what the validation sandbox shows (``Found``: read-only dependencies
and toolchains, offline variables, a writable build cache, generated files carried from the
checkout) and which check command and allowlist entries fit it. ``table`` lists them in
``TOOLCHAINS``; nothing else in mesh branches on an ecosystem. ``caches`` names the build caches
(per project, outside every tree, written by the base check alone, bounded), ``view`` puts what every toolchain
found into one ``orchestrator.sandbox.project_view.ProjectView``, and ``base_check`` runs the
project's check command on a base tree once per commit.

May import: ``redact``, ``roles``, ``orchestrator.testruns``, ``orchestrator.sandbox``,
``orchestrator.worktree``.
"""
