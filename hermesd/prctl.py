"""The three ``prctl(2)`` calls the supervisor needs (Linux; no-ops elsewhere).

* ``PR_SET_CHILD_SUBREAPER`` — orphaned descendants are re-parented to this
  process instead of init, so hermesd reaps what its children leave behind;
* ``PR_GET_CHILD_SUBREAPER`` — asked before each warm start (a warm child must
  be re-parented to the daemon);
* ``PR_SET_PDEATHSIG`` — the kernel sends a signal when the parent exits.

libc is opened once per process (``dlopen`` costs about 0.1 ms, and warm
starts ask on every spawn).  Constants from ``<linux/prctl.h>``.
"""

from __future__ import annotations

import ctypes
import functools

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _prctl(option: int, *args: object) -> int:
    """``prctl(option, args…)``; -1 where there is no ``prctl`` (not Linux)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "prctl"):
        return -1
    padded = (*args, 0, 0, 0, 0)[:4]
    return libc.prctl(option, *padded)


def set_death_signal(signum: int) -> bool:
    """Have the kernel send ``signum`` to this process when its parent exits; False if unsupported."""
    return _prctl(PR_SET_PDEATHSIG, int(signum)) == 0


def become_subreaper() -> bool:
    """Make this process a child subreaper; False where unsupported."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0


def is_subreaper() -> bool:
    """True when this process is a child subreaper."""
    value = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value)) == 0 and value.value > 0
