"""``python -m dashboard``: serve the dashboard (``hermesctl dashboard`` starts it so, detached).

Reads ``config.yaml`` (``dashboard:``; ``--listen`` wins), refuses an address other than
loopback unless ``dashboard.allow_remote`` (and says loudly when it serves one), binds the socket
itself so that a port in use is one clear line (exit 2), writes ``dashboard.json`` (pid, URL) 0600 in
the runtime directory for ``hermesctl dashboard`` to find it (again each time hermesd answers after
it did not: a daemon restarted may have a new runtime directory), and serves until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path

from hermesd import config as config_mod
from hermesd import paths, private

STATE_FILE = "dashboard.json"
SHUTDOWN_SECONDS = 2
"""How long open pages (their server-sent event streams) may hold the shutdown after SIGTERM."""


def state_path(runtime_dir: str | None) -> Path:
    """``RUNTIME_DIR/dashboard.json``: the running dashboard's pid and URL."""
    return (Path(runtime_dir) if runtime_dir else paths.runtime_dir()) / STATE_FILE


def forget(state: Path, pid: int) -> None:
    """Remove ``state`` (a ``dashboard.json``) if it names dashboard ``pid``: another one's stays."""
    try:
        if json.loads(state.read_text(encoding="utf-8")).get("pid") == pid:
            state.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def announce(state: Path, url: str, listen: str) -> None:
    """Write ``state`` (``dashboard.json``: this process's pid, its ``url`` and ``listen`` address)
    0600, its directory made first when it is not there.  Raises ``OSError``."""
    paths.ensure_private_dir(state.parent)
    private.write_file(state, json.dumps({"pid": os.getpid(), "url": url, "listen": listen}))


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``.  Raises ``OSError`` (``EADDRINUSE``: the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _exit(signum: int, frame: object) -> None:
    """SIGTERM/SIGINT once uvicorn has shut down: it raises the signal it caught again with the
    handler it found (uvicorn.Server.capture_signals), which is this one — an orderly exit that
    runs :func:`main`'s cleanup — not the default one, which ended the process there."""
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    """Serve; returns the exit status (2: bad config or the address cannot be had)."""
    from hermesd.dashboard.config import is_loopback, split_listen

    parser = argparse.ArgumentParser(prog="python -m dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", help="HOST:PORT (default: dashboard.listen, 127.0.0.1:8770; port 0: any free one)")
    parser.add_argument("--runtime-dir", help="the daemon's runtime directory (default: HERMES_RUNTIME_DIR)")
    parser.add_argument("--config", help="config.yaml (default: HERMES_HOME/config.yaml)")
    args = parser.parse_args(argv)
    try:
        cfg = config_mod.load(args.config).dashboard
        host, port = split_listen(args.listen or cfg.listen)
    except (config_mod.ConfigError, ValueError) as exc:
        print(f"hermesctl dashboard: {exc}", file=sys.stderr)
        return 2
    if not is_loopback(host) and not cfg.allow_remote:
        print(f"hermesctl dashboard: {host} is reachable from other machines: set dashboard.allow_remote: true to "
              "serve there", file=sys.stderr)
        return 2
    try:
        sock = bind(host, port)
    except OSError as exc:
        why = "is in use (another dashboard? `hermesctl dashboard` finds a running one; else set dashboard.listen)" \
            if exc.errno == errno.EADDRINUSE else f"cannot be had: {exc.strerror or exc}"
        print(f"hermesctl dashboard: {host}:{port} {why}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    if not is_loopback(host):
        print(f"WARNING: the dashboard serves {host}:{port}, reachable from other machines (dashboard.allow_remote): "
              "anyone with its token can see and act on your jobs; put TLS in front of it", file=sys.stderr, flush=True)
    if cfg.nice > os.nice(0):  # hermesd and its children first when the CPU is short
        with contextlib.suppress(OSError):
            os.nice(cfg.nice - os.nice(0))
    import uvicorn

    from dashboard.app import build
    from dashboard.auth import load_token

    private.tighten_umask()
    token = load_token()
    state, shown = state_path(args.runtime_dir), f"[{host}]" if ":" in host else host
    url, listen = f"http://{shown}:{port}/", f"{host}:{port}"

    def again() -> None:
        """hermesd answers (again): its runtime directory may be a new one without dashboard.json
        (systemd removes a unit's RuntimeDirectory= as it stops), where `hermesctl dashboard` looks."""
        try:
            announce(state, url, listen)
        except OSError as exc:
            print(f"hermesctl dashboard: cannot write {state}: {exc}", file=sys.stderr, flush=True)

    app = build(args.runtime_dir, token, read_only=cfg.read_only, metrics_public=cfg.metrics_public, on_up=again)
    announce(state, url, listen)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=SHUTDOWN_SECONDS))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit)
    try:
        server.run(sockets=[sock])
    except SystemExit:
        pass
    finally:
        forget(state, os.getpid())
    return 0


if __name__ == "__main__":
    sys.exit(main())
