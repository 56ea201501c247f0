"""Containers for jobs' terminal commands, the daemon's side: a plugin without a job kind.

* :mod:`hermesd.containers.ops`: ``ContainersPlugin`` — a job's ``container`` spec
  made at admission, its containers removed when it ends and swept at start-up.

The child's side is :mod:`child.container`.  This module imports nothing.
"""
