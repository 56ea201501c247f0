"""The MCP servers of one job: connected, listed, called, stopped — through the ``mcp`` SDK.

The SDK is asynchronous and the agent loop is not: the servers live on an asyncio loop in a
thread of their own (``mcp``), one task per server holding its ``mcp.Client`` (a stdio
server's process, :mod:`child.mcp.stdio`, or a streamable HTTP session) from the job's start
to its end; a tool call is a coroutine sent to that loop, waited for in the agent's thread
with the server's ``timeout_seconds``, the stop flag watched and life shown (``heartbeat``).

Failures are the model's tool errors naming the server, never a hung or failed job: a server
that does not start (or not within ``connect_timeout_seconds``), exits, crashes mid-call,
does not answer within ``timeout_seconds`` or answers what the SDK cannot read.  A server that
failed or crashed is started again at its next call, :data:`MAX_STARTS` times at most.  Each
server's state (:meth:`Servers.states`) is reported with the job's result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from mcp_types import REQUEST_TIMEOUT

from child.mcp import stdio
from child.mcp.results import result_text
from hermesd.mcp.config import Server
from hermesd.protocol import counted

MAX_STARTS = 3
"""Times one server is started in a job at most (the first start included)."""
POLL_SECONDS = 0.1
"""How often a waiting call looks at the stop flag."""
STDERR_TAIL = 600
"""Characters of a server's stderr its start failure quotes."""


class McpError(Exception):
    """A server could not do what was asked; the message names it (shown to the model)."""


@dataclass
class Connection:
    """One server of the job: its settings, state (``starting``, ``ready``, ``failed``,
    ``crashed``, ``closed``; ``stopped``: the job stopped before it was ready), error, the tools it listed, counters, and what holds it open."""

    server: Server
    state: str = "starting"
    error: str | None = None
    tools: list[Any] = field(default_factory=list)
    starts: int = 0
    calls: int = 0
    failures: int = 0
    listed: list[Any] = field(default_factory=list)
    client: Any = None
    closing: asyncio.Event | None = None
    holder: asyncio.Task | None = None
    process: Any = None
    stderr: list[str] = field(default_factory=list)
    stderr_fd: int | None = None

    def report(self) -> dict[str, Any]:
        """``{transport, state, tools, calls, failures, error}``: what ``ps``/``result`` show."""
        return {"transport": self.server.transport, "state": self.state, "tools": len(self.tools),
                "calls": self.calls, "failures": self.failures, "error": self.error}


class Servers:
    """The servers ``specs`` (``JobSpec.mcp_servers``: name → :meth:`Server.to_wire`) of one job.

    ``cwd``: where a stdio server without ``cwd`` of its own runs (the job's directory);
    ``container``: the job's :class:`child.container.Container` (stdio servers run inside), or
    None; ``log``: one line of the job's log; ``secrets``: called with each server's ``env`` and
    ``headers`` as it gets them (the secret ones are redacted: :func:`child.redact.add`)."""

    def __init__(self, specs: dict[str, dict[str, Any]], *, cwd: str, container: Any = None,
                 log: Callable[[str], None] = print, secrets: Callable[[dict[str, str]], None] = lambda _s: None):
        self.connections = {name: Connection(Server.from_wire(spec)) for name, spec in specs.items()}
        self.cwd, self.container, self.log, self.secrets = cwd, container, log, secrets
        self.stopping = False  # the job stops: a server that ends now did not fail
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp", daemon=True)
        self.thread.start()

    # starting ---------------------------------------------------------------------------------

    def start(self, stop: Any = None) -> None:
        """Start every server at once; return when each is ready or failed (its connect timeout),
        or as soon as ``stop`` (the child's stop flag, ``is_set()``) is set: a cancel is not held up
        by a server slow to start; :meth:`close` stops those still starting."""
        futures = [self._submit(self._start(c)) for c in self.connections.values()]
        while concurrent.futures.wait(futures, timeout=POLL_SECONDS).not_done:
            if stop is not None and stop.is_set():
                self.stopping = True
                for c in self.connections.values():
                    if c.state == "starting":
                        c.state, c.error = "stopped", "the job stopped before it was ready"
                return
        for future in futures:
            future.result()

    def _submit(self, coroutine: Any) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def _start(self, c: Connection) -> None:
        """Start ``c``'s server and list its tools; its state says how it went (never raises)."""
        c.starts += 1
        c.state, c.error, c.stderr = "starting", None, []
        ready: asyncio.Future[None] = self.loop.create_future()
        c.closing = asyncio.Event()
        began = time.monotonic()
        c.holder = self.loop.create_task(self._hold(c, ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), c.server.connect_timeout_seconds)
        except asyncio.TimeoutError:
            c.holder.cancel()
            self._failed(c, "failed", f"did not start within connect_timeout_seconds="
                                      f"{c.server.connect_timeout_seconds:g}")
        except Exception as exc:  # noqa: BLE001 - a server that cannot start is the model's error
            self._failed(c, "failed", f"did not start: {await self._exit_of(c) or describe(exc)}")
        else:
            c.state = "ready"
            offered = [t.name for t in c.tools]
            self.log(f"mcp {c.server.name}: ready in {time.monotonic() - began:.2f}s, {counted(len(offered), 'tool')}"
                     + (f": {', '.join(offered)}" if offered else ""))
            missing = sorted(set(c.server.include or []) - {t.name for t in c.listed})
            if missing:
                self.log(f"mcp {c.server.name}: tools of its allow-list it does not offer: {', '.join(missing)}")

    async def _hold(self, c: Connection, ready: asyncio.Future[None]) -> None:
        """The task that holds ``c``'s client open until it is closed (or fails)."""
        from mcp import Client

        stdio.STARTED.set(lambda process: setattr(c, "process", process))
        try:
            async with Client(self._transport(c), raise_exceptions=False) as client:
                tools, cursor = [], None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                c.listed = tools
                c.tools = [t for t in tools if c.server.offers(t.name)]
                c.client = client
                ready.set_result(None)
                await c.closing.wait()
        except BaseException as exc:  # noqa: BLE001 - reported through ready, or as a crash
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpError("stopped"))
            elif c.state == "ready":
                self._failed(c, "crashed", f"stopped answering: {describe(exc)}")
            if not isinstance(exc, Exception):
                raise
        finally:
            c.client = None
            if c.stderr_fd is not None:
                os.close(c.stderr_fd)  # the reader ends with the server's own end
                c.stderr_fd = None

    async def _exit_of(self, c: Connection, wait: float = 1.0) -> str | None:
        """``exited with status N`` when ``c``'s process ended (waiting up to ``wait`` seconds for the
        loop to see it), else None."""
        if c.process is None:
            return None
        deadline = time.monotonic() + wait
        while c.process.returncode is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return None if c.process.returncode is None else f"it exited with exit status {c.process.returncode}"

    def _transport(self, c: Connection) -> Any:
        """The SDK transport of ``c``'s server: a stdio process or a streamable HTTP session."""
        s = c.server
        if s.transport == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = stdio.expand(dict(s.headers), f"mcp_servers.{s.name}.headers")
            self.secrets(headers)
            http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(s.timeout_seconds, connect=s.connect_timeout_seconds))
            return streamable_http_client(s.url, http_client=http)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        env = stdio.expand(dict(s.env), f"mcp_servers.{s.name}.env")
        self.secrets(env)
        command, args, cwd = s.command or "", list(s.args), s.cwd
        if self.container is not None:
            command, args, environ = stdio.in_container(self.container, command, args, env, cwd)
            cwd = None
        else:
            environ = stdio.environment(env)
            cwd = os.path.join(self.cwd, os.path.expanduser(cwd)) if cwd else self.cwd
        return stdio_client(StdioServerParameters(command=command, args=args, env=environ, cwd=cwd),
                            errlog=self._stderr(c))

    def _stderr(self, c: Connection) -> Any:
        """A pipe for ``c``'s stderr: each line goes to the job's log as ``mcp NAME: …`` (redacted
        there, as all the log), the last ones kept for its start failure's message."""
        read, c.stderr_fd = os.pipe()

        def pump() -> None:
            with open(read, "r", encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    c.stderr = (c.stderr + [line.rstrip("\n")])[-20:]
                    self.log(f"mcp {c.server.name}: {line.rstrip()}")

        threading.Thread(target=pump, name=f"mcp-{c.server.name}-stderr", daemon=True).start()
        return _Fd(c.stderr_fd)

    def _failed(self, c: Connection, state: str, why: str) -> None:
        if self.stopping:  # ended by the job's stop (its cancel, timeout), not a failure of its own
            if c.state != "ready":
                c.state, c.error = "stopped", "the job stopped before it was ready"
                self.log(f"mcp {c.server.name}: {c.error}")
            return
        tail = "\n".join(c.stderr)[-STDERR_TAIL:].strip()
        c.state, c.error = state, why + (f"; its stderr ends: {tail}" if tail and state != "crashed" else "")
        self.log(f"mcp {c.server.name}: {state}: {c.error}")

    # calling ----------------------------------------------------------------------------------

    def call(self, name: str, tool: str, args: dict[str, Any], *, stop: Any = None,
             heartbeat: Callable[[str], None] = lambda _w: None) -> tuple[bool, str]:
        """Call ``tool`` of server ``name`` with ``args``: ``(ok, text)`` of its result
        (:func:`child.mcp.results.result_text`).  Raises :class:`McpError` naming the server when
        it cannot answer (not started, crashed, too slow, a reply the SDK cannot read) or the stop
        flag is set."""
        c = self.connections[name]
        s = c.server
        if c.state in ("failed", "crashed") and c.starts < MAX_STARTS:
            self.log(f"mcp {name}: starting it again (start {c.starts + 1} of at most {MAX_STARTS})")
            self._submit(self._start(c)).result()
        if c.state != "ready" or c.client is None:
            raise McpError(f"MCP server {name!r} {c.state}: {c.error or 'not available'}")
        c.calls += 1
        future = self._submit(c.client.call_tool(tool, args, read_timeout_seconds=s.timeout_seconds))
        deadline = time.monotonic() + s.timeout_seconds + 1.0
        too_slow = McpError(f"MCP server {name!r} did not answer {tool} within timeout_seconds={s.timeout_seconds:g}")
        while True:
            try:
                ok, text = result_text(future.result(POLL_SECONDS))
                c.failures += not ok
                return ok, text
            except concurrent.futures.TimeoutError:
                if stop is not None and stop.is_set():
                    future.cancel()
                    raise McpError(f"MCP server {name!r}: the call of {tool} was stopped with the job") from None
                if time.monotonic() >= deadline:
                    future.cancel()
                    c.failures += 1
                    raise too_slow from None
                heartbeat(f"waiting for MCP server {name} ({tool})")
            except Exception as exc:  # noqa: BLE001 - whatever the SDK raised, named for the model
                c.failures += 1
                if getattr(exc, "code", None) == REQUEST_TIMEOUT:  # the SDK's read_timeout_seconds
                    raise too_slow from None
                exited = self._submit(self._exit_of(c)).result(5) if c.process is not None else None
                if exited or not self.alive(c):
                    self._failed(c, "crashed", f"stopped during a call of {tool}"
                                 + (f" ({exited.removeprefix('it ')})" if exited else "") + f": {describe(exc)}")
                    self.loop.call_soon_threadsafe(c.closing.set)
                    raise McpError(f"MCP server {name!r} {c.error}") from None
                raise McpError(f"MCP server {name!r}: the call of {tool} failed: {describe(exc)}") from None

    def alive(self, c: Connection) -> bool:
        """Whether ``c``'s server is still there: its process runs (stdio), its client's task runs."""
        if c.process is not None and c.process.returncode is not None:
            return False
        return c.holder is not None and not c.holder.done()

    # the end ----------------------------------------------------------------------------------

    def states(self) -> dict[str, dict[str, Any]]:
        """Each server's :meth:`Connection.report`, by name."""
        return {name: c.report() for name, c in self.connections.items()}

    def close(self, timeout: float = 10.0) -> None:
        """Stop every server (the SDK's shutdown: stdin closed, then SIGTERM, SIGKILL) and the loop."""
        self.stopping = True
        async def close_all() -> None:
            for c in self.connections.values():
                if c.closing is not None:
                    c.closing.set()
                if c.state == "starting" and c.holder is not None:  # no reply to wait for
                    c.holder.cancel()
            holders = [c.holder for c in self.connections.values() if c.holder is not None]
            if holders:
                await asyncio.wait(holders, timeout=timeout)

        try:
            self._submit(close_all()).result(timeout + 1)
        except Exception as exc:  # noqa: BLE001 - the child's exit takes its group along anyway
            self.log(f"mcp: stopping the servers: {describe(exc)}")
        for c in self.connections.values():
            if c.state in ("ready", "starting"):  # starting: its start had not said so yet
                c.state = "closed" if c.state == "ready" else "stopped"
        self.loop.call_soon_threadsafe(self.loop.stop)


class _Fd:
    """A descriptor as the ``errlog`` file the SDK hands its process (only ``fileno()`` is used)."""

    def __init__(self, fd: int):
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def describe(exc: BaseException) -> str:
    """What went wrong, in one line: the innermost error of an exception group, its type and text."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or "no message"
    if isinstance(exc, (McpError, stdio.Unset)):  # ours: the text says it all
        return text[:500]
    if isinstance(exc, FileNotFoundError) and exc.filename:  # the SDK's exec of a command not on PATH
        return f"command not found: {exc.filename}"[:500]
    if isinstance(exc, OSError) and exc.strerror:
        return (f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror)[:500]
    return f"{type(exc).__name__}: {text}"[:500]

