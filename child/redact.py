"""Secrets stay with the child's provider: what a tool's environment lacks, and what is redacted.

A child is started with the daemon's environment, so it holds the provider keys
(:data:`hermesd.contract.providers.PROVIDER_KEYS`) and every other secret of the daemon's environment.
The child needs the keys to call the model; nothing its tools run needs a secret it was not
given.  The rule is :class:`hermesd.redaction.Secrets` (secret: a provider key, a name in
:data:`hermesd.redaction.SECRETS_ENV` — the config's ``secrets:``, the job's ``secrets`` —, a
name matching :data:`hermesd.redaction.SECRET_PATTERNS`, the job's token; passed: the names in
:data:`hermesd.redaction.PASS_ENV` — ``terminal.pass_env``, the job's own variables):

* :func:`tool_environment` is the environment of a terminal command and of a
  container engine's client: the child's, less its secrets that are not passed and
  always less the job's token for ``children.sock``.
* :class:`Redactor` replaces the value of every secret — passed or not — by
  ``[REDACTED:NAME]`` in text before it is stored or sent: a tool's result (so the model,
  the trajectory and the messages never hold it), the job's log (the child's
  ``stderr``, :func:`install`) and everything the child sends the daemon
  (events, results: :meth:`Redactor.data`).  A plain variable (``--env STAGE=production``)
  is never redacted.

Values shorter than :data:`MIN_SECRET_CHARS` are not redacted: a short value
(``1``, ``yes``) would garble every output it appears in, and is no secret.
Redaction is a net for accidents and careless commands, not a sandbox: a command
that encodes a value (``base64``) gets it past the net, which is why the secrets are
not in a tool's environment in the first place.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, Mapping

from hermesd.contract.providers import PROVIDER_KEYS
from hermesd.redaction import MIN_SECRET_CHARS, Redactor, Secrets  # noqa: F401 (MIN_SECRET_CHARS: re-exported)

TOKEN_ENV = "HERMES_CHILD_TOKEN"
"""The job's secret for ``children.sock``: never in a tool's environment, redacted where it shows."""


def rule(environ: Mapping[str, str] | None = None) -> Secrets:
    """The secrets rule of ``environ`` (default ``os.environ``): :meth:`hermesd.redaction.Secrets.of_child`
    with the provider keys and the job's token."""
    return Secrets.of_child(os.environ if environ is None else environ, PROVIDER_KEYS, (TOKEN_ENV,))


def hidden_names(environ: Mapping[str, str]) -> set[str]:
    """Variables of ``environ`` a tool's environment lacks: its secrets not passed, and the job's token."""
    return rule(environ).hidden(environ)


def tool_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) without :func:`hidden_names`: what a tool's process gets."""
    environ = os.environ if environ is None else environ
    return rule(environ).tool_environment(environ)


def passed() -> list[str]:
    """The variables of this process's environment its tools get by name, secret or not (the job's
    own and ``terminal.pass_env``: :data:`hermesd.redaction.PASS_ENV`), sorted: what a command in the
    job's container is given on top of the image's environment."""
    return sorted(rule().passed & set(os.environ))


def from_environ(environ: Mapping[str, str] | None = None) -> Redactor:
    """The redactor of a child's environment (default ``os.environ``): the values of its secrets."""
    environ = os.environ if environ is None else environ
    return rule(environ).redactor(environ)


_current: Redactor | None = None


def current() -> Redactor:
    """The redactor of this process, made from its environment at first use (:func:`install` makes it anew)."""
    global _current
    if _current is None:
        _current = from_environ()
    return _current


def add(values: Mapping[str, str]) -> None:
    """Redact from now on, in this process's redactor (:func:`current`), those of ``{NAME: value}``
    (an MCP server's ``env`` and ``headers`` as it gets them: :mod:`child.mcp.client`) whose name
    is secret by the rule (:func:`rule`: ``GITHUB_TOKEN``, ``X_API_KEY``…) or is ``Authorization``."""
    secret = {name: value for name, value in values.items()
              if name.lower() == "authorization" or rule().secret(name.upper().replace("-", "_"))}
    if secret:
        known = {mark[len("[REDACTED:"):-1]: value for value, mark in current().pairs}
        current().__init__({**known, **secret})


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
    """Rewrite this process's ``/proc/PID/environ`` without the secrets its tools are not given
    (:func:`hidden_names`), which stay in ``os.environ`` and libc's environment (on the heap, where only this
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
