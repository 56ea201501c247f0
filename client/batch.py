"""``hermes-batch`` and ``hermesctl batch run|status|cancel|list``: the batch front end.

Thin, like every client: the flags become one ``batch.run`` request (paths are
made absolute here because the daemon runs elsewhere; the daemon reads the
dataset and checks every value), then a progress bar follows the daemon's
events (``batch.progress`` and the batch job's ``job.state``) until the run
ends.  ``--detach`` prints the job id and returns (for cron).  Without a
terminal on stdout the bar becomes a plain line every few seconds; with
``--json`` each progress event is one JSON line and the final record another.
Ctrl-C only stops watching: the batch goes on in hermesd.

Flags are spelled as batch_runner's (``--dataset_file``); the dashed forms
(``--dataset-file``) work too.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

import click

from client import render
from client.common import (COMPLETION_HELP, IDEMPOTENCY_HELP, TERMINAL, Ctl, conn, exit_for, global_options, is_json,
                           json_option, out, print_log, said_repeat, show, stopped_watching)
from batch.config import EXECUTORS
from hermesd.contract.providers import PROVIDERS, REASONING_EFFORTS
from hermesd.protocol import EXIT_CODES

batch_group = click.Group("batch", help="Batch runs: trajectories over a JSONL dataset of prompts.")

PLAIN_INTERVAL = 2.0
"""Seconds between progress lines when stdout is not a terminal."""
RUN_REPLY_SECONDS = 75.0
"""The least ``batch.run`` is given to answer: with ``--executor ray`` the daemon waits up to
60 s for the run's driver to join the cluster."""



def _flag(name: str, **kwargs: Any) -> Callable:
    spellings = dict.fromkeys([f"--{name}", f"--{name.replace('_', '-')}"])
    return click.option(*spellings, name, **kwargs)


SWITCHES = ("allow_synthetic", "exclude_partial")
"""Filter flags a resume can turn off too (``--no-NAME``: sent as ``false``, which wins over the run's own)."""


def _switch(name: str, **kwargs: Any) -> Callable:
    dashed = name.replace("_", "-")
    return click.option(*dict.fromkeys([f"--{name}/--no-{name}", f"--{dashed}/--no-{dashed}"]), name, default=None,
                        **kwargs)


def min_reward_value(_ctx: Any, _param: Any, value: str | None) -> float | str | None:
    """``--min_reward``: a number, or ``none`` (a resume then drops the run's)."""
    if value is None or value == "none":
        return value
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number nor 'none'") from None


RUN_OPTIONS = [
    _flag("dataset_file", default=None, help="JSONL dataset, one {\"prompt\": ...} per line (required)."),
    _flag("batch_size", type=click.IntRange(min=1), default=None, help="Prompts per batch_N.jsonl (required)."),
    _flag("run_name", default=None, help="Run name: OUTPUT_DIR/RUN_NAME and job batch_RUN_NAME (required)."),
    _flag("model", default=None, help="Model name (default: the daemon's)."),
    _flag("num_workers", type=click.IntRange(min=1), default=None, help="Prompts run at once (default 4)."),
    _flag("max_turns", type=click.IntRange(min=1), default=None, help="Model turns per prompt (default 10)."),
    _flag("distribution", default=None, help="Toolset distribution (default: default)."),
    _flag("reasoning_effort", type=click.Choice(REASONING_EFFORTS), default=None, help="Reasoning effort of the model."),
    _flag("resume", is_flag=True, help="Continue the run from its files: nothing finished runs again "
          "(dataset, batch size and distribution default to the run's own)."),
    _flag("allow_changed_dataset", is_flag=True, help="With --resume: go on although the dataset changed in "
          "place since the run began (prompts are known by their line number; refused otherwise)."),
    _flag("list_distributions", is_flag=True, help="Print the toolset distributions and exit."),
    _flag("max_samples", type=click.IntRange(min=1), default=None, help="Use only the first K prompts."),
    _flag("output_dir", default="data", show_default=True, help="Directory of the run directories."),
    _flag("ephemeral_system_prompt", default=None,
          help="System prompt the model sees during the run; never written into the trajectories."),
    _flag("prefill_messages_file", default=None,
          help="JSON list of {role, content} messages put before each prompt (not in the trajectories)."),
    _flag("max_tokens", type=click.IntRange(min=1), default=None, help="Most tokens per model reply."),
    _flag("max_cost_usd", type=float, default=None,
          help="Budget of the whole run in USD: once spent no more prompts start (exit 13; --resume with a "
               "higher one goes on)."),
    _flag("max_total_tokens", type=int, default=None,
          help="Budget of the whole run in tokens (input and output), like --max_cost_usd."),
    _flag("reasoning_disabled", is_flag=True, help="No reasoning/thinking tokens (reasoning effort none)."),
    _flag("provider", type=click.Choice(PROVIDERS), default=None, help="Model provider of this run (default: the daemon's)."),
    _flag("base_url", default=None, help="Model server of this run (default: the daemon's)."),
    _switch("allow_synthetic",
            help="Let samples of the scripted provider into trajectories.jsonl (left out and counted otherwise; "
                 "--no-allow_synthetic on a resume leaves them out again)."),
    _switch("exclude_partial",
            help="Leave partial samples (stopped for invalid tool calls, out of turns) out of trajectories.jsonl "
                 "(counted; --no-exclude_partial on a resume takes them in again)."),
    _flag("verifier", default=None, help="Shell command judging each sample in its working directory after the "
          "agent ends: exit status 0 passes, or it prints {\"reward\": float}; HERMES_SAMPLE tells it which sample."),
    _flag("verifier_timeout", type=click.FloatRange(min=0, min_open=True, max=3600), default=None,
          help="Seconds the verifier may run (default 60); past it, that sample has a verifier error."),
    _flag("min_reward", default=None, callback=min_reward_value, metavar="FLOAT|none",
          help="Leave samples with a lower reward (or none) out of trajectories.jsonl (counted; 'none' on a "
               "resume drops the run's)."),
    _flag("samples_per_prompt", type=click.IntRange(min=1, max=1000), default=None,
          help="Independent attempts of each prompt (a group; pass@1 and pass@k in statistics.json, groups.jsonl)."),
    _flag("verbose", is_flag=True, help="Print what became of each prompt."),
    _flag("executor", type=click.Choice(EXECUTORS), default=None,
          help="Where the prompts run: local child processes, or tasks on a Ray cluster (default: batch.executor, local)."),
    _flag("ray_address", envvar="RAY_ADDRESS", default=None,
          help="Address of the Ray cluster, e.g. 10.0.0.5:6379 or ray://head:10001 (default: RAY_ADDRESS, "
               "batch.ray_address, auto)."),
    _flag("ray_num_cpus", type=click.FloatRange(min=0), default=None, help="CPUs each prompt reserves on a Ray node "
          "(default: batch.ray_num_cpus, 1)."),
    _flag("ray_memory_mb", type=click.IntRange(min=1), default=None, help="Memory (MiB) each prompt reserves on a "
          "Ray node (default: none)."),
    _flag("detach", is_flag=True, help="Print the job id and return; the batch runs on."),
    _flag("idempotency_key", default=None, metavar="KEY", help=IDEMPOTENCY_HELP),
]


def run_options(fn: Callable) -> Callable:
    """Add the batch_runner flags to a command."""
    for option in reversed(RUN_OPTIONS):
        fn = option(fn)
    return fn


def progress_text(p: dict[str, Any], live: bool = True) -> str:
    """One line of counts: ``done 35 · failed 1 · discarded 4 · running 4 · pending 156 · 12.0/min · ETA 13m00s``
    (without rate and ETA when not ``live``)."""
    text = f"done {p['done']} · failed {p['failed']} · discarded {p['discarded']} · running {p['running']} · " \
           f"pending {p['pending']}"
    return text + (f" · {p.get('rate_per_minute') or 0:.1f}/min · ETA {render.elapsed(p.get('eta_seconds'))}" if live else "")


class ProgressView:
    """Shows a run's progress: a live ``rich`` bar on a terminal, plain lines
    otherwise, JSON lines with ``--json``."""

    def __init__(self, record: dict[str, Any]):
        self.job = record["id"]
        self.mode = "json" if is_json() else ("tty" if sys.stdout.isatty() else "plain")
        self.last_line = 0.0
        self.bar = None
        if self.mode == "tty":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            out(f"{self.job}: {record['run_dir']}")
            self.bar = Progress(BarColumn(bar_width=24), MofNCompleteColumn(), TextColumn("{task.fields[counts]}"),
                                console=Console(highlight=False))
            self.bar.start()
            self.task = self.bar.add_task(record["run_name"], total=1, counts="")
        self.update(record.get("progress") or {})

    def update(self, p: dict[str, Any]) -> None:
        """Show progress counts ``p`` (see ``batch.status``)."""
        if not p:
            return
        if self.mode == "json":
            render.emit_json({"job": self.job, "progress": p})
        elif self.bar is not None:
            counts = (f"done {p['done']} failed {p['failed']} discarded {p['discarded']} · "
                      f"{p.get('rate_per_minute') or 0:.0f}/min · ETA {render.elapsed(p.get('eta_seconds'))}")
            self.bar.update(self.task, total=max(1, p["total"]), completed=p["processed"], counts=counts)
        elif time.monotonic() - self.last_line >= PLAIN_INTERVAL or p["processed"] >= p["total"]:
            self.last_line = time.monotonic()
            out(f"{self.job}: {p['processed']}/{p['total']} · {progress_text(p)}")

    def note(self, text: str) -> None:
        """A remark between progress updates (stderr; above the bar on a terminal)."""
        if self.bar is not None:
            self.bar.console.print(f"{self.job}: {text}", markup=False, highlight=False)
        else:
            out(f"{self.job}: {text}", err=True)

    def close(self) -> None:
        """Stop the live display."""
        if self.bar is not None:
            self.bar.stop()


def item_text(item: dict[str, Any]) -> str:
    """One settled prompt (``--verbose``): ``prompt 7 (batch_item_…, toolsets terminal,file): written: completed``."""
    return (f"prompt {item.get('index')} ({item.get('job')}, toolsets {','.join(item.get('toolsets') or []) or '-'}): "
            f"{item.get('outcome')}: {item.get('detail')}")


def follow(record: dict[str, Any], verbose: bool = False) -> dict[str, Any]:
    """Show the run's progress until its job is terminal (with ``verbose``, a line per
    settled prompt); returns its final record."""
    job = record["id"]
    if record["status"] in TERMINAL:
        return record
    view = ProgressView(record)
    try:
        for event in conn().follow(record["seq"]):
            if event.get("job") != job:
                continue
            data = event.get("data") or {}
            if event["type"] == "batch.progress":
                if verbose and data.get("item") and view.mode != "json":
                    view.note(item_text(data["item"]))
                view.update(data)
            elif event["type"] == "batch.restarting":
                view.note("hermesd restarted; the batch continues from its files")
            elif event["type"] == "job.state" and data.get("status") in TERMINAL:
                break
    except KeyboardInterrupt:
        view.close()
        stopped_watching(job, follow=f"hermesctl batch status {record['run_name']}",
                         cancel=f"hermesctl batch cancel {record['run_name']}")
    view.close()
    return conn().call("batch.status", id=job)


def record_text(rec: dict[str, Any]) -> str:
    """A batch record as readable lines."""
    s, p = rec.get("settings") or {}, rec.get("progress")
    lines = [f"{rec['id']}  {rec['status']}" + (f" ({rec['exit_reason']})" if rec.get("exit_reason") else ""),
             f"  dataset: {s.get('dataset_file')}  batch_size {s.get('batch_size')}  workers {s.get('num_workers')}"
             f"  distribution {s.get('distribution')}", f"  output: {rec.get('run_dir')}"]
    ex = rec.get("executor") or {}
    if ex.get("name") == "ray":
        where = f"Ray cluster {ex.get('address') or s.get('ray_address') or 'RAY_ADDRESS/auto'}"
        if ex.get("nodes") is not None:
            where += f": {ex['nodes']} node(s), {ex.get('cpus') or 0:g} CPUs ({ex.get('cpus_free') or 0:g} free)"
        driver = f" · driver {ex['driver']}" + (" (warm: from the pool)" if ex.get("warm") else "") if ex.get("driver") else ""
        lines.append(f"  executor: {where}{driver}")
        if ex.get("waiting"):
            lines.append(f"  waiting: {ex['waiting']}")
    elif ex:
        lines.append(f"  executor: {ex['name']}")
    if p:
        lines.append(f"  progress: {p['processed']}/{p['total']} · {progress_text(p, rec['status'] == 'running')}")
    rewards = (p or {}).get("rewards")
    if rewards and rewards.get("verified"):
        mean = "-" if rewards.get("mean") is None else f"{rewards['mean']:.3f}"
        lines.append(f"  rewards: mean {mean} · pass rate {rewards['pass_rate']:.1%} ({rewards['passed']} passed of "
                     f"{rewards['verified']} verified) · verifier errors {rewards['verifier_errors']}")
    if rec.get("usage") and rec["usage"].get("calls"):
        u = rec["usage"]
        lines.append(f"  spent: {render.counted(u['calls'], 'model call')}, tokens {render.tokens_text(u)}, cost {render.cost_text(u)}")
    if rec.get("bad_lines"):
        lines.append(f"  bad dataset lines: {rec['bad_lines']}")
    if rec.get("summary"):
        lines.append(f"  result: {rec['summary']}")
    if rec.get("error"):
        lines.append(f"  error: {rec['error']}")
    return "\n".join(lines)


def _distributions() -> None:
    """Print the toolset distributions: hermesd's own (fixed data, ``batch.distributions``) and those
    of ``$HERMES_HOME/config.yaml`` (``batch.distributions:``; a file that does not load adds none),
    read here without a daemon."""
    from batch import distributions
    from hermesd import config as config_mod

    try:
        own = config_mod.load().batch.distributions
    except config_mod.ConfigError:
        own = {}
    answer = {"default": distributions.DEFAULT, "distributions": {
        **distributions.listing(), **{n: {"description": "config.yaml's own", "toolsets": p} for n, p in own.items()}}}
    if is_json():
        for name, dist in answer["distributions"].items():
            render.emit_json({"name": name, **dist})
        return
    for name, dist in answer["distributions"].items():
        odds = ", ".join(f"{t} {p:.0%}" for t, p in dist["toolsets"].items())
        mark = " (default)" if name == answer["default"] else ""
        out(f"{name}{mark}: {odds} — {dist['description']}")


def run_batch(flags: dict[str, Any]) -> None:
    """The body of ``hermes-batch`` / ``hermesctl batch run`` (``flags``: the options by name)."""
    if flags.pop("list_distributions"):
        return _distributions()
    # with --resume the daemon takes what is not given of the run's own settings from its checkpoint
    needed = ("run_name",) if flags.get("resume") else ("dataset_file", "batch_size", "run_name")
    missing = [f"--{k}" for k in needed if flags.get(k) is None]
    if missing:
        raise click.UsageError(f"missing required option(s): {', '.join(missing)}")
    detach, verbose = flags.pop("detach"), flags.pop("verbose")
    args = {k: v for k, v in flags.items() if v is not None and (v is not False or k in SWITCHES)}
    for key in ("dataset_file", "output_dir", "prefill_messages_file"):
        if key in args:
            args[key] = os.path.abspath(os.path.expanduser(args[key]))
    connection = conn()
    record = connection.call("batch.run", max(connection.timeout, RUN_REPLY_SECONDS), **args)
    said_repeat(record, record["id"])
    for message in record.get("warnings") or []:
        out(f"warning: {message}", err=True)
    for message in record.get("errors") or []:
        out(message, err=True)
    if (record.get("bad_lines") or 0) > len(record.get("errors") or []):
        out(f"… {record['bad_lines']} bad lines in all (skipped)", err=True)
    if detach:
        return show(record, lambda r: r["id"])
    final = follow(record, verbose)
    show(final, record_text)
    exit_if_budget_spent(final)
    exit_for(final)
    exit_if_prompts_failed(final)


def exit_if_budget_spent(final: dict[str, Any]) -> None:
    """A run stopped by its budget says which and how to go on (stderr), and exits 13
    (``budget_exceeded``): ``--resume`` with a raised ``--max_cost_usd`` / ``--max_total_tokens``
    runs what is left."""
    if final.get("exit_reason") != "budget_exceeded":
        return
    out(f"{final.get('error')}\nhermes-batch --run_name {final.get('run_name')} --resume --max_cost_usd USD "
        "(or --max_total_tokens N) continues where it stopped.", err=True)
    sys.exit(EXIT_CODES["budget_exceeded"])


def exit_if_prompts_failed(final: dict[str, Any]) -> None:
    """A run that ended with failed prompts says how many and why (stderr), and exits 11
    (``prompts_failed``); ``--resume`` runs them again."""
    failed = (final.get("progress") or {}).get("failed") or 0
    if not failed:
        return
    total = (final.get("progress") or {}).get("total") or 0
    out(f"{failed} of {render.counted(total, 'prompt')} failed; hermes-batch --run_name {final.get('run_name')} --resume "
        "runs them again. Commonest errors:", err=True)
    for failure in final.get("failures") or []:
        out(f"  {failure['count']} × {failure['error']}", err=True)
    sys.exit(EXIT_CODES["prompts_failed"])


@batch_group.command("run")
@run_options
@json_option
def run_command(**flags: Any) -> None:
    """Run a batch (the batch_runner flags); shows progress until it ends."""
    run_batch(flags)


@batch_group.command("status")
@json_option
@click.argument("run")
def status_command(run: str) -> None:
    """Show batch RUN (run name or job id): settings, progress, result."""
    show(conn().call("batch.status", id=run), record_text)


@batch_group.command("cancel")
@json_option
@click.argument("run")
def cancel_command(run: str) -> None:
    """Cancel batch RUN: running prompts are interrupted, the files written for what is done."""
    show(conn().call("batch.cancel", id=run), record_text)


@batch_group.command("list")
@json_option
def list_command() -> None:
    """List every batch run."""
    records = conn().call("batch.list")["batches"]
    if is_json():
        for rec in records:
            render.emit_json(rec)
        return
    if not records:
        out("no batch runs")
    for rec in records:
        p = rec.get("progress") or {}
        out(f"{rec['id']:<30} {rec['status']:<10} {p.get('processed', '-')}/{p.get('total', '-')}  "
                   f"{rec.get('run_dir')}")


@click.group(cls=Ctl, name="hermes-batch", invoke_without_command=True, subcommand_metavar="",
             context_settings={"help_option_names": ["-h", "--help"]},
             epilog=COMPLETION_HELP.replace("HERMESCTL", "HERMES_BATCH").replace("hermesctl", "hermes-batch"))
@run_options
@global_options
def hermes_batch(**flags: Any) -> None:
    """hermes-batch: generate trajectories over a JSONL dataset with hermesd.

    Each prompt runs as its own subagent process under hermesd's caps; the
    files go to OUTPUT_DIR/RUN_NAME/ (batch_N.jsonl, checkpoint.json,
    trajectories.jsonl, statistics.json).
    """
    run_batch(flags)


def main() -> None:
    """Console-script entry point of ``hermes-batch``."""
    hermes_batch.main(prog_name="hermes-batch")


def batch_logs(job_id: str, follow: bool) -> None:
    """``hermesctl logs`` of a batch: it has no process of its own; its items' logs are printed, each under its id."""
    items = [j for k in ("batch_item", "ray_item") for j in conn().call("ps", all=True, kind=k)["jobs"]
             if j.get("parent") == job_id]
    if not items and not is_json():
        out(f"{job_id} has no items yet (hermesctl batch status {job_id})", err=True)
    for item in items:
        if not is_json():
            out(f"==> {item['id']} ({item['status']}: {render.short(item.get('goal'), 50)}) <==")
        print_log(item["id"], follow=False)


RAY_ITEM_LOG_WAITS = ("{job} runs on a Ray node: its log is there, in the item's scratch directory "
                      "($TMPDIR/hermes-item-*/log on that node), until it ends; then its last 128 KiB are "
                      "here (hermesctl logs -f {job} waits for them)")
RAY_ITEM_NO_LOG = "{job} left no log: it never started on a node, or it was lost with its host or driver"


def ray_item_logs(job_id: str, follow: bool) -> None:
    """``hermesctl logs`` of an item on a Ray cluster: its log is on its node until it ends, then here
    (its last 128 KiB); until then, where it is."""
    if not is_json():
        chunk = conn().call("logs", id=job_id, offset=0, limit=1)
        if not chunk["size"]:
            out((RAY_ITEM_NO_LOG if chunk["done"] else RAY_ITEM_LOG_WAITS).format(job=job_id), err=True)
            if chunk["done"] or not follow:
                return
    print_log(job_id, follow)


COMMANDS = (batch_group,)
"""The family's commands in ``hermesctl`` (``hermesctl batch …``; ``hermes-batch`` is :func:`main`)."""
LOGS = {"batch": batch_logs, "ray_item": ray_item_logs}
"""How ``hermesctl logs`` prints the batch's kinds that have no log of their own here."""


if __name__ == "__main__":  # python -m client.batch: the same as the hermes-batch command
    main()
