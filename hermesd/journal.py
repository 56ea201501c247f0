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
* ``note``: a text block added to the last user message (a steer message).

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
