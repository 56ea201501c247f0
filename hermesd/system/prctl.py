"""The three ``prctl(2)`` calls the supervisor needs (Linux; no-ops elsewhere).

* ``PR_SET_CHILD_SUBREAPER`` — orphaned descendants are re-parented to this
  process instead of init, so hermesd reaps what its children leave behind;
* ``PR_GET_CHILD_SUBREAPER`` — asked before each warm start (a warm child must
  be re-parented to the daemon);
* ``PR_SET_PDEATHSIG`` — the kernel sends a signal when the parent exits;

and one more libc call the daemon makes once started, ``malloc_trim(3)``
(glibc), which hands the heap that start-up freed back to the kernel.

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


def release_free_heap() -> bool:
    """``malloc_trim(0)``: return the free memory at the top and inside of the malloc heap
    to the kernel (glibc; bench/README.md: the imports, the config and the reconcile leave about
    1 MiB free but resident at start).  True when glibc released something; False
    elsewhere or when there was nothing to release."""
    libc = _libc()
    return libc is not None and hasattr(libc, "malloc_trim") and libc.malloc_trim(0) == 1
