"""The settings of one batch run: the ``hermes-batch`` flags, as the daemon keeps them.

They live in the batch job's ``spec`` column (so a restarted daemon can continue
the run) and in ``checkpoint.json`` (so ``--resume`` can check that the run is
the same one).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXED = ("dataset_file", "batch_size", "distribution", "samples_per_prompt")
"""Settings a resume may not change: batch files are numbered by ``batch_size``,
prompts are the dataset's lines, toolsets are drawn by the distribution, and
samples are numbered by ``samples_per_prompt`` (``batch.groups``)."""

RESUMED = ("dataset_file", "batch_size", "num_workers", "max_turns", "distribution", "distribution_toolsets",
           "reasoning_effort",
           "max_samples", "model", "ephemeral_system_prompt", "prefill_messages_file", "max_tokens",
           "reasoning_disabled", "provider", "base_url", "allow_synthetic", "exclude_partial", "verifier",
           "verifier_timeout", "min_reward", "samples_per_prompt", "executor", "ray_address", "ray_num_cpus",
           "ray_memory_mb", "budget")
"""The settings a resume takes from the run's checkpoint when the request does not give them
(given ones win: ``allow_synthetic``/``exclude_partial`` ``false`` turns the run's off, ``min_reward``
``"none"`` drops the run's)."""

FILTERS = ("allow_synthetic", "exclude_partial", "min_reward")
"""The settings that choose which written samples ``trajectories.jsonl`` keeps
(:meth:`batch.trajectories.Written.reason`); a resume may change them: the merged files are
written again from the batch files, which keep every sample (:func:`filter_change`)."""

MAX_SAMPLES_PER_PROMPT = 1000
"""Most attempts of one prompt (``--samples_per_prompt``)."""
MAX_VERIFIER_TIMEOUT = 3600.0
"""Longest time limit of a verifier, in seconds (the terminal tool's longest)."""


PREFILL_ROLES = ("system", "user", "assistant")
"""Roles a prefill message may have (batch_runner's ``--prefill_messages_file``: a JSON
list of ``{role, content}``); ``system`` ones are added to the system prompt."""


class PrefillError(ValueError):
    """``--prefill_messages_file`` is not a JSON list of messages (the message is ``FILE: reason``)."""


def load_prefill(path: str) -> list[dict[str, str]]:
    """Read a prefill file: a JSON list of ``{"role": "system"|"user"|"assistant",
    "content": str}`` objects (other keys ignored), returned as ``{role, content}``.

    Raises :class:`PrefillError` ``FILE: reason`` (reason naming the item and key)
    for anything else: unreadable, not JSON, not a list, a bad item.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise PrefillError(f"{path}: cannot read the prefill messages: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise PrefillError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, list):
        raise PrefillError(f"{path}: expected a JSON list of messages, got {type(data).__name__}")
    out = []
    for number, item in enumerate(data):
        where = f"{path}: message {number}"
        if not isinstance(item, dict):
            raise PrefillError(f"{where}: expected an object with 'role' and 'content', got {type(item).__name__}")
        if item.get("role") not in PREFILL_ROLES:
            raise PrefillError(f"{where}: 'role' must be one of {', '.join(PREFILL_ROLES)}, not {item.get('role')!r}")
        if not isinstance(item.get("content"), str):
            raise PrefillError(f"{where}: 'content' must be a string")
        out.append({"role": item["role"], "content": item["content"]})
    return out


def no_run(run_name: str, run_dir: Path) -> Any:
    """The ``bad_request`` error of a resume of run ``run_name`` whose ``run_dir`` holds no run."""
    from hermesd.protocol import ProtocolError

    return ProtocolError("bad_request", f"cannot resume {run_name!r}: {run_dir} holds no run (no checkpoint.json, "
                         "no batch files); check --run_name and --output_dir, or start it without --resume",
                         {"field": "resume", "run_dir": str(run_dir)})


def resume_args(args: dict[str, Any], run_name: str, run_dir: Path) -> dict[str, Any]:
    """The ``batch.run`` arguments of a resume of run ``run_name`` (in ``run_dir``): every
    setting of :data:`RESUMED` the request leaves out is the run's own, from its checkpoint
    (``--max_samples``, the model, the verifier… stay what the run began with); the ones it
    gives override them (the :data:`FIXED` ones must agree: :meth:`Settings.conflicts`).

    Raises ``ProtocolError(bad_request)`` (:func:`no_run`) when ``run_dir`` holds no run;
    an unreadable checkpoint leaves ``args`` as they are (the run's start says what is wrong)."""
    from batch.checkpoint import Checkpoint, CheckpointError
    from batch.trajectories import batch_files

    try:
        stored = Checkpoint.load(run_dir)
    except CheckpointError:
        return args
    if stored is None:
        if not batch_files(run_dir):
            raise no_run(run_name, run_dir)
        return args
    own = {key: value for key, value in stored.settings.items() if key in RESUMED and value is not None}
    return {**own, **{k: v for k, v in args.items() if v is not None}}


def filter_change(before: dict[str, Any], after: dict[str, Any], written: list[Any]) -> str | None:
    """The warning of a resume that changes the run's filters (:data:`FILTERS`) from ``before``
    (the checkpoint's settings) to ``after`` (the resume's ``Settings.filters``): the flags, and
    how many of the ``written`` samples (``batch.trajectories.Written``) ``trajectories.jsonl`` kept
    and will keep, with why the others stay out; None when the filters are the same or nothing
    was written yet (then there is nothing to rewrite)."""
    old = {key: before.get(key, Settings.__dataclass_fields__[key].default) for key in FILTERS}
    changed = [key for key in FILTERS if old[key] != after[key]]
    if not changed or not written:
        return None

    def shown(value: Any) -> str:
        return "none" if value is None else ("on" if value is True else "off" if value is False else f"{value:g}")

    flags = ", ".join(f"--{key} {shown(after[key])} (the run had {shown(old[key])})" for key in changed)
    reasons: dict[str, int] = {}
    for w in written:
        why = w.reason(**after)
        if why:
            reasons[why[0]] = reasons.get(why[0], 0) + 1
    kept_before = sum(1 for w in written if w.reason(**old) is None)
    kept_now = len(written) - sum(reasons.values())
    out = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return (f"this resume changes the run's filters: {flags}; trajectories.jsonl and messages.jsonl are written "
            f"again from the {len(written)} sample(s) of the batch files: {kept_before} kept before, {kept_now} now"
            + (f" (left out: {out})" if out else "") + "; the batch files keep every sample")


BUDGET_ARGS = ("max_cost_usd", "max_total_tokens")
"""The ``batch.run`` arguments of the run's budget (its own ``max_tokens`` is batch_runner's, per reply)."""


def job_id_of(run_name: str) -> str:
    """The job id of a run: ``batch_<run_name>``."""
    return f"batch_{run_name}"


def flag_options(args: dict[str, Any]) -> dict[str, Any]:
    """The batch_runner flags of a ``batch.run`` request beyond the basic ones, as
    :class:`Settings` keywords; the prefill file is read and checked here, before
    anything starts.  Raises ``ProtocolError(bad_request)`` naming the field."""
    from hermesd.config import PROVIDERS, check_url
    from hermesd.protocol import ProtocolError, arg

    prefill_file = arg(args, "prefill_messages_file", str, None)
    if prefill_file is not None and not os.path.isabs(prefill_file):
        raise ProtocolError("bad_request", f"argument 'prefill_messages_file' must be an absolute path, not "
                            f"{prefill_file!r}", {"field": "prefill_messages_file"})
    try:
        prefill = load_prefill(prefill_file) if prefill_file else None
    except PrefillError as exc:
        raise ProtocolError("bad_request", str(exc), {"field": "prefill_messages_file", "file": prefill_file}) from None
    base_url = arg(args, "base_url", str, None) or None
    try:
        base_url = base_url and check_url(base_url)
    except ValueError as exc:
        raise ProtocolError("bad_request", f"argument 'base_url' {exc}", {"field": "base_url"}) from None
    max_tokens = arg(args, "max_tokens", int, None)
    if max_tokens is not None and max_tokens < 1:
        raise ProtocolError("bad_request", f"argument 'max_tokens' must be >= 1, not {max_tokens}",
                            {"field": "max_tokens"})
    from batch.verify import DEFAULT_TIMEOUT_SECONDS

    timeout = float(arg(args, "verifier_timeout", (int, float), DEFAULT_TIMEOUT_SECONDS))
    if not 0 < timeout <= MAX_VERIFIER_TIMEOUT:
        raise ProtocolError("bad_request", f"argument 'verifier_timeout' must be in (0, {MAX_VERIFIER_TIMEOUT:g}] "
                            f"seconds, not {timeout:g}", {"field": "verifier_timeout"})
    min_reward = None if args.get("min_reward") == "none" else arg(args, "min_reward", (int, float), None)
    if min_reward is not None and not math.isfinite(min_reward):
        raise ProtocolError("bad_request", f"argument 'min_reward' must be a finite number, not {min_reward}",
                            {"field": "min_reward"})
    verifier = arg(args, "verifier", str, None)
    if verifier is not None and not verifier.strip():
        raise ProtocolError("bad_request", "argument 'verifier' is empty", {"field": "verifier"})
    from hermesd.billing.budget import budget_of

    own = args.get("budget") if isinstance(args.get("budget"), dict) else {}  # a resume's: the run's own
    budget = {**(budget_of(own) or {}), **(budget_of(args, BUDGET_ARGS) or {})} or None
    return {"budget": budget,"ephemeral_system_prompt": arg(args, "ephemeral_system_prompt", str, None) or None,
            "verifier": verifier, "verifier_timeout": timeout,
            "min_reward": None if min_reward is None else float(min_reward),
            "samples_per_prompt": arg(args, "samples_per_prompt", int, 1, lo=1, hi=MAX_SAMPLES_PER_PROMPT),
            "prefill_messages_file": prefill_file, "prefill_messages": prefill, "max_tokens": max_tokens,
            "reasoning_disabled": arg(args, "reasoning_disabled", bool, False),
            "provider": arg(args, "provider", str, None, choices=PROVIDERS),
            "base_url": base_url,
            "allow_synthetic": arg(args, "allow_synthetic", bool, False),
            "exclude_partial": arg(args, "exclude_partial", bool, False)}


@dataclass(frozen=True)
class Settings:
    """``run_name``; ``dataset_file`` and ``output_dir`` (absolute paths);
    ``batch_size``, ``num_workers``, ``max_turns`` (>= 1); ``distribution``
    (a name of ``batch.distributions``, or of the config's ``batch.distributions:``, whose
    probabilities the run keeps as it started in ``distribution_toolsets``); ``reasoning_effort``, ``max_samples``
    and ``model`` (None: the daemon's default / the whole dataset).

    batch_runner's other flags: ``ephemeral_system_prompt`` (the model sees it,
    the trajectory never does), ``prefill_messages_file`` (absolute) and the
    ``prefill_messages`` read from it (:func:`load_prefill`), ``max_tokens``
    (per model reply), ``reasoning_disabled`` (reasoning effort ``none``),
    ``provider`` and ``base_url`` (None: the daemon's).  hermesd's:
    ``allow_synthetic`` (samples of the ``scripted`` provider go into
    ``trajectories.jsonl``) and ``exclude_partial`` (partial samples do not);
    ``verifier`` (a shell command judging each sample, None: none; a dataset line's
    ``verifier`` wins) with ``verifier_timeout`` (seconds), ``min_reward`` (samples
    with a lower reward, or none, stay out of ``trajectories.jsonl``; None: no such
    filter) and ``samples_per_prompt`` (attempts of each prompt: ``batch.groups``).

    Where the items run: ``executor`` (``local`` or ``ray``) with, for ``ray``,
    ``ray_address`` (None: the daemon's ``RAY_ADDRESS``, else ``auto``),
    ``ray_num_cpus`` and ``ray_memory_mb`` per item.

    ``budget``: the run's spend limits over every attempt of it (``{max_cost_usd,
    max_tokens}``, from ``--max_cost_usd`` and ``--max_total_tokens``; :mod:`hermesd.billing`):
    once spent the run starts no more prompts (:class:`batch.job.BatchRun`)."""

    run_name: str
    dataset_file: str
    output_dir: str
    batch_size: int
    num_workers: int = 4
    max_turns: int = 10
    distribution: str = "default"
    reasoning_effort: str | None = None
    max_samples: int | None = None
    model: str | None = None
    ephemeral_system_prompt: str | None = None
    prefill_messages_file: str | None = None
    prefill_messages: list[dict[str, str]] | None = None
    max_tokens: int | None = None
    reasoning_disabled: bool = False
    provider: str | None = None
    base_url: str | None = None
    allow_synthetic: bool = False
    exclude_partial: bool = False
    verifier: str | None = None
    verifier_timeout: float = 60.0
    min_reward: float | None = None
    samples_per_prompt: int = 1
    executor: str = "local"
    ray_address: str | None = None
    ray_num_cpus: float = 1.0
    ray_memory_mb: int | None = None
    budget: dict[str, Any] | None = None
    distribution_toolsets: dict[str, float] | None = None

    @property
    def cluster(self) -> str:
        """The Ray cluster's address as given, or where Ray looks without one (``RAY_ADDRESS/auto``)."""
        return self.ray_address or "RAY_ADDRESS/auto"

    @property
    def effort(self) -> str | None:
        """The reasoning effort the items run with: ``none`` when ``reasoning_disabled``."""
        return "none" if self.reasoning_disabled else self.reasoning_effort

    @property
    def filters(self) -> dict[str, Any]:
        """The keywords of ``batch.trajectories.Written.reason``: what keeps a written sample out
        of ``trajectories.jsonl``."""
        return {key: getattr(self, key) for key in FILTERS}

    @property
    def run_dir(self) -> Path:
        """``OUTPUT_DIR/RUN_NAME``."""
        return Path(self.output_dir) / self.run_name

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        """Settings from :meth:`to_dict` output (unknown keys ignored).  Raises ``TypeError``
        when a required key is missing."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def conflicts(self, stored: dict[str, Any]) -> list[str]:
        """Why this run cannot resume the one whose settings are ``stored``: one
        message per :data:`FIXED` setting that differs (empty when compatible)."""
        mine = self.to_dict()
        return [f"--{key} {mine[key]!r} differs from the run's checkpoint ({stored[key]!r})"
                for key in FIXED if key in stored and stored[key] != mine[key]]
