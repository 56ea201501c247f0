"""A batch's parts of the job spec: a prompt's (:class:`ItemSpec`, of ``batch_item`` and
``ray_item`` jobs) and its Ray driver's (:class:`DriverSpec`, of a ``batch_driver``).

A leaf children import (:mod:`child.agent`'s ``run_item``, :mod:`child.ray_driver`): the
standard library and :mod:`hermesd.contract` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hermesd.contract.wire import Wire


@dataclass
class ItemSpec(Wire):
    """What a batch item's child gets besides the common spec (Hermes' batch_runner options):
    ``ephemeral_system_prompt`` (added to the system prompt the model sees, never to the
    trajectory); ``prefill_messages`` (``[{"role": "system"|"user"|"assistant", "content": str}]``:
    user and assistant ones put before the conversation at every model call, system ones added
    to the system prompt; never recorded — Hermes' prefill); ``workdir_placeholder`` (shown
    instead of the working directory, and the tool list left to the API's tool definitions, so
    every sample's system prompt is the same; what is recorded is masked: :mod:`child.hostmask`);
    ``invalid_tool_call_retries`` (see :meth:`child.agent.Agent.loop`); ``verifier``
    (``{command, timeout_seconds, env}``, run after the agent: :mod:`child.verify`)."""

    ephemeral_system_prompt: str | None = None
    prefill_messages: list[dict[str, Any]] | None = None
    workdir_placeholder: str | None = None
    invalid_tool_call_retries: int | None = None
    verifier: dict[str, Any] | None = None


@dataclass
class DriverSpec(Wire):
    """What a batch's Ray driver gets besides the common spec: ``ray``, its cluster settings
    (``address, num_cpus, memory_mb, grace``: :mod:`child.ray_driver`)."""

    ray: dict[str, Any] | None = None
