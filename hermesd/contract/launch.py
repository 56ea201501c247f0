"""How hermesd starts programs of its own, and what a child's environment carries.

A leaf (standard library only) of :mod:`hermesd.contract`: :data:`PYTHON` (the interpreter and
its options), the variable of a child's environment that caps its log (:data:`LOG_CAP_ENV`) and the names of a log's rotated copies (:func:`rotated_log`).
"""

from __future__ import annotations

import sys

PYTHON = (sys.executable, "-P")
"""How hermesd starts a Python program of its own (``*PYTHON, "-m", module``): ``-P``
(Python 3.11) leaves the working directory out of ``sys.path``, so a ``logging.py`` in a
job's ``cwd`` (or where the daemon was started) cannot shadow a module of the runtime."""

LOG_CAP_ENV = "HERMES_LOG_CAP"
"""Variable of a child's environment: ``MAX_BYTES:KEEP``, the cap on its log (``logs.max_bytes``,
``logs.keep``) that the child's own writer holds (:mod:`child.logwriter`)."""


def rotated_log(name: str, n: int) -> str:
    """``log.N``: the file name of the ``n``-th rotated copy of log ``name`` (1 is the newest)."""
    return f"{name}.{n}"
