"""Tie the child's life to the daemon's: PR_SET_PDEATHSIG, a parent check and a watchdog.

When hermesd dies (even by ``kill -9``) the child must die too and take its
process group with it: the commands its tools started run in that group, and
PDEATHSIG alone does not reach them.  Three layers:

1. ``prctl(PR_SET_PDEATHSIG, SIGUSR2)`` (Linux, ``prctl(2)``): the kernel signals
   the child when its parent exits; the handler kills the whole process group.
2. Right after arming, the parent pid is compared with the pid the child
   serves (:func:`serves`): a parent that died before the prctl call is
   caught here.
3. A daemon thread polls ``getppid()`` every 0.2 s, for the case where the
   main thread sits in a long C call and cannot run the Python signal handler.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from hermesd.system.prctl import set_death_signal

DEATH_SIGNAL = signal.SIGUSR2
SERVES_ENV = ("HERMES_LIFELINE_PID", "HERMES_DAEMON_PID")
"""Whom a child serves, first found wins: ``HERMES_LIFELINE_PID`` (a batch item
started by a Ray task: the Ray worker, see :mod:`child.item`), else
``HERMES_DAEMON_PID`` (hermesd)."""
_armed_for: int | None = None  # the parent pid the layers are armed against


def _die_with_group(*_: object) -> None:
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(137)


def serves() -> int | None:
    """The pid this child must die with (see :data:`SERVES_ENV`); None: its parent now."""
    value = next((os.environ[k] for k in SERVES_ENV if os.environ.get(k)), None)
    return int(value) if value else None


def arm(expected_parent: int | None) -> None:
    """Arm all three layers.  Exits at once (status 137, group killed) if the
    parent is already not ``expected_parent``.  Arming again against the same
    parent does nothing (a warm-start spare arms before it has a job)."""
    global _armed_for
    if expected_parent is not None and expected_parent == _armed_for:
        return
    signal.signal(DEATH_SIGNAL, _die_with_group)
    set_death_signal(DEATH_SIGNAL)  # not Linux: the watchdog still works
    if expected_parent is None:
        expected_parent = os.getppid()
    if os.getppid() != expected_parent:
        _die_with_group()

    def watch() -> None:
        while True:
            time.sleep(0.2)
            if os.getppid() != expected_parent:
                _die_with_group()

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
    _armed_for = expected_parent
