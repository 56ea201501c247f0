"""One batch run as the daemon runs it: per-prompt scheduling, recording, resume.

Scheduling is per prompt: at most ``num_workers`` items are handed to the
executor at once, and the moment one ends the next pending prompt goes — a
slow prompt holds one worker, never a batch.  Pending prompts go in dataset
order; prompts that fail are run again by the next resume, not in this one.

Recording an ended prompt (in this order, so a crash at any point loses
nothing and runs nothing twice — see ``batch.checkpoint``):

1. a sample (a trajectory of an item that ``completed``; or one that stopped
   early: out of turns or time — ``completed`` false — or, what Hermes calls
   ``partial``, after invalid tool calls) without reasoning is *discarded*:
   written to the checkpoint;
2. any other sample is appended to ``batch_N.jsonl`` (flushed, fsynced), then
   the checkpoint names it — within :data:`SAVE_EVERY` seconds, as the batch
   files are the truth for these (the checkpoint is rebuilt from them);
3. anything else is a *failure* in the checkpoint — unless the daemon was
   stopping, in which case the prompt is simply pending again.

When nothing is pending or running, the run is finalized: ``trajectories.jsonl``
(merged, filtered) and ``statistics.json`` are written from the files.  What
that needs of each line — where it is, why the merge would leave it out, its
counts (``batch.trajectories.Written``, ``batch.statistics.Tally``) — is read from the
batch files when the run opens and added as each line is written, so the end of
a run copies the lines kept instead of parsing them all again (1,000 lines of
12 KB: 30 ms, not 340).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Protocol

from batch import card, distributions, files, groups, statistics, trajectories, verify, view
from batch.line import build_line
from batch.checkpoint import Checkpoint
from batch.dataset import Dataset, Prompt
from batch.executor import ItemExecutor, ItemOutcome, ItemRequest, SubmitError
from batch.settings import Settings
from hermesd import clock
from hermesd.contract.wire import JobResult

STATISTICS = "statistics.json"
SAVE_EVERY = 1.0
"""Seconds between two writes of the checkpoint while prompts only land in batch files: it is
a whole-file rewrite per write (its lists grow with the run), and the files already hold
those prompts.  An outcome that lives only in the checkpoint (discarded, failed, a failure
lifted) is written at once; so is the end of the run."""

Emit = Callable[[str, dict[str, Any]], None]
Finished = Callable[["BatchRun", str, "dict[str, Any] | None", "str | None"], None]
Offload = Callable[[Callable[[], Any], Callable[[Any, "BaseException | None"], None]], None]


class Bill(Protocol):
    """What a run asks of the bill (``hermesd.billing``; ``batch.service.RunBill``)."""

    def refusal(self) -> str | None:
        """Why no prompt may start now (a budget of the run spent), else None."""

    def of_item(self, job: str) -> dict[str, Any]:
        """An item's ``cost_usd`` and ``cost_unknown`` (for its line's metadata)."""

    def of_run(self) -> dict[str, Any]:
        """What the whole run spent (``Ledger.spent`` of its tree)."""


def run_here(work: Callable[[], Any], done: Callable[[Any, BaseException | None], None]) -> None:
    """An :data:`Offload` that runs ``work`` at once, in this thread."""
    try:
        value = work()
    except Exception as exc:  # noqa: BLE001 - handed to ``done``
        done(None, exc)
        return
    done(value, None)


class BatchRun:
    """The live state of batch job ``job_id`` (see the module doc).

    ``emit(type, data)`` publishes an event about the job; ``bill`` (:class:`Bill`) says
    what items cost and why no prompt may start now (a budget of the run spent): the run
    then starts no more, lets the running ones finish, and ends ``failed``
    (``budget_stop``; the rest stays pending for a ``--resume``); ``finished(run,
    status, statistics, error)`` is called once when the run ends
    (``completed``, ``cancelled`` or ``failed``), after ``offload(work, done)``
    ran the final merge (which copies every line kept) — in a worker thread,
    so a large run never stalls the daemon's event loop.
    """

    def __init__(self, job_id: str, settings: Settings, dataset: Dataset, executor: ItemExecutor,
                 emit: Emit, finished: Finished, offload: Offload = run_here, bill: Bill | None = None):
        self.job_id, self.settings, self.dataset = job_id, settings, dataset
        self.bill = bill
        self.budget_stop: str | None = None  # why no more prompts start (a budget of the run is spent)
        self.executor, self.emit, self.finished, self.offload = executor, emit, finished, offload
        self.run_dir = settings.run_dir
        self.prompts = {p.index: p for p in dataset.prompts}
        self.scope = set(self.prompts)
        self.checkpoint = Checkpoint(self.run_dir)
        self.written: dict[int, trajectories.Written] = {}  # the batch files' lines (where, not what)
        self.tally = statistics.Tally()  # and their counts
        self.pending: deque[Prompt] = deque()
        self.in_flight: set[int] = set()
        self.ending: set[int] = set()  # in flight, outcome recorded, slot not yet free
        self.failed_now: set[int] = set()
        self.problems: list[str] = []
        self.closed = False
        self.settled_now = 0
        self._base_seconds = 0.0
        self._started = clock.monotonic()
        self._saved = -SAVE_EVERY  # when the checkpoint was last written
        self._filling = self._again = False

    # opening ---------------------------------------------------------------

    def open(self) -> None:
        """Create the run directory and rebuild the state from its files (torn
        batch-file tails truncated).  Raises ``OSError`` and ``CheckpointError``."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        ckpt = Checkpoint.load(self.run_dir) or self.checkpoint
        lines, self.problems = trajectories.read_lines(self.run_dir, repair=True)
        self.written = {index: where for index, _, where in lines}
        for _, line, _ in lines:
            self.tally.add(line)
        ckpt.done = set(self.written)
        ckpt.discarded = {i: v for i, v in ckpt.discarded.items() if i not in ckpt.done}
        ckpt.failed = {i: v for i, v in ckpt.failed.items() if i not in ckpt.settled()}
        ckpt.settings, ckpt.run_name, ckpt.job = self.settings.to_dict(), self.settings.run_name, self.job_id
        ckpt.total_prompts, ckpt.bad_lines, ckpt.finished = len(self.scope), len(self.dataset.errors), False
        ckpt.line_digests = self.dataset.digests
        self.checkpoint = ckpt
        self._base_seconds = ckpt.active_seconds
        self.pending = deque(p for p in self.dataset.prompts if p.index not in ckpt.settled())
        ckpt.skipped = ckpt.settled() & self.scope
        self.save()
        card.write(self.run_dir, self.settings.run_name)

    def start(self, *, adopt: bool = False, defer: Callable[[Callable[[], None]], Any] | None = None) -> None:
        """Open the executor pool (re-owning items an earlier daemon left queued when
        ``adopt``) and start filling it — now, or through ``defer(fn)``."""
        self.executor.open(self, self.settings.num_workers)
        if adopt:
            taken = self.executor.adopt(self, {p.index for p in self.pending})
            self.pending = deque(p for p in self.pending if p.index not in taken)
            self.in_flight |= taken
        (defer or (lambda fn: fn()))(self.fill)

    # scheduling ------------------------------------------------------------

    def request(self, prompt: Prompt) -> ItemRequest:
        """The executor request of ``prompt``: toolsets drawn from the distribution (the same
        for every attempt of a group), the verifier of the line or else of the run."""
        s = self.settings
        sample = {"prompt_index": prompt.index, "group_id": prompt.group, "attempt": prompt.attempt,
                  "run_name": s.run_name, "fields": prompt.extra}
        return ItemRequest(index=prompt.index, batch=prompt.index // s.batch_size, prompt=prompt.prompt,
                           cwd=prompt.cwd, toolsets=distributions.sample(s.distribution, prompt.group, s.distribution_toolsets),
                           verifier=verify.item_verifier(prompt.verifier or s.verifier, s.verifier_timeout, sample),
                           model=s.model, max_turns=s.max_turns, reasoning_effort=s.effort,
                           script=prompt.script, max_tokens=s.max_tokens,
                           ephemeral_system_prompt=s.ephemeral_system_prompt, prefill_messages=s.prefill_messages,
                           provider=s.provider, base_url=s.base_url,
                           image=prompt.docker_image)

    def fill(self) -> None:
        """Hand pending prompts to the executor while fewer than ``num_workers`` run."""
        if self._filling:  # called back from inside submit: the outer loop goes on
            self._again = True
            return
        self._filling = True
        try:
            self._again = True
            while self._again:
                self._again = False
                while (self.pending and not self.closed and len(self.in_flight) < self.settings.num_workers
                       and self.executor.accepting() and self.executor.ready() and not self.over_budget()):
                    if not self._submit(self.pending.popleft()):
                        break
        finally:
            self._filling = False
        self._maybe_finish()

    def _submit(self, prompt: Prompt) -> bool:
        self.in_flight.add(prompt.index)
        try:
            self.executor.submit(self, self.request(prompt))
        except SubmitError as err:
            self.in_flight.discard(prompt.index)
            if err.retry_later:
                self.pending.appendleft(prompt)
                return False
            now = clock.now_iso()
            self.on_done(ItemOutcome(index=prompt.index, status="failed", result=None, error=str(err),
                                     started_at=now, completed_at=now, shutdown=False, handle=""))
        return True

    def on_freed(self, index: int) -> None:
        """An item's worker slot is free: start the next prompt."""
        self.in_flight.discard(index)
        self.ending.discard(index)
        self.fill()

    def over_budget(self) -> bool:
        """True once a budget of the run is spent (``budget_stop`` says which): no prompt starts."""
        if self.budget_stop is None and self.bill is not None:
            self.budget_stop = self.bill.refusal()
            if self.budget_stop is not None:
                self.emit("batch.budget_stop", {"error": self.budget_stop, "pending": len(self.pending)})
        return self.budget_stop is not None

    def _maybe_finish(self) -> None:
        if not self.closed and not self.in_flight and (not self.pending or self.budget_stop is not None):
            if self.budget_stop is not None:
                self.finish("failed", f"{self.budget_stop}; {len(self.pending)} prompt(s) not started: raise the "
                            "limit and --resume to run them")
            else:
                self.finish("completed")

    # recording -------------------------------------------------------------

    def on_done(self, o: ItemOutcome) -> None:
        """Record how prompt ``o.index`` ended (see the module doc)."""
        if self.closed:
            return
        self.ending.add(o.index)
        result = o.result or JobResult()
        trajectory = result.trajectory if isinstance(result.trajectory, dict) else None
        stopped = o.status == "timed_out" or result.exit_reason in ("max_turns", "invalid_tool_calls")
        sample = trajectory is not None and (o.status == "completed" or stopped)
        partial = sample and o.status != "completed"  # stopped early: out of turns or time, invalid calls
        if not sample and o.shutdown:
            self.pending.appendleft(self.prompts[o.index])
            return
        only_here = not sample or o.index in self.checkpoint.failed  # a failure noted or lifted
        try:
            if sample:
                self._sample(o, result, trajectory, completed=o.status == "completed", partial=partial)
            else:
                self._failure(o, result)
            if only_here or o.index in self.checkpoint.discarded or clock.monotonic() - self._saved >= SAVE_EVERY:
                self.save()
        except OSError as exc:
            self.finish("failed", f"cannot write the run's files in {self.run_dir}: {exc}")
            return
        self.settled_now += 1
        self.emit("batch.progress", {**self.progress(), "item": self._item_report(o, sample, partial)})

    def _item_report(self, o: ItemOutcome, sample: bool, partial: bool) -> dict[str, Any]:
        """What became of one prompt, for ``--verbose``: ``index``, ``job``, ``outcome``
        (``written``, ``discarded`` or ``failed``), ``detail``, ``toolsets``."""
        if not sample:
            outcome, detail = "failed", str(self.checkpoint.failed.get(o.index, {}).get("error") or o.status)
        elif o.index in self.checkpoint.discarded:
            record = self.checkpoint.discarded[o.index]
            outcome = "discarded"
            detail = (f"stopped after invalid tool calls ({record.get('error')}), no reasoning kept"
                      if record.get("reason") == "invalid_tool_calls" else "no reasoning in any assistant turn")
        else:
            outcome = "written"
            detail = "completed" if not partial else f"partial ({(o.result.exit_reason if o.result else None) or o.status})"
        return {"index": o.index, "job": o.handle, "outcome": outcome, "detail": detail,
                "toolsets": self.request(self.prompts[o.index]).toolsets}

    def _sample(self, o: ItemOutcome, result: JobResult, trajectory: dict[str, Any], *, completed: bool,
                partial: bool) -> None:
        conversations = list(trajectory.get("conversations") or [])
        spent = {"api_calls": int(result.api_calls or 0), "tokens": result.tokens or {},
                 "duration_seconds": float(result.duration_seconds or 0.0), "completed_at": o.completed_at}
        ckpt = self.checkpoint
        ckpt.failed.pop(o.index, None)
        self.failed_now.discard(o.index)
        scores = verify.scores(result)
        prompt = self.prompts[o.index]
        if not trajectories.has_reasoning(conversations):
            why = "invalid_tool_calls" if result.exit_reason == "invalid_tool_calls" else "no_reasoning"
            ckpt.discarded[o.index] = {"reason": why, "error": result.error, "completed": completed, "partial": partial,
                                       "job": o.handle, "reward": scores["reward"], "group_id": prompt.group,
                                       "passed": (scores["verifier"] or {}).get("passed"), **spent}
            return
        s = self.settings
        meta = {"run_name": s.run_name, "job": o.handle, "model": result.model or s.model,
                "provider": result.provider, "distribution": s.distribution, "started_at": o.started_at,
                "exit_reason": result.exit_reason or o.status, "synthetic": result.synthetic, **spent,
                **(self.bill.of_item(o.handle) if self.bill is not None and o.handle else {})}
        line = build_line(index=o.index, batch=o.index // s.batch_size, trajectory=trajectory,
                          completed=completed, partial=partial, api_calls=spent["api_calls"],
                          toolsets=self.request(prompt).toolsets, trace=list(result.trace or []),
                          metadata=meta, extra=prompt.extra, group_id=prompt.group,
                          attempt=prompt.attempt, **scores)
        number = o.index // s.batch_size
        start, end = files.append_line(trajectories.batch_file(self.run_dir, number), line)
        if o.index not in self.written:  # as when the files are read: an index's first line counts
            self.written[o.index] = trajectories.written_at(line, number, start, end)
            self.tally.add(line)
        ckpt.done.add(o.index)

    def _failure(self, o: ItemOutcome, result: JobResult) -> None:
        before = self.checkpoint.failed.get(o.index) or {}
        self.checkpoint.failed[o.index] = {
            "error": str(o.error or result.error or f"the item ended {o.status}"), "status": o.status,
            "attempts": int(before.get("attempts") or 0) + 1, "job": o.handle,
            "api_calls": int(result.api_calls or 0), "tokens": result.tokens or {},
            "completed_at": o.completed_at}
        self.failed_now.add(o.index)

    def active_seconds(self) -> float:
        """Seconds this run has been running, over every daemon session."""
        return self._base_seconds + (clock.monotonic() - self._started)

    def save(self) -> None:
        """Write the checkpoint (atomic, fsynced).  Raises ``OSError``."""
        self.checkpoint.active_seconds = self.active_seconds()
        self.checkpoint.save()
        self._saved = clock.monotonic()

    # progress and the end ----------------------------------------------------

    def progress(self) -> dict[str, Any]:
        """Counts for progress displays: ``total, done, discarded, failed, running,
        pending, processed, rate_per_minute, eta_seconds`` (None while unknown), and
        ``rewards`` (``statistics.json``'s; None when nothing was verified yet)."""
        ckpt = self.checkpoint
        done, discarded = len(ckpt.done & self.scope), len(set(ckpt.discarded) & self.scope)
        # a prompt whose outcome is recorded frees its worker a moment later, and the next pending
        # prompt takes it: counted as running already, so the counts hold until the next event;
        # an executor whose items wait to be started (Ray: for a slot on a host) counts those as pending
        waiting = self.executor.waiting(self)
        handover = 0 if self.closed or waiting is not None else min(len(self.ending & self.in_flight), len(self.pending))
        running = max(0, len(self.in_flight - self.ending) - (waiting or 0)) + handover
        left = len(self.pending) + len(self.in_flight - self.ending)
        elapsed = clock.monotonic() - self._started
        rate = self.settled_now / elapsed * 60.0 if elapsed > 0 and self.settled_now else 0.0
        return {"total": len(self.scope), "done": done, "discarded": discarded, "failed": len(self.failed_now),
                "running": running, "pending": left - running,
                "processed": done + discarded + len(self.failed_now), "rate_per_minute": round(rate, 2),
                "eta_seconds": round(left / rate * 60.0, 1) if rate else None,
                "rewards": judged.rewards() if (judged := statistics.verdicts(self.tally, ckpt)).verified else None}

    def finish(self, status: str, error: str | None = None) -> None:
        """End the run (``completed``, ``cancelled`` or ``failed``): stop live items,
        then (offloaded) write the merged trajectories and the statistics, and
        report to ``finished``."""
        if self.closed:
            return
        self.closed = True
        self.executor.cancel_all(self, None if status == "cancelled" else f"its batch ended {status}: {error}")
        self.executor.close(self, status)

        def report(stats: dict[str, Any] | None, exc: BaseException | None) -> None:
            if exc is not None:
                self.finished(self, "failed", None, error or f"cannot write the run's files in {self.run_dir}: {exc}")
            else:
                self.finished(self, status, stats, error)

        usage = self.bill.of_run() if self.bill is not None else None  # read here, on the loop
        self.offload(lambda: self.finalize(finished=status == "completed", usage=usage), report)

    def finalize(self, *, finished: bool, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """Merge the batch files into ``trajectories.jsonl`` (filtered), write
        ``statistics.json`` and the checkpoint; returns the statistics.  Raises ``OSError``."""
        merged = trajectories.merge(self.run_dir, self.written, **self.settings.filters)
        view.write(self.run_dir, self.run_dir / trajectories.TRAJECTORIES)
        card.write(self.run_dir, self.settings.run_name, finished=True)
        self.checkpoint.finished = finished
        self.save()
        stats = statistics.compute(settings=self.settings.to_dict(), job=self.job_id, scope=self.scope,
                                   bad_lines=len(self.dataset.errors), tally=self.tally, merged=merged,
                                   checkpoint=self.checkpoint, usage=usage)
        if self.settings.samples_per_prompt > 1:
            groups.write(self.run_dir, self.settings.filters)
        files.write_json(self.run_dir / STATISTICS, stats)
        return stats

