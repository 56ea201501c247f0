"""The wire types of the children's socket: :class:`JobSpec` (what a child receives in reply
to ``child.hello``) and :class:`JobResult` (what it reports in ``child.result``), the one
definition of each, both rendered into ``docs/protocol.md``.  A leaf (standard library only)
of :mod:`hermesd.contract`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Any, Self

from hermesd.contract.tokens import TOKEN_KEYS


class Wire:
    """A dataclass that crosses the children's socket as a map of its fields (:class:`JobSpec`,
    :class:`JobResult`): the map's keys are the field names, in order."""

    @classmethod
    def names(cls) -> frozenset[str]:
        """The field names (the keys of the wire map)."""
        return frozenset(_names(cls))

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Self:
        """An instance from a wire map: missing or ``None`` values take the defaults, unknown keys
        are ignored (a newer peer may send more)."""
        names = _names(cls)
        return cls(**{k: v for k, v in data.items() if k in names and v is not None})

    def to_wire(self) -> dict[str, Any]:
        """The wire map (every field; values shared, not copied: it is encoded at once)."""
        return {name: getattr(self, name) for name in _names(type(self))}


@dataclass
class JobSpec(Wire):
    """The job spec a child receives in reply to ``child.hello``; on the wire a map of these fields.

    The daemon fills it from the job's row and the config (``Runner.child_spec``);
    a child given a partial map (a test, a direct run) takes these defaults.
    ``timeout_seconds`` (an opt-in wall clock; None: none)/``max_turns`` bound the run; ``depth`` is the
    delegation depth of this agent (0: started by a person or a session);
    ``limits``: ``max_output_bytes``, ``max_file_bytes``,
    ``terminal_timeout_seconds``; ``record_trajectory``: return the ShareGPT trajectory too (the daemon
    asks it of every job it runs, so that ``result --trajectory`` has it);
    ``output_schema``: a JSON Schema the final answer must validate against
    (:mod:`child.structured`); ``activity_interval_seconds``: least seconds between two
    throttled activity reports (:mod:`child.activity`; the daemon makes it at most a
    quarter of ``delegation.stale_after_seconds``).
    ``entry``: the child's entry point (``module:function``), its kind's (``hermesd.jobs.JobKind.entry``);
    ``part``: the kind's own part of the spec (the map of its kind's ``JobKind.spec``, a wire dataclass
    of the kind's package — a session turn's history, a batch item's verifier…), None: its kind has none.
    ``script``: the ``scripted`` provider's replies (any kind may run that provider).
    ``container``: the container its terminal commands run in (engine, image,
    name, labels, workdir…: :func:`hermesd.containers.engine.prepare`), None: on the host.
    ``approval_tools``: tools whose every call waits for a person (``approvals.always``;
    ``child.approval``).
    ``journal``: the path of the job's journal (``hermesd.journal``), which the child
    replays when it holds steps of an earlier child and appends to; None: none kept.
    ``journal_wait_seconds``: how long a journal write that fails (a full disk) is tried again before
    the job fails rather than take its step unjournalled (:class:`child.journal.Journal`; the daemon
    sends ``delegation.stale_after_seconds``: the child reports its waiting as activity meanwhile).
    ``context_window``: the model's context window in tokens (:func:`hermesd.contract.providers.context_window`), past a
    share of which older tool results are shortened in what is sent (:mod:`child.window`);
    None: the child looks its model up itself, in ``context_windows`` (the config's
    ``context_windows:``, model name or prefix → tokens) and then :data:`hermesd.contract.providers.CONTEXT_WINDOWS`.
    ``worktree``: the job's own git worktree (``{repo, path, branch, cwd}``:
    :func:`hermesd.worktrees.git.plan`), which the child makes before its agent starts and
    works in (:mod:`child.worktree`); None: it works in ``cwd``.
    ``mcp_servers``: the MCP servers of its ``mcp:NAME`` toolsets, ``{NAME: settings}``
    (:meth:`hermesd.mcp.config.Server.to_wire`; the child is their client, :mod:`child.mcp`).
    """

    job: str = ""
    kind: str = "delegation"
    entry: str = "child.agent:run"
    part: dict[str, Any] | None = None
    goal: str = ""
    context: str | None = None
    toolsets: list[str] = field(default_factory=lambda: ["terminal", "file"])
    role: str = "leaf"
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    reasoning_effort: str | None = None
    max_turns: int = 20
    timeout_seconds: float | None = None
    cwd: str | None = None
    depth: int = 0
    max_spawn_depth: int = 1
    auto_approve: bool = False
    approval_tools: list[str] = field(default_factory=list)
    limits: dict[str, Any] = field(default_factory=dict)
    script: Any = None
    system_prompt: str | None = None
    record_trajectory: bool = False
    max_tokens: int = 4096
    output_schema: dict[str, Any] | None = None
    activity_interval_seconds: float = 2.0
    container: dict[str, Any] | None = None
    journal: str | None = None
    journal_wait_seconds: float = 600.0
    context_window: int | None = None
    context_windows: dict[str, int] | None = None
    worktree: dict[str, Any] | None = None
    mcp_servers: dict[str, dict[str, Any]] | None = None


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    """The field names of the wire dataclass ``cls``, in order (the keys of its wire map)."""
    return tuple(f.name for f in fields(cls))


def _doc(text: str, default: Any = None, *, factory: Any = None) -> Any:
    """A dataclass field with its meaning (``metadata["doc"]``, rendered into ``docs/protocol.md``)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


def _no_tokens() -> dict[str, int]:
    return dict.fromkeys(TOKEN_KEYS, 0)


@dataclass
class JobResult(Wire):
    """What a child reports when its run ends (``child.result``; on the wire a map of these fields).

    Built by the child (:mod:`child.agent`, the fallbacks of :mod:`child.__main__`,
    :mod:`child.ray_driver`; a Ray item's ``result.json``, :mod:`child.item`) and read
    typed by the daemon (the runner, delegation, sessions, batch).  A field left out
    of the map, or ``None``, takes its default; keys this version does not know are
    ignored.  Adding a field is adding it here, with its meaning, and setting it
    where the child builds the result.
    """

    status: str | None = _doc("The terminal state the run ended in (a ``JobStatus`` value: ``completed``, "
                              "``failed``, ``interrupted``, ``timed_out``); none: the process exit decides.")
    exit_reason: str | None = _doc("Why it ended: ``completed``, ``max_turns``, ``timeout``, ``interrupted``, "
                                   "``error``, ``output_schema``, ``invalid_tool_calls``…")
    summary: str = _doc("The final answer (with an ``output_schema``, the JSON value alone); for a run without "
                        "one, the assistant's texts so far.", "")
    error: str | None = _doc("What went wrong, for people; none when it completed.")
    api_calls: int = _doc("Model calls that returned.", 0)
    tokens: dict[str, int] = _doc("Tokens used over the run: ``{input, output, cache_write, cache_read}`` "
                                  "(``TOKEN_KEYS``: ``input`` counts every prompt token, the cache's writes "
                                  "and reads among them).", factory=_no_tokens)
    trace: list[dict[str, Any]] = _doc("Every tool call, in order: ``[{name, ok, bytes, seconds}]`` (``bytes``: of "
                                       "the result shown to the model; ``seconds``: its wall time).", factory=list)
    duration_seconds: float | None = _doc("Seconds the run took, by the child's monotonic clock.")
    synthetic: bool = _doc("True when no model made it (the ``scripted`` provider).", False)
    provider: str | None = _doc("The provider that ran it (``PROVIDERS``).")
    model: str | None = _doc("The model that ran it.")
    messages: list[dict[str, Any]] | None = _doc("This run's new messages (``child.messages`` form: "
                                                 "Anthropic-style content blocks), what a session stores.")
    trajectory: dict[str, Any] | None = _doc("With ``record_trajectory``: the conversation as training data "
                                             "(``conversations``, ``messages``, ``tools``, ``has_reasoning``, "
                                             "``tool_names``, ``tools_offered``, ``tool_stats``: "
                                             "``child.agent.Agent.trajectory``).")
    verifier: dict[str, Any] | None = _doc("A batch item's verifier's verdict, when its spec has a ``verifier``: "
                                           "``{command, passed, reward, exit_status, details, output, error, "
                                           "seconds}`` (``child.verify``).")
    traceback: str | None = _doc("When the child's runtime itself failed: the Python traceback.")
    worktree: dict[str, Any] | None = _doc("When the job ran in a git worktree of its own: what it holds as the run "
                                           "ended, ``{path, branch, made, changed, changed_files, changes, commit_count, "
                                           "commits}`` (``hermesd.worktrees.git.inspect``), or ``{path, branch, "
                                           "error}`` when git could not tell.")
    mcp: dict[str, Any] | None = _doc("The MCP servers the job used (``mcp:NAME`` toolsets) and how each was as the run "
                                      "ended: ``{NAME: {transport, state, tools, calls, failures, error}}`` (``state``: "
                                      "``ready``, ``failed``, ``crashed``: ``child.mcp.client``); none without any.")
