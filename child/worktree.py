"""The child's side of its git worktree (a job spec with ``worktree``: ``--worktree``).

Before the agent starts, :func:`enter` makes the job's worktree (``git worktree add`` on
the new branch ``hermes/JOB_ID``, :func:`hermesd.worktrees.git.create`; a resumed job finds
its own and keeps it) and makes its working directory the agent's.  When the agent has
ended, however it ended, :func:`report` says what the worktree holds (changed files, the
branch's own commits: :func:`hermesd.worktrees.git.inspect`) for the result.  The child
never removes it: the daemon does, once the job has ended and the worktree holds no change
(:mod:`hermesd.worktrees.ops`).  Git runs with the tools' environment (no provider key,
no secret: :func:`child.redact.tool_environment`), since the repository's hooks run too.
"""

from __future__ import annotations

import os
from typing import Any

from child.redact import tool_environment
from hermesd.contract.wire import JobSpec
from hermesd.worktrees import git


class WorktreeError(Exception):
    """The job's worktree could not be made; the text says where and git's reason (shown as it is)."""


def enter(spec: JobSpec) -> None:
    """Make (or find again) the job's worktree and work in it: ``spec.cwd`` and this process's
    working directory become its working directory.  Raises :class:`WorktreeError` saying that
    the worktree could not be made, and git's reason."""
    worktree = spec.worktree
    if not worktree:
        return
    try:
        git.create(worktree, tool_environment())
    except (git.GitError, OSError) as exc:
        raise WorktreeError(f"could not create the job's git worktree {worktree['path']} "
                           f"(branch {worktree['branch']}): {exc}") from None
    os.chdir(worktree["cwd"])
    spec.cwd = worktree["cwd"]


def report(spec: JobSpec | None) -> dict[str, Any] | None:
    """What the job's worktree holds now (:func:`hermesd.worktrees.git.inspect`, with its
    ``path`` and ``branch``), for the result; ``{error}`` when git could not tell; None for a
    job without one."""
    worktree = spec.worktree if spec is not None else None
    if not worktree:
        return None
    where = {"path": worktree["path"], "branch": worktree["branch"]}
    try:
        return {**where, **git.inspect(worktree, tool_environment())}
    except (git.GitError, OSError) as exc:
        return {**where, "error": str(exc)}
