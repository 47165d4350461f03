"""A child process that dies with its parent (Linux ``PR_SET_PDEATHSIG``).

``die_with_parent`` is meant for ``preexec_fn`` (it runs between fork and exec, so it only makes
one call of a C library loaded beforehand): a ``mesh run`` killed with SIGKILL then takes its
worker processes and their sandboxes with it, and a killed ``mesh eval`` its runs, instead of
leaving them running with nobody to stop them. Elsewhere than Linux it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1
try:
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # no C library to ask: nothing to set
    _LIBC = None


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when the thread that started it ends."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
