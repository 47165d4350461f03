"""Roles: the protocol's role and round names, artifact schemas, output parsing, prompts,
and the worker backends that produce the raw answers."""

from .backends import (
    BACKEND_NAMES,
    ERROR_KINDS,
    Backend,
    BackendError,
    CommandBackend,
    ReplayBackend,
    ReplayMismatch,
    Usage,
    WorkerRequest,
    WorkerResponse,
    get_backend,
)
from .definitions import (
    ALL_ROLES,
    CRITIC_ROLES,
    FALLBACK_ROLES,
    FULL_ROLES,
    REVIEWER,
    ROLE_BRIEFS,
    ROUNDS,
    critics_for,
    round_owner,
)
from .parsing import PARSE_ERROR_KINDS, ParsedResponse, ParseError, parse_response
from .prompts import INPUT_KEYS, Prompt, build_prompt
from .schemas import (
    ARTIFACT_SCHEMAS,
    NO_DIFF_PREFIX,
    CritiqueArtifact,
    DecisionLogEntry,
    Finding,
    HydrationArtifact,
    OutboxMessage,
    ProposalArtifact,
    ReviewArtifact,
    RevisionPlanArtifact,
    RevisionStep,
    SynthesisArtifact,
    VoteArtifact,
    looks_like_diff,
)

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
