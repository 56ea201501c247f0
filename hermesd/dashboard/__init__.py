"""The dashboard's part of ``config.yaml`` (``dashboard:``); the dashboard itself is the ``dashboard``
package, a client of the daemon's sockets in a process of its own (imports nothing)."""
