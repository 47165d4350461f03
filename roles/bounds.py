"""How much of a worker's answer mesh takes: each field, the whole answer, and the patch.

An accepted artifact does not stay where it was written: the proposal is shown to every
critic, the synthesizer and every voter, a critique to the synthesizer and the voters, a
review to the revision rounds, an outbox message to its addressee; every prompt is scrubbed
and logged, every artifact checkpointed. One enormous field would be carried, and scrubbed,
a dozen times over. So the parser refuses an answer past these bounds as ``invalid_shape``,
with a message naming the field, its size and the bound (quoted to the worker in the strict
follow-up, so it can answer shorter). Refused, not cut: an artifact is what its author wrote,
or nothing, and the rounds that read it never vote on half a sentence.

- ``max_field_chars``: any one string of the artifact (a plan step, an assumption, a
  finding's evidence, a vote's reason, a hydrated design) and any outbox message;
- ``max_answer_chars``: all of them together;
- ``max_patch_bytes``: the patch of a synthesis or revision (UTF-8 bytes), which is counted
  in neither of the above: a diff is legitimately larger, and ``patch.max_bytes`` would
  refuse it at integration anyway (here it is refused before the voters are shown it).

Sizes are those of the validated artifact, after the schema's normalising (a vote keeps
the first line of its reason), since that is what later prompts carry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["AnswerBounds", "DEFAULT_BOUNDS", "PATCH_TOO_LARGE", "oversize"]

PATCH_TOO_LARGE = "answer too large: the patch is"
"""How the message about a patch past its bound starts (the engine blocks it as ``patch_refused``)."""


@dataclass(frozen=True)
class AnswerBounds:
    """The bounds of one answer (defaults: docs/config.md, ``[answers]`` and ``patch.max_bytes``)."""

    max_field_chars: int = 16_000
    max_answer_chars: int = 64_000
    max_patch_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        if min(self.max_field_chars, self.max_answer_chars, self.max_patch_bytes) <= 0:
            raise ValueError("answer bounds must be positive")


DEFAULT_BOUNDS = AnswerBounds()


def oversize(artifact: Mapping[str, Any], outbox: Sequence[Mapping[str, Any]] = (),
             bounds: AnswerBounds = DEFAULT_BOUNDS) -> str | None:
    """Why ``artifact`` (a validated artifact's ``model_dump()``) with its ``outbox`` messages is
    too large for ``bounds``, in one line fit to quote to the worker; None when it is not."""
    patch = artifact.get("patch")
    if isinstance(patch, str):
        size = len(patch.encode("utf-8", "surrogatepass"))
        if size > bounds.max_patch_bytes:
            return (f"{PATCH_TOO_LARGE} {size:,} bytes, at most {bounds.max_patch_bytes:,}"
                    " (patch.max_bytes); make a smaller change")
    fields = {key: value for key, value in artifact.items() if key != "patch"}
    total = 0
    for path, text in _strings(fields, ""):
        total += len(text)
        if len(text) > bounds.max_field_chars:
            return (f"answer too large: {path} is {len(text):,} characters, at most {bounds.max_field_chars:,}"
                    " a field (answers.max_field_chars); shorten it")
    for index, message in enumerate(outbox):
        text = str(message.get("message") or "")
        total += len(text)
        if len(text) > bounds.max_field_chars:
            return (f"answer too large: outbox[{index}].message is {len(text):,} characters, at most"
                    f" {bounds.max_field_chars:,} a field (answers.max_field_chars); shorten it")
    if total > bounds.max_answer_chars:
        return (f"answer too large: its fields hold {total:,} characters (the patch aside), at most"
                f" {bounds.max_answer_chars:,} an answer (answers.max_answer_chars); be briefer")
    return None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string inside ``value`` with its path (``findings[0].evidence``), in order."""
    if isinstance(value, str):
        yield path or "the answer", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")
