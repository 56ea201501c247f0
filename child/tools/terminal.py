"""The ``terminal`` tool: run one shell command in the job's working directory.

Process groups — two requirements pull in different directions:

1. hermesd stops a job with ``killpg(child_pgid)`` (and the child's lifeline
   does the same when the daemon dies), so every command a tool starts must be
   *in the child's process group*: a command in a group of its own would
   survive its job.
2. A command that runs past its timeout, or is running when the job is asked
   to stop, must die *with everything it started* — but the child cannot
   ``killpg`` its own group without killing itself.

So the command stays in the child's group and session (no ``setsid``, no
``setpgid``), and on timeout or stop the tool kills the command's process tree
itself: the descendants of its ``/bin/sh`` (found with psutil) plus every
process still carrying this run's ``HERMES_TOOL_RUN`` marker in its environment
— that catches the double-forked orphans (``(cmd &)``, ``nohup cmd &``) that
init adopted and the parent chain no longer leads to.  SIGTERM first, SIGKILL
after a short grace.  A command that finishes normally may leave background
processes behind on purpose (a server for a later step); they live in the
child's group and end with the job.

Memory: over the job's memory limit, the daemon kills the largest process of the
job with the rest of its command (they share their ``HERMES_TOOL_RUN``), or the
kernel's OOM killer does in the job's cgroup, where every command runs with the
highest ``oom_score_adj`` (:data:`hermesd.system.rlimits.TOOL_OOM_SCORE_ADJ`) so
that it goes before the agent.  A command that ends by ``SIGKILL`` asks the daemon
whether that was the limit (``child.tool_killed``); if so its call fails with
``killed: memory limit 1536 MiB exceeded (the command used 1,690 MiB)`` and the
output so far, and the agent goes on.

Output goes to an unlinked temporary file, not a pipe: nothing has to drain it
while the command runs, a background process holding it open cannot make the
tool hang, and only the first and last ``max_output_bytes/2`` are ever read.

In a job with a container (:mod:`child.container`) the same holds for the
engine's ``exec`` client, which stands for the command on the host; inside, the
command carries the same ``HERMES_TOOL_RUN``, by which a shell inside kills
what it started (:meth:`child.container.Container.kill_commands`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import uuid

import psutil

from child import approval
from child.redact import tool_environment
from child.tools import Tool, ToolContext, ToolError, daemon_call, join_capped, schema
from child.tools.policy import dangerous
from hermesd.system import rlimits

MARKER = rlimits.TOOL_RUN_ENV
"""Environment variable set to a fresh id in every command's environment."""

MIB = 1024 * 1024
KILLED_STATUSES = (-signal.SIGKILL, 128 + signal.SIGKILL)
"""How a command killed by ``SIGKILL`` ends: the shell itself killed, or its last command (``sh``
exits 128 + the signal)."""

POLL_SECONDS = 0.1
"""How often the wait loop looks at the command and the stop flag."""

KILL_GRACE_SECONDS = 0.3
"""How long a killed command's processes get between SIGTERM and SIGKILL."""

MAX_TIMEOUT_SECONDS = 3600

MAX_SPOOL_BYTES = 256 * 1024 * 1024
"""A command whose output file grows past this is killed (a runaway ``yes`` must not fill the disk)."""



def _read_capped(out, limit: int) -> str:
    """The command's output (file object ``out``), capped at ``limit`` bytes."""
    size = os.fstat(out.fileno()).st_size
    half = limit // 2
    out.seek(0)
    if size <= limit:
        return join_capped(out.read(), b"", 0)
    head = out.read(half)
    out.seek(size - (limit - half))
    return join_capped(head, out.read(), size - limit)


def _tree(proc: subprocess.Popen, run_id: str) -> list[psutil.Process]:
    """The command's shell, its descendants, and any process with its marker; zombies left out."""
    found: dict[int, psutil.Process] = {}
    try:
        shell = psutil.Process(proc.pid)
        found[shell.pid] = shell
        found.update((p.pid, p) for p in shell.children(recursive=True))
    except psutil.Error:
        pass
    me = os.getpid()
    for p in psutil.process_iter():
        if p.pid in found or p.pid == me:
            continue
        try:
            if p.environ().get(MARKER) == run_id:
                found[p.pid] = p
        except psutil.Error:  # gone, a zombie, or not ours to read
            continue
    return [p for p in found.values() if _alive(p)]


def _alive(p: psutil.Process) -> bool:
    """False for a process that is gone or already a zombie (dead, waiting to be reaped)."""
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_tree(proc: subprocess.Popen, run_id: str) -> int:
    """Kill the command and everything it started (SIGTERM, then SIGKILL after
    :data:`KILL_GRACE_SECONDS`); reap the shell.  Returns how many processes were signalled."""
    procs = _tree(proc, run_id)
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=KILL_GRACE_SECONDS)
    for p in alive + _tree(proc, run_id):  # again: a dying shell may have forked
        try:
            p.kill()
        except psutil.Error:
            pass
    proc.wait()
    return len(procs)


def _environment(run_id: str) -> dict[str, str]:
    """The child's environment without its secrets (:func:`child.redact.tool_environment`: no
    secret it was not passed, no token for ``children.sock``), plus :data:`MARKER`.
    ``HERMES_JOB_ID`` stays, so a restarted daemon can find what a dead job left behind."""
    return {**tool_environment(), MARKER: run_id}


def _memory_kill(ctx: ToolContext, run_id: str) -> str | None:
    """``killed: memory limit … exceeded (…)`` when the daemon says the command ``run_id``,
    which ended by ``SIGKILL``, was killed for the job's memory limit; None otherwise (or when
    the daemon cannot be asked: the exit status says what is known)."""
    if ctx.channel is None:
        return None
    try:
        answer = daemon_call(ctx, "child.tool_killed", timeout=10.0, run=run_id)
    except ToolError:
        return None
    if not answer.get("killed"):
        return None
    head = f"killed: memory limit {answer.get('limit_mb')} MiB exceeded"
    if answer.get("used") is not None:
        return f"{head} (the command used {answer['used'] / MIB:,.0f} MiB)"
    return f"{head} (the kernel's OOM killer in the job's cgroup took the command's largest process)"


def _status(returncode: int) -> str:
    if returncode < 0:
        return f"[killed by signal {signal.Signals(-returncode).name}]"
    return f"[exit status: {returncode}]"


def run_command(args: dict, ctx: ToolContext) -> str:
    """Handler of ``terminal``: ``{"command": str, "timeout"?: seconds}`` → output
    then ``[exit status: N]``.

    Raises :class:`ToolError` when the tripwire holds the command and no person approves it
    (:mod:`child.approval`), or as
    :func:`run_shell` does.
    """
    command = args["command"]
    rule = dangerous(command)
    if rule is not None and not ctx.auto_approve and "terminal" not in ctx.approval_tools:
        denied = approval.ask(ctx, "terminal", args, f"the tripwire holds it: {rule.reason}")
        if denied is not None:
            raise ToolError(f"command denied ({rule.reason}): {denied}")
    timeout = float(args.get("timeout") or ctx.limits["terminal_timeout_seconds"])
    output, returncode = run_shell(command, ctx, timeout)
    if output and not output.endswith("\n"):
        output += "\n"
    return output + _status(returncode)


def run_shell(command: str, ctx: ToolContext, timeout: float, env: dict[str, str] | None = None) -> tuple[str, int]:
    """Run shell ``command`` in ``ctx.cwd`` (inside ``ctx.container`` when there is one)
    for at most ``timeout`` seconds; returns ``(output, returncode)`` — stdout and
    stderr together, capped at ``max_output_bytes``; a negative returncode is the signal.

    Raises :class:`ToolError` — with the output so far — when it times out, when the
    job is asked to stop, when its output passes :data:`MAX_SPOOL_BYTES` (the
    command and every process it started are killed first), or when it was killed for
    the job's memory limit (``killed: memory limit …``, see the module doc).  The command's
    environment is the child's, less its secrets (:func:`child.redact.tool_environment`), plus :data:`MARKER` and
    ``env``; in a container, the image's environment plus ``env``, through the
    engine's ``exec``.
    """
    limit = int(ctx.limits["max_output_bytes"])
    run_id = uuid.uuid4().hex
    box = ctx.container
    argv = box.exec_argv(command, env, run_id) if box is not None else ["/bin/sh", "-c", command]
    with tempfile.TemporaryFile(prefix="hermes-terminal-") as out:
        try:
            proc = subprocess.Popen(argv, cwd=ctx.cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env={**_environment(run_id), **(env or {})},
                                    preexec_fn=None if box is not None else rlimits.raise_oom_score)
        except OSError as exc:
            raise ToolError(f"cannot start {argv[0]} in {ctx.cwd}: {exc}") from None
        deadline = time.monotonic() + timeout
        written = 0
        while True:
            try:
                proc.wait(timeout=POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            else:
                killed_for = _memory_kill(ctx, run_id) if proc.returncode in KILLED_STATUSES else None
                if killed_for is not None:
                    kill_tree(proc, run_id)  # what the kernel's choice left of the command
                    output = _read_capped(out, limit)
                    raise ToolError(killed_for + (f"\n{output}" if output else ""))
                return _read_capped(out, limit), proc.returncode
            if ctx.stop is not None and ctx.stop.is_set():
                why = "interrupted: the job was asked to stop"
            elif time.monotonic() >= deadline:
                why = f"timed out after {timeout:g}s"
            elif (size := os.fstat(out.fileno()).st_size) > MAX_SPOOL_BYTES:
                why = f"output passed {MAX_SPOOL_BYTES} bytes"
            else:
                if size != written:  # new output: the command is alive
                    written = size
                    ctx.heartbeat(f"terminal output ({size} bytes so far) of: {command[:60]}")
                continue
            killed = kill_tree(proc, run_id)
            if box is not None:
                box.kill_commands(run_id)  # what the command started inside the container
            raise ToolError(f"[{why}; {killed} process(es) of the command were killed; output so far "
                            f"below]\n{_read_capped(out, limit)}")


TOOLS = [
    Tool(
        name="terminal",
        toolset="terminal",
        description=(
            "Run a shell command (/bin/sh -c) in the job's working directory (inside the job's container "
            "when it has one) and return its combined "
            "stdout and stderr followed by its exit status. Standard input is empty; long output is cut "
            "in the middle. The command and everything it started are killed at the timeout. "
            "Destructive system commands are refused."
        ),
        input_schema=schema({
            "command": {"type": "string", "minLength": 1, "description": "The shell command line."},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_SECONDS,
                        "description": "Seconds before the command is killed (default: the job's "
                                       "terminal_timeout_seconds)."},
        }, required=("command",)),
        handler=run_command,
    ),
]
