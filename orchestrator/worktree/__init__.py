"""Git worktrees and what a patch may do in one.

Holds git driven by subprocess with hooks and ``GIT_*`` stripped (``gitops``: worktrees,
applying a patch, commits, the integration branch's plumbing), the checks a patch passes before
it is applied (``patchcheck``), the patch policy (``policy``), its table of protected paths
(``protected_paths``) and of configuration tools run as code (``tool_configs``), and ``mesh clean`` (``clean``: what finished work left behind).

May import: ``tracker``, ``redact``. Nothing of the rest of ``orchestrator``.
"""
