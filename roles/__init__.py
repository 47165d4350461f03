"""Roles: what the protocol asks of each worker and how its answer is read.

The middle layer of mesh, below the orchestrator. It holds:

- ``definitions``: the rounds and roles, their briefs, and who answers which round;
- ``schemas``: the pydantic model of every round's artifact;
- ``prompts``: each worker's prompt, rendered from the Jinja2 templates of ``templates/``;
- ``parsing``: a worker's raw text turned into a validated artifact, reading JSON and, in
  tolerant mode, markdown (``fields``: each round's field kinds and aliases;
  ``markdown``: the section scanner and its readers; ``bounds``: how large an answer may be);
- ``contract``: the worker contract, rendered from the code;
- ``usage``: the tokens and cost of calls (a plain dataclass);
- ``lazy``: this package's names imported on first use;
- ``backends``: the ways to get a role's answer (see ``roles.backends``).

May import: ``redact`` (to scrub what workers and tools print). Besides it, the standard
library, pydantic, jinja2 and the templates folder (data only); nothing of tracker (a
role's inputs reach it as plain data) and never orchestrator, not even for types: what a
backend reads of the run's configuration is the protocol ``BackendConfig`` of
``roles.backends.settings``, which the orchestrator's config satisfies.
"""

from .lazy import lazy_exports

# Each name is imported from its module on first use (see ``roles.lazy``).
_EXPORTS = {
    **dict.fromkeys([
        "BACKEND_NAMES", "ERROR_KINDS", "Backend", "BackendError", "CommandBackend", "ReplayBackend",
        "ReplayMismatch", "Usage", "WorkerRequest", "WorkerResponse", "get_backend"
    ], ".backends"),
    **dict.fromkeys([
        "ALL_ROLES", "CRITIC_ROLES", "FALLBACK_ROLES", "FULL_ROLES", "REVIEWER", "ROLE_BRIEFS", "ROUNDS",
        "critics_for", "round_owner", "round_roles"
    ], ".definitions"),
    **dict.fromkeys(["PARSE_ERROR_KINDS", "ParsedResponse", "ParseError", "parse_response"], ".parsing"),
    **dict.fromkeys(["AnswerBounds"], ".bounds"),
    **dict.fromkeys(["INPUT_KEYS", "Prompt", "build_prompt"], ".prompts"),
    **dict.fromkeys([
        "ARTIFACT_SCHEMAS", "NO_DIFF_PREFIX", "CritiqueArtifact", "DecisionLogEntry", "Finding",
        "HydrationArtifact", "OutboxMessage", "ProposalArtifact", "ReviewArtifact", "RevisionPlanArtifact",
        "RevisionStep", "SynthesisArtifact", "VoteArtifact", "looks_like_diff"
    ], ".schemas"),
}

__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    # definitions
    "ROUNDS",
    "FULL_ROLES",
    "FALLBACK_ROLES",
    "REVIEWER",
    "CRITIC_ROLES",
    "ALL_ROLES",
    "ROLE_BRIEFS",
    "critics_for",
    "round_owner",
    "round_roles",
    # schemas
    "HydrationArtifact",
    "ProposalArtifact",
    "CritiqueArtifact",
    "DecisionLogEntry",
    "SynthesisArtifact",
    "VoteArtifact",
    "Finding",
    "ReviewArtifact",
    "RevisionStep",
    "RevisionPlanArtifact",
    "OutboxMessage",
    "ARTIFACT_SCHEMAS",
    "NO_DIFF_PREFIX",
    "looks_like_diff",
    # parsing
    "PARSE_ERROR_KINDS",
    "ParseError",
    "ParsedResponse",
    "parse_response",
    "AnswerBounds",
    # prompts
    "INPUT_KEYS",
    "Prompt",
    "build_prompt",
    # backends
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
