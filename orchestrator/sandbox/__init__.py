"""The sandbox: where untrusted commands run.

Holds the bubblewrap command line and the identity a sandbox runs as (``bwrap``), control
groups that cap a whole command tree (``cgroups``), the command workers' sandbox (``worker_sandbox``:
the reduced git view, the hidden tracker, each call's limits), their private HOMEs (``worker_homes``:
one per repository, task, role and program, on a size-bound tmpfs per call, unpacked in a sandbox
of their own) and its network (``netjoin``: pasta, run as ``python -I -m
orchestrator.sandbox.netjoin``; ``egress``: the proxy that lets a worker reach only its
allowlist), the project's environment (``project_env``), validation commands (``validation``),
the build caches each validation is shown (``cache_layers``: the base check's, copied),
the test counts read from their runners' own reports (``testcounts``) and the control tests that
prove a runner honest (``canaries``, with the twins of the project's own tests that
``orchestrator.mutants`` makes).

May import: ``redact``, ``roles``, ``orchestrator.testruns``, ``orchestrator.mutants``. Nothing else of ``orchestrator``
(``orchestrator.config`` reads its limits from here, not the other way round).
"""
