"""Profiles: which rounds a run goes through to its patch, and how it answers a review.

Each profile is one module behind the small protocol of ``base`` (``Profile``), listed in
``table.PROFILES``; ``mesh.toml``'s ``profile`` (or ``--profile``) picks one, ``[profiles]``
holds their settings. The engine does the rest the same way for every profile: hydration,
the review gate, the close rule, checkpoints and resume. docs/protocol.md ("Profiles")
describes each one's rounds, consensus, close rule and checkpoints.

- ``full``: the mesh profile (proposal, three critiques, synthesis, five votes; a revision
  plan with its critique and vote before each revision).
- ``lite``: proposal, one critique, synthesis; a review's changes answered by one revision.
- ``single``: one agent's patch, sent back with the validation's failures up to N times.
- ``candidates``: N patches by different roles (models, agent CLIs), each validated aside;
  the one that passes is kept, the reviewer choosing between several.

May import what ``orchestrator.protocol`` may (the engine's mixins call into it through the
engine object it is given).
"""
