"""Nothing in flight is lost: jobs that were running when hermesd stopped or died resume.

A job of a kind with ``at_restart="journal"`` (delegations, background jobs,
session turns, Kanban workers: :class:`hermesd.plugin.JobKind`) keeps a journal
in its folder (``jobs/ID/journal.jsonl``, :mod:`hermesd.journal`): its child
appends each completed model call and each tool call, fsynced before the next
step (:mod:`child.journal`).  When the daemon starts again after a crash, or
when a graceful stop interrupted the child, the job goes back to ``queued``
(``starting``/``running → queued``), keeps its id, counts ``resumes`` and
``resumed_at``, and a new child replays the journal and goes on from its last
step: what earlier children spent is in the journal's counters and counted
once, its terminal state and completion notification come once, at its real end.

Unless its plugin says no (``resume_on_restart``: for the job types of
:mod:`hermesd.subagents`, ``delegation.resume_on_restart``) or the job was submitted
with ``resume: false``: then it ends ``lost`` as before.  A job whose journal
is missing or unreadable ends ``lost`` naming why.  The daemon's side here
(the runner's and start-up's hooks) is small on purpose: the journal and its
replay belong to the child.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd import clock
from hermesd.contract.states import JobStatus
from hermesd.contract.wire import JobResult
from hermesd.journal import NAME, JournalError, read

if TYPE_CHECKING:
    from hermesd.runner import Runner

log = logging.getLogger("hermesd")

LOST_WITHOUT_RESUME = "hermesd stopped while this job ran and its process could not be accounted for on restart"
"""The error of a job found running at start-up that does not resume."""


def journal_path(runner: "Runner", job_id: str) -> Path:
    """``jobs/ID/journal.jsonl``."""
    return runner.job_dir(job_id) / NAME


def keeps_journal(runner: "Runner", row: dict[str, Any]) -> bool:
    """Whether the job's child keeps a journal (its kind resumes from one)."""
    return runner.jobs.kind(row["kind"]).at_restart == "journal"


def resumable(runner: "Runner", row: dict[str, Any]) -> bool:
    """Whether the job resumes after a restart: its kind keeps a journal, its plugin's
    ``resume_on_restart`` hook says so (``delegation.resume_on_restart``: :mod:`hermesd.subagents`)
    and the job was not submitted with ``resume: false``."""
    return (keeps_journal(runner, row) and runner.hooks.resume_on_restart(row)
            and (row.get("spec") or {}).get("resume", True) is not False)


def lost_error(runner: "Runner", row: dict[str, Any]) -> str:
    """The ``error`` of ``row``, found running at start-up, that does not resume: :data:`LOST_WITHOUT_RESUME`,
    and why it was not resumed when its kind keeps a journal (``resume: false``, or its plugin's
    ``resume_on_restart``: ``delegation.resume_on_restart: false``)."""
    if not keeps_journal(runner, row):
        return LOST_WITHOUT_RESUME
    if (row.get("spec") or {}).get("resume", True) is False:
        return f"{LOST_WITHOUT_RESUME}; not resumed: it was submitted with --no-resume (resume: false)"
    return f"{LOST_WITHOUT_RESUME}; not resumed: resume_on_restart is false in its job type's config " \
           f"(delegation.resume_on_restart)"


def spec_journal(runner: "Runner", row: dict[str, Any]) -> str | None:
    """The journal path a child of ``row`` is given (``JobSpec.journal``), None for a kind without one."""
    return str(journal_path(runner, row["id"])) if keeps_journal(runner, row) else None


def fresh_journal(runner: "Runner", row: dict[str, Any]) -> None:
    """Before a job's first child starts: an empty journal (an earlier one of the same id is emptied),
    so that a job found running after a crash always has one.  Raises ``OSError``."""
    if keeps_journal(runner, row) and not row.get("resumes"):
        fd = os.open(journal_path(runner, row["id"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.close(fd)


def requeue(runner: "Runner", row: dict[str, Any], why: str) -> None:
    """Send ``row`` (``starting``/``running``, its process gone) back to the queue to resume, or,
    when its journal is missing or unreadable, end it ``lost`` saying so.  ``why``: how its child
    ended (``crash``, ``shutdown``), for the log line.  The totals the next child starts from (the
    journal's last ``api_calls`` and ``tokens``) go in the spec as ``carried``: what the bill
    (``hermesd.billing``) has recorded already."""
    try:
        entries = read(journal_path(runner, row["id"]))
    except JournalError as exc:
        runner.jobs.transition(row["id"], JobStatus.LOST, exit_reason="error",
                               error=f"hermesd stopped while this job ran and it cannot resume: {exc}")
        return
    resumes = int(row.get("resumes") or 0) + 1
    last = next((e for e in reversed(entries) if e["t"] == "message"), {})
    carried = {"api_calls": int(last.get("api_calls") or 0), "tokens": dict(last.get("tokens") or {})}
    runner.jobs.transition(row["id"], JobStatus.QUEUED, resumes=resumes, resumed_at=clock.now_iso(), pid=None,
                           stop_reason=None, spec={**(row.get("spec") or {}), "carried": carried})
    log.info("%s: back in the queue after a %s, to resume from its journal (resume %d)", row["id"], why, resumes)


def after_crash(runner: "Runner", row: dict[str, Any]) -> bool:
    """Start-up, for a job an earlier daemon left ``starting``/``running``: requeued (or ``lost`` for
    its journal) when it resumes — True — else False (the caller ends it ``lost`` as before)."""
    if not resumable(runner, row):
        return False
    requeue(runner, row, "crash")
    return True


def at_shutdown(runner: "Runner", row: dict[str, Any], result: JobResult | None) -> bool:
    """A graceful stop interrupted the job's child: requeued to resume at the next start — True —
    unless the job does not resume or its child ended of its own (completed, failed) meanwhile."""
    if row["status"] == JobStatus.QUEUED:
        return True  # requeued when it reported; now its process exited
    if not resumable(runner, row) or (result is not None and result.status not in (None, JobStatus.INTERRUPTED)):
        return False
    requeue(runner, row, "shutdown")
    return True
