"""What every front end shares, defined once: the global options, the connection
of an invocation, output and errors, exit codes, waiting for a job, reading text.

Clients import in one direction: ``client.ctl`` (the ``hermesctl`` group)
imports the command families (``sessions``, ``batch``, ``kanban``, ``top``),
and every one of them imports this module, ``client.render`` and
``client.connection`` — never ``ctl``.  Nothing heavy is imported here (no
rich, textual, prompt_toolkit or jsonschema): a command that needs one imports
it inside its body, so ``hermesctl status`` starts fast.

Exit codes: :data:`hermesd.protocol.EXIT_CODES` (per error code) and
:data:`hermesd.protocol.EXIT_MEANINGS` (what each status means), 130 for Ctrl-C.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
import time
from typing import Any, Callable

import click
from click.shell_completion import CompletionItem

from client import render, verbs
from client.calls import Away
from client.connection import ClientError, Connection
from client.fast import DEFAULT_TIMEOUT
from client.verbs import IDEMPOTENCY_HELP, INTERRUPTED, Usage, exit_for, split  # noqa: F401  (for the families)
from hermesd.contract.states import TERMINAL  # noqa: F401  (re-exported for the clients)
from hermesd.protocol import ProtocolError
COMPLETION_HELP = ("Shell completion (commands, options, job ids): "
                   'eval "$(_HERMESCTL_COMPLETE=bash_source hermesctl)" in ~/.bashrc, '
                   'or zsh_source in ~/.zshrc, or fish_source in fish.')


# -- options and the invocation's state ------------------------------------------------------------


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(dict)["json"] = True


def json_option(fn: Callable) -> Callable:
    """Add ``--json`` to a command (also accepted on the group, before the subcommand)."""
    return click.option("--json", "json_", is_flag=True, expose_value=False, callback=_set_json,
                        is_eager=True, help="Machine-readable output: one JSON object per line.")(fn)


def _set_root(name: str) -> Callable:
    def store(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        ctx.ensure_object(dict)[name] = value
        return value
    return store


TIMEOUT_HELP = "Seconds to wait for a reply from hermesd."


def _set_timeout(ctx: click.Context, _param: click.Parameter, value: float | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)["timeout"] = value


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: not eager, so that ``--json`` (eager) is known wherever it stands."""
    if not value or ctx.resilient_parsing:
        return
    version = importlib.metadata.version("hermesd")
    if ctx.ensure_object(dict).get("json"):
        render.emit_json({"version": version})
    else:
        click.echo(f"{ctx.find_root().info_name}, version {version}")
    ctx.exit()


def global_options(fn: Callable) -> Callable:
    """The options every front end takes before its command: ``--json``,
    ``--runtime-dir`` (``HERMES_RUNTIME_DIR``), ``--timeout`` (seconds per reply,
    :data:`DEFAULT_TIMEOUT`; after the command too, see :class:`Ctl`) and ``--version``.
    They are stored on the root context's ``obj`` (``timeout`` None when not typed: :func:`timeout_given`)."""
    fn = click.option("--version", is_flag=True, expose_value=False, callback=_show_version,
                      help="Show the version and exit (JSON {\"version\": …} with --json).")(fn)
    fn = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
                      show_default=f"{DEFAULT_TIMEOUT:g}", expose_value=False, callback=_set_root("timeout"),
                      help=TIMEOUT_HELP)(fn)
    fn = click.option("--runtime-dir", envvar="HERMES_RUNTIME_DIR", type=click.Path(file_okay=False, readable=False),
                      default=None, expose_value=False, callback=_set_root("runtime_dir"),
                      help="Runtime directory of the daemon's sockets.")(fn)
    return json_option(fn)


def with_timeout_option(command: click.Command) -> None:
    """Give ``command`` (and every command of a group) ``--timeout`` as after the command
    (``hermesctl status --timeout 2``), stored where the group's own goes; a command
    with a ``--timeout`` of its own (``wait``: how long to wait for the job) keeps it."""
    for sub in getattr(command, "commands", {}).values():
        with_timeout_option(sub)
    if not any("--timeout" in getattr(p, "opts", ()) for p in command.params):
        command.params.append(click.Option(["--timeout"], type=click.FloatRange(min=0, min_open=True), default=None,
                                           expose_value=False, callback=_set_timeout, help=TIMEOUT_HELP))


class Duration(click.ParamType):
    """A duration: ``90`` (seconds), ``45s``, ``30m``, ``12h``, ``7d``, ``2w``, or sums
    such as ``1d12h``; converted to seconds (``clean --older-than``; ``usage --since`` too)."""

    name = "duration"
    UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    EXAMPLES = "90, 45s, 30m, 12h, 7d, 2w, 1d12h"

    @classmethod
    def seconds(cls, value: Any) -> float | None:
        """``value`` (text) as seconds; None when it is no duration."""
        text = str(value).strip().lower()
        parts = re.fullmatch(r"(?:\d+(?:\.\d+)?[smhdw]?)+", text) and re.findall(r"(\d+(?:\.\d+)?)([smhdw]?)", text)
        return sum(float(n) * cls.UNITS[unit or "s"] for n, unit in parts) if parts else None

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        seconds = self.seconds(value)
        if seconds is None:
            self.fail(f"{value!r} is not a duration (e.g. {self.EXAMPLES})", param, ctx)
        return seconds


def root_obj() -> dict[str, Any]:
    """The root context's ``obj`` (global options, the connection)."""
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().ensure_object(dict) if ctx else {}


def timeout_given() -> float | None:
    """The ``--timeout`` typed on the command line (before or after the command), in seconds; None
    when none was (each reply then waits :data:`DEFAULT_TIMEOUT`)."""
    return root_obj().get("timeout")


def is_json() -> bool:
    """True when ``--json`` was given anywhere on the command line."""
    return bool(root_obj().get("json"))


def conn() -> Connection:
    """The connection of the current invocation (made on first use)."""
    obj = root_obj()
    if "conn" not in obj:
        obj["conn"] = new_connection()
    return obj["conn"]


def who() -> str:
    """Who the person running this client is, as answers show it: the user's name (else the uid)."""
    return os.environ.get("USER") or f"uid {os.getuid()}"


def new_connection(timeout: float | None = None) -> Connection:
    """A fresh connection with the invocation's runtime directory and ``timeout`` (default ``--timeout``);
    for a second thread (ZeroMQ sockets are not thread-safe)."""
    obj = root_obj()
    return Connection(obj.get("runtime_dir"), timeout=timeout or obj.get("timeout") or DEFAULT_TIMEOUT)


# -- output and errors -----------------------------------------------------------------------------


def out(text: Any = "", *, nl: bool = True, err: bool = False) -> None:
    """Print text for people, control characters escaped (:func:`render.clean`)."""
    click.echo(render.clean(text), nl=nl, err=err)


def program_name() -> str:
    """``hermesctl`` or ``hermes-batch``: the name errors are prefixed with."""
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().info_name if ctx else os.path.basename(sys.argv[0] or "hermesctl")


class ClickSession(verbs.Session):
    """A :class:`client.verbs.Session` inside a click command: the invocation's connection,
    ``--json``, click's output, the program's name, the wait that shows itself on a terminal."""

    conn = property(lambda self: conn())
    json = property(lambda self: is_json())
    prog = property(lambda self: program_name())

    def echo(self, text: str, *, nl: bool = True, err: bool = False) -> None:
        """``click.echo``."""
        click.echo(text, nl=nl, err=err)

    def wait(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """:func:`wait_job`."""
        return wait_job(job_id, timeout)


SESSION = ClickSession()
"""The session of every click command (its state is click's current context)."""


def run(body: Callable[..., None], **values: Any) -> None:
    """Run a :mod:`client.verbs` body in a click command; its :class:`~client.verbs.Usage` becomes
    click's own usage error (shown with the command's usage line, exit 2)."""
    usage_errors(body, SESSION, **values)


def usage_errors(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, a :class:`~client.verbs.Usage` it raises made click's ``BadParameter``
    (with its option) or ``UsageError``."""
    try:
        return fn(*args, **kwargs)
    except Usage as err:
        if err.hint:
            raise click.BadParameter(err.message, param_hint=err.hint) from None
        raise click.UsageError(err.message) from None


def fail(code: str, message: str) -> None:
    """Report an error (stderr, and JSON on stdout with ``--json``) and exit with its code."""
    SESSION.fail(code, message)


def show(obj: dict[str, Any], text: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Print one result: JSON with ``--json``, else ``text(obj)`` or readable key: value lines."""
    verbs.show(SESSION, obj, text)


def idempotency_option(fn: Callable) -> Callable:
    """``--idempotency-key KEY`` (the requests' ``idempotency_key``, ``hermesd.idempotency``)."""
    return click.option("--idempotency-key", "idempotency_key", default=None, metavar="KEY", help=IDEMPOTENCY_HELP)(fn)


def said_repeat(answer: dict[str, Any], job_id: str) -> None:
    """:func:`client.verbs.said_repeat`."""
    verbs.said_repeat(SESSION, answer, job_id)


def print_all(items: list[dict[str, Any]], text: Callable[[dict[str, Any]], str], empty: str) -> None:
    """Print a list: one JSON object per line with ``--json``, else ``text(item)`` each (``empty`` for none)."""
    for item in items:
        render.emit_json(item) if is_json() else out(text(item))
    if not items and not is_json():
        out(empty)


def one_line_usage_error(err: click.ClickException, prog: str) -> str:
    """click's error ``err`` as the one line every client error is (``PROG CMD: message``, then
    where help is for a usage error), instead of click's three (usage, hint, message)."""
    ctx = getattr(err, "ctx", None)
    where = ctx.command_path if ctx is not None else prog
    hint = f" (see '{where} --help')" if isinstance(err, click.UsageError) else ""
    return f"{where}: {' '.join(err.format_message().split())}{hint}"


class Ctl(click.Group):
    """A click group that turns protocol and connection errors into clean exits,
    and usage errors into JSON too when ``--json`` is on the command line; the
    commands added to it take ``--timeout`` after their name too."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Add ``cmd`` (see :func:`with_timeout_option`)."""
        with_timeout_option(cmd)
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ProtocolError as err:
            fail(err.code, err.message)
        except ClientError as err:
            fail(err.code, err.message)
        except KeyboardInterrupt:
            click.echo("", err=True)
            sys.exit(INTERRUPTED)

    def main(self, args: list[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:
        """Run the command line; a usage error prints click's message (and with ``--json``
        one ``{"error": {"code": "bad_request", …}}`` line on stdout) and exits 2."""
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(argv, prog_name, standalone_mode=False, **extra)
        except click.ClickException as err:
            if "--json" in argv:
                render.emit_json({"error": {"code": "bad_request", "message": err.format_message()}})
            click.echo(render.clean(one_line_usage_error(err, prog_name or self.name or "hermesctl")), err=True)
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("", err=True)
            sys.exit(INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


# -- requests that several commands make -----------------------------------------------------------


def working_dir() -> str:
    """:func:`client.verbs.working_dir`."""
    return verbs.working_dir(SESSION)


def toolset_names(value: str | None) -> list[str] | None:
    """:func:`client.verbs.toolset_names`, raising :class:`click.UsageError`."""
    return usage_errors(verbs.toolset_names, value)


def text_input(name: str, what: str) -> Callable:
    """An optional argument ``NAME`` and an option ``--NAME-file FILE`` for a command's
    long text: ``NAME`` ``-`` or ``--NAME-file -`` reads standard input (the shell
    limits arguments to 128 KiB).  Resolve it with :func:`read_text`."""
    def deco(fn: Callable) -> Callable:
        fn = click.option(f"--{name}-file", f"{name}_file", type=click.File("r", encoding="utf-8"), default=None,
                          help=f"Read the {what} from this file ('-': standard input).")(fn)
        return click.argument(name, required=False)(fn)
    return deco


def read_text(value: str | None, file: Any, name: str) -> str:
    """:func:`client.verbs.read_text`, raising :class:`click.UsageError`."""
    return usage_errors(verbs.read_text, value, file, name)


def complete_job_id(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a job id (click's ``shell_complete``): every job of the
    daemon whose id starts with ``incomplete``, newest first, each with its status
    and goal (the daemon filters by prefix and pages).  What arrived when the
    daemon stops answering within 2 s."""
    runtime_dir = ctx.find_root().params.get("runtime_dir")
    jobs: list[dict[str, Any]] = []
    try:
        connection = Connection(runtime_dir, timeout=2.0)
        try:
            for job in connection.jobs(all=True, order="newest", prefix=incomplete or None):
                jobs.append(job)
        finally:
            connection.close()
    except (ClientError, ProtocolError, OSError):
        pass
    return [CompletionItem(j["id"], help=f"{j['status']}: {j.get('goal') or ''}"[:70]) for j in jobs]


LOGS: dict[str, Callable[[str, bool], None]] = {}
"""How ``hermesctl logs`` prints a job of a kind, when not as :func:`print_log` does: kind →
``printer(job_id, follow)``, from the command families' ``LOGS`` (added by :mod:`client.ctl`)."""


def print_log(job_id: str, follow: bool) -> None:
    """Print ``job_id``'s log from its start; ``follow``: as it grows until the job ends, waiting
    for a daemon that goes away meanwhile (said once on stderr: :class:`client.calls.Away`)."""
    offset = 0
    away = Away(lambda text: out(f"hermesctl: {text}", err=True), f"the log of {job_id}")

    def read() -> dict[str, Any]:
        return conn().call("logs", id=job_id, offset=offset)

    while True:
        chunk = away.retry(read) if follow else read()
        if chunk["data"]:
            if is_json():
                render.emit_json({"job": job_id, "offset": offset, "data": chunk["data"]})
            else:
                out(chunk["data"], nl=False)
        offset = chunk["offset"]
        if chunk["offset"] < chunk["size"]:
            continue
        if not follow or chunk["done"]:
            return
        time.sleep(0.25)


def stopped_watching(job_id: str, follow: str | None = None, cancel: str | None = None) -> None:
    """After Ctrl-C on a foreground wait: say what goes on and how to reach it, exit 130
    (:meth:`client.verbs.Session.stopped_watching`)."""
    SESSION.stopped_watching(job_id, follow, cancel)


def wait_job(job_id: str, timeout: float | None = None, *, quiet: bool = False) -> dict[str, Any]:
    """Block until job ``job_id`` is terminal and return its record; ``timeout``
    seconds (None: no limit) then exit 9.  On a terminal (stderr), unless
    ``quiet`` or ``--json``, one line shows that it waits: status, elapsed time,
    model calls.  Ctrl-C says what goes on (:func:`stopped_watching`).  A daemon that
    is not running fails at once (exit 3); one that stops while waiting is given a
    moment to restart (:meth:`client.connection.Connection.wait_job`)."""
    live = not quiet and not is_json() and sys.stderr.isatty()
    start = time.monotonic()
    shown = False

    def show(answer: dict[str, Any]) -> None:
        nonlocal shown
        if not live:
            return
        rec = answer["job"]
        line = (f"waiting for {job_id}: {rec['status']} · {render.elapsed(time.monotonic() - start)} · "
                f"{render.counted(rec.get('api_calls'), 'model call')}")
        hint = " · Ctrl-C stops watching"
        width = shutil.get_terminal_size().columns - 1
        line = line + hint if len(line + hint) <= width else line[:width]
        click.echo(f"\r\033[K{line}", nl=False, err=True)
        shown = True

    try:
        # a dead daemon fails at once; one that dies meanwhile is given a moment to restart
        return conn().wait_job(job_id, timeout, chunk=1.0 if live else 30.0, on_answer=show,
                               notice=lambda text: click.echo(("\n" if shown else "") + f"hermesctl: {text}", err=True))
    except KeyboardInterrupt:
        stopped_watching(job_id)
        raise  # not reached
    finally:
        if shown:
            click.echo("\r\033[K", nl=False, err=True)
