"""Load and validate ``config.yaml`` into typed settings (every key: ``docs/operations.md``).

The file is read with ``yaml.safe_load`` semantics; every error names the
file, the line and the dotted key (``config.yaml:7: delegation.max_async_children:
must be an integer >= 1, not 'three'``).  Unknown keys are errors too, so a
typo never silently falls back to a default.

Each section is a frozen dataclass; a field's type and ``metadata`` (``min``,
``choices``, ``names`` for lists, ``url``) are its validation rule, so the
schema is written once.  This module holds the rules and the core's sections
(:class:`Core`); each job type or plugin declares its own sections in its
package's ``config`` module (:data:`hermesd.paths.PLUGIN_ROOTS`), and :class:`Config` is
put together from them.  Every name is checked where it is given: a toolset
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

from hermesd import paths
from hermesd.paths import plugin_modules
from hermesd.contract.providers import PROVIDERS, REASONING_EFFORTS
from hermesd.contract.toolsets import MCP_TOOLSET, TOOLSETS
from hermesd.protocol import INT64_MAX

if TYPE_CHECKING:
    import yaml

START_METHODS = ("spawn", "forkserver")


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


def at_least(n: float, most: float | None = None) -> dict[str, Any]:
    """A field's ``metadata``: a number >= ``n`` (and <= ``most``)."""
    return {"min": n} if most is None else {"min": n, "max": most}


def one_of(*values: str) -> dict[str, Any]:
    """A field's ``metadata``: one of ``values``."""
    return {"choices": values}


def section(cls: type) -> Any:
    """A field holding section ``cls`` (a frozen dataclass), all defaults when not given."""
    return field(default_factory=cls)


TOOLSET_NAMES = {"names": (*TOOLSETS, "all", "*"), "prefix": MCP_TOOLSET}
"""Toolset names: a toolset, ``all``, ``*``, or ``mcp:NAME`` (whose server ``hermesd.mcp.config`` checks)."""
URL = {"url": True}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""An environment variable's name (a job's ``env``, the config's ``secrets``)."""
ENV_NAMES = {"env_names": True}
"""A list of environment variable names (``secrets:``): ``[A-Za-z_][A-Za-z0-9_]*``, none ``HERMES_*``."""


@dataclass(frozen=True)
class Supervisor:
    """``supervisor:`` — the global cap, stopping, and where state and logs live."""

    max_children: int = field(default=16, metadata=at_least(1))
    stop_timeout_seconds: float = field(default=10.0, metadata=at_least(0.1))
    interrupt_grace_seconds: float = field(default=3.0, metadata=at_least(0.0))
    state_dir: str | None = None
    log_dir: str | None = None
    start_method: str = field(default="forkserver", metadata=one_of(*START_METHODS))


@dataclass(frozen=True)
class Limits:
    """``limits:`` — caps on what one tool call may produce."""

    max_output_bytes: int = field(default=65536, metadata=at_least(256))
    max_file_bytes: int = field(default=1048576, metadata=at_least(1))
    terminal_timeout_seconds: float = field(default=60.0, metadata=at_least(0.1))


@dataclass(frozen=True)
class ChildLimits:
    """``child_limits:`` — resource limits of each child and everything it starts
    (see :mod:`hermesd.system.limits`); unset: unlimited.  A job may ask for lower ones."""

    memory_mb: int | None = field(default=None, metadata=at_least(16, 1 << 40))
    cpu_seconds: int | None = field(default=None, metadata=at_least(1, 1 << 40))
    processes: int | None = field(default=None, metadata=at_least(1, 1 << 22))
    open_files: int | None = field(default=None, metadata=at_least(16, 1 << 30))
    cgroup: bool = True


POSITIVE = {"gt": 0}
"""A number > 0 (a budget's limit)."""


def yaml_text_number(value: Any) -> str:
    """``"; YAML reads 1e3 as text: write 1000"`` when ``value`` is a string that is a finite number
    (PyYAML follows YAML 1.1, whose floats need a dot: ``1e3`` and ``1E3`` stay strings), else ``""``:
    the end of the error of a key that wants a number."""
    from decimal import Decimal, InvalidOperation  # here: an error's text only, not the idle daemon's memory

    try:
        number = Decimal(value.strip().replace("_", "")) if isinstance(value, str) else None
    except InvalidOperation:
        return ""
    if number is None or not number.is_finite():
        return ""
    return f"; YAML reads {value} as text: write {number:f}"


def parse_context_windows(data: Any) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The config's ``context_windows:`` mapping — model name or name prefix → the model's
    context window in tokens, read before :data:`hermesd.contract.providers.CONTEXT_WINDOWS` (the
    longest matching prefix wins: :func:`hermesd.contract.providers.context_window`) — as
    ``(table, problems)``; each problem is ``(model key, reason)``.  A window must be a whole
    number of tokens >= 1024."""
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [("", "must be a mapping of model names (or prefixes) to context windows in tokens, "
                         "e.g. {claude-sonnet-4: 1000000}")]
    table: dict[str, int] = {}
    problems: list[tuple[str, str]] = []
    for model, tokens in data.items():
        if model is None or not str(model).strip():
            problems.append(("null" if model is None else f'"{model}"',
                             "a model name (or prefix) must not be empty: it would match every model"))
        elif isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1024:
            problems.append((f"{model}", f"must be a whole number of tokens >= 1024, not {tokens!r}"
                                         f"{yaml_text_number(tokens)}"))
        else:
            table[str(model)] = tokens
    return table, problems


@dataclass(frozen=True)
class Core:
    """The core's part of ``config.yaml``: the model every job uses unless told otherwise, the
    toolsets, the supervisor, the caps of a tool call and of a child, the secrets.  ``source``
    is the file it came from (or None for defaults).  ``context_windows``: the models' context
    windows as written (:func:`parse_context_windows`).  The rest is the plugins' (:func:`parts`)."""

    model: str | None = None
    provider: str | None = field(default=None, metadata=one_of(*PROVIDERS))
    base_url: str | None = field(default=None, metadata=URL)
    reasoning_effort: str | None = field(default=None, metadata=one_of(*REASONING_EFFORTS))
    toolsets: list[str] = field(default_factory=lambda: ["terminal", "file", "web"], metadata=TOOLSET_NAMES)
    supervisor: Supervisor = section(Supervisor)
    limits: Limits = section(Limits)
    child_limits: ChildLimits = section(ChildLimits)
    secrets: list[str] = field(default_factory=list, metadata=ENV_NAMES)
    context_windows: dict[str, int] = field(default_factory=dict, metadata={"check": parse_context_windows})
    source: str | None = field(default=None, metadata={"internal": True})

    def state_dir(self) -> Path:
        """Directory of ``state.db`` (``supervisor.state_dir`` or ``HERMES_HOME``)."""
        return Path(self.supervisor.state_dir).expanduser() if self.supervisor.state_dir else paths.hermes_home()

    def log_dir(self) -> Path:
        """Directory of per-job directories (``supervisor.log_dir`` or ``HERMES_HOME/jobs``)."""
        return _log_dir(self.supervisor.log_dir, os.environ.get("HERMES_HOME"), os.environ.get("HOME"))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data view (for ``status`` and child specs)."""
        return dataclasses.asdict(self)


def _part_modules() -> list[str]:
    """The dotted names of the plugins' ``config`` modules (:data:`hermesd.paths.PLUGIN_ROOTS`): a
    package's ``config`` module, when it has one, declares the package's part of ``config.yaml``
    as a frozen dataclass ``Sections`` (one field per top-level key, each a section's dataclass or a
    mapping; its methods become the config's; a ``check(config)`` method returns ``[(dotted key,
    reason)]`` for rules across keys).  Found by file, so a new job type adds its section in its own
    package and the clients' imports stay light."""
    return [name for name in plugin_modules("config") if name != __name__]  # this module is no part


@functools.cache
def parts() -> tuple[type, ...]:
    """Every plugin's ``Sections`` (:data:`hermesd.paths.PLUGIN_ROOTS`), in module name order; :class:`Config` is
    :class:`Core` and these."""
    import importlib

    return tuple(importlib.import_module(name).Sections for name in _part_modules())


@functools.cache
def config_class() -> type:
    """The whole ``config.yaml``'s frozen dataclass (``hermesd.config.Config``): the fields of
    :class:`Core`, then those of each plugin's part (:func:`parts`), with their methods.  Raises
    ``ValueError`` when two parts declare the same key."""
    keys = [(f.name, part) for part in (Core, *parts()) for f in dataclasses.fields(part)]
    twice = sorted({name for name, _ in keys if [n for n, _ in keys].count(name) > 1})
    if twice:
        raise ValueError(f"config keys declared twice: {', '.join(twice)} "
                         f"({', '.join(sorted({p.__module__ for n, p in keys if n in twice}))})")
    return dataclasses.make_dataclass(
        "Config", [], bases=(*reversed(parts()), Core), frozen=True,
        namespace={"__module__": __name__, "__doc__": "The whole ``config.yaml``: :class:`Core` and every "
                   "plugin's part (:func:`parts`)."})


def __getattr__(name: str) -> Any:
    """``Config``: :func:`config_class` (made when first asked for, once the plugins' parts can be imported)."""
    if name == "Config":
        return config_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    mapping (YAML would silently keep the last).  A key set twice maps to its last line, and its
    keys to the last one's: the data holds the last value, so its problems are named there.
    """

    def __init__(self, node: "yaml.Node | None"):
        self.lines: dict[str, int] = {}
        self.duplicates: list[tuple[str, int, int]] = []
        if node is not None:
            self._walk(node, "")

    def _walk(self, node: "yaml.Node", prefix: str) -> None:
        import yaml

        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = f"{prefix}{key_node.value}"
                line = key_node.start_mark.line + 1
                if key in seen:
                    self.duplicates.append((key, line, seen[key]))
                    self.lines = {k: n for k, n in self.lines.items() if not k.startswith(key + ".")}
                seen[key] = self.lines[key] = line
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
        numeric = hint in (int, float)
        raise ValueError(f"must be {_describe(hint, meta)}, not {value!r}{yaml_text_number(value) if numeric else ''}")
    unknown = [v for v in value if v not in meta["names"] and not (meta.get("prefix") and v.startswith(meta["prefix"]))] \
        if "names" in meta else []
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
            valid, problems = f.metadata["check"](data[name])
            for key, reason in problems:
                dotted = f"{prefix}{name}" + (f".{key}" if key else "")
                errors.append(ConfigError(reason, file, lines.get(dotted), dotted))
            # its valid entries stay for the sections' checks (an mcp:NAME of toolsets: names a good server)
            values[name] = ({k: v for k, v in data[name].items() if str(k) in valid}
                            if problems and isinstance(data[name], dict) else data[name] or {})
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
    config = _build(config_class(), data, "", file, lines, errors)
    for part in parts():
        check = vars(part).get("check")
        for key, reason in check(config) if check else ():
            errors.append(ConfigError(reason, file, lines.get(key), key))
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
        return config_class()()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", str(file)) from None
    return parse(text, str(file))
