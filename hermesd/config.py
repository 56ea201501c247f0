"""Load and validate ``config.yaml`` into typed settings (every key: ``docs/operations.md``).

The file is read with ``yaml.safe_load`` semantics; every error names the
file, the line and the dotted key (``config.yaml:7: delegation.max_async_children:
must be an integer >= 1, not 'three'``).  Unknown keys are errors too, so a
typo never silently falls back to a default.

Each section is a frozen dataclass; a field's type and ``metadata`` (``min``,
``choices``, ``names`` for lists, ``url``) are its validation rule, so the
schema is written once.  Every name is checked where it is given: a toolset
that does not exist, a provider that does not exist or a ``base_url`` that is
not an ``http(s)://`` URL is an error of ``check-config`` and ``reload``.
PyYAML is imported when a file is parsed (clients import this module for its
names and stay fast).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hermesd import paths, prices
from hermesd.contract import (EXECUTORS, PROVIDERS, REASONING_EFFORTS, TOOL_NAMES,  # noqa: F401 (choices)
                              TOOLSETS)
from hermesd.protocol import INT64_MAX

if TYPE_CHECKING:
    import yaml

START_METHODS = ("spawn", "forkserver")
TERMINAL_BACKENDS = ("local", "docker", "podman")


class ConfigError(Exception):
    """An invalid configuration: ``file``, ``line`` (1-based or None), ``key`` (dotted or None).

    ``problems``: every problem found in the file, in line order (this error is
    the first); a file is checked whole, so one run names all its mistakes.
    """

    def __init__(self, message: str, file: str | None = None, line: int | None = None, key: str | None = None):
        where = ":".join(str(p) for p in (file, line) if p is not None)
        text = f"{where}: " if where else ""
        text += f"{key}: " if key else ""
        super().__init__(text + message)
        self.file, self.line, self.key, self.reason = file, line, key, message
        self.problems: list[ConfigError] = [self]

    def details(self) -> dict[str, Any]:
        """The ``details`` map of an ``invalid_config`` protocol error."""
        return {"file": self.file, "line": self.line, "key": self.key, "reason": self.reason}


def _min(n: float, most: float | None = None) -> dict[str, Any]:
    return {"min": n} if most is None else {"min": n, "max": most}


def _choices(*values: str) -> dict[str, Any]:
    return {"choices": values}


TOOLSET_NAMES = {"names": (*TOOLSETS, "all", "*")}
URL = {"url": True}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""An environment variable's name (a job's ``env``, the config's ``secrets``)."""
ENV_NAMES = {"env_names": True}
"""A list of environment variable names (``secrets:``): ``[A-Za-z_][A-Za-z0-9_]*``, none ``HERMES_*``."""


@dataclass(frozen=True)
class Delegation:
    """``delegation:`` — the caps and rules of delegation.

    ``child_timeout_seconds``: an opt-in wall-clock limit of every child (none by
    default); ``stale_after_seconds``: a child that shows no activity (model call,
    streamed reply, tool, tool output) this long is interrupted as stale;
    ``resume_on_restart``: a job running when hermesd stopped or died resumes from
    its journal in a new child at the next start (:mod:`hermesd.resume`), else it ends ``lost``.
    """

    max_async_children: int = field(default=3, metadata=_min(1))
    max_concurrent_children: int = field(default=3, metadata=_min(1))
    max_spawn_depth: int = field(default=1, metadata=_min(0))
    max_tasks_per_call: int = field(default=8, metadata=_min(1))
    child_timeout_seconds: float | None = field(default=None, metadata=_min(0.1))
    stale_after_seconds: float = field(default=600.0, metadata=_min(0.1))
    subagent_auto_approve: bool = False
    resume_on_restart: bool = True
    max_turns: int = field(default=10, metadata=_min(1))
    model: str | None = None
    provider: str | None = field(default=None, metadata=_choices(*PROVIDERS))


@dataclass(frozen=True)
class Hooks:
    """``hooks:`` — operator callbacks (:mod:`hermesd.control.hooks`)."""

    on_job_end: str | None = None
    on_approval_request: str | None = None
    timeout_seconds: float = field(default=30.0, metadata=_min(0.1))


@dataclass(frozen=True)
class Approvals:
    """``approvals:`` — tool calls that wait for a person (:mod:`hermesd.control.approvals`).

    ``timeout_seconds``: a request nobody answers this long is denied (the model is told so);
    ``always``: tools that always wait for a person (``approval: always``), besides the
    commands the tripwire holds.
    """

    timeout_seconds: float = field(default=600.0, metadata=_min(1))
    always: list[str] = field(default_factory=list, metadata={"names": TOOL_NAMES})


@dataclass(frozen=True)
class Supervisor:
    """``supervisor:`` — the global cap, stopping, and where state and logs live."""

    max_children: int = field(default=16, metadata=_min(1))
    stop_timeout_seconds: float = field(default=10.0, metadata=_min(0.1))
    interrupt_grace_seconds: float = field(default=3.0, metadata=_min(0.0))
    state_dir: str | None = None
    log_dir: str | None = None
    start_method: str = field(default="forkserver", metadata=_choices(*START_METHODS))


@dataclass(frozen=True)
class Limits:
    """``limits:`` — caps on what one tool call may produce."""

    max_output_bytes: int = field(default=65536, metadata=_min(256))
    max_file_bytes: int = field(default=1048576, metadata=_min(1))
    terminal_timeout_seconds: float = field(default=60.0, metadata=_min(0.1))


@dataclass(frozen=True)
class Batch:
    """``batch:`` — defaults of the batch job type.  ``executor``: where items run
    (``local`` children, or ``ray``: tasks on the Ray cluster at ``ray_address``,
    else ``RAY_ADDRESS``); ``ray_num_cpus`` and ``ray_memory_mb``: what each item
    reserves on a Ray node (``ray_memory_mb`` None: nothing)."""

    output_dir: str = "data"
    num_workers: int = field(default=4, metadata=_min(1))
    max_turns: int = field(default=10, metadata=_min(1))
    executor: str = field(default="local", metadata=_choices(*EXECUTORS))
    ray_address: str | None = None
    ray_num_cpus: float = field(default=1.0, metadata=_min(0.0))
    ray_memory_mb: int | None = field(default=None, metadata=_min(1))


@dataclass(frozen=True)
class Kanban:
    """``kanban:`` — the dispatcher's timing and retry rules."""

    heartbeat_ttl_seconds: float = field(default=300.0, metadata=_min(1))
    max_spawn_failures: int = field(default=3, metadata=_min(1))
    dispatch_interval_seconds: float = field(default=1.0, metadata=_min(0.05))


@dataclass(frozen=True)
class Sessions:
    """``sessions:``: what a session's turn is sent (:mod:`hermesd.sessions.compaction`).  Past
    ``compact_at_tokens`` (default: ``compact_share`` of the model's context window — the known
    window of ``model``, or ``context_window_tokens``) the older turns are summarised; the most
    recent ``keep_recent_tokens`` (default: a quarter of the limit) stay verbatim."""

    compact_at_tokens: int | None = field(default=None, metadata=_min(256))
    compact_share: float = field(default=0.6, metadata=_min(0.05, 0.95))
    keep_recent_tokens: int | None = field(default=None, metadata=_min(1))
    context_window_tokens: int | None = field(default=None, metadata=_min(1024))


@dataclass(frozen=True)
class Retention:
    """``retention:`` — which finished jobs go, with their folders and events (see
    :mod:`hermesd.upkeep.retention`); both rules off by default (nothing is removed)."""

    max_age_days: float | None = field(default=None, metadata=_min(0))
    max_jobs: int | None = field(default=None, metadata=_min(1))
    interval_seconds: float = field(default=300.0, metadata=_min(1))
    batch_size: int = field(default=200, metadata=_min(1, 100_000))


@dataclass(frozen=True)
class Logs:
    """``logs:`` — the cap of each job's log (see :mod:`hermesd.upkeep.logcap`)."""

    max_bytes: int = field(default=10 * 1024 * 1024, metadata=_min(4096))
    keep: int = field(default=2, metadata=_min(0, 100))
    check_interval_seconds: float = field(default=1.0, metadata=_min(0.05))


@dataclass(frozen=True)
class ChildLimits:
    """``child_limits:`` — resource limits of each child and everything it starts
    (see :mod:`hermesd.system.limits`); unset: unlimited.  A job may ask for lower ones."""

    memory_mb: int | None = field(default=None, metadata=_min(16, 1 << 40))
    cpu_seconds: int | None = field(default=None, metadata=_min(1, 1 << 40))
    processes: int | None = field(default=None, metadata=_min(1, 1 << 22))
    open_files: int | None = field(default=None, metadata=_min(16, 1 << 30))
    cgroup: bool = True


@dataclass(frozen=True)
class Terminal:
    """``terminal:`` — where a job's terminal commands run (see ``hermesd.containers.plugin``).

    ``backend``: ``local`` (on the host) or a container engine for every job
    (``docker``/``podman``, with ``image``); a job may still ask for an image
    itself (a dataset's ``docker_image``, ``delegate --image``).  ``engine_path``:
    the engine's command (default: ``backend`` on ``PATH``; for ``local``,
    ``podman`` then ``docker``).  ``runtime``: the OCI runtime the engine uses
    (``--runtime``, e.g. ``runc``).  ``network``: give containers the engine's
    default network (default: none).  ``pull``: pull a missing image (default:
    never; the job fails).  ``max_processes``: the containers' ``nproc`` limit
    (at most the job's own).  ``start_timeout_seconds``: how long starting a
    container may take.
    """

    backend: str = field(default="local", metadata=_choices(*TERMINAL_BACKENDS))
    image: str | None = None
    engine_path: str | None = None
    runtime: str | None = None
    network: bool = False
    pull: bool = False
    max_processes: int = field(default=4096, metadata=_min(1))
    start_timeout_seconds: float = field(default=60.0, metadata=_min(1))


POSITIVE = {"gt": 0}
"""A number > 0 (a budget's limit)."""


@dataclass(frozen=True)
class Budgets:
    """``budgets:`` — limits on spend (see :mod:`hermesd.billing`), checked before each model
    call against what was spent plus what the calls in flight may still spend; unset: none.

    ``daily_cost_usd`` / ``daily_tokens``: all of this daemon's jobs together per UTC day;
    ``session_daily_cost_usd`` / ``session_daily_tokens``: each session (its turns and their
    subagents) per UTC day.  Tokens count input and output.
    """

    daily_cost_usd: float | None = field(default=None, metadata=POSITIVE)
    daily_tokens: int | None = field(default=None, metadata=POSITIVE)
    session_daily_cost_usd: float | None = field(default=None, metadata=POSITIVE)
    session_daily_tokens: int | None = field(default=None, metadata=POSITIVE)


@dataclass(frozen=True)
class RateLimit:
    """One entry of ``rate_limits:`` — what the governor (:mod:`hermesd.governor`) lets every
    child together send to one provider endpoint with one key: requests, input tokens and
    output tokens per minute, and calls in flight (unset: not limited by the config; what the
    provider's 429s and headers say still holds)."""

    requests_per_minute: float | None = field(default=None, metadata=_min(0.001))
    input_tokens_per_minute: float | None = field(default=None, metadata=_min(1))
    output_tokens_per_minute: float | None = field(default=None, metadata=_min(1))
    max_concurrent: int | None = field(default=None, metadata=_min(1, 100_000))


RATE_LIMIT_KEYS = {"rate_limit_key": True}
"""``rate_limits:`` is keyed by a provider name (all its endpoints) or an endpoint's ``http(s)://`` URL."""


@dataclass(frozen=True)
class Config:
    """The whole ``config.yaml``.  ``source`` is the file it came from (or None for defaults).
    ``prices``: the ``prices:`` section as written (:mod:`hermesd.prices`; :meth:`price_table`)."""

    model: str | None = None
    provider: str | None = field(default=None, metadata=_choices(*PROVIDERS))
    base_url: str | None = field(default=None, metadata=URL)
    reasoning_effort: str | None = field(default=None, metadata=_choices(*REASONING_EFFORTS))
    toolsets: list[str] = field(default_factory=lambda: ["terminal", "file", "web"], metadata=TOOLSET_NAMES)
    delegation: Delegation = field(default_factory=Delegation)
    supervisor: Supervisor = field(default_factory=Supervisor)
    limits: Limits = field(default_factory=Limits)
    batch: Batch = field(default_factory=Batch)
    kanban: Kanban = field(default_factory=Kanban)
    sessions: Sessions = field(default_factory=Sessions)
    retention: Retention = field(default_factory=Retention)
    logs: Logs = field(default_factory=Logs)
    child_limits: ChildLimits = field(default_factory=ChildLimits)
    hooks: Hooks = field(default_factory=Hooks)
    approvals: Approvals = field(default_factory=Approvals)
    terminal: Terminal = field(default_factory=Terminal)
    secrets: list[str] = field(default_factory=list, metadata=ENV_NAMES)
    rate_limits: dict[str, RateLimit] = field(default_factory=dict, metadata=RATE_LIMIT_KEYS)
    prices: dict[str, Any] = field(default_factory=dict, metadata={"check": prices.parse_prices})
    budgets: Budgets = field(default_factory=Budgets)
    source: str | None = field(default=None, metadata={"internal": True})

    def price_table(self) -> dict[str, prices.Price]:
        """The prices of models (:data:`hermesd.prices.DEFAULT_PRICES` and the ``prices:`` section)."""
        return prices.parse_prices(self.prices)[0]

    def state_dir(self) -> Path:
        """Directory of ``state.db`` (``supervisor.state_dir`` or ``HERMES_HOME``)."""
        return Path(self.supervisor.state_dir).expanduser() if self.supervisor.state_dir else paths.hermes_home()

    def log_dir(self) -> Path:
        """Directory of per-job directories (``supervisor.log_dir`` or ``HERMES_HOME/jobs``)."""
        return _log_dir(self.supervisor.log_dir, os.environ.get("HERMES_HOME"), os.environ.get("HOME"))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data view (for ``status`` and child specs)."""
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=8)
def _log_dir(configured: str | None, hermes_home: str | None, home: str | None) -> Path:
    """:meth:`Config.log_dir` for a ``supervisor.log_dir``, ``$HERMES_HOME`` and ``$HOME`` (cached:
    the runner asks for it several times per job)."""
    return Path(configured).expanduser() if configured else paths.hermes_home() / "jobs"


def default_path() -> Path:
    """``$HERMES_HOME/config.yaml`` (``~/.hermes/config.yaml``)."""
    return paths.hermes_home() / "config.yaml"


class _Lines:
    """Map dotted keys of a YAML document to their 1-based line numbers.

    ``duplicates``: ``(key, line, first line)`` of each key set twice in one
    mapping (YAML would silently keep the last).
    """

    def __init__(self, node: "yaml.Node | None"):
        self.lines: dict[str, int] = {}
        self.duplicates: list[tuple[str, int, int]] = []
        if node is not None:
            self._walk(node, "")

    def _walk(self, node: "yaml.Node", prefix: str) -> None:
        import yaml

        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = f"{prefix}{key_node.value}"
                line = key_node.start_mark.line + 1
                if key in self.lines:
                    self.duplicates.append((key, line, self.lines[key]))
                    continue
                self.lines[key] = line
                self._walk(value_node, key + ".")

    def get(self, key: str) -> int | None:
        """Line of ``key``, or of its nearest enclosing key, or None."""
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key.rpartition(".")[0]
        return None


def _describe(hint: Any, meta: dict[str, Any]) -> str:
    if "choices" in meta:
        return "one of " + ", ".join(meta["choices"])
    base = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(hint, "a list of strings")
    if "max" in meta:
        return base + f" from {meta['min']} to {meta['max']}"
    if "gt" in meta:
        return base + f" > {meta['gt']}"
    return base + (f" >= {meta['min']}" if "min" in meta else "")


def _convert(value: Any, hint: Any, meta: dict[str, Any]) -> Any:
    """Return ``value`` converted to ``hint`` or raise ValueError with the expectation."""
    optional = typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", None))
    if optional:
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    ok = True
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif typing.get_origin(hint) is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if ok and "min" in meta:
        ok = value >= meta["min"]
    if ok and "gt" in meta:
        ok = value > meta["gt"]
    if ok and isinstance(value, (int, float)) and not isinstance(value, bool):
        ok = value <= meta.get("max", INT64_MAX) and value == value and value != float("inf")
    if ok and "choices" in meta:
        ok = value in meta["choices"]
    if not ok:
        raise ValueError(f"must be {_describe(hint, meta)}, not {value!r}")
    unknown = [v for v in value if v not in meta["names"]] if "names" in meta else []
    if unknown:
        raise ValueError(f"unknown name(s) {', '.join(map(repr, unknown))}; known: {', '.join(meta['names'])}")
    bad = [v for v in value if not ENV_NAME.match(v) or v.startswith("HERMES_")] \
        if meta.get("env_names") else []
    if bad:
        raise ValueError(f"must be environment variable names (not HERMES_*), not {', '.join(map(repr, bad))}")
    if meta.get("url") and value is not None:
        check_url(value)
    return value


def check_url(value: str) -> str:
    """``value`` when it is an ``http://`` or ``https://`` URL with a host and no whitespace (a
    model server's ``base_url``); raises ``ValueError`` saying what it must be otherwise."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in value):
        raise ValueError(f"must be an http:// or https:// URL such as http://localhost:8000, not {value!r}")
    return value


def _build(cls: type, data: Any, prefix: str, file: str | None, lines: _Lines, errors: list[ConfigError]) -> Any:
    """``cls`` from ``data``; each problem is appended to ``errors`` and its key left at the default."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        key = prefix.rstrip(".") or None
        errors.append(ConfigError("must be a mapping of keys to values", file, lines.get(prefix.rstrip(".")), key))
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for key in data:
        if key not in fields:
            known = ", ".join(sorted(fields))
            errors.append(ConfigError(f"unknown key (known keys: {known})", file, lines.get(f"{prefix}{key}"),
                                      f"{prefix}{key}"))
    values = {}
    for name, f in fields.items():
        if name not in data:
            continue
        hint = hints[name]
        if "check" in f.metadata:  # a section of names chosen by the user: its own parser names the problems
            problems = f.metadata["check"](data[name])[1]
            for key, reason in problems:
                dotted = f"{prefix}{name}" + (f".{key}" if key else "")
                errors.append(ConfigError(reason, file, lines.get(dotted), dotted))
            if not problems:
                values[name] = data[name] or {}
            continue
        if typing.get_origin(hint) is dict:
            values[name] = _build_entries(typing.get_args(hint)[1], data[name], f"{prefix}{name}", file, lines, errors)
            continue
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, data[name], f"{prefix}{name}.", file, lines, errors)
            continue
        try:
            values[name] = _convert(data[name], hint, dict(f.metadata))
        except ValueError as exc:
            errors.append(ConfigError(str(exc), file, lines.get(f"{prefix}{name}"), f"{prefix}{name}"))
    return cls(**values)


def _build_entries(cls: type, data: Any, key: str, file: str | None, lines: _Lines,
                   errors: list[ConfigError]) -> dict[str, Any]:
    """A mapping of names to ``cls`` (``rate_limits:``); a name is a provider or an ``http(s)://`` URL."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        errors.append(ConfigError("must be a mapping of names to settings", file, lines.get(key), key))
        return {}
    out = {}
    for name, entry in data.items():
        where = f"{key}.{name}"
        try:
            if name not in PROVIDERS:
                _convert(name, str, URL)
        except ValueError:
            errors.append(ConfigError(f"must be a provider ({', '.join(PROVIDERS)}) or an http:// or https:// "
                                      f"URL such as https://api.anthropic.com, not {name!r}", file,
                                      lines.get(where), where))
            continue
        out[str(name).rstrip("/")] = _build(cls, entry, where + ".", file, lines, errors)
    return out


def parse(text: str, file: str | None = None) -> Config:
    """Validate YAML ``text`` into a :class:`Config`.  Raises :class:`ConfigError`."""
    data, lines = read_yaml(text, file)
    errors = [ConfigError(f"set twice (first on line {first}); remove one", file, line, key)
              for key, line, first in lines.duplicates]
    return _validated(data, file, lines, errors)


def read_yaml(text: str, file: str | None = None) -> tuple[Any, _Lines]:
    """YAML ``text`` of ``file`` as plain data and the line of each dotted key (``.get(key)``:
    1-based or None; ``.duplicates``: keys set twice).  Raises :class:`ConfigError` (invalid YAML,
    with its line)."""
    import yaml

    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ConfigError(f"invalid YAML: {exc.problem or exc}", file, mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file) from None
    return data, _Lines(node)


def from_data(data: Any, source: str | None = None) -> Config:
    """Validate plain data into a :class:`Config` coming from file ``source``.

    ``data``: a mapping as YAML or JSON gives it (the shape of :meth:`Config.to_dict`,
    without ``source``).  How the daemon process receives the config that ``hermesd
    run`` read (:mod:`hermesd.daemon`), so that it never imports PyYAML to start.
    Raises :class:`ConfigError` (without line numbers).
    """
    return _validated(data, source, _Lines(None), [])


def _validated(data: Any, file: str | None, lines: _Lines, errors: list[ConfigError]) -> Config:
    """:class:`Config` from ``data``, or the first of ``errors`` and its own problems raised."""
    config = _build(Config, data, "", file, lines, errors)
    if config.terminal.backend != "local" and not config.terminal.image:
        errors.append(ConfigError(f"{config.terminal.backend} runs every job's commands in a container, so "
                                  "terminal.image must name its image", file, lines.get("terminal.backend"),
                                  "terminal.backend"))
    if errors:
        errors.sort(key=lambda e: e.line or 0)
        errors[0].problems = errors
        raise errors[0]
    return dataclasses.replace(config, source=file)


def load(path: str | os.PathLike | None = None) -> Config:
    """Load the config file.

    ``path`` None means ``$HERMES_HOME/config.yaml``, and a missing default
    file means all defaults; an explicit ``path`` must exist.  Raises
    :class:`ConfigError` naming the file (and line and key where known).
    """
    explicit = path is not None
    file = Path(path) if explicit else default_path()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        if explicit:
            raise ConfigError("no such file", str(file)) from None
        return Config()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", str(file)) from None
    return parse(text, str(file))
