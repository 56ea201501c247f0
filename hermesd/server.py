"""The daemon: one asyncio event loop, three sockets, one router, the plugin list.

Client requests (``hermesd.sock``) and child messages (``children.sock``) go
through :data:`ROUTER` to the handlers (``hermesd.handlers``, ``hermesd.kanban.ops``);
signals and timers call the same code.  :data:`PLUGINS` lists the job types.  No
handler blocks: long work happens in children, and a request that waits (for
example ``wait``) parks a future instead of holding anything.

Start-up order: lock the runtime directory (one daemon per directory), open
the state database, end what an earlier daemon left running, reconcile its
jobs, bind the sockets (0600 in a 0700 directory), then ``READY=1``.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import zmq

from batch import ops as batch
from hermesd import __version__, clock, config as config_mod, eager, looplag, paths, private, protocol, resume, unwritable
from hermesd.billing.ops import BillingPlugin
from hermesd.containers.ops import ContainersPlugin
from hermesd.governor.ops import GovernorPlugin
from hermesd.context import Context
from hermesd.contract.states import ACTIVE, JobStatus
from hermesd.control import ops as control
from hermesd.control.approvals import ApprovalsPlugin
from hermesd.delegation import ops as delegation
from hermesd.endpoint import NOBLOCK, Endpoint
from hermesd.events import EventLog
from hermesd.handlers import admin, children, jobs
from hermesd.jobs import JobTable
from hermesd.kanban import ops as kanban
from hermesd.mcp.ops import McpPlugin
from hermesd.plugin import Plugin, Plugins
from hermesd.protocol import ProtocolError
from hermesd.router import Router
from hermesd.runner import Runner
from hermesd.scheduler import Scheduler
from hermesd.sessions import ops as sessions
from hermesd.store import Store, StoreError
from hermesd.system.prctl import become_subreaper, release_free_heap
from hermesd.system.procs import ProcessManager, sweep_leftovers
from hermesd.system.systemd import Notifier
from hermesd.upkeep import ops as upkeep
from hermesd.warm.spawner import make_spawner
from hermesd.worktrees.ops import WorktreesPlugin

log = logging.getLogger("hermesd")
PUB_HWM = 100_000
SETTLE_SECONDS = 3.0
"""Seconds after start-up when the daemon gives back its memory a second time (:meth:`Daemon._give_back_memory`):
the zygote's warm-up and the first spares are done by then."""
RESTART_KEYS = ("state_dir", "log_dir", "start_method")
"""``supervisor.*`` keys a reload cannot change (see :meth:`Daemon.reload`)."""

PLUGINS: tuple[type[Plugin], ...] = (
    delegation.DelegationPlugin,  # delegation, background: subagents for people and agents
    sessions.SessionsPlugin,      # session_turn: persistent conversations
    batch.BatchPlugin,            # batch (no process), batch_item, batch_driver (Ray): batch_runner runs
    kanban.KanbanPlugin,          # kanban_worker: the board's workers
    upkeep.UpkeepPlugin,          # no kinds: retention, the log cap, per-job cgroups
    control.ControlPlugin,        # no kind: pause/resume, the job-end hook
    ApprovalsPlugin,              # no kind: tool calls waiting for a person (after control: its hooks)
    ContainersPlugin,             # no kind: any job's container (made at admission, removed at exit and restart)
    WorktreesPlugin,              # no kind: any job's git worktree (planned at admission, settled when it ends)
    GovernorPlugin,               # no kind: every model call's grant (rate limits per provider endpoint and key)
    BillingPlugin,                # no kind: the bill of every job, its budgets; the usage op
    McpPlugin,                    # no kind: a job's mcp:NAME toolsets checked, its servers' settings in its spec
)
"""The job types, in the order their hooks run.  Adding one: its package, and a line here."""

ROUTER = Router((admin, jobs, children, *(m for cls in PLUGINS for m in cls.op_modules())))
"""The one dispatch path: the core's ops (daemon, jobs, child reports) and every plugin's."""


class AlreadyRunning(Exception):
    """Another live hermesd owns the runtime directory."""


class Daemon:
    """One hermesd instance.  ``config`` is validated; ``runtime`` the socket directory."""

    def __init__(self, config: config_mod.Config, runtime: Path | None = None, config_path: str | None = None):
        self.config = config
        self.in_force = {key: getattr(config.supervisor, key) for key in RESTART_KEYS}  # until a restart
        self.config_path = config_path
        self.sockets = paths.sockets(runtime)
        self.started_mono = clock.monotonic()
        self.started_at = clock.now_iso()
        self.notifier = Notifier()
        self.stopping = False
        self.loop_lag = looplag.from_env()  # HERMES_LOOP_LAG_MS: a benchmark's probe, reported by status
        self.started = False  # set once start-up is done: a failure before it is one line, no traceback
        self.plugins = Plugins(PLUGINS)
        self._lock_fd: int | None = None
        self._state_lock_fd: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self.early_signals: list[str] = []  # stop signals that came while it started (hermesd.daemon)

    # start-up ------------------------------------------------------------

    def _give_back_memory(self) -> None:
        """Give back what start-up left behind (idle RSS, bench/README.md): its cyclic garbage
        (``gc.collect``), SQLite's page cache of the reconcile (:meth:`hermesd.store.Store.shrink_memory`),
        then the malloc heap's free memory (:func:`hermesd.system.prctl.release_free_heap`)."""
        gc.collect()
        self.store.shrink_memory()
        release_free_heap()

    @staticmethod
    def _hold(fd: int, pid_file: Path, what: str) -> int:
        """Take an exclusive ``flock`` on ``fd`` and write our pid to ``pid_file`` (where it
        can be written); returns ``fd``.  Raises :class:`AlreadyRunning` naming the holder's
        pid (read from ``pid_file``) and ``what`` it holds."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                pid = pid_file.read_text().strip() or "?"
            except OSError:
                pid = "?"
            raise AlreadyRunning(f"hermesd is already running (pid {pid}) with {what}") from None
        try:
            private.write_file(pid_file, f"{os.getpid()}\n")  # 0600, also over an older, looser one
        except OSError:
            pass  # a read-only state directory: opening the database says what is wrong
        return fd

    def _lock_state_dir(self, state_dir: Path) -> None:
        """One daemon per state directory too: a second one (with another runtime directory)
        would sweep the first one's children as leftovers and share its database.  The lock
        is on the directory itself, so a read-only directory still gets the clear error of
        the database; the holder's pid goes to ``hermesd.pid``."""
        fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._state_lock_fd = self._hold(fd, state_dir / "hermesd.pid", f"state directory {state_dir}")

    def _lock(self) -> None:
        paths.check_socket_paths(self.sockets)
        paths.ensure_private_dir(self.sockets.dir)
        fd = os.open(self.sockets.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._lock_fd = self._hold(fd, self.sockets.lock, f"runtime directory {self.sockets.dir}")
        # The lock is free, so no live daemon owns these sockets; still probe it (a socket file outlives a kill -9ed daemon).
        if self.sockets.control.exists() and _probe(self.sockets.control):
            raise AlreadyRunning(f"a live hermesd answers on {self.sockets.control}")
        for path in (self.sockets.control, self.sockets.events, self.sockets.children):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def _open_state(self) -> None:
        state_dir = self.config.state_dir()
        if paths.hermes_home().exists():  # config.yaml, profiles/: ours and private, or refused
            paths.ensure_private_dir(paths.hermes_home())
        paths.ensure_private_dir(state_dir)
        self._lock_state_dir(state_dir)
        paths.ensure_private_dir(self.config.log_dir())
        self.store = Store(state_dir / "state.db", self.plugins.migrations())
        self.supervisor_id = str((state_dir / "state.db").resolve())
        self.events = EventLog(self.store, self._publish)
        self.jobs = JobTable(self.store, self.events, self.plugins.kinds)
        self.jobs.pending = unwritable.PendingEnds(self.jobs, asyncio.get_running_loop())
        sup = self.config.supervisor
        self.scheduler = Scheduler({"global": sup.max_children})  # the plugins' pools: their configure hook
        self.loop = asyncio.get_running_loop()
        self.procs = ProcessManager(self.loop, self._on_child_exit, grace=sup.interrupt_grace_seconds,
                                    supervisor_id=self.supervisor_id,
                                    spawner=make_spawner(sup.start_method, self.loop, self.supervisor_id,
                                                         self.sockets.children,
                                                         providers=(self.config.provider, *self.plugins.warm_providers(self.config)),
                                                         base_url=self.config.base_url,
                                                         modules=self.plugins.warm_modules(self.config)))
        self.runner = Runner(self.config, self.jobs, self.scheduler, self.procs, self.sockets.children, self.loop,
                             hooks=self.plugins)
        self.context = Context(control=self, store=self.store, events=self.events, jobs=self.jobs,
                               scheduler=self.scheduler, procs=self.procs, runner=self.runner,
                               plugins=self.plugins, router=ROUTER, loop=self.loop)
        self.plugins.start(self.context)
        self.plugins.configure(self.config)
        self.jobs.terminal_hooks.append(self.plugins.on_terminal)
        self.events.listeners.append(self.plugins.on_event)

    def _on_child_exit(self, child) -> None:
        self.runner.on_exit(child)

    def _reconcile(self) -> None:
        """Repair what a dead daemon left: end its processes, settle its jobs."""
        killed = sweep_leftovers(self.supervisor_id)
        if killed:
            log.warning("ended %d process(es) left by an earlier hermesd: %s", len(killed), killed)
        resumed = self.plugins.names(at_restart="resume")
        for row in self.jobs.list(statuses=ACTIVE):
            if row["kind"] in resumed or resume.after_crash(self.runner, row):
                continue  # its plugin's restore continues it, or a new child resumes it from its journal
            self.jobs.transition(row["id"], JobStatus.LOST, exit_reason="error", error=resume.lost_error(self.runner, row))
        for row in self.jobs.list(statuses=(JobStatus.QUEUED,), kinds=self.plugins.names(process=True)):
            self.runner.requeue(row)
        self.plugins.restore()

    def _bind(self) -> None:
        self.ctx = zmq.Context()
        self.control = self.ctx.socket(zmq.ROUTER)
        self.children = self.ctx.socket(zmq.ROUTER)
        self.pub = self.ctx.socket(zmq.PUB)
        for sock in (self.control, self.children):
            sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_READ)  # up to it, too_large is answered
            sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
            sock.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, PUB_HWM)
        self.pub.setsockopt(zmq.LINGER, 0)
        paths.bind_ipc(self.pub, self.sockets.events)
        paths.bind_ipc(self.children, self.sockets.children)
        paths.bind_ipc(self.control, self.sockets.control)

    def _publish(self, frames: list[bytes]) -> None:
        pub = getattr(self, "pub", None)
        if pub is None:
            return
        try:
            pub.send_multipart(frames, flags=NOBLOCK)
        except zmq.ZMQError:
            pass  # a full subscriber queue drops; clients catch up with events_since

    # running -------------------------------------------------------------

    async def run(self) -> int:
        """Run until shut down; returns the exit status (0 on a clean stop)."""
        self._lock()
        self._open_state()
        become_subreaper()
        self._reconcile()
        self.procs.spawner.start()  # forkserver: the zygote starts warming up (after the sweep)
        self._bind()
        self.started = True  # from here on, an error is not a start-up failure
        loop = self.loop
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda s=sig: self.request_shutdown(f"signal {signal.Signals(s).name}"))
        loop.add_signal_handler(signal.SIGHUP, self._reload_on_signal)
        loop.add_signal_handler(signal.SIGCHLD, self.procs.reap)
        self._done = asyncio.Event()
        for name in self.early_signals:  # came while it started: stop now, cleanly, before any job starts
            self.request_shutdown(f"signal {name} while starting")
        self.procs.reap()
        self.runner.pump()
        self.endpoints = [self._serve(self.control, lambda request: ROUTER.client(self.context, request)),
                          self._serve(self.children, lambda request: ROUTER.child(self.context, request))]
        if self.notifier.watchdog_seconds:
            self._spawn(self._watchdog(self.notifier.watchdog_seconds / 2))
        if self.loop_lag is not None:
            self._spawn(self.loop_lag.run())
        self.events.emit("daemon.started", data={"pid": os.getpid(), "version": __version__})
        self._give_back_memory()
        asyncio.get_running_loop().call_later(SETTLE_SECONDS, self._give_back_memory)  # once the spares are forked
        self.notifier.notify(READY="1", STATUS=self.status_line(), MAINPID=str(os.getpid()))
        log.info("hermesd %s ready (pid %d, runtime %s)", __version__, os.getpid(), self.sockets.dir)
        await self._done.wait()
        await self._shutdown()
        return 130 if "SIGINT" in self.early_signals else 0

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._track(task)
        return task

    def _track(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watchdog(self, interval: float) -> None:
        while True:
            self.notifier.notify(WATCHDOG="1", STATUS=self.status_line())
            await asyncio.sleep(interval)

    def status_line(self) -> str:
        """``STATUS=`` text: running and queued counts."""
        running = len(self.procs.children) if hasattr(self, "procs") else 0
        queued = len(self.scheduler.queue) if hasattr(self, "scheduler") else 0
        return f"{running} running, {queued} queued"

    def _serve(self, sock: zmq.Socket, dispatch) -> Endpoint:
        """Serve ``sock`` from the loop: each request is answered at once, and by a task of its
        own from its first ``await`` that suspends on (:mod:`hermesd.eager`)."""
        def answer(envelope: list[bytes], frame: bytes) -> None:
            task = eager.start(self.loop, self._answer(endpoint, envelope, frame, dispatch))
            if task is not None:
                self._track(task)

        endpoint = Endpoint(self.loop, sock, answer)
        return endpoint

    async def _answer(self, endpoint: Endpoint, envelope: list[bytes], frame: bytes, dispatch) -> None:
        req_id = None
        try:
            request = protocol.decode_request(frame)
            req_id = request.id
            result = await unwritable.answer(self.store, dispatch, request)
            reply = protocol.encode_reply(req_id, result)
        except ProtocolError as err:
            req_id = getattr(err, "req_id", req_id)
            reply = protocol.encode_error(req_id, err)
        except Exception as exc:  # the daemon never dies of a request
            log.error("internal error: %s", traceback.format_exc())
            reply = protocol.encode_error(req_id, ProtocolError("internal", f"{exc.__class__.__name__}: {exc}"))
        if len(reply) > protocol.MAX_MESSAGE_BYTES:
            reply = protocol.encode_error(req_id, ProtocolError("too_large", "reply exceeds the message size limit"))
        endpoint.send([*envelope, reply])

    # control -------------------------------------------------------------

    def request_shutdown(self, reason: str) -> None:
        """Begin the graceful stop (signals and the ``shutdown`` op end here)."""
        if self.stopping:
            return
        log.info("shutting down (%s)", reason)
        self.stopping = True
        self.runner.accepting = False
        grace = self.config.supervisor.stop_timeout_seconds + 2 * self.config.supervisor.interrupt_grace_seconds + 3
        self.notifier.notify(STOPPING="1", STATUS="stopping", EXTEND_TIMEOUT_USEC=str(int(grace * 1_000_000)))
        self._done.set()

    def _reload_on_signal(self) -> None:
        """SIGHUP: :meth:`reload`; a refused file is already logged and published as an event."""
        try:
            self.reload()
        except ProtocolError:
            pass

    def reload(self) -> dict[str, Any]:
        """Re-read the config file; an invalid file is refused and the running config kept.

        Returns ``{"reloaded": True, "source": path, "restart_needed": [keys]}``:
        the keys of :data:`RESTART_KEYS` that changed are read again only at
        the next start (the state database, the job directories and the
        start method are opened once).

        Raises ``ProtocolError(invalid_config)`` naming file, line and key.
        """
        self.notifier.notify(RELOADING="1", MONOTONIC_USEC=str(time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000))
        try:
            new = config_mod.load(self.config_path)
        except config_mod.ConfigError as err:
            log.error("reload refused: %s", err)
            self.notifier.notify(READY="1", STATUS=self.status_line())
            self.events.emit("daemon.reload_failed", data={"error": str(err), **err.details()})
            raise ProtocolError("invalid_config", "\n".join(str(p) for p in err.problems),
                                {**err.details(), "problems": [p.details() for p in err.problems]}) from None
        restart = [f"supervisor.{key}" for key in RESTART_KEYS if self.in_force[key] != getattr(new.supervisor, key)]
        if restart:
            log.warning("reload: %s changed; in force after a restart", ", ".join(restart))
        self.config = new
        self.runner.config = new
        self.scheduler.set_limit("global", new.supervisor.max_children)
        self.plugins.configure(new)
        self.procs.grace = new.supervisor.interrupt_grace_seconds
        self.events.emit("daemon.reloaded", data={"source": new.source, "restart_needed": restart})
        self.notifier.notify(READY="1", STATUS=self.status_line())
        self.runner.pump()
        return {"reloaded": True, "source": new.source, "restart_needed": restart}

    async def _settle(self) -> None:
        """Let the plugins' work still running finish (``Plugin.settling``: the job-end hooks'
        commands, those of the jobs this shutdown ended too), at most as long as the longest asks."""
        deadline = clock.monotonic() + max(self.plugins.settling(), default=0.0)
        while any(self.plugins.settling()) and clock.monotonic() < deadline:
            await asyncio.sleep(0.02)
            self.procs.reap()

    async def _shutdown(self) -> None:
        stopped = self.plugins.names(at_shutdown="stop")
        for job in list(self.scheduler.queued_jobs()):
            row = self.jobs.get(job)
            if row and row["status"] == JobStatus.QUEUED and row["kind"] in stopped and not row.get("resumes"):
                self.runner.stop(job, "shutdown")
        for job in list(self.procs.children):
            self.procs.stop(job, "shutdown")
        deadline = clock.monotonic() + self.config.supervisor.stop_timeout_seconds
        while self.procs.children and clock.monotonic() < deadline:
            await asyncio.sleep(0.02)
            self.procs.reap()
        if self.procs.children:
            log.warning("%d child(ren) still alive after stop_timeout_seconds: SIGKILL", len(self.procs.children))
            self.procs.signal_all(signal.SIGKILL)
            end = clock.monotonic() + 2.0
            while self.procs.children and clock.monotonic() < end:
                await asyncio.sleep(0.02)
                self.procs.reap()
        self.procs.spawner.close()  # the zygote and its spares
        await self._settle()
        sweep_leftovers(self.supervisor_id)
        self.procs.reap()
        self.plugins.shutdown()
        self.events.emit("daemon.stopped", data={"pid": os.getpid()})
        self.events.flush()
        await asyncio.sleep(0.05)  # let the last events leave the PUB socket
        for task in list(self._tasks):
            task.cancel()
        for endpoint in getattr(self, "endpoints", []):
            endpoint.close()
        self.pub.close(linger=0)
        self.ctx.term()
        for path in (self.sockets.control, self.sockets.events, self.sockets.children):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.store.close()
        for fd in (self._state_lock_fd, self._lock_fd):
            if fd is not None:
                os.close(fd)

    def uptime(self) -> float:
        """Seconds since start (monotonic), to the millisecond."""
        return round(clock.monotonic() - self.started_mono, 3)


def _probe(path: Path, timeout_ms: int = 300) -> bool:
    """True when something answers ``hello`` on the control socket at ``path``.  Its ZeroMQ context
    is its own and ended after (a context kept would hold 5 descriptors and 2 threads for the
    daemon's life: the daemon's is made later, :class:`Server`)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"ipc://{path}")
        _, frame = protocol.encode_request("hello")
        sock.send(frame)
        return bool(sock.poll(timeout_ms))
    finally:
        sock.close()
        ctx.term()


def run(config: config_mod.Config, config_path: str | None = None, early_signals: list[str] | None = None) -> int:
    """Run a daemon in the foreground until it is shut down; returns the exit status.

    A failure to start (another daemon, a socket path over the Unix limit, a directory
    that cannot be created or written, a full disk, a state database that cannot be
    opened) is one line on stderr naming the path, and status 1, never a traceback.
    ``early_signals``: names of stop signals that came while it started, appended to as they
    come (:data:`hermesd.daemon.EARLY_SIGNALS`): it stops as soon as it has started.
    """
    daemon = Daemon(config, config_path=config_path)
    daemon.early_signals = early_signals if early_signals is not None else []
    try:
        return asyncio.run(daemon.run())
    except (AlreadyRunning, StoreError, paths.UnsafeDirectory, paths.SocketPathTooLong) as exc:
        print(f"hermesd: {exc}", file=sys.stderr)  # StoreError: e.g. a read-only or full state directory
        return 1
    except (OSError, zmq.ZMQError) as exc:
        if daemon.started:
            raise
        print(f"hermesd: cannot start: {_describe(exc, daemon)}", file=sys.stderr)
        return 1


def _describe(exc: OSError | zmq.ZMQError, daemon: Daemon) -> str:
    """One line for an OS error at start-up, naming the path (the runtime directory when
    the error does not name one)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"{daemon.sockets.dir}: {reason}"
