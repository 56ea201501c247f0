"""``hermesctl``: the thin command-line client of hermesd.

Every command is one request over the control socket (or a subscription to
events); the daemon's op docstrings are the reference for what each does.
``--json`` is accepted before or after the subcommand.  The global options,
output, errors and exit codes are in :mod:`client.common`; this module is the
top of the client's imports: it adds the commands of every command family
(:func:`families`), which never import it.

A command is one way: an entry of its family module's ``COMMANDS`` — a
:class:`client.verbs.Verb` when scripts call it and the fast path answers it
(:mod:`client.fast`), else a click command.  A family of the core, or of a plugin
without a job kind, is a line of :data:`FAMILIES`; a job type names its own family
in its package's ``display`` leaf (``CLIENT``), found by file as its other parts are
(:func:`hermesd.paths.plugin_modules`).  A family may also say how ``hermesctl logs``
prints a job of its kinds (``LOGS``: kind → ``printer(job_id, follow)``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable

import click

from client import verbs
from client.common import COMPLETION_HELP, LOGS, Ctl, complete_job_id, global_options, json_option, run
from hermesd.paths import plugin_modules
from hermesd.protocol import exit_codes_text

FAMILIES = ("client.verbs", "client.admin", "client.approvals", "client.usage", "client.worktrees",
            "client.dashboard", "client.mcp", "client.top")
"""The command families of the core and of the plugins without a job kind (modules with ``COMMANDS``);
a job type's family is named by its ``display`` leaf (:func:`families`)."""


TYPES: dict[str, Any] = {"str": None, "int": int, "int1": click.IntRange(min=1), "int0": click.IntRange(min=0), "float": float,
                         "float0": click.FloatRange(min=0), "dir": click.Path(file_okay=False, exists=True),
                         "file": click.File("r", encoding="utf-8")}
"""Each kind of :class:`client.verbs.Opt` as click's parameter type."""


def click_param(param: verbs.Opt | verbs.Arg) -> Callable:
    """The click decorator of one parameter of a :class:`client.verbs.Verb`."""
    if isinstance(param, verbs.Arg):
        return click.argument(param.name, required=param.required,
                              shell_complete=complete_job_id if param.job else None)
    flags = (param.flag, param.short) if param.short else (param.flag,)
    if param.kind == "flag":
        return click.option(*flags, param.dest, is_flag=True, help=param.help)
    kind = click.Choice(param.choices()) if param.kind == "choice" else TYPES[param.kind]
    return click.option(*flags, param.dest, type=kind, default=None, multiple=param.multiple,
                        metavar=param.metavar, help=param.help)


def verb_command(verb: verbs.Verb) -> click.Command:
    """The click command of ``verb`` (``--json``, its parameters, its body's docstring as help)."""
    def command(**values: Any) -> None:
        run(verb.body, **values)

    command.__doc__ = verb.body.__doc__
    for param in reversed(verb.params):
        command = click_param(param)(command)
    return click.command(verb.name)(json_option(command))


@click.group(cls=Ctl, context_settings={"help_option_names": ["-h", "--help"]}, epilog=COMPLETION_HELP)
@global_options
def cli() -> None:
    """hermesctl: control hermesd, the supervisor daemon for AI subagents."""


cli.help = f"{cli.help}\n\n{exit_codes_text()}"


def main() -> None:
    """The full client (``hermesctl``'s entry point, :func:`client.main`, comes here for all
    but the commands :mod:`client.fast` answers)."""
    cli.main(prog_name="hermesctl")


def families() -> list[str]:
    """Every command family's module name: :data:`FAMILIES`, then each job type's, which its
    package's ``display`` leaf names (``CLIENT``; found by file, :func:`hermesd.paths.plugin_modules`)."""
    named = (getattr(importlib.import_module(name), "CLIENT", None) for name in plugin_modules("display"))
    return [*FAMILIES, *(n for n in named if n)]


def add_family(module: ModuleType) -> None:
    """Add ``module``'s ``COMMANDS`` to ``hermesctl`` (a :class:`client.verbs.Verb` as its click
    command) and its ``LOGS`` printers to :data:`client.common.LOGS`."""
    for command in module.COMMANDS:
        cli.add_command(verb_command(command) if isinstance(command, verbs.Verb) else command)
    LOGS.update(getattr(module, "LOGS", {}))


for _name in families():
    add_family(importlib.import_module(_name))
