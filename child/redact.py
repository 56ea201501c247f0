"""Secrets stay with the child's provider: what a tool's environment lacks, and what is redacted.

A child is started with the daemon's environment, so it holds the provider keys
(:data:`hermesd.contract.PROVIDER_KEYS`) and whatever variables the config names
as secrets (``secrets:``, carried as names in :data:`hermesd.contract.SECRETS_ENV`).
The child needs them to call the model; nothing its tools run does:

* :func:`tool_environment` is the environment of a terminal command and of a
  container engine's client: the child's, less those variables and the job's
  token for ``children.sock``.  The variables a job was given with ``--env``
  (names in :data:`hermesd.contract.JOB_ENV_NAMES`) stay: they are for its tools.
* :class:`Redactor` replaces every known secret value — provider keys, config
  secrets, the job's ``--env`` values, the job's token — by ``[REDACTED:NAME]``
  in text before it is stored or sent: a tool's result (so the model, the
  trajectory and the messages never hold it), the job's log (the child's
  ``stderr``, :func:`install`) and everything the child sends the daemon
  (events, results: :meth:`Redactor.data`).

The redactor is :class:`hermesd.redaction.Redactor` (the daemon's too).
Values shorter than :data:`MIN_SECRET_CHARS` are not redacted: a short value
(``1``, ``true``) would garble every output it appears in, and is no secret.
Redaction is a net for accidents and careless commands, not a sandbox: a command
that encodes a value (``base64``) gets it past the net, which is why the keys are
not in a tool's environment in the first place.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, Mapping

from hermesd.contract import JOB_ENV_NAMES, PROVIDER_KEYS, SECRETS_ENV
from hermesd.redaction import MIN_SECRET_CHARS, Redactor  # noqa: F401 (MIN_SECRET_CHARS: re-exported)

TOKEN_ENV = "HERMES_CHILD_TOKEN"
"""The job's secret for ``children.sock``: never in a tool's environment, redacted where it shows."""


def _names(environ: Mapping[str, str], key: str) -> list[str]:
    """The comma-separated variable names in ``environ[key]``."""
    return [n for n in (environ.get(key) or "").split(",") if n]


def hidden_names(environ: Mapping[str, str]) -> set[str]:
    """Variables a tool's environment lacks: the provider keys, the config's secrets and the
    job's token, less the names the job's ``--env`` gave its tools."""
    return ({*PROVIDER_KEYS, *_names(environ, SECRETS_ENV), TOKEN_ENV}
            - set(_names(environ, JOB_ENV_NAMES)))


def tool_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) without :func:`hidden_names`: what a tool's process gets."""
    environ = os.environ if environ is None else environ
    hidden = hidden_names(environ)
    return {k: v for k, v in environ.items() if k not in hidden}


def from_environ(environ: Mapping[str, str] | None = None) -> Redactor:
    """The redactor of a child's environment (default ``os.environ``): the provider keys,
    the config's secrets, the job's ``--env`` variables and its token."""
    environ = os.environ if environ is None else environ
    return Redactor.of(environ, {*PROVIDER_KEYS, *_names(environ, SECRETS_ENV), *_names(environ, JOB_ENV_NAMES), TOKEN_ENV})


_current: Redactor | None = None


def current() -> Redactor:
    """The redactor of this process, made from its environment at first use (:func:`install` makes it anew)."""
    global _current
    if _current is None:
        _current = from_environ()
    return _current


class _RedactingStream(io.TextIOBase):
    """A text stream that writes through another one, with secrets redacted."""

    def __init__(self, inner: Any, redactor: Redactor):
        self.inner, self.redactor = inner, redactor

    def write(self, text: str) -> int:
        """Write ``text``, redacted; returns ``len(text)`` (what the caller gave)."""
        self.inner.write(self.redactor.text(text))
        return len(text)

    def flush(self) -> None:
        """Flush the inner stream."""
        self.inner.flush()

    def fileno(self) -> int:
        """The inner stream's descriptor (faulthandler and subprocesses write there directly)."""
        return self.inner.fileno()

    def isatty(self) -> bool:
        """Whether the inner stream is a terminal."""
        return self.inner.isatty()


def hide_from_proc() -> bool:
    """Rewrite this process's ``/proc/PID/environ`` without the provider keys and the config's
    secrets, which stay in ``os.environ`` and libc's environment (on the heap, where only this
    process reads them): a tool that reads its parent's ``/proc/PID/environ`` finds none.
    Everything else stays there (the daemon finds a job's processes by ``HERMES_JOB_ID`` and
    ``HERMES_SUPERVISOR``; the job's token, which only speaks for this job, is kept out of its
    tools' environment and redacted).  Returns True when rewritten (False: nothing to hide,
    or not Linux)."""
    hidden = (hidden_names(os.environ) - {TOKEN_ENV}) & set(os.environ)
    if not hidden:
        return False
    from child import spare  # how a warm spare writes its job's environment there, reused

    env = dict(os.environ)
    area = spare.blank_environment()
    os.environ.update(env)
    return spare.publish_environ({k: v for k, v in env.items() if k not in hidden}, area)


def install() -> Redactor:
    """Make this process's redactor from its environment (a child's, once it has its job's)
    and redact what it prints on ``stdout``/``stderr`` (the job's log)."""
    global _current
    _current = from_environ()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and _current.pairs:
            inner = stream.inner if isinstance(stream, _RedactingStream) else stream
            setattr(sys, name, _RedactingStream(inner, _current))
    return _current
