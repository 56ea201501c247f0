"""Training data clean of the host: a batch item's trajectory without the machine it ran on.

A tool result can show where the item ran — ``pwd``, ``ls -la``, a traceback, an
error naming a file — and so can the model's own replies once it has seen one.
:class:`HostMask` replaces, in every string of the recorded trajectory (and the
verifier's output), the paths and names of this host by fixed placeholders:

* the working directory (as given and resolved) by the spec's ``workdir_placeholder``
  (``.``: what the system prompt shows), so ``/…/jobs/ID/work/solution.py`` reads
  ``./solution.py``;
* ``HERMES_HOME`` by ``$HERMES_HOME`` and the runtime directory (sockets) by
  ``$HERMES_RUNTIME_DIR``; the home directory by ``~``;
* the host's name (as a whole word, when it is at least :data:`MIN_HOSTNAME_CHARS`
  long) by ``localhost``;
* the model server's address (``base_url``, whose port is the host's) by ``$BASE_URL``, and so
  its ``host:port`` alone when it has a port.

Longer paths are replaced first, so a path under another gets its own placeholder.
What the model saw is not changed: only what is recorded (the model worked with
the real paths; the data shows the placeholders).  Secrets are masked elsewhere
(:mod:`child.redact`).
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any

MIN_HOSTNAME_CHARS = 2
"""A shorter host name is not masked: it would garble words of the text."""


def _with_port(url: str) -> str | None:
    """The ``host:port`` of ``url`` when it names a port (a bare host name is not the host's), else None."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return parts.netloc.rsplit("@", 1)[-1] if parts.port is not None else None
    except ValueError:
        return None


class HostMask:
    """Replaces this host's paths and names in text (see the module doc).  ``cwd``: the
    job's working directory; ``placeholder``: what stands for it; ``base_url``: the
    model server's address, or None; ``environ``: where ``HERMES_HOME``,
    ``HERMES_RUNTIME_DIR`` and ``HOME`` are read (default ``os.environ``)."""

    def __init__(self, cwd: str, placeholder: str, base_url: str | None = None,
                 environ: dict[str, str] | None = None):
        from hermesd import paths

        env = os.environ if environ is None else environ
        pairs: dict[str, str] = {}
        home = env.get("HOME") or ""
        for path, shown in ((home, "~"), (str(paths.hermes_home()), "$HERMES_HOME"),
                            (str(paths.runtime_dir()), "$HERMES_RUNTIME_DIR"), (cwd, placeholder)):
            for variant in {path, os.path.realpath(path)} if path else ():
                if len(variant) > 1:  # never "/"
                    pairs[variant.rstrip("/")] = shown
        if base_url:
            pairs[base_url.rstrip("/")] = "$BASE_URL"
            netloc = _with_port(base_url)
            if netloc:  # as an error shows it: "connection refused: 127.0.0.1:8765"
                pairs[netloc] = "$BASE_URL"
        ordered = sorted(pairs.items(), key=lambda kv: len(kv[0]), reverse=True)
        self.pairs = [(path, re.compile(re.escape(path) + r"(?![\w.-])"), shown) for path, shown in ordered]
        host = socket.gethostname()
        masked = len(host) >= MIN_HOSTNAME_CHARS and host != "localhost"
        self.host = re.compile(rf"(?<![\w.-]){re.escape(host)}(?![\w-])") if masked else None

    def text(self, text: str) -> str:
        """``text`` with the host's paths and names replaced (a path only where it ends:
        ``/a/work`` is not masked in ``/a/work2``)."""
        for path, pattern, shown in self.pairs:
            if path in text:
                text = pattern.sub(lambda _m: shown, text)
        return self.host.sub("localhost", text) if self.host is not None else text

    def data(self, value: Any) -> Any:
        """``value`` (JSON-like data) with :meth:`text` applied to every string in it, keys too."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.data(v) for v in value]
        return value
