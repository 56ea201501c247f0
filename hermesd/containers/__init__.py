"""Containers for jobs' terminal commands, the daemon's side: a plugin without a job kind.

* :mod:`hermesd.containers.ops`: ``ContainersPlugin`` — a job's ``container`` spec
  made at admission, its containers removed when it ends and swept at start-up;
* :mod:`hermesd.containers.engine`: how (the spec, the engine's commands), imported at
  the first job with a container.

The child's side is :mod:`child.container`.  This module imports nothing.
"""
