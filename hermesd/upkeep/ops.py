"""Upkeep of a daemon that runs for months: the ``clean`` op, and a plugin without job
kinds whose hooks detect the cgroup delegation (:mod:`hermesd.system.limits`) and run the
timers that apply the retention policy (:mod:`hermesd.upkeep.retention`), cap job logs
(:mod:`hermesd.upkeep.logcap`) and hold memory limits without a cgroup
(:class:`hermesd.system.limits.MemoryWatch`) in the background."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermesd.contract.launch import LOG_CAP_ENV
from hermesd.plugin import Plugin
from hermesd.protocol import ProtocolError, arg
from hermesd.router import op
from hermesd.system import limits
from hermesd.upkeep import logcap, retention as retention_mod

if TYPE_CHECKING:
    from hermesd.context import Context


class UpkeepPlugin(Plugin):
    """No job kinds: the cgroup delegation (at start, before any child), retention, the log
    cap and the memory watch (timers from restore to shutdown)."""

    def __init__(self, ctx: "Context"):
        super().__init__(ctx)
        ctx.procs.cgroups = limits.Cgroups.detect() if ctx.config.child_limits.cgroup else None
        self.retention = ctx.provide(retention_mod.Retention(ctx.store, ctx.events, ctx.runner.job_dir,
                                                             ctx.config.retention.batch_size))
        self.sweeper = retention_mod.Sweeper(self.retention, lambda: retention_mod.policy_of(ctx.config),
                                             lambda: ctx.config.retention.interval_seconds, ctx.loop)
        self.logcap = logcap.LogCap(lambda: ctx.procs.children, ctx.runner.log_path,
                                    lambda: (ctx.config.logs.max_bytes, ctx.config.logs.keep),
                                    lambda: ctx.config.logs.check_interval_seconds, ctx.loop)
        self.memory = limits.MemoryWatch(lambda: ctx.procs.children, ctx.procs.kill_for_memory,
                                         ctx.procs.kill_command_for_memory, ctx.loop)

    def child_env(self, row: dict[str, Any]) -> dict[str, str]:
        """Every child's log cap (``logs.max_bytes`` and ``keep``), which its own writer holds (:mod:`child.logwriter`)."""
        return {LOG_CAP_ENV: f"{self.ctx.config.logs.max_bytes}:{self.ctx.config.logs.keep}"}

    def restore(self) -> None:
        """Start the retention, log-cap and memory-watch timers."""
        self.sweeper.start()
        self.logcap.start()
        self.memory.start()

    def on_event(self, event: dict[str, Any]) -> None:
        """A reload applies its retention policy at once, not an interval later."""
        if event.get("type") == "daemon.reloaded":
            self.retention.batch_size = self.ctx.config.retention.batch_size
            self.sweeper.now()

    def shutdown(self) -> None:
        """Stop them."""
        self.sweeper.stop()
        self.logcap.stop()
        self.memory.stop()


@op("child.tool_killed", child=True)
async def child_tool_killed(ctx: "Context", job: str, args: dict[str, Any]) -> dict[str, Any]:
    """Whether this job's tool command ``run`` (its ``HERMES_TOOL_RUN``), which ended by
    ``SIGKILL``, was killed for the job's memory limit: ``{"killed": false}``, or ``{"killed":
    true, "by": "hermesd", "limit_mb", "used"}`` (bytes its processes used: the memory watch
    chose it) or ``{"killed": true, "by": "kernel", "limit_mb", "used": null}`` (an OOM kill in
    the job's cgroup not told yet).  Asked once per command: the answer is not kept."""
    run = arg(args, "run", str)
    child = ctx.procs.children.get(job)
    if child is None:
        return {"killed": False}
    used = child.tool_kills.pop(run, None)
    if used is not None:
        return {"killed": True, "by": "hermesd", "limit_mb": child.limits.memory_mb, "used": used}
    kills = ctx.procs.cgroups.oom_kills(job) if child.cgroup and ctx.procs.cgroups is not None else 0
    if kills > child.oom_seen:
        child.oom_seen = kills
        return {"killed": True, "by": "kernel", "limit_mb": child.limits.memory_mb, "used": None}
    return {"killed": False}


@op("clean")
async def clean(ctx: "Context", args: dict[str, Any]) -> dict[str, Any]:
    """Remove finished jobs with their folders and events now: those that ended more than
    ``older_than_seconds`` ago, or, without it, what the config's ``retention:`` policy
    selects.  ``dry_run=true`` only counts.  Never removes a job that is not terminal,
    one whose notification is not yet delivered, or one whose parent (a batch) is not
    terminal.  Returns ``{jobs, folders, events, oldest_seq, sample, dry_run}``
    (``sample``: up to 20 ids; ``events`` of a dry run: the events below the current
    floor).  ``bad_request`` when there is neither an argument nor a policy;
    ``invalid_state`` while another clean-up runs."""
    older = arg(args, "older_than_seconds", (int, float), None, lo=0, hi=1e11)
    dry_run = arg(args, "dry_run", bool, False)
    service = ctx.service(retention_mod.Retention)
    service.batch_size = ctx.config.retention.batch_size
    policy = retention_mod.Policy(max_age_seconds=float(older)) if older is not None else retention_mod.policy_of(ctx.config)
    if not policy.active:
        raise ProtocolError("bad_request", "no retention policy in the config (retention.max_age_days, "
                            "retention.max_jobs); give an age (hermesctl clean --older-than 30d)",
                            {"field": "older_than_seconds"})
    report = await service.apply(policy, dry_run=dry_run,
                                 run_in_thread=lambda fn, *a: ctx.loop.run_in_executor(None, fn, *a))
    return {**report.to_dict(), "dry_run": dry_run}
