"""Git worktrees for jobs (no job kind): a job that asks runs in a ``git worktree`` of its own.

* :mod:`hermesd.worktrees.git`: the git commands, a leaf the child imports too (plan, create,
  inspect, remove);
* :mod:`hermesd.worktrees.ops`: the plugin (planned at admission, settled when the job ends:
  removed when clean, kept when changed) and the ops ``worktrees``, ``worktrees.prune``;
* the child's side: :mod:`child.worktree`.

This module imports nothing (children import its leaf ``git``).
"""
