"""The values of a job's secret variables, kept out of ``state.db``.

A job given a secret with its value (``hermesctl delegate --secret NAME=VALUE``, or ``--env
NAME=VALUE`` whose name is secret by :class:`hermesd.redaction.Secrets`) needs it each time its
child starts (a resume after a restart too), yet no row, event, page or backup of ``state.db``
may hold it: the spec keeps the names (:func:`hermesd.delegation.tasks.split_env`) and the values
are in ``jobs/ID/secrets.json`` (0600, in the job's 0700 folder: :mod:`hermesd.private`),
written at admission, read at each start of its child, removed once the job is terminal (a
``retry`` of it must be given them again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hermesd.private import write_file

FILE = "secrets.json"
"""The file in a job's folder that holds its secret values: ``{NAME: value}``."""


def write(folder: Path, values: dict[str, str]) -> None:
    """Keep ``values`` in ``folder`` (created 0700 when missing).  Raises ``OSError``."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_file(folder / FILE, json.dumps(values))


def read(folder: Path, names: list[str]) -> dict[str, str]:
    """The values of ``names`` kept in ``folder``.  Raises ``OSError`` naming what is missing
    (the file was removed by hand, or the job had ended)."""
    try:
        values = json.loads((folder / FILE).read_text())
    except (OSError, ValueError) as exc:
        raise OSError(f"the values of its secrets ({', '.join(names)}) are gone: {folder / FILE}: {exc}") from None
    missing = [n for n in names if not isinstance(values.get(n), str)]
    if missing:
        raise OSError(f"{folder / FILE} lacks the value of {', '.join(missing)}")
    return {n: values[n] for n in names}


def remove(folder: Path) -> None:
    """Forget the values kept in ``folder`` (none kept: nothing to do)."""
    try:
        os.unlink(folder / FILE)
    except FileNotFoundError:
        pass
