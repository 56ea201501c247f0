"""Known secret values replaced by ``[REDACTED:NAME]``: one definition for the daemon and its children.

A leaf (standard library only) children may import.  The child redacts what its tools
return, its log and all it sends (:mod:`child.redact`); the daemon redacts what a client
submits before it is stored or published (:meth:`hermesd.router.Router.client`), so a key
pasted into a goal is in no event, row, log or trajectory.

Values shorter than :data:`MIN_SECRET_CHARS` are not redacted: a short value (``1``,
``true``) would garble every output it appears in, and is no secret.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

MIN_SECRET_CHARS = 8
"""Shortest value that is redacted (characters)."""


class Redactor:
    """Replaces known secret values by ``[REDACTED:NAME]``.

    ``secrets``: ``{NAME: value}``; values under :data:`MIN_SECRET_CHARS` are
    ignored; the longest value is replaced first (a value that contains another
    is replaced whole).
    """

    def __init__(self, secrets: Mapping[str, str]):
        kept = {value: name for name, value in secrets.items() if value and len(value) >= MIN_SECRET_CHARS}
        self.pairs = sorted(((v, f"[REDACTED:{n}]") for v, n in kept.items()), key=lambda p: -len(p[0]))

    @classmethod
    def of(cls, environ: Mapping[str, str], names: Iterable[str]) -> "Redactor":
        """The values in ``environ`` of the variables ``names`` (those set)."""
        return cls({n: environ[n] for n in sorted(set(names)) if n in environ})

    def text(self, text: str) -> str:
        """``text`` with every known secret value replaced."""
        for value, mark in self.pairs:
            if value in text:
                text = text.replace(value, mark)
        return text

    def data(self, value: Any, keep: frozenset[str] = frozenset()) -> Any:
        """``value`` (strings, lists, tuples, dicts, scalars: a message's arguments) with every
        string redacted (dict keys too), but the value of a dict key in ``keep`` at any depth (a
        job's ``env``: values its tools are given); the same object when there is nothing to redact."""
        if not self.pairs:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): v if k in keep else self.data(v, keep) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.data(v, keep) for v in value)
        return value
