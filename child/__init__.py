"""One subagent run, in its own OS process (``python -m child``).

The daemon starts this package with ``HERMES_JOB_ID``, ``HERMES_CHILD_SOCKET``,
``HERMES_CHILD_TOKEN`` and ``HERMES_DAEMON_PID`` in the environment; the child
fetches its job spec over ``children.sock`` and reports back on it.  A batch
item on a Ray cluster is started by its Ray task instead (:mod:`child.item`:
``HERMES_ITEM_DIR`` and ``HERMES_LIFELINE_PID``, spec and result in files).
"""
