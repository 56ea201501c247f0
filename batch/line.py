"""The trajectory line of a batch run, declared once: :data:`LINE`.

A line is the same in ``batch_N.jsonl`` and in ``trajectories.jsonl``.  Every key
of Hermes Agent's batch_runner.py line is there with its meaning (its source is
the reference), hermesd's richer keys beside them.  Each :class:`Key` of
:data:`LINE` gives a key's name, its type, what it means and where the writer
takes its value from (a :class:`Sample`: what one finished prompt left), and
everything else is derived from it: the writer (:func:`build`, and
:func:`build_line`), the dataset card's features
(:func:`features`, in :mod:`batch.card`) and the reference in
``docs/protocol.md`` (:func:`reference`, by ``docs/gen_protocol.py``).

Adding a key to the batch output is a :class:`Key` here and its producer: a
value the child records goes into its trajectory (``child.agent.Agent.trajectory``)
and its key reads it from :attr:`Sample.trajectory`.

Types are the dataset card's (``datasets`` feature types): ``string``, ``int64``,
``float64``, ``bool``, ``json`` (``datasets.Json``: stored as JSON text, read back
as objects; for keys whose shape varies by tool or dataset, so runs with
different tool sets and from different versions load and concatenate), a struct
(a tuple of keys) or :class:`ListOf` one of those.  The writer makes scalars of
the type (a missing string is ``""``, a number ``0``), builds structs key by key
and takes lists as their source gives them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from batch import trajectories


@dataclass(frozen=True)
class ListOf:
    """A list whose items are of type ``item`` (a scalar type name or a struct)."""

    item: Union[str, tuple["Key", ...]]


@dataclass(frozen=True)
class Key:
    """One key of the line: ``name``, ``type`` (see the module doc), ``meaning`` (for the
    reference) and ``value(source)``, where the writer takes it from (a :class:`Sample` for
    :data:`LINE`, a trajectory line for the view's keys, :data:`batch.view.VIEW`; None for the
    keys of a struct whose value is built whole, or of a list's items)."""

    name: str
    type: Union[str, tuple["Key", ...], ListOf]
    meaning: str = ""
    value: Callable[[Any], Any] | None = None


@dataclass
class Sample:
    """What one finished prompt left, the writer's input: ``index`` (the prompt's),
    ``batch`` (its batch file's number), ``trajectory`` (the child's: ``conversations``,
    ``messages``, ``tools``…), ``completed``/``partial``, ``api_calls``, ``toolsets``
    (drawn for the prompt), ``trace`` (the child's tool calls ``[{name, ok, bytes}]``),
    ``metadata`` (hermesd's metadata values: ``run_name``, ``job``, ``model``, ``provider``,
    ``distribution``, ``started_at``, ``completed_at``, ``duration_seconds``,
    ``exit_reason``, ``synthetic``, ``tokens``), ``extra`` (the dataset line's other fields),
    ``group_id`` and ``attempt`` (``batch.groups``), ``reward`` and ``verifier`` (``batch.verify``)."""

    index: int
    batch: int
    trajectory: dict[str, Any]
    completed: bool
    partial: bool
    api_calls: int
    toolsets: list[str]
    trace: list[dict[str, Any]]
    metadata: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    group_id: int = 0
    attempt: int = 0
    reward: float | None = None
    verifier: dict[str, Any] | None = None

    @functools.cached_property
    def stats(self) -> dict[str, dict[str, int]]:
        """``tool_stats`` of the trace (:func:`batch.trajectories.tool_stats`), the sample's MCP tools included."""
        return trajectories.tool_stats(self.trace, trajectories.offered_tools({"tools": self.trajectory.get("tools") or []}))

    def meta(self, key: str) -> Any:
        """The metadata value ``key`` (None when missing)."""
        return self.metadata.get(key)

    def token(self, key: str) -> Any:
        """The token count ``key`` (``contract.tokens.TOKEN_KEYS``) of the metadata's ``tokens``."""
        return (self.metadata.get("tokens") or {}).get(key)


def _meta(name: str, type_: str, meaning: str) -> Key:
    """A metadata key whose value is the sample's metadata value of the same name."""
    return Key(name, type_, meaning, lambda s: s.meta(name))


def _plain(*names: str) -> tuple[Key, ...]:
    """Keys of type string without a meaning of their own (items of a list)."""
    return tuple(Key(n, "string") for n in names)


MESSAGE = (*_plain("role", "content", "reasoning_content"),
           Key("tool_calls", ListOf((*_plain("id", "type"), Key("function", _plain("name", "arguments"))))),
           *_plain("tool_call_id", "name"))
"""A model-neutral message (``child.trajectory.to_messages``)."""

LINE: tuple[Key, ...] = (
    Key("prompt_index", "int64", "Hermes: the prompt's index in the dataset (its line, from 0).", lambda s: s.index),
    Key("conversations", ListOf(_plain("from", "value")),
        "Hermes' ShareGPT turns, `from` one of system, human, gpt, tool (``child.trajectory.to_sharegpt``).",
        lambda s: [{"from": str(t.get("from", "")), "value": str(t.get("value", ""))}
                   for t in s.trajectory.get("conversations") or []]),
    Key("metadata", (
        Key("batch_num", "int64", "Hermes: the number N of the batch file `batch_N.jsonl`.", lambda s: s.batch),
        Key("timestamp", "string", "Hermes: when the sample ended (ISO 8601 UTC).", lambda s: s.meta("completed_at")),
        _meta("model", "string", "Hermes: the model that made it."),
        Key("batch", "int64", "The batch file's number again (hermesd's name).", lambda s: s.batch),
        _meta("run_name", "string", "The run's name (its folder)."),
        _meta("job", "string", "The item's job id."),
        _meta("provider", "string", "The provider that ran it."),
        _meta("distribution", "string", "The toolset distribution the run drew from."),
        _meta("started_at", "string", "When the item started (ISO 8601 UTC)."),
        _meta("completed_at", "string", "When it ended (ISO 8601 UTC)."),
        _meta("duration_seconds", "float64", "Seconds the child's run took."),
        _meta("exit_reason", "string", "Why the run ended (``contract.wire.JobResult.exit_reason``)."),
        _meta("synthetic", "bool", "True when no model made it (the scripted provider)."),
        Key("tokens", (Key("input", "int64", "Input tokens (every prompt token).", lambda s: s.token("input")),
                       Key("output", "int64", "Output tokens.", lambda s: s.token("output")),
                       Key("cache_write", "int64", "Of the input tokens, those written to the prompt cache.",
                           lambda s: s.token("cache_write") or 0),
                       Key("cache_read", "int64", "Of the input tokens, those read from the prompt cache.",
                           lambda s: s.token("cache_read") or 0)),
            "Tokens the run used."),
        _meta("cost_usd", "float64", "What the item's model calls cost in USD where their model had a price "
              "(``hermesd.billing``)."),
        _meta("cost_unknown", "bool", "True when some of its tokens' model had no price."),
        Key("extra", "json", "The dataset line's other fields (e.g. `task_id`).", lambda s: dict(s.extra or {})),
    ), "Hermes' metadata keys, then hermesd's."),
    Key("completed", "bool", "Hermes: the agent gave its final answer.", lambda s: s.completed),
    Key("partial", "bool", "Hermes: stopped for invalid tool calls (``child.agent``).", lambda s: s.partial),
    Key("api_calls", "int64", "Hermes: model calls made.", lambda s: s.api_calls),
    Key("toolsets_used", ListOf("string"), "Hermes: the toolsets the sample was offered.",
        lambda s: [str(t) for t in s.toolsets]),
    Key("tool_stats", "json", "Hermes: `{tool: {count, success, failure}}` for every known tool, zeros included, and "
        "the sample's MCP tools (`mcp__NAME__TOOL`).",
        lambda s: s.stats),
    Key("tool_error_counts", "json", "Hermes: `{tool: failures}` for every known tool.",
        lambda s: trajectories.tool_error_counts(s.stats)),
    Key("messages", ListOf(MESSAGE), "The model-neutral conversation: roles system, user, assistant, tool; "
        "structured `tool_calls`; `reasoning_content` (``child.trajectory.to_messages``).",
        lambda s: list(s.trajectory.get("messages") or [])),
    Key("tools", ListOf("json"), "The tools offered, as OpenAI function schemas "
        "`{type: function, function: {name, description, parameters}}`.",
        lambda s: list(s.trajectory.get("tools") or [])),
    Key("tool_usage", ListOf((Key("name", "string"), Key("count", "int64"), Key("success", "int64"),
                              Key("failure", "int64"))),
        "`tool_stats` as records `{name, count, success, failure}` for the tools offered or used: the same "
        "counts in a schema that does not depend on which tools exist.",
        lambda s: trajectories.tool_usage(s.stats, trajectories.offered_tools({"tools": s.trajectory.get("tools") or []}))),
    Key("group_id", "int64", "The dataset line the sample answers (its index; ``batch.groups``): the attempts "
        "of one prompt share it.", lambda s: s.group_id),
    Key("attempt", "int64", "The attempt's number in its group, from 0 (`--samples_per_prompt`).",
        lambda s: s.attempt),
    Key("reward", "float64?", "The verifier's reward; null without a verifier or when it failed (``batch.verify``).",
        lambda s: s.reward),
    Key("verifier", (Key("command", "string"), Key("passed", "bool"), Key("reward", "float64"),
                     Key("exit_status", "int64"), Key("details", "json"), Key("output", "string"),
                     Key("error", "string"), Key("seconds", "float64")),
        "The verifier's verdict, null without one: `{command, passed, reward, exit_status, details, output, "
        "error, seconds}` (``child.verify``; `passed`/`reward` null when it failed, `error` then says why).",
        lambda s: s.verifier),
)
"""The trajectory line, key by key, in the order it is written (see the module doc)."""

_SCALARS: dict[str, Callable[[Any], Any]] = {"string": lambda v: str(v or ""), "int64": lambda v: int(v or 0),
                                             "float64": lambda v: float(v or 0.0), "bool": bool, "json": lambda v: v,
                                             "float64?": lambda v: None if v is None else float(v),
                                             "bool?": lambda v: None if v is None else bool(v)}
"""How the writer makes a value of each scalar type (``T?``: the type ``T`` or null)."""


def _write(key: Key, source: Any) -> Any:
    if isinstance(key.type, tuple) and key.value is None:
        return {k.name: _write(k, source) for k in key.type}
    assert key.value is not None, f"key {key.name} has no value"
    value = key.value(source)
    return _SCALARS[key.type](value) if isinstance(key.type, str) else value


def build(source: Any, keys: tuple[Key, ...] = LINE) -> dict[str, Any]:
    """The line of ``source`` (a :class:`Sample` for :data:`LINE`): every key of ``keys``, in
    order, each its value made of its type (scalars as the module doc says, structs key by key)."""
    return {key.name: _write(key, source) for key in keys}


def build_line(*, index: int, batch: int, trajectory: dict[str, Any], completed: bool, partial: bool,
               api_calls: int, toolsets: list[str], trace: list[dict[str, Any]], metadata: dict[str, Any],
               extra: dict[str, Any] | None = None, group_id: int | None = None, attempt: int = 0,
               reward: float | None = None, verifier: dict[str, Any] | None = None) -> dict[str, Any]:
    """One trajectory line (:data:`LINE`).  ``trajectory``: the child's
    (``conversations``, ``messages``, ``tools``); ``metadata`` holds hermesd's
    metadata values (missing strings become ``""``, numbers ``0``); ``extra``: the
    dataset line's other fields; ``group_id`` (None: ``index``) and ``attempt``;
    ``reward`` and ``verifier`` (``batch.verify.scores``) (see :class:`Sample`)."""
    return build(Sample(index=index, batch=batch, trajectory=trajectory, completed=completed, partial=partial,
                        api_calls=api_calls, toolsets=toolsets, trace=trace, metadata=metadata,
                        extra=dict(extra or {}), group_id=index if group_id is None else group_id,
                        attempt=attempt, reward=reward, verifier=verifier))


def _feature_type(type_: Union[str, tuple[Key, ...], ListOf]) -> Any:
    if isinstance(type_, str):
        return type_.rstrip("?")
    if isinstance(type_, ListOf):
        return _feature_type(type_.item)
    return [feature(k) for k in type_]


def feature(key: Key) -> dict[str, Any]:
    """``key`` as a dataset card feature (``datasets.Features._to_yaml_list`` form)."""
    if isinstance(key.type, ListOf):
        return {"name": key.name, "list": _feature_type(key.type.item)}
    if isinstance(key.type, tuple):
        return {"name": key.name, "struct": _feature_type(key.type)}
    return {"name": key.name, "dtype": key.type.rstrip("?")}


def features() -> list[dict[str, Any]]:
    """The features of a line, in the card's YAML form (:mod:`batch.card`)."""
    return [feature(k) for k in LINE]


def _type_text(type_: Union[str, tuple[Key, ...], ListOf]) -> str:
    if isinstance(type_, str):
        return type_
    if isinstance(type_, ListOf):
        return f"list of {_type_text(type_.item)}"
    return "{" + ", ".join(k.name for k in type_) + "}"


def reference(keys: tuple[Key, ...] = LINE, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, type, meaning)`` of every key with a meaning, struct keys after their
    struct (for the reference in ``docs/protocol.md``)."""
    rows = []
    for key in keys:
        if key.meaning:
            rows.append((prefix + key.name, _type_text(key.type), key.meaning))
        if isinstance(key.type, tuple):
            rows += reference(key.type, f"{prefix}{key.name}.")
    return rows
