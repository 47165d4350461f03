"""The ``[forge]`` table of ``mesh.toml``: where landed work becomes a pull request, a plain model
(``orchestrator.config`` holds it as ``MeshConfig.forge``).

May import: ``orchestrator.forges``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ForgeConfig"]


class ForgeConfig(BaseModel):
    """``[forge]``: where landed work becomes a pull request (docs/pull-requests.md)."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["github", "gitlab"]
    # GitHub: OWNER/NAME; GitLab: the project's path (GROUP/NAME, subgroups included).
    repository: str = Field(min_length=3, pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$")
    # The API's root: https://api.github.com, https://HOST/api/v3 (GitHub Enterprise Server),
    # https://gitlab.com/api/v4 or https://HOST/api/v4; None: the provider's public one.
    api_url: str | None = None
    # The variable holding the token (None: GITHUB_TOKEN or GITLAB_TOKEN): read by mesh alone.
    token_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # The git remote branches are pushed to.
    remote: str = Field(default="origin", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    # One pull request per scope (its integration branch, into the branch it follows), or one
    # per task (from mesh/<task>, into the scope's integration branch).
    pull_requests: Literal["scope", "task"] = "scope"

    @field_validator("api_url")
    @classmethod
    def _check_api_url(cls, value: str | None) -> str | None:
        from orchestrator.forges.api import check_api_url

        problem = None if value is None else check_api_url(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def token_name(self) -> str:
        """The variable holding the token."""
        return self.token_env or ("GITHUB_TOKEN" if self.provider == "github" else "GITLAB_TOKEN")
