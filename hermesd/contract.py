"""Every name that crosses a boundary between daemon, clients and children, defined once.

A leaf module (standard library only), imported by the daemon, the clients
(``client/``) and the children (``child/``) beside :mod:`hermesd.protocol`:

* :class:`JobStatus` and the :data:`TERMINAL` and :data:`ACTIVE` sets (the
  transitions themselves are the daemon's: :data:`hermesd.jobs.TRANSITIONS`);
* :class:`KanbanStatus` (the board's transitions: :data:`hermesd.kanban.board.TRANSITIONS`);
* :data:`STOP_REASONS`: why the daemon stops a job, with the status, exit_reason
  and error text the job ends with;
* :class:`JobSpec`: the job spec a child receives in reply to ``child.hello``;
* :class:`JobResult`: what a child reports in ``child.result``, the one definition of it;
* the toolsets and their tools (:data:`TOOLSETS`);
* the model providers (:data:`PROVIDER_TABLE`, their names :data:`PROVIDERS`), agent roles (:data:`ROLES`, :data:`WORKER_ROLE`);
* a job log's cap as a child gets it (:data:`LOG_CAP_ENV`) and the names of its rotated copies (:func:`rotated_log`).

Statuses are ``str`` enums: a member equals (and hashes as) its value, so rows
read from the database and maps read from the wire compare with them directly.
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, Self


class JobStatus(StrEnum):
    """The states of a job (the state machine: :mod:`hermesd.jobs`)."""

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LOST = "lost"


TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.INTERRUPTED, JobStatus.TIMED_OUT,
                      JobStatus.CANCELLED, JobStatus.LOST})
"""Final job states: nothing leaves them."""
ACTIVE = (JobStatus.STARTING, JobStatus.RUNNING)
"""Job states with a live process (or, for a job kind without one, live work)."""
LIVE = (JobStatus.QUEUED, *ACTIVE)
"""Job states that are not final (what ``hermesctl ps`` lists by default)."""


class KanbanStatus(StrEnum):
    """The states of a Kanban task; how a task moves: :mod:`hermesd.kanban.board`."""

    TRIAGE = "triage"
    TODO = "todo"
    READY = "ready"
    RUNNING = "running"
    BLOCKED = "blocked"
    DONE = "done"
    ARCHIVED = "archived"


@dataclass(frozen=True)
class StopReason:
    """Why the daemon stops a job, and how the job then ends.

    ``status``: the terminal state it ends in whatever the child reports, or
    None when the child's own report decides (``failed`` without one);
    ``exit_reason``: the ``exit_reason`` it ends with when the child reported
    none; ``error``: the error text when the child gave none.
    """

    name: str
    status: JobStatus | None
    exit_reason: str | None
    error: str


STOP_REASONS: dict[str, StopReason] = {r.name: r for r in (
    StopReason("cancel", JobStatus.CANCELLED, "interrupted", "cancelled by request"),
    StopReason("timeout", JobStatus.TIMED_OUT, "timeout", "wall-clock limit reached"),
    StopReason("shutdown", JobStatus.INTERRUPTED, "interrupted", "hermesd shut down"),
    StopReason("session_stop", JobStatus.INTERRUPTED, "interrupted", "stopped by /stop in its session"),
    StopReason("parent_stop", JobStatus.INTERRUPTED, "interrupted", "parent_stop"),
    StopReason("stale", JobStatus.INTERRUPTED, "stale", "stale: no activity"),
    StopReason("agent_stop", JobStatus.INTERRUPTED, "interrupted", "stopped by the agent that started it"),
    StopReason("kanban_archive", None, None, "kanban_archive"),
    StopReason("kanban_reclaim", None, None, "kanban_reclaim"),
    # not the daemon's stop but the kernel's, for a child_limits limit (hermesd.system.limits names which)
    StopReason("resource_limit", JobStatus.FAILED, "resource_limit", "a resource limit was exceeded"),
    # a budget (hermesd.ledger) refused the job's next model call; the error names it, the spend and the limit
    StopReason("budget_exceeded", JobStatus.FAILED, "budget_exceeded", "a budget was exceeded"),
)}
"""Every reason the daemon stops a job for (``Runner.stop(job, reason)``), by name."""


_GENERIC_STOP = {JobStatus.CANCELLED: "cancel", JobStatus.TIMED_OUT: "timeout", JobStatus.INTERRUPTED: "shutdown"}
"""For each status a stop can end in, the stop reason whose ``exit_reason`` a job gets when it ended
that way without saying why (a failure names no reason: ``resource_limit`` is never a default)."""


def exit_reason_of(status: str) -> str:
    """The ``exit_reason`` of a job that ended ``status`` without saying why: that of its generic
    stop reason (:data:`_GENERIC_STOP`, rows of :data:`STOP_REASONS`), else ``error``."""
    name = _GENERIC_STOP.get(status)  # type: ignore[call-overload]
    return (STOP_REASONS[name].exit_reason or "error") if name else "error"


TOKEN_KEYS = ("input", "output", "cache_write", "cache_read")
"""The token counts of a model call, a job and a bill.  ``input`` is every prompt token and
``output`` every generated one (Hermes' meaning); ``cache_write`` and ``cache_read`` say how
many of the input tokens were written to and read from the provider's prompt cache, so the
uncached rest is ``input - cache_write - cache_read``."""


@dataclass(frozen=True)
class ProviderEntry:
    """One model provider a child can run.

    ``name``: what a config, a task or a flag names it by (``aliases``: other names
    accepted for it); ``module``/``cls``: where its class is (``child/providers/``),
    made with ``cls(model, base_url=..., temperature=...)`` unless the class has a
    ``for_job`` classmethod (:func:`child.providers.select.make_provider`); ``env``:
    the environment variables it reads (keys, base URLs), which a batch item on a
    Ray cluster is given from its driver's environment (:mod:`child.item`);
    ``preload``: the modules the zygote imports for it (:mod:`child.zygote`; the SDK).
    A new provider is its module, a row here, and its SDK in ``pyproject.toml``.
    """

    name: str
    module: str
    cls: str
    env: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()


PROVIDER_TABLE: tuple[ProviderEntry, ...] = (
    ProviderEntry("anthropic", "child.providers.anthropic", "AnthropicProvider",
                  env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"),
                  preload=("ssl", "child.providers.anthropic", "anthropic", "anthropic.types",
                           "anthropic.resources.messages"), aliases=("claude",)),
    ProviderEntry("openai-compat", "child.providers.openai_compat", "OpenAICompatProvider",
                  env=("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENROUTER_API_KEY"),
                  preload=("ssl", "child.providers.openai_compat", "openai"),
                  aliases=("openai", "openai_compat", "openrouter")),
    # local loads its model in the child; scripted is in the zygote's runtime already
    ProviderEntry("local", "child.providers.local", "LocalProvider"),
    ProviderEntry("scripted", "child.providers.scripted", "ScriptedProvider"),
)
"""The model providers, the one table of them (:class:`ProviderEntry`)."""

PROVIDERS = tuple(p.name for p in PROVIDER_TABLE)
"""Model providers a child can run, by name (``child.providers.select``)."""


def provider_entry(name: str) -> ProviderEntry | None:
    """The :class:`ProviderEntry` called ``name`` or one of its aliases (any case), or None."""
    wanted = name.strip().lower()
    return next((p for p in PROVIDER_TABLE if wanted == p.name or wanted in p.aliases), None)

PROVIDER_WAIT = "waiting for the provider's rate limit"
"""How a child told to wait by the governor (``hermesd.governor``) says so in its activity
(``child.progress``; ``ps``, ``top`` and a timeout's error show it)."""

CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-", 200_000),   # https://docs.anthropic.com/en/docs/build-with-claude/context-windows (1M only with a beta)
    ("gpt-4.1", 1_047_576),  # https://platform.openai.com/docs/models/gpt-4.1
    ("gpt-4o", 128_000),     # https://platform.openai.com/docs/models/gpt-4o
    ("o3", 200_000), ("o4-mini", 200_000),  # https://platform.openai.com/docs/models
    ("smollm2", 8_192),      # SmolLM2's trained context (the embedded model runs with less: child.providers.local)
)
"""Known context windows in tokens, by model-name prefix (read 2026-12-01); the config's
``context_windows:`` comes first, :data:`DEFAULT_CONTEXT_WINDOW` for the rest."""

DEFAULT_CONTEXT_WINDOW = 128_000
"""The context window assumed for a model no table knows (tokens): the smallest of the current
large models', so that a session compacts early rather than too late."""

BYTES_PER_TOKEN = 4
"""The estimate of text per token hermesd uses before a provider has counted (about four
characters of English per token: https://help.openai.com/en/articles/4936856)."""


def context_window(model: str | None, configured: dict[str, int] | None = None) -> int:
    """The context window of ``model`` in tokens: ``configured`` (model name or prefix → tokens),
    then :data:`CONTEXT_WINDOWS`, else :data:`DEFAULT_CONTEXT_WINDOW`; the longest prefix wins."""
    name = (model or "").strip().lower()
    for table in ((configured or {}).items(), CONTEXT_WINDOWS):
        hits = sorted(((p, n) for p, n in table if name.startswith(str(p).lower())), key=lambda h: -len(h[0]))
        if hits:
            return int(hits[0][1])
    return DEFAULT_CONTEXT_WINDOW


def estimate_tokens(value: Any) -> int:
    """Estimated tokens of ``value`` (messages, content blocks, text) as sent: its compact JSON's
    UTF-8 bytes over :data:`BYTES_PER_TOKEN`.  Only an estimate, for deciding when to shorten;
    what a call really cost is what the provider's usage reports."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
"""The ``reasoning_effort`` values a task or a batch may ask for."""

PYTHON = (sys.executable, "-P")
"""How hermesd starts a Python program of its own (``*PYTHON, "-m", module``): ``-P``
(Python 3.11) leaves the working directory out of ``sys.path``, so a ``logging.py`` in a
job's ``cwd`` (or where the daemon was started) cannot shadow a module of the runtime."""

EXECUTORS = ("local", "ray")
"""Where a batch's items run: children of this daemon, or tasks on a Ray cluster."""

TOOLSETS: dict[str, tuple[str, ...]] = {
    "terminal": ("terminal",),
    "file": ("read_file", "write_file", "patch_file", "list_files"),
    "web": ("web_extract", "web_search"),
    "delegation": ("delegate_task", "spawn_agent", "spawn_parallel", "list_subagents", "steer_subagent",
                   "stop_subagent"),
    "kanban": ("kanban_create", "kanban_link", "kanban_list", "kanban_show", "kanban_comment", "kanban_unblock",
               "kanban_my_task", "kanban_complete", "kanban_block", "kanban_heartbeat"),
}
"""Toolset name → the names of its tools, in the order the model is offered them: the one
list of both (the tools themselves are the child's, :mod:`child.tools.registry`, which
checks itself against this at import)."""
EXPLICIT_ONLY = ("kanban",)
"""Toolsets that ``all`` and ``*`` leave out; only their literal name enables them."""
TOOL_NAMES = tuple(sorted(name for names in TOOLSETS.values() for name in names))
"""Every tool a child can have, sorted (the stable key set of ``tool_stats``)."""


ROLES = ("leaf", "orchestrator")
"""Roles a delegating agent may give a subagent: a ``leaf`` cannot delegate further."""
WORKER_ROLE = "kanban_worker"
"""The ``role`` of a Kanban worker job: its child offers the Kanban worker tools only."""


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
    ``terminal_timeout_seconds``; ``history``: earlier messages (session
    turns); ``record_trajectory``: return the ShareGPT trajectory too (the daemon
    asks it of every job it runs, so that ``result --trajectory`` has it);
    ``output_schema``: a JSON Schema the final answer must validate against
    (:mod:`child.output`); ``activity_interval_seconds``: least seconds between two
    throttled activity reports (:mod:`child.activity`; the daemon makes it at most a
    quarter of ``delegation.stale_after_seconds``).
    Batch items also set ``ephemeral_system_prompt``, ``prefill_messages``,
    ``workdir_placeholder`` and ``invalid_tool_call_retries`` (see ``child.agent``), and
    ``verifier`` (``{command, timeout_seconds, env}``, run after the agent: ``child.verify``).
    ``container``: the container its terminal commands run in (engine, image,
    name, labels, workdir…: :func:`hermesd.containers.plugin.prepare`), None: on the host.
    ``ray``: a ``batch_driver``'s cluster settings (``address, num_cpus, memory_mb,
    grace``; ``child.ray_driver``), else None.
    ``approval_tools``: tools whose every call waits for a person (``approvals.always``;
    ``child.approval``).
    ``journal``: the path of the job's journal (``hermesd.journal``), which the child
    replays when it holds steps of an earlier child and appends to; None: none kept.
    ``context_window``: the model's context window in tokens (:func:`context_window`), past a
    share of which older tool results are shortened in what is sent (:mod:`child.window`);
    None: the child looks its model up itself, in ``context_windows`` (the config's
    ``context_windows:``, model name or prefix → tokens) and then :data:`CONTEXT_WINDOWS`.
    ``worktree``: the job's own git worktree (``{repo, path, branch, cwd}``:
    :func:`hermesd.worktrees.git.plan`), which the child makes before its agent starts and
    works in (:mod:`child.worktree`); None: it works in ``cwd``.
    """

    job: str = ""
    kind: str = "delegation"
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
    history: list[dict[str, Any]] | None = None
    system_prompt: str | None = None
    record_trajectory: bool = False
    max_tokens: int = 4096
    ephemeral_system_prompt: str | None = None
    prefill_messages: list[dict[str, Any]] | None = None
    workdir_placeholder: str | None = None
    invalid_tool_call_retries: int | None = None
    verifier: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    activity_interval_seconds: float = 2.0
    container: dict[str, Any] | None = None
    ray: dict[str, Any] | None = None
    journal: str | None = None
    context_window: int | None = None
    context_windows: dict[str, int] | None = None
    worktree: dict[str, Any] | None = None


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
    trace: list[dict[str, Any]] = _doc("Every tool call, in order: ``[{name, ok, bytes}]`` (``bytes``: of the "
                                       "result shown to the model).", factory=list)
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
                                           "ended, ``{path, branch, changed, changed_files, changes, commit_count, "
                                           "commits}`` (``hermesd.worktrees.git.inspect``), or ``{path, branch, "
                                           "error}`` when git could not tell.")


PROVIDER_KEYS = tuple(v for p in PROVIDER_TABLE for v in p.env if not v.endswith("_BASE_URL"))
"""The environment variables that hold a model provider's key (each provider's ``env`` but its base
URL: ``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN``, ``OPENAI_API_KEY``, ``OPENROUTER_API_KEY``): in
the child that calls the model, never in what its tools run."""

LOG_CAP_ENV = "HERMES_LOG_CAP"
"""Variable of a child's environment: ``MAX_BYTES:KEEP``, the cap on its log (``logs.max_bytes``,
``logs.keep``) that the child's own writer holds (:mod:`child.logwriter`)."""


def rotated_log(name: str, n: int) -> str:
    """``log.N``: the file name of the ``n``-th rotated copy of log ``name`` (1 is the newest)."""
    return f"{name}.{n}"
