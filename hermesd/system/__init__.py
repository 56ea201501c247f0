"""The OS layer: processes, ``/proc``, ``prctl(2)``, rlimits, cgroups, ``sd_notify``.

* :mod:`hermesd.system.procs`: start, stop, reap and sweep children; every OS call
  behind the ``OS`` seam the tests replace; the ``Spawner`` strategy;
* :mod:`hermesd.system.procfs`: what the daemon reads about other processes from ``/proc``;
* :mod:`hermesd.system.prctl`: the few ``prctl(2)`` calls and ``malloc_trim(3)`` (a leaf children import);
* :mod:`hermesd.system.rlimits`: a job's rlimits in its environment, set in the child (a leaf children import);
* :mod:`hermesd.system.limits`: per-child limits, per-job cgroups v2;
* :mod:`hermesd.system.systemd`: ``sd_notify``.

This module imports nothing: importing a leaf from a child must not pull in the daemon.
"""
