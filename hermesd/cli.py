"""``hermesd run | check-config | version``: the daemon's own command line.

``hermesd run`` reads and checks the config, then execs the daemon process
(:mod:`hermesd.daemon`), which holds neither this command line nor PyYAML.
argparse, not click as ``hermesctl``: a few commands, and ``run`` starts sooner.
"""

from __future__ import annotations

import os
import signal
import stat
import sys

if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "hermesd":
    # The program (not a test importing it): SIGTERM and SIGINT are held from its first line, so
    # that one that comes while `hermesd run` starts stops the daemon cleanly once it has started
    # (hermesd.daemon.main); main() lets them through at once for the other commands.
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTERM, signal.SIGINT))

import argparse  # noqa: E402 - after the signals are held
from typing import Any, Callable

from hermesd import __version__, config as config_mod, daemon, paths  # noqa: E402

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout with the width found here: its own way imports ``shutil``
    (with ``bz2`` and ``lzma``), which ``hermesd run`` has no use for."""

    def __init__(self, prog: str):
        try:
            width = int(os.environ.get("COLUMNS") or os.get_terminal_size(sys.stdout.fileno()).columns)
        except (ValueError, OSError, AttributeError):  # AttributeError: stdout closed, sys.stdout None
            width = 80
        super().__init__(prog, width=max(width - 2, 40))


INVALID_CONFIG = 7
"""The exit status of a configuration hermesd cannot use: an invalid config file, or a
``HERMES_HOME`` that is no directory (where the config file and state would be)."""


def _load(path: str | None) -> config_mod.Config:
    try:
        return config_mod.load(path)
    except config_mod.ConfigError as err:
        for problem in err.problems:
            print(f"hermesd: invalid configuration: {problem}", file=sys.stderr)
        sys.exit(INVALID_CONFIG)


def _check_home() -> None:
    """Exit :data:`INVALID_CONFIG` with one line naming ``HERMES_HOME`` when it is there but no directory (a file, or
    a path through one); a missing one is made by the daemon."""
    home = paths.hermes_home()
    try:
        if stat.S_ISDIR(os.stat(home).st_mode):
            return
        why = "is not a directory"
    except FileNotFoundError:
        return
    except OSError as exc:
        why = f"cannot be used: {exc.strerror or exc}"
    print(f"hermesd: HERMES_HOME {home} {why}; set HERMES_HOME to the daemon's state directory "
          "(default ~/.hermes)", file=sys.stderr)
    sys.exit(INVALID_CONFIG)


def run(args: argparse.Namespace) -> None:
    """Run the daemon in the foreground until SIGTERM, SIGINT or `hermesctl shutdown`."""
    _check_home()
    cfg = _load(args.config)
    try:
        daemon.exec_daemon(cfg, args.config, args.log_level)
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, daemon.STOP_SIGNALS)
        print(f"hermesd: cannot start the daemon process ({sys.executable}): {exc}", file=sys.stderr)
        sys.exit(1)


def check_config(args: argparse.Namespace) -> None:
    """Validate the config file (PATH, else $HERMES_HOME/config.yaml).

    Exit 0 if valid, 7 with one file:line: key: reason line per problem if not (7 too, with one
    line, when no PATH is given and HERMES_HOME is no directory)."""
    if not (args.path or args.config):
        _check_home()
    cfg = _load(args.path or args.config)
    print(f"{cfg.source or 'defaults (no config file)'}: OK")


def version(_args: argparse.Namespace) -> None:
    """Print the version."""
    print(__version__)


def parser() -> argparse.ArgumentParser:
    """The command line: ``run``, ``check-config``, ``version`` (each command's help is its doc)."""
    top = argparse.ArgumentParser(prog="hermesd", description="hermesd: the supervisor daemon for AI subagents.",
                                  formatter_class=_Formatter)
    top.add_argument("--version", action="version", version=f"hermesd, version {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    config_help = "Config file (default $HERMES_HOME/config.yaml)."
    cmd = _command(commands, "run", run)
    cmd.add_argument("--config", metavar="PATH", default=None, help=config_help)
    cmd.add_argument("--foreground", action="store_true", default=True, help=argparse.SUPPRESS)  # always
    cmd.add_argument("--log-level", default="INFO", choices=LOG_LEVELS)
    cmd = _command(commands, "check-config", check_config)
    cmd.add_argument("path", nargs="?", default=None, metavar="PATH")
    cmd.add_argument("--config", metavar="PATH", default=None, help="The file to check (the same as PATH).")
    cmd = _command(commands, "version", version)
    return top


def _command(commands: Any, name: str, fn: Callable[[argparse.Namespace], None]) -> argparse.ArgumentParser:
    """The sub-parser of command ``name`` run by ``fn`` (its help: ``fn``'s doc)."""
    doc = (fn.__doc__ or "").strip()
    cmd = commands.add_parser(name, formatter_class=_Formatter, help=(doc.splitlines() or [""])[0], description=doc)
    cmd.set_defaults(func=fn, parser=cmd)
    return cmd


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point.  Exits 2 on a usage error (as argparse does), 7 on an
    invalid configuration (or HERMES_HOME no directory), 130 on a Ctrl-C."""
    args, extra = parser().parse_known_args(argv)
    if getattr(args, "func", None) is not run:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, daemon.STOP_SIGNALS)
    if extra:  # said by the command's own parser, with its own usage line
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        args.func(args)
    except KeyboardInterrupt:  # Ctrl-C while the config is read: no traceback
        sys.exit(130)


if __name__ == "__main__":
    main()
