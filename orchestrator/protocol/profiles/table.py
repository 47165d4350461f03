"""Every profile by name: the one table ``profile = "…"`` is looked up in."""

from __future__ import annotations

from orchestrator.protocol.profiles.base import Profile
from orchestrator.protocol.profiles.candidates import Candidates
from orchestrator.protocol.profiles.full import Full
from orchestrator.protocol.profiles.lite import Lite
from orchestrator.protocol.profiles.single import Single

__all__ = ["PROFILES", "profile_for"]

PROFILES: dict[str, Profile] = {p.name: p for p in (Full(), Lite(), Single(), Candidates())}


def profile_for(name: str) -> Profile:
    """The profile called ``name`` (config validation admits only these names)."""
    return PROFILES[name]
