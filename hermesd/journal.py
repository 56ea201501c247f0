"""A running job's journal: the steps of its agent loop, as the child wrote them, read back.

``jobs/ID/journal.jsonl``: one JSON object per line (JSON Lines, https://jsonlines.org),
appended and fsynced by the child (:mod:`child.journal`) before its next step, so
that after a crash of the daemon or the child a new child resumes the job where
the last one stopped (:mod:`hermesd.resume`).  Entries (key ``t``):

* ``message``: a message added to the run's conversation (the first user message,
  each completed model call's assistant message, a repair prompt), with the run's
  ``turn``, ``api_calls`` and ``tokens`` so far;
* ``tool_started``: a tool call (``id``, ``name``) is about to run;
* ``tool_result``: its ``result`` block and ``trace`` entry, once it ran;
* ``note``: a text block added to the last user message (a steer message, with its ``steer`` id:
  the message it is, :mod:`hermesd.delegation.inbox`).

A leaf both sides import (standard library only): the daemon checks a journal at
start-up, the child replays it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NAME = "journal.jsonl"
"""The journal's file name in the job's folder (``jobs/ID/``)."""

KINDS = frozenset({"message", "tool_started", "tool_result", "note"})
"""The entry kinds (key ``t``)."""


class JournalError(Exception):
    """A journal that is missing or cannot be read; the text says which and why."""


def read(path: str | Path) -> list[dict[str, Any]]:
    """The entries of the journal at ``path``, in order.

    A last line without its newline is a write that a crash cut short: it is left
    out (its step is done again).  Raises :class:`JournalError` when the file is
    missing or unreadable, or a complete line is not an entry
    (``PATH:LINE: reason``).
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise JournalError(f"its journal {path} is missing") from None
    except OSError as exc:
        raise JournalError(f"its journal {path} cannot be read: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    entries = []
    for number, line in enumerate(lines[:-1], 1):  # lines[-1]: '' or a torn last write
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise JournalError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(entry, dict) or entry.get("t") not in KINDS:
            raise JournalError(f"{path}:{number}: not a journal entry")
        entries.append(entry)
    return entries


def read_from(path: str | Path, offset: int, limit: int) -> tuple[list[dict[str, Any]], int, int]:
    """The whole lines of the journal at ``path`` from byte ``offset`` on, as many as fit in about
    ``limit`` bytes (a longer first line whole): ``(entries, next offset, file size)``.  A line that
    is not an entry is left out; a missing file is ``([], 0, 0)``.  For a reader that follows a
    running job (the ``journal`` op) rather than a child that replays it (:func:`read`)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(min(max(0, offset), size))
            data = fh.read(limit)
            while data and b"\n" not in data and len(data) < size:  # one line longer than the limit
                more = fh.read(limit)
                if not more:
                    break
                data += more
    except FileNotFoundError:
        return [], 0, 0
    whole = data[:data.rfind(b"\n") + 1]
    entries = []
    for line in whole.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("t") in KINDS:
            entries.append(entry)
    return entries, min(max(0, offset), size) + len(whole), size
