"""Durable file operations of a batch run: append a line, replace a file, read JSONL back.

The rules that make a run survive ``kill -9`` and power loss:

* a finished prompt is one ``write`` of one whole line to a file opened for
  appending, then ``flush`` and ``fsync`` (and an ``fsync`` of the directory
  when the file was just created) — before anything else records it;
* whole files (checkpoint, merged trajectories, statistics) are written to a
  temporary file in the same directory, fsynced, then renamed over the old one;
* reading back, a last line without its newline is a write the crash tore: the
  owner of the run truncates it away (:func:`read_jsonl` with ``repair``), and
  that prompt runs again.  Complete lines are never rewritten.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable


def dumps(obj: Any) -> str:
    """Compact JSON text of ``obj`` (UTF-8 kept as is)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def fsync_dir(path: Path) -> None:
    """fsync directory ``path`` so a created or renamed entry in it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_line(path: Path, obj: Any) -> tuple[int, int]:
    """Append ``obj`` as one JSON line to ``path``, flushed and fsynced; returns the
    line's byte range in the file, ``(start, end)``, its newline included.  Raises ``OSError``."""
    created = not path.exists()
    data = (dumps(obj) + "\n").encode("utf-8")
    with open(path, "ab") as fh:  # appending: the position starts at the end
        start = fh.tell()
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if created:
        fsync_dir(path.parent)
    return start, start + len(data)


def write_atomic(path: Path, text: str | Iterable[bytes]) -> None:
    """Replace ``path`` with ``text`` (or the byte chunks it yields, written one by one)
    atomically (temp file, fsync, rename, fsync dir). Raises ``OSError``."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        for chunk in [text.encode("utf-8")] if isinstance(text, str) else text:
            fh.write(chunk)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json(path: Path, obj: Any) -> None:
    """Replace ``path`` with ``obj`` as indented JSON, atomically (see :func:`write_atomic`)."""
    write_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def read_jsonl(path: Path, *, repair: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON objects of the lines of ``path`` and the problems met (see :func:`read_spans`)."""
    spans, problems = read_spans(path, repair=repair)
    return [obj for obj, _, _ in spans], problems


def read_spans(path: Path, *, repair: bool = False) -> tuple[list[tuple[dict[str, Any], int, int]], list[str]]:
    """The JSON objects of the lines of ``path``, each with its byte range ``(obj, start,
    end)`` (newline included), and the problems met, as ``FILE:LINE: reason``.

    A last line without its newline is torn: with ``repair`` the file is
    truncated just before it (and the problem says so), else it is only
    reported.  A complete line that is not a JSON object is reported and
    skipped, never removed.  A missing file reads as empty.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return [], []
    entries, problems = [], []
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
        action = "truncated away" if repair else "ignored"
        torn_line = data.count(b"\n", 0, keep) + 1
        problems.append(f"{path}:{torn_line}: "
                        f"torn last line ({len(data) - keep} bytes without a newline) {action}")
        if repair:
            with open(path, "r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
    end = 0
    for number, raw in enumerate(data[:keep].split(b"\n")[:-1], start=1):
        start, end = end, end + len(raw) + 1
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problems.append(f"{path}:{number}: not JSON ({exc.__class__.__name__}); line skipped")
            continue
        if not isinstance(obj, dict):
            problems.append(f"{path}:{number}: not a JSON object; line skipped")
            continue
        entries.append((obj, start, end))
    return entries, problems
