"""How the hot paths (``bd_hot``'s answers, ``mesh --help``'s generated text) print: as click
would, without importing click or anything else.

May import: the standard library only.
"""

from __future__ import annotations

import os
import sys

__all__ = ["write_answer"]


def write_answer(text: str) -> None:
    """Print an answer as click would (stdout, flushed); a reader that went away ends the
    process with status 1, as click's own command line does."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # What is still buffered goes nowhere, so the interpreter's last flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
