"""The item runner of a batch, behind a small interface.

A batch run (:class:`batch.job.BatchRun`) knows nothing about processes: it
hands :class:`ItemRequest` objects to an :class:`ItemExecutor` and hears back,
per item, exactly once :meth:`ItemOwner.on_done` (how the prompt ended) and
then exactly once :meth:`ItemOwner.on_freed` (the item's worker slot is free
again).  Both may be called from inside :meth:`ItemExecutor.submit` (an item
that could not even start).

The executors: :class:`batch.executor_local.SupervisorExecutor` runs each item as a
``batch_item`` child of this hermesd; :class:`batch.executor_ray.RayExecutor`
(``--executor ray``) runs the same requests as Ray tasks and reports through
the same two callbacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from hermesd.contract.wire import JobResult

log = logging.getLogger("hermesd.batch")


@dataclass(frozen=True)
class ItemRequest:
    """One prompt to run: its ``index`` and ``batch`` number, the ``prompt``,
    ``cwd`` (None: a scratch directory), ``toolsets``, ``model`` (None: the
    daemon's), ``max_turns``, ``reasoning_effort`` (None: the daemon's) and the
    scripted provider's ``script`` (None: none); batch_runner's ``max_tokens``,
    ``ephemeral_system_prompt``, ``prefill_messages``, ``provider`` and
    ``base_url`` (None: the daemon's / none); the container ``image``
    its terminal commands run in (None: the config's default); the ``verifier``
    run after the agent (``batch.verify.item_verifier``; None: none)."""

    index: int
    batch: int
    prompt: str
    cwd: str | None
    toolsets: list[str]
    model: str | None
    max_turns: int
    reasoning_effort: str | None
    script: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    ephemeral_system_prompt: str | None = None
    prefill_messages: list[dict[str, str]] | None = None
    provider: str | None = None
    base_url: str | None = None
    image: str | None = None
    verifier: dict[str, Any] | None = None


WORKDIR_PLACEHOLDER = "."
"""What a batch item's system prompt shows for its working directory (tools run
there), so the system turn is the same for every sample with the same tools."""

INVALID_TOOL_CALL_RETRIES = 3
"""Replies with invalid tool calls in a row that end a batch item as *partial*
(Hermes Agent's limit; see ``child.agent.Agent.loop``)."""

OPTIONAL_SPEC_KEYS = ("reasoning_effort", "script", "max_tokens", "ephemeral_system_prompt", "prefill_messages",
                      "provider", "base_url", "image", "verifier")
"""Request fields passed to the item's job spec when set."""


@dataclass(frozen=True)
class ItemOutcome:
    """How one item ended.

    ``status``: the child's status (``completed``, ``failed``, ``timed_out``,
    ``interrupted``…) or, when it reported nothing, its job's final state;
    ``result``: the child's result (with ``trajectory``) or None;
    ``error``: why it failed, or None; ``started_at``/``completed_at``: ISO 8601
    UTC; ``shutdown``: the executor was stopping when the item ended, so an
    unfinished item is not the prompt's failure; ``handle``: the item's id.
    """

    index: int
    status: str
    result: JobResult | None
    error: str | None
    started_at: str
    completed_at: str
    shutdown: bool
    handle: str


def item_spec(request: ItemRequest) -> dict[str, Any]:
    """What a ``batch_item`` job's ``spec`` adds to a child's spec for ``request``."""
    spec: dict[str, Any] = {"max_turns": request.max_turns, "record_trajectory": True,
                            "prompt_index": request.index, "batch": request.batch,
                            "workdir_placeholder": WORKDIR_PLACEHOLDER,
                            "invalid_tool_call_retries": INVALID_TOOL_CALL_RETRIES}
    for key in OPTIONAL_SPEC_KEYS:
        if getattr(request, key) is not None:
            spec[key] = getattr(request, key)
    return spec


class ItemOwner(Protocol):
    """What an executor reports to (a batch run): ``job_id`` (the batch job) and
    ``settings`` (its :class:`batch.settings.Settings`)."""

    job_id: str
    settings: Any

    def finish(self, status: str, error: str | None = None) -> None:
        """End the run (``failed`` with ``error`` when the executor cannot go on)."""

    def on_done(self, outcome: ItemOutcome) -> None:
        """The item of ``outcome.index`` ended."""

    def on_freed(self, index: int) -> None:
        """The worker slot of the item of ``index`` is free."""

    def fill(self) -> None:
        """Hand over pending prompts while workers are free (the executor calls it when it can
        take items again: :meth:`ItemExecutor.ready`, a :class:`SubmitError` with ``retry_later``)."""


class SubmitError(Exception):
    """An item could not be handed over; ``retry_later`` when the executor is stopping, or
    cannot take it now (the prompt is not at fault and stays pending; when the executor goes
    on, it calls the owner's ``fill`` again)."""

    def __init__(self, message: str, *, retry_later: bool):
        super().__init__(message)
        self.retry_later = retry_later


class ItemExecutor(Protocol):
    """Runs the items of batch runs (see the module doc)."""

    name: str

    def open(self, owner: ItemOwner, workers: int) -> None:
        """Start serving ``owner`` with at most ``workers`` items at once."""

    def close(self, owner: ItemOwner, status: str | None = None) -> None:
        """Stop serving ``owner``, whose run ended ``status`` (its live items are left to :meth:`cancel_all`)."""

    def accepting(self) -> bool:
        """False once the executor is stopping: submit nothing more."""

    def ready(self) -> bool:
        """False while an item submitted now would start slower than one submitted a
        moment later; the executor then calls the owners' ``fill`` when it is ready."""

    def submit(self, owner: ItemOwner, request: ItemRequest) -> None:
        """Run ``request`` for ``owner``.  Raises :class:`SubmitError`."""

    def cancel_all(self, owner: ItemOwner, error: str | None = None) -> None:
        """Stop every live item of ``owner`` (their ``on_done``/``on_freed`` still follow);
        ``error``: why (their jobs' error; None: ``cancelled by request``)."""

    def waiting(self, owner: ItemOwner) -> int | None:
        """How many of the items handed over for ``owner`` have not started yet (they count as
        pending, not running); None: an executor that starts what it is handed at once."""

    def adopt(self, owner: ItemOwner, wanted: set[int]) -> set[int]:
        """Take back items of ``owner`` left waiting by an earlier daemon; returns
        their indices (items of indices not in ``wanted`` are cancelled)."""

    def describe(self, batch: str) -> dict[str, Any] | None:
        """Where the items of batch job ``batch`` run, for ``batch.status``: at least
        ``{name}``; None when the executor does not serve it now."""



def guarded(callback: Callable[[], None]) -> None:
    """Run an owner's callback from a runner hook: a bug in a batch must not break the
    lifecycle of the job that reported (the prompt then stays unsettled and runs on resume)."""
    try:
        callback()
    except Exception:  # noqa: BLE001
        log.exception("batch item callback failed")
