"""The table of forges: a provider's name to its module's class, its public API's URL and the
variable its token is read from by default. Adding a forge is a module (``model.Forge``) and a row.

May import: ``orchestrator.forges``.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from orchestrator.forges.github import GitHub
from orchestrator.forges.gitlab import GitLab
from orchestrator.forges.model import Forge, ForgeError

__all__ = ["FORGES", "connect"]

FORGES: dict[str, tuple[Any, str, str]] = {
    "github": (GitHub, "https://api.github.com", "GITHUB_TOKEN"),
    "gitlab": (GitLab, "https://gitlab.com/api/v4", "GITLAB_TOKEN"),
}


def connect(provider: str, repository: str, api_url: str | None, token_env: str | None,
            environ: Mapping[str, str] | None = None, *, transport: Any = None) -> Forge:
    """The forge ``provider`` for ``repository``, its token read from the variable ``token_env``
    (the provider's default when None) of ``environ`` (default: this process's)."""
    row = FORGES.get(provider)
    if row is None:
        raise ForgeError(f"forge.provider {provider!r}: one of {', '.join(sorted(FORGES))}")
    kind, default_api, default_token_env = row
    name = token_env or default_token_env
    token = (os.environ if environ is None else environ).get(name)
    if not token:
        raise ForgeError(f"the forge token is not set: export {name} (forge.token_env names the variable)")
    return kind(repository, api_url or default_api, token, transport=transport)
