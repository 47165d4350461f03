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
    # After each push, how long to wait for the pull request head's checks (0: not at all); a
    # failing one is a validation failure of the task that pushed it (a revision follows).
    checks_timeout_s: float = Field(default=0.0, ge=0, le=86400)
    # How often the forge is asked meanwhile.
    checks_poll_s: float = Field(default=15.0, gt=0, le=3600)
    # The checks that must pass (by name: a check run's, a status's context, a GitLab job's);
    # empty: every check reported on the head.
    required_checks: list[str] = Field(default_factory=list)
    # The logins whose reviews on the pull request count: their changes requested and line
    # comments become review findings, their approval is a task's human review. Empty: nobody's.
    reviewers: list[str] = Field(default_factory=list)
    # "auto": mesh merges the pull request once its checks (and a listed reviewer's approval,
    # where a person's review is asked) pass, through the forge's own merge; "never": people do.
    merge: Literal["never", "auto"] = "never"
    # The public address of ``mesh serve`` (e.g. https://mesh.example.com): each task's line in a
    # pull request's body links its report there. None: no link.
    report_url: str | None = None
    # The variable holding the secret of the forge's webhook to ``mesh serve`` (None: no webhook).
    webhook_secret_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("api_url", "report_url")
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
