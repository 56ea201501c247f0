"""Worker profiles: ``HERMES_HOME/profiles/NAME/config.yaml``.

A profile names a kind of Kanban worker and says what it is good at; the
description is what an orchestrator reads to route work (``kanban.list``
answers with every profile).  The file holds::

    name: coder
    description: Skilled at implementing features, fixing bugs and writing tests
    model: null          # null: the daemon's delegation.model / model
    provider: null       # null: the daemon's delegation.provider / provider
    toolsets: null       # null: the config's toolsets; `kanban` is always added for workers
    worktree: false      # true: each worker runs in a git worktree of its own (branch hermes/JOB_ID)
    mcp_servers: {}      # MCP servers of its own (the shape of config.yaml's), which only its workers get

The files are the truth: they are read on every use, so an edit by hand takes
effect at the next dispatch, and a broken file is reported (``invalid_config``
naming the file and the key) instead of guessed at.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable


from hermesd import config as config_mod
from hermesd import paths
from hermesd.contract.providers import PROVIDERS
from hermesd.mcp.config import parse_servers
from hermesd.protocol import ProtocolError, expand_toolsets, one_line

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A profile name: a letter or digit, then up to 63 letters, digits, ``_``, ``.``, ``-`` (it names a directory)."""

MAX_DESCRIPTION = 4000
"""Longest description, in characters (it goes into every orchestrator's ``kanban_list``)."""

KEYS = ("name", "description", "model", "provider", "toolsets", "worktree", "mcp_servers")


@dataclass(frozen=True)
class Profile:
    """One worker profile.  ``toolsets`` None means the config's toolsets; ``worktree``: its workers
    run in git worktrees of their own (:mod:`hermesd.worktrees.ops`); ``mcp_servers``: MCP servers
    of its own as written (``mcp_servers:``, checked: :func:`hermesd.mcp.config.parse_servers`), which its
    workers get besides their toolsets' (:mod:`hermesd.mcp.ops`); ``path`` is its file."""

    name: str
    description: str
    model: str | None = None
    provider: str | None = None
    toolsets: list[str] | None = None
    worktree: bool = False
    mcp_servers: dict[str, Any] | None = None
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The profile as ops answer it: every field plus ``path``."""
        return asdict(self)


def root() -> Path:
    """``HERMES_HOME/profiles`` (not created)."""
    return paths.hermes_home() / "profiles"


def file_of(name: str) -> Path:
    """``HERMES_HOME/profiles/NAME/config.yaml`` of a valid ``name``; raises ``bad_request`` otherwise."""
    if not isinstance(name, str) or not NAME.match(name):
        raise ProtocolError("bad_request", f"profile name {name!r} must match {NAME.pattern}", {"field": "name"})
    return root() / name / "config.yaml"


def check(fields: dict[str, Any], *, bad: str = "bad_request", file: str | None = None,
          line_of: Callable[[str], int | None] = lambda _key: None) -> dict[str, Any]:
    """Validate profile ``fields`` (``description``, ``model``, ``provider``, ``toolsets``, ``worktree``,
    ``mcp_servers``: :func:`hermesd.mcp.config.parse_servers`).

    Returns them normalised (toolsets expanded, ``all`` never giving ``kanban``).
    Raises ``ProtocolError`` with code ``bad`` naming every wrong field, one line each
    (``FILE:LINE: key: reason`` when the fields came from ``file``, ``line_of(key)``
    giving a key's line), the first in ``details`` with all of them as ``problems``.
    """
    problems: list[dict[str, Any]] = []

    def wrong(key: str, message: str) -> None:
        problems.append({"field": key, "key": key, "file": file, "line": line_of(key) if file else None,
                         "reason": message})

    for key in sorted(set(fields) - set(KEYS)):
        wrong(key, f"unknown key (known keys: {', '.join(KEYS)})")
    description = fields.get("description")
    if not isinstance(description, str) or not description.strip():
        wrong("description", "must be a non-empty text saying what this worker is good at")
    elif len(description) > MAX_DESCRIPTION:
        wrong("description", f"must be at most {MAX_DESCRIPTION} characters")
    for key in ("model", "provider"):
        if fields.get(key) is not None and not isinstance(fields[key], str):
            wrong(key, f"must be a string, not {type(fields[key]).__name__}")
    if isinstance(fields.get("provider"), str) and fields["provider"] not in PROVIDERS:
        wrong("provider", f"must be one of {', '.join(PROVIDERS)}")
    if fields.get("worktree") is not None and not isinstance(fields["worktree"], bool):
        wrong("worktree", "must be true or false")
    toolsets = fields.get("toolsets")
    if toolsets is not None:
        if not isinstance(toolsets, list) or not all(isinstance(t, str) for t in toolsets):
            wrong("toolsets", "must be a list of toolset names")
        else:
            try:
                toolsets = expand_toolsets(toolsets)
            except ProtocolError as err:
                wrong("toolsets", err.message)
    servers, server_problems = parse_servers(fields.get("mcp_servers"))
    for key, reason in server_problems:
        wrong("mcp_servers" + (f".{key}" if key else ""), reason)
    if problems:
        problems.sort(key=lambda p: p["line"] or 0)
        text = [":".join(str(w) for w in (p["file"], p["line"]) if w) for p in problems]
        raise ProtocolError(bad, "\n".join(f"{where + ': ' if where else ''}{p['key']}: {p['reason']}"
                                           for where, p in zip(text, problems)),
                            {**problems[0], "problems": problems})
    return {"description": description.strip(), "model": fields.get("model") or None,
            "provider": fields.get("provider") or None, "toolsets": toolsets, "worktree": fields.get("worktree") is True,
            "mcp_servers": dict(fields["mcp_servers"]) if servers else None}


def load(name: str) -> Profile:
    """Read profile ``name``.  Raises ``not_found`` (listing the profiles there are)
    or ``invalid_config`` (a broken file, naming the file and the key)."""
    path = file_of(name)
    try:
        data, lines = config_mod.read_yaml(path.read_text(encoding="utf-8"), str(path))
    except config_mod.ConfigError as exc:
        raise ProtocolError("invalid_config", str(exc), exc.details()) from None
    except FileNotFoundError:
        known = ", ".join(p.name for p in list_all()) or "none yet"
        raise ProtocolError("not_found", f"no profile {name!r} (profiles: {known}); create it with "
                            f"`hermesctl profile create {name} --description TEXT`",
                            {"profile": name}) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProtocolError("invalid_config", f"{path}: cannot read profile: {one_line(exc)}",
                            {"file": str(path)}) from None
    if not isinstance(data, dict):
        raise ProtocolError("invalid_config", f"{path}: a profile must be a mapping of keys to values",
                            {"file": str(path)})
    fields = {k: v for k, v in data.items() if k != "name"}
    return Profile(name=name, path=str(path),
                   **check(fields, bad="invalid_config", file=str(path), line_of=lines.get))


def list_all() -> list[Profile]:
    """Every readable profile, by name.  A broken file is left out (:func:`broken` names it)."""
    return [p for p in _scan() if isinstance(p, Profile)]


def broken() -> list[dict[str, Any]]:
    """Every profile whose file cannot be used: ``[{name, path, error}]`` by name."""
    return [p for p in _scan() if not isinstance(p, Profile)]


def _scan() -> list[Profile | dict[str, Any]]:
    out: list[Profile | dict[str, Any]] = []
    directory = root()
    if not directory.is_dir():
        return out
    for entry in sorted(directory.iterdir()):
        if NAME.match(entry.name) and (entry / "config.yaml").is_file():
            try:
                out.append(load(entry.name))
            except ProtocolError as err:
                out.append({"name": entry.name, "path": str(entry / "config.yaml"), "error": err.message})
    return out


def save(name: str, fields: dict[str, Any], *, replace: bool = False) -> Profile:
    """Create (or with ``replace`` overwrite) profile ``name`` from ``fields``.

    The file is written atomically (temporary file, fsync, rename) in a 0700
    directory.  Raises ``bad_request`` naming the field, or ``invalid_state``
    when the profile exists and ``replace`` is off.
    """
    path = file_of(name)
    checked = check(fields)
    if path.exists() and not replace:
        raise ProtocolError("invalid_state", f"profile {name!r} already exists ({path}); delete it first or "
                            "replace it", {"profile": name})
    paths.ensure_private_dir(root())
    paths.ensure_private_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    import yaml

    written = {k: v for k, v in checked.items() if v is not None or k != "mcp_servers"}  # none: no key
    text = yaml.safe_dump({"name": name, **written}, sort_keys=False, allow_unicode=True)
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return Profile(name=name, path=str(path), **checked)


def delete(name: str) -> dict[str, Any]:
    """Remove profile ``name`` and its directory; returns what it was (a broken
    file can be deleted too).  Raises ``not_found``."""
    path = file_of(name)
    if not path.exists():
        load(name)  # raises not_found with the list of profiles
    try:
        gone = load(name).to_dict()
    except ProtocolError:
        gone = {"name": name, "path": str(path)}
    import shutil

    shutil.rmtree(path.parent)
    return gone
