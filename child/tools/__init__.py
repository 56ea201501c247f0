"""The tools a subagent can call, grouped in toolsets.

This package file holds the small vocabulary every tool module shares
(:class:`Tool`, :class:`ToolContext`, :class:`ToolError`, the output cap and
the daemon call); :mod:`child.tools.registry` gathers the tool modules into
toolsets, validates arguments and runs a tool without ever raising.  The
types live here rather than in the registry so that a tool module can import
them without importing the registry (which imports every tool module).

Callers use :mod:`child.tools.registry`, which re-exports these names.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

DEFAULT_LIMITS: dict[str, Any] = {
    "max_output_bytes": 65536,
    "max_file_bytes": 1024 * 1024,
    "terminal_timeout_seconds": 60,
}
"""Limits a :class:`ToolContext` falls back on for keys its ``limits`` lacks (bytes, seconds)."""


class ToolError(Exception):
    """A tool-level failure: bad input the schema cannot express, a refused path,
    a denied command, a network error...  The message is shown to the model as
    the tool result (``is_error``), so it says what went wrong and what to do."""


class _NeverStop:
    """The stop flag of a context nobody interrupts (``stop=None``)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def is_set(self) -> bool:
        """Whether someone set :attr:`event` (only a test would)."""
        return self.event.is_set()


@dataclass
class ToolContext:
    """Everything a tool handler may use besides its arguments.

    * ``cwd``: the job's working directory; file tools stay inside it, the
      terminal runs there.
    * ``limits``: ``max_output_bytes``, ``max_file_bytes``,
      ``terminal_timeout_seconds``; missing keys take :data:`DEFAULT_LIMITS`.
    * ``auto_approve``: run commands the policy calls dangerous
      (``delegation.subagent_auto_approve``).
    * ``stop``: the child's stop flag (``.is_set()`` and ``.event``, a
      :class:`threading.Event`); ``None`` means never stopped.
    * ``channel``: the :class:`child.channel.Channel` to hermesd, ``None`` in tests.
    * ``job``, ``depth``, ``max_spawn_depth``, ``role``: who is calling, how deep
      it sits in the delegation tree, how deep the tree may go, and its role
      (``leaf``, ``orchestrator``, ...).
    * ``heartbeat(what)``: a long-running tool shows life (e.g. its command wrote
      output), so that hermesd does not take the child for a stale one; cheap to
      call often (reports are throttled).
    * ``container``: the job's :class:`child.container.Container` (``cwd``
      mounted inside), where the terminal runs its commands; ``None``: on the host.
    * ``approval_tools``: names of the tools whose every call waits for a person
      (``approvals.always``: :mod:`child.approval`).
    * ``budget``: the job's wall clock (``pause()``, ``resume()``: :class:`child.agent.BudgetClock`),
      paused while a call waits for a person; ``None``: none.
    * ``extra_tools``: tools of this job only, by name (its MCP servers' ``mcp__NAME__TOOL``:
      :mod:`child.tools.mcp`), run as the others are; ``mcp``: the job's
      :class:`child.mcp.client.Servers` (None: it has no MCP server).
    """

    cwd: str
    limits: dict[str, Any] = field(default_factory=dict)
    auto_approve: bool = False
    stop: Any = None
    channel: Any = None
    job: str = ""
    depth: int = 0
    max_spawn_depth: int = 1
    role: str = "leaf"
    heartbeat: Callable[[str], None] = lambda _what: None
    container: Any = None
    approval_tools: tuple[str, ...] = ()
    budget: Any = None
    extra_tools: dict[str, Any] = field(default_factory=dict)
    mcp: Any = None

    def __post_init__(self) -> None:
        self.limits = {**DEFAULT_LIMITS, **{k: v for k, v in (self.limits or {}).items() if v is not None}}
        if self.stop is None:
            self.stop = _NeverStop()


Handler = Callable[[dict, ToolContext], str]


@dataclass(frozen=True)
class Tool:
    """One tool: its name, the toolset it belongs to, what the model is told
    about it (``description``, ``input_schema`` as JSON Schema) and its handler
    ``(args, ctx) -> str``, which raises :class:`ToolError` on a tool-level failure.
    ``repeatable``: running it again changes nothing (it only reads), so a call a
    restart interrupted is run again on resume (:mod:`child.journal`)."""

    name: str
    toolset: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    repeatable: bool = False

    def spec(self) -> dict[str, Any]:
        """The tool as providers receive it: ``{"name", "description", "input_schema"}``."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON Schema object with these ``properties``, the ``required`` names and
    no other property allowed (a misspelt argument is an error the model sees)."""
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


def truncation_marker(omitted: int) -> str:
    """The note that stands where output was cut (``omitted`` in bytes)."""
    return f"\n[output truncated: {omitted} bytes omitted]\n"


def join_capped(head: bytes, tail: bytes, omitted: int) -> str:
    """Decode the kept ``head`` and ``tail`` of a longer output (UTF-8, bad
    bytes replaced) with the truncation marker between them."""
    text = head.decode("utf-8", "replace")
    if omitted > 0:
        text += truncation_marker(omitted) + tail.decode("utf-8", "replace")
    return text


def cap_text(text: str, limit: int) -> str:
    """Return ``text`` if its UTF-8 form fits in ``limit`` bytes, else its first
    and last ``limit/2`` bytes with ``[output truncated: N bytes omitted]`` between.

    Keeping the tail matters: errors and summaries usually come last.
    """
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    return join_capped(data[:half], data[len(data) - (limit - half):], len(data) - limit)


def daemon_call(ctx: ToolContext, request: str, /, timeout: float | None = 30.0, **args: Any) -> Any:
    """Send request ``request`` (a ``child.*`` op) with ``args`` to hermesd over
    ``ctx.channel`` and return its result.  ``args`` may hold a key ``op``
    (``child.call`` needs one), hence the positional-only first parameters.

    Raises :class:`ToolError` when there is no channel, when the daemon answers
    an error (the message carries its code, e.g. ``capacity_reached: ...``) or
    does not answer in time.
    """
    if ctx.channel is None:
        raise ToolError(f"{request} needs a connection to hermesd, and this process has none")
    from hermesd.protocol import ProtocolError

    from child.channel import ChannelError

    try:
        return ctx.channel.call(request, timeout=timeout, **args)
    except ProtocolError as err:
        raise ToolError(f"{err.code}: {err.message}") from None
    except ChannelError as err:
        raise ToolError(str(err)) from None
