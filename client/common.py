"""What every front end shares, defined once: the global options, the connection
of an invocation, output and errors, exit codes, waiting for a job, reading text.

Clients import in one direction: ``client.ctl`` (the ``hermesctl`` group)
imports the command families (``sessions``, ``batch``, ``kanban``, ``top``),
and every one of them imports this module, ``client.render`` and
``client.connection`` — never ``ctl``.  Nothing heavy is imported here (no
rich, textual, prompt_toolkit or jsonschema): a command that needs one imports
it inside its body, so ``hermesctl status`` starts fast.

Exit codes (:data:`hermesd.protocol.EXIT_CODES`): 0 success, 1 internal error,
2 usage or bad request, 3 daemon not running or shutting down, 4
capacity_reached/depth_limit, 5 not found, 6 invalid state, 7 invalid config,
8 version mismatch, 9 timeout, 10 the job ended but did not complete, 130
interrupted by a person (Ctrl-C).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, Callable

import click

from client import render
from client.connection import ClientError, Connection
from client.fast import DEFAULT_TIMEOUT
from hermesd.contract import TERMINAL, TOOLSETS  # noqa: F401  (TERMINAL re-exported for the clients)
from hermesd.protocol import EXIT_CODES, ProtocolError

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, as shells report it)."""
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


def global_options(fn: Callable) -> Callable:
    """The options every front end takes before its command: ``--json``,
    ``--runtime-dir`` (``HERMES_RUNTIME_DIR``), ``--timeout`` (seconds per reply,
    :data:`DEFAULT_TIMEOUT`; after the command too, see :class:`Ctl`) and ``--version``.
    They are stored on the root context's ``obj``."""
    fn = click.version_option(None, "--version", package_name="hermesd", message="%(prog)s, version %(version)s")(fn)
    fn = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT,
                      show_default=True, expose_value=False, callback=_set_root("timeout"), help=TIMEOUT_HELP)(fn)
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


def root_obj() -> dict[str, Any]:
    """The root context's ``obj`` (global options, the connection)."""
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().ensure_object(dict) if ctx else {}


def is_json() -> bool:
    """True when ``--json`` was given anywhere on the command line."""
    return bool(root_obj().get("json"))


def conn() -> Connection:
    """The connection of the current invocation (made on first use)."""
    obj = root_obj()
    if "conn" not in obj:
        obj["conn"] = new_connection()
    return obj["conn"]


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


def fail(code: str, message: str) -> None:
    """Report an error (stderr, and JSON on stdout with ``--json``) and exit with its code."""
    if is_json():
        render.emit_json({"error": {"code": code, "message": message}})
    out(f"{program_name()}: {message}", err=True)
    sys.exit(EXIT_CODES.get(code, 1))


def show(obj: dict[str, Any], text: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Print one result: JSON with ``--json``, else ``text(obj)`` or readable key: value lines."""
    if is_json():
        render.emit_json(obj)
    else:
        out(text(obj) if text is not None else render.fields_text(obj))


IDEMPOTENCY_HELP = ("Make the request idempotent: sent again with the same KEY (after a timeout, by a retrying "
                    "script), it returns the job the first one made instead of starting another.")


def idempotency_option(fn: Callable) -> Callable:
    """``--idempotency-key KEY`` (the requests' ``idempotency_key``, ``hermesd.idempotency``)."""
    return click.option("--idempotency-key", "idempotency_key", default=None, metavar="KEY", help=IDEMPOTENCY_HELP)(fn)


def said_repeat(answer: dict[str, Any], job_id: str) -> None:
    """On stderr, for people: ``answer`` is a repeat (``repeat: true``), job ``job_id`` the first one's."""
    if answer.get("repeat") and not is_json():
        out(f"{job_id}: submitted before with this idempotency key; not started again", err=True)


def print_all(items: list[dict[str, Any]], text: Callable[[dict[str, Any]], str], empty: str) -> None:
    """Print a list: one JSON object per line with ``--json``, else ``text(item)`` each (``empty`` for none)."""
    for item in items:
        render.emit_json(item) if is_json() else out(text(item))
    if not items and not is_json():
        out(empty)


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
            err.show()
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("", err=True)
            sys.exit(INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


# -- requests that several commands make -----------------------------------------------------------


def working_dir() -> str:
    """The current directory (a request's default ``cwd``); exits cleanly (``bad_request``,
    status 2) when the shell's directory was deleted under it."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        fail("bad_request", "the current directory no longer exists; cd elsewhere or pass --cwd")
        raise  # not reached: fail() exits


def split(value: str | None) -> list[str] | None:
    """``"a, b,c"`` → ``["a", "b", "c"]``; None or empty → None."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def toolset_names(value: str | None) -> list[str] | None:
    """``--toolsets``: the names (:func:`split`), None when not given; raises :class:`click.UsageError`
    for a value that names none (``--toolsets ""``), which would silently mean the default."""
    names = split(value)
    if value is not None and not names:
        raise click.UsageError(f"--toolsets names no toolset; give some of {', '.join(TOOLSETS)} "
                               "(comma-separated), or leave it out for the config's")
    return names


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
    """The text given as argument ``name`` (``-``: standard input) or by ``--NAME-file``;
    raises :class:`click.UsageError` when neither or both are given."""
    if (value is None) == (file is None):
        raise click.UsageError(f"give {name.upper()} or --{name}-file (not both); '-' reads standard input")
    if file is not None:
        return file.read()
    return sys.stdin.read() if value == "-" else value


def exit_for(record: dict[str, Any]) -> None:
    """Exit 10 (``job_failed``) unless the job completed."""
    if record.get("status") != "completed":
        sys.exit(EXIT_CODES["job_failed"])


def stopped_watching(job_id: str, follow: str | None = None, cancel: str | None = None) -> None:
    """After Ctrl-C on a foreground wait: say what goes on and how to reach it, exit 130."""
    follow = follow or f"hermesctl wait {job_id}"
    cancel = cancel or f"hermesctl cancel {job_id}"
    click.echo(f"\nstopped watching; {job_id} goes on in hermesd (follow: {follow}; stop: {cancel})", err=True)
    sys.exit(INTERRUPTED)


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
                f"{rec.get('api_calls') or 0} model call(s)")
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
