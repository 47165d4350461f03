"""Where ``mesh ci-close`` takes its configuration from: never the branch under review.

ci-close runs in CI's checkout of the branch whose work it is asked to close, and that
branch's ``mesh.toml`` is written by the same hands (or models) as the work: its
``validation.env`` would hand a CI secret to the revalidated code, its ``tracker.url``
would point the close at another tracker, its ``validation.allow`` would widen what runs.
The configuration is therefore, in order:

1. ``--config FILE`` outside the checkout: CI's own file (the only one that may also turn
   the sandbox off). A ``--config`` inside the checkout is refused: it is the branch's.
2. the protected branch's ``mesh.toml`` (else its ``pyproject.toml`` ``[tool.mesh]``, else
   the defaults), read from git objects (``git cat-file blob REF:mesh.toml``), never from
   the work tree. The protected branch is ``--base REF`` (env ``MESH_CI_BASE``: the
   integration branch CI protects, e.g. ``origin/main``), by default ``origin/HEAD`` (the
   remote's default branch, which ``git clone`` records), else a local ``main``, else
   ``master``.
3. none of these: ci-close refuses (exit 2), naming the option to give.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.config import ConfigError, MeshConfig, config_from_text, load_config
from orchestrator.worktree.gitops import GitError
from orchestrator.worktree.gitops import _git as gitops_git

__all__ = ["DEFAULT_BASES", "CiConfigError", "ci_config"]

DEFAULT_BASES = ("origin/HEAD", "main", "master")


class CiConfigError(Exception):
    """ci-close has no trusted configuration to read (one line saying what to give)."""


def _git(repo: Path, *args: str):
    return gitops_git(repo, *args, check=False)


def _resolve(repo: Path, ref: str) -> str | None:
    proc = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def _blob(repo: Path, commit: str, path: str) -> str | None:
    proc = _git(repo, "cat-file", "blob", f"{commit}:{path}")
    return proc.stdout if proc.returncode == 0 else None


def ci_config(checkout: Path, base: str | None, config_file: Path | None) -> tuple[MeshConfig, str, bool]:
    """(configuration, where it came from, whether it may choose the sandbox) for ci-close
    in ``checkout`` (the top of the git checkout under review)."""
    checkout = Path(checkout).resolve()
    try:
        if config_file is not None:
            path = Path(config_file).resolve()
            if path.is_relative_to(checkout):
                raise CiConfigError(f"--config {config_file} is a file of the checkout under review: give CI's own"
                                    " file from outside it, or --base REF to read the protected branch's mesh.toml")
            return load_config(checkout, path), str(path), True
        for ref in ([base] if base else DEFAULT_BASES):
            commit = _resolve(checkout, ref)
            if commit is not None:
                config = config_from_text(_blob(checkout, commit, "mesh.toml"), _blob(checkout, commit, "pyproject.toml"),
                                          ref)
                return config, f"{ref} ({commit[:12]})", False
    except (ConfigError, GitError) as exc:
        raise CiConfigError(str(exc)) from None
    if base:
        raise CiConfigError(f"--base {base} names no commit in {checkout} (fetch it first, e.g. `git fetch origin"
                            f" main`, and give the remote-tracking ref: --base origin/main)")
    raise CiConfigError(f"no protected branch to read mesh.toml from in {checkout} (none of {', '.join(DEFAULT_BASES)}"
                        " exists): give --base REF (the integration branch, fetched) or --config FILE (CI's own)")
