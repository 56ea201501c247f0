"""Upkeep of a daemon that runs for months: a plugin without a job kind.

* :mod:`hermesd.upkeep.ops`: the plugin (its timers, the cgroup delegation found at start) and ``clean``;
* :mod:`hermesd.upkeep.retention`: which finished jobs and events go, in small batches;
* :mod:`hermesd.upkeep.logcap`: the cap on each job's log.

This module imports nothing.
"""
