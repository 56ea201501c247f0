"""The one dispatch path: every op, found by name, called with the typed context.

An op is an ``async`` function marked with :func:`op` in a handler module; its
docstring is at once the ``hermesctl`` help and the protocol reference
(``docs/protocol.md`` is generated from it).  The :class:`Router` is built from
the core's op modules and the plugins' (``hermesd.server.ROUTER``):

* client ops (``hermesd.sock``): ``handler(ctx, args)``; ``work`` ops are
  refused with ``shutting_down`` once the daemon stops;
* child ops (``children.sock``): ``handler(ctx, job, args)`` after the child's
  token was checked.  ``child.call {op, args}`` — the older envelope of an
  agent's Kanban tools — is unwrapped here into the child op ``op``, so it takes
  the same path.

What a client submits is redacted before any handler sees it: the value of every secret
of the daemon's environment (:class:`hermesd.redaction.Secrets`: the provider keys, the
config's ``secrets:``, the names matching the patterns) and every secret value the request
gives a job (:meth:`hermesd.redaction.Secrets.given`) in its arguments is ``[REDACTED:NAME]``, but a job's
``env`` and ``secrets`` (values its tools are given), so a key pasted into a goal is stored,
published and given to the model redacted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Awaitable, Callable, Iterable

from hermesd.contract.providers import PROVIDER_KEYS
from hermesd.protocol import ProtocolError, Request
from hermesd.redaction import JOB_VARIABLES, Redactor, Secrets

Handler = Callable[..., Awaitable[Any]]
KEPT = JOB_VARIABLES
"""Argument keys whose values a client's redaction leaves alone (a job's ``env`` and ``secrets``: for its tools)."""
ENVELOPE_OP = "child.call"
"""The child op that carries another child op: ``{op, args}`` (unwrapped by :meth:`Router.child`)."""


@dataclass(frozen=True)
class OpInfo:
    """How an op is registered: its wire ``name``, ``work`` (refused while stopping), ``child`` (a child op)."""

    name: str
    work: bool = False
    child: bool = False


def op(name: str, *, work: bool = False, child: bool = False) -> Callable[[Handler], Handler]:
    """Mark ``fn`` as the handler of op ``name``; the :class:`Router` that lists its module routes to it."""

    def mark(fn: Handler) -> Handler:
        fn.op_info = OpInfo(name, work, child)  # type: ignore[attr-defined]
        return fn

    return mark


class Router:
    """The dispatch tables of the ops of ``modules``.  Raises ``ValueError`` for an op defined twice."""

    def __init__(self, modules: Iterable[ModuleType]):
        self.ops: dict[str, Handler] = {}
        self.child_ops: dict[str, Handler] = {}
        self.work_ops: set[str] = set()
        self._redacting: tuple[Any, Secrets, Redactor] = (None, Secrets(), Redactor({}))
        for module in modules:
            for fn in vars(module).values():
                info = getattr(fn, "op_info", None)
                if not isinstance(info, OpInfo) or fn.__module__ != module.__name__:
                    continue
                table = self.child_ops if info.child else self.ops
                if info.name in table:
                    raise ValueError(f"op {info.name!r} is defined twice ({module.__name__})")
                table[info.name] = fn
                if info.work:
                    self.work_ops.add(info.name)

    async def client(self, ctx: Any, request: Request) -> Any:
        """Answer a client request; raises ``ProtocolError`` (``unknown_op``, ``shutting_down``, the handler's)."""
        handler = self.ops.get(request.op)
        if handler is None:
            raise ProtocolError("unknown_op", f"unknown op {request.op!r}", {"op": request.op})
        if ctx.stopping and request.op in self.work_ops:
            raise ProtocolError("shutting_down", "hermesd is shutting down and accepts no new work")
        redactor = self.redactor(ctx.config)
        given = self._redacting[1].given(request.args)
        if given:  # a value it gives as a secret is redacted from the rest of the request too
            redactor = redactor.adding(given)
        return await handler(ctx, redactor.data(request.args, KEPT))

    def redactor(self, config: Any) -> Redactor:
        """The daemon's redactor for ``config``: the values of the secrets of ``os.environ`` (the
        provider keys, its ``secrets``, the patterns), made again only when the config was reloaded."""
        if self._redacting[0] is not config:
            rule = Secrets((*PROVIDER_KEYS, *config.secrets))
            self._redacting = (config, rule, rule.redactor(os.environ))
        return self._redacting[2]

    async def child(self, ctx: Any, request: Request) -> Any:
        """Answer a child message (token checked first); ``child.call`` is unwrapped into its op."""
        name, args = request.op, request.args
        if name == ENVELOPE_OP:
            name = args.get("op")
            if not isinstance(name, str) or name == ENVELOPE_OP:
                raise ProtocolError("bad_request", "child.call: argument 'op' must name a child op", {"field": "op"})
            inner = args.get("args", {})
            if not isinstance(inner, dict):
                raise ProtocolError("bad_request", "child.call: argument 'args' must be a map", {"field": "args"})
            args = {**inner, "job": args.get("job"), "token": args.get("token")}
        handler = self.child_ops.get(name)
        if handler is None:
            raise ProtocolError("unknown_op", f"unknown child op {name!r}", {"op": name})
        job = ctx.runner.authenticate(args)
        return await handler(ctx, job, args)
