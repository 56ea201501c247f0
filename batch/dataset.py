"""Reading a batch dataset: JSONL, one prompt per line (the keys: ``docs/protocol.md``, ``batch.run``).

Each line is a JSON object with ``prompt`` (a non-empty string) and optionally:

* ``cwd``: the directory the prompt runs in (absolute, or relative to the
  dataset file's directory; it must exist);
* ``docker_image``: a container image the prompt's terminal commands run in
  (docker or podman: see ``hermesd.containers.engine``);
* ``script``: a list of steps for the ``scripted`` provider (tests and demos;
  other providers ignore it);
* ``verifier``: the command that judges this prompt's samples (instead of the
  run's ``--verifier``; see ``batch.verify``).

Other fields (e.g. HumanEval's ``task_id``) travel into each trajectory line's
``metadata.extra``.

``prompt_index`` is the 0-based position of the line among the file's lines —
blank and bad lines count — so indices stay put when a bad line is fixed.  Bad
lines are reported as ``FILE:LINE: reason`` (1-based) and skipped; the rest of
the dataset is used.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

MAX_PROMPT_BYTES = 256 * 1024
"""Largest ``prompt`` accepted (the same bound as a delegation's goal)."""
MAX_DEPTH = 64
"""Deepest nesting of a line's JSON value (arrays and objects) accepted."""


class DatasetError(Exception):
    """The dataset file cannot be read at all (missing, a directory, unreadable)."""


@dataclass(frozen=True)
class Prompt:
    """One usable dataset line: ``index`` (0-based), ``line`` (1-based), the prompt
    text, its absolute ``cwd`` or None, ``docker_image`` or None, ``script`` or None,
    ``verifier`` or None, and the line's ``extra`` fields (every other key).  As one
    sample of a group (``batch.groups.expand``): ``index`` is the sample's, ``group``
    the line's index and ``attempt`` its number in the group."""

    index: int
    line: int
    prompt: str
    cwd: str | None = None
    docker_image: str | None = None
    script: list[dict[str, Any]] | None = None
    verifier: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    group: int = 0
    attempt: int = 0


CONSUMED = ("prompt", "cwd", "docker_image", "script", "verifier")
"""Dataset-line fields hermesd uses; the others are a prompt's ``extra``."""


@dataclass
class Dataset:
    """A read dataset: its absolute ``path``, the usable ``prompts`` in file order,
    and ``errors`` (``FILE:LINE: reason`` for every skipped line)."""

    path: str
    prompts: list[Prompt] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    """One :func:`line_digest` per line of the file (every line, used or not)."""


def line_digest(raw: bytes) -> str:
    """A short fingerprint of one dataset line (BLAKE2b, 8 bytes, hex): a resume knows by it
    whether the line a prompt index names is still the one that ran."""
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def first_change(before: list[str], now: list[str]) -> int | None:
    """The 0-based index of the first line of digests ``before`` that ``now`` does not have
    at the same place (changed, moved or removed), or None: lines added at the end change
    nothing that ran."""
    return next((i for i, digest in enumerate(before) if i >= len(now) or now[i] != digest), None)


class _BadLine(Exception):
    """A reason to skip one line."""


def _check_values(obj: dict[str, Any]) -> None:
    """Raise :class:`_BadLine` when a line's object is nested deeper than :data:`MAX_DEPTH`
    levels (msgpack and the trajectory files must carry it) or holds a string that is no
    Unicode text (a lone surrogate escape such as ``"\\ud800"``: RFC 8259 section 8.2 leaves
    it undefined, UTF-8 cannot encode it).  Walks the value without recursion."""
    todo: list[tuple[Any, int, str]] = [(obj, 1, "")]  # (value, depth, where it is)
    while todo:
        value, depth, where = todo.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _BadLine(f"{where}: invalid Unicode (a lone surrogate "
                               f"\\u{ord(value[exc.start]):04x})") from None
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise _BadLine(f"JSON nested deeper than {MAX_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    todo.append((key, depth, f"a key in {where}" if where else "a field name"))
                todo.append((item, depth + 1, f"{where}[{key!r}]" if where else f"field {key!r}"))


def _optional_str(obj: dict[str, Any], name: str) -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise _BadLine(f"field '{name}' must be a string, not {type(value).__name__}")
    return value


def _parse(raw: bytes, base_dir: str) -> dict[str, Any]:
    """The fields of one line as :class:`Prompt` keywords; raises :class:`_BadLine`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadLine(f"not UTF-8 (byte {exc.start + 1})") from None
    if not text.strip():
        raise _BadLine('empty line (expected a JSON object with "prompt")')
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadLine(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise _BadLine(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if not isinstance(obj, dict):
        raise _BadLine(f"expected a JSON object, got {type(obj).__name__}")
    _check_values(obj)
    if "prompt" not in obj:
        raise _BadLine("missing field 'prompt'")
    prompt = obj["prompt"]
    if not isinstance(prompt, str):
        raise _BadLine(f"field 'prompt' must be a string, not {type(prompt).__name__}")
    if not prompt.strip():
        raise _BadLine("field 'prompt' is empty")
    if len(prompt.encode("utf-8")) > MAX_PROMPT_BYTES:
        raise _BadLine(f"field 'prompt' exceeds {MAX_PROMPT_BYTES} bytes")
    cwd = _optional_str(obj, "cwd")
    if cwd is not None:
        cwd = os.path.normpath(os.path.join(base_dir, os.path.expanduser(cwd)))
        if not os.path.isdir(cwd):
            raise _BadLine(f"field 'cwd': directory {cwd!r} does not exist")
    script = obj.get("script")
    if script is not None and not (isinstance(script, list) and all(isinstance(s, dict) for s in script)):
        raise _BadLine("field 'script' must be a list of objects")
    verifier = _optional_str(obj, "verifier")
    if verifier is not None and not verifier.strip():
        raise _BadLine("field 'verifier' is empty")
    return {"prompt": prompt, "cwd": cwd, "docker_image": _optional_str(obj, "docker_image"), "script": script,
            "verifier": verifier, "extra": {k: v for k, v in obj.items() if k not in CONSUMED}}


def read(path: str, max_samples: int | None = None) -> Dataset:
    """Read the JSONL dataset at ``path`` (absolute).

    Stops after ``max_samples`` usable prompts when given.  Returns a
    :class:`Dataset`; raises :class:`DatasetError` naming the file when it
    cannot be read.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the dataset: {exc.strerror or exc}") from None
    dataset = Dataset(path)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line starts no new one
    dataset.digests = [line_digest(raw) for raw in lines]
    base_dir = os.path.dirname(path)
    for index, raw in enumerate(lines):
        if max_samples is not None and len(dataset.prompts) >= max_samples:
            break
        try:
            fields = _parse(raw.removesuffix(b"\r"), base_dir)
        except _BadLine as bad:
            dataset.errors.append(f"{path}:{index + 1}: {bad}")
            continue
        dataset.prompts.append(Prompt(index=index, line=index + 1, group=index, **fields))
    return dataset
