"""Worker profiles (SPEC §7): ``HERMES_HOME/profiles/NAME/config.yaml``.

A profile names a kind of Kanban worker and says what it is good at; the
description is what an orchestrator reads to route work (``kanban.list``
answers with every profile).  The file holds::

    name: coder
    description: Skilled at implementing features, fixing bugs and writing tests
    model: null          # null: the daemon's delegation.model / model
    provider: null       # null: the daemon's delegation.provider / provider
    toolsets: null       # null: the config's toolsets; `kanban` is always added for workers

The files are the truth: they are read on every use, so an edit by hand takes
effect at the next dispatch, and a broken file is reported (``invalid_config``
naming the file and the key) instead of guessed at.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


from hermesd import config as config_mod
from hermesd import paths
from hermesd.contract import PROVIDERS
from hermesd.protocol import ProtocolError, expand_toolsets, one_line

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A profile name: a letter or digit, then up to 63 letters, digits, ``_``, ``.``, ``-`` (it names a directory)."""

MAX_DESCRIPTION = 4000
"""Longest description, in characters (it goes into every orchestrator's ``kanban_list``)."""

KEYS = ("name", "description", "model", "provider", "toolsets")


@dataclass(frozen=True)
class Profile:
    """One worker profile.  ``toolsets`` None means the config's toolsets; ``path`` is its file."""

    name: str
    description: str
    model: str | None = None
    provider: str | None = None
    toolsets: list[str] | None = None
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


def check(fields: dict[str, Any], *, bad: str = "bad_request", file: str | None = None) -> dict[str, Any]:
    """Validate profile ``fields`` (``description``, ``model``, ``provider``, ``toolsets``).

    Returns them normalised (toolsets expanded, ``all`` never giving ``kanban``).
    Raises ``ProtocolError`` with code ``bad`` naming the field (and ``file`` when
    the fields came from a file).
    """
    def fail(key: str, message: str) -> ProtocolError:
        where = f"{file}: " if file else ""
        return ProtocolError(bad, f"{where}{key}: {message}", {"field": key, "key": key, "file": file})

    unknown = sorted(set(fields) - set(KEYS))
    if unknown:
        raise fail(unknown[0], f"unknown key (known keys: {', '.join(KEYS)})")
    description = fields.get("description")
    if not isinstance(description, str) or not description.strip():
        raise fail("description", "must be a non-empty text saying what this worker is good at")
    if len(description) > MAX_DESCRIPTION:
        raise fail("description", f"must be at most {MAX_DESCRIPTION} characters")
    for key in ("model", "provider"):
        if fields.get(key) is not None and not isinstance(fields[key], str):
            raise fail(key, f"must be a string, not {type(fields[key]).__name__}")
    if fields.get("provider") not in (None, *PROVIDERS):
        raise fail("provider", f"must be one of {', '.join(PROVIDERS)}")
    toolsets = fields.get("toolsets")
    if toolsets is not None:
        if not isinstance(toolsets, list) or not all(isinstance(t, str) for t in toolsets):
            raise fail("toolsets", "must be a list of toolset names")
        try:
            toolsets = expand_toolsets(toolsets)
        except ProtocolError as err:
            raise fail("toolsets", err.message) from None
    return {"description": description.strip(), "model": fields.get("model") or None,
            "provider": fields.get("provider") or None, "toolsets": toolsets}


def load(name: str) -> Profile:
    """Read profile ``name``.  Raises ``not_found`` (listing the profiles there are)
    or ``invalid_config`` (a broken file, naming the file and the key)."""
    import yaml  # here, as shutil below: what only profile commands need is not in the idle daemon

    path = file_of(name)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = ", ".join(p.name for p in list_all()) or "none yet"
        raise ProtocolError("not_found", f"no profile {name!r} (profiles: {known}); create it with "
                            f"`hermesctl profile create {name} --description TEXT`",
                            {"profile": name}) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ProtocolError("invalid_config", f"{where}: invalid YAML: {exc.problem or exc.context}",
                            {"file": str(path), "line": mark.line + 1 if mark else None}) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ProtocolError("invalid_config", f"{path}: cannot read profile: {one_line(exc)}",
                            {"file": str(path)}) from None
    if not isinstance(data, dict):
        raise ProtocolError("invalid_config", f"{path}: a profile must be a mapping of keys to values",
                            {"file": str(path)})
    fields = {k: v for k, v in data.items() if k != "name"}
    return Profile(name=name, path=str(path), **check(fields, bad="invalid_config", file=str(path)))


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

    text = yaml.safe_dump({"name": name, **checked}, sort_keys=False, allow_unicode=True)
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
