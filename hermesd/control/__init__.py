"""The operator controls: a plugin without a job kind.

* :mod:`hermesd.control.ops`: the plugin, ``pause`` and ``resume``;
* :mod:`hermesd.control.pause`: the queue's durable pause switch;
* :mod:`hermesd.control.dependencies`: jobs that start after others (``after``);
* :mod:`hermesd.control.staleness`: live jobs' last signs of activity, which are stale;
* :mod:`hermesd.control.hooks`: ``hooks.on_job_end``, a command per ended job.

This module imports nothing.
"""
