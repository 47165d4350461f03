"""Worker backends: the ways to get a role's raw answer, all behind ``base.Backend``.

- ``base``: the interface (request, response, usage, errors) and ``get_backend``, the
  registry that imports a backend only when it is chosen;
- ``replay`` (scripted answers), ``command`` (a program on stdin/stdout) and ``presets``
  (the agent CLIs Claude Code, Codex and OpenCode, run through ``command``);
- ``anthropic`` (the Messages API, with the read-only repository ``tools``) and ``llm``
  (``llm_backend``: any model of the ``llm`` library); their SDKs are imported only when
  the backend is built, so ``mesh --help`` stays cheap;
- ``settings``: what those two read of the run's configuration, as protocols;
- ``batching`` and ``batch_journal``: the anthropic backend's batch mode, and the file that
  lets a resumed run take the answers of a batch a killed run left running.

It may import the rest of roles (prompts, schemas, definitions), redact, and the backends'
own SDKs; never tracker or orchestrator: the run's configuration is passed in, typed by
``settings.BackendConfig``.
"""

from ..lazy import lazy_exports

# Each name is imported from its module on first use (see ``roles.lazy``).
_EXPORTS = {
    **dict.fromkeys([
        "BACKEND_NAMES", "ERROR_KINDS", "Backend", "BackendError", "Usage", "WorkerRequest",
        "WorkerResponse", "get_backend"
    ], ".base"),
    **dict.fromkeys(["CommandBackend"], ".command"),
    **dict.fromkeys(["ReplayBackend", "ReplayMismatch"], ".replay"),
}

__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "BACKEND_NAMES",
    "ERROR_KINDS",
    "Backend",
    "BackendError",
    "Usage",
    "WorkerRequest",
    "WorkerResponse",
    "get_backend",
    "CommandBackend",
    "ReplayBackend",
    "ReplayMismatch",
]
