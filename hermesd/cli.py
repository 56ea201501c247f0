"""``hermesd run | check-config | version``: the daemon's own command line."""

from __future__ import annotations

import logging
import sys

import click

from hermesd import __version__, config as config_mod


def keep_tls_out() -> None:
    """Make ``import ssl`` fail in this process, before asyncio is imported.

    The daemon speaks only over unix sockets, never TLS, yet asyncio imports
    ``ssl`` when it can (``asyncio.base_events``, ``asyncio.sslproto``: both
    fall back to ``ssl = None``), which maps libssl and libcrypto, about 5 MiB
    of an idle daemon's 33 (issue 22).  A ``None`` in ``sys.modules`` makes the
    import raise ``ImportError`` (the import system's documented rule).  Its
    children (zygote, child processes) are new interpreters and keep ``ssl``.
    """
    sys.modules.setdefault("ssl", None)


def _load(path: str | None) -> config_mod.Config:
    try:
        return config_mod.load(path)
    except config_mod.ConfigError as err:
        for problem in err.problems:
            click.echo(f"hermesd: invalid configuration: {problem}", err=True)
        sys.exit(7)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hermesd")
def cli() -> None:
    """hermesd: the supervisor daemon for AI subagents."""


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (default $HERMES_HOME/config.yaml).")
@click.option("--foreground", is_flag=True, default=True, hidden=True,
              help="Stay in the foreground (always; hermesd never daemonizes itself).")
@click.option("--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def run(config_path: str | None, foreground: bool, log_level: str) -> None:
    """Run the daemon in the foreground until SIGTERM, SIGINT or `hermesctl shutdown`."""
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s hermesd[%(process)d] %(levelname)s %(message)s")
    cfg = _load(config_path)
    keep_tls_out()
    from hermesd import server

    sys.exit(server.run(cfg, config_path))


@cli.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False), required=False)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="The file to check (the same as PATH).")
def check_config(path: str | None, config_path: str | None) -> None:
    """Validate the config file (PATH, else $HERMES_HOME/config.yaml); exit 0 if valid, 7 with
    one file:line: key: reason line per problem if not."""
    cfg = _load(path or config_path)
    click.echo(f"{cfg.source or 'defaults (no config file)'}: OK")


@cli.command()
def version() -> None:
    """Print the version."""
    click.echo(__version__)


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
