"""``hermesctl dashboard``: start the dashboard (or find the one running) and print its URL.

The dashboard is a client of hermesd in a process of its own (``python -m dashboard``), not a child
hermesd supervises: a bug or a flood of browsers there cannot reach the daemon's loop, and it
outlives daemon restarts (it reconnects, as ``hermesctl top`` does).  This command starts it
detached (its own session; its output in ``HERMES_HOME/dashboard.log``) unless
``RUNTIME_DIR/dashboard.json`` names one that answers, waits until it serves, and prints the URL
with the token (``?token=``; the page then keeps it in a cookie).  ``--foreground`` serves in this
process instead (a systemd unit, a container); ``--stop`` ends the running one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import webbrowser
from pathlib import Path

import click

from client.common import fail, is_json, json_option, out, root_obj
from hermesd import paths, private

START_SECONDS = 20.0
STOP_SECONDS = 10.0
"""How long ``--stop`` waits for the dashboard to exit (it shuts down within ``dashboard.__main__.SHUTDOWN_SECONDS``)."""


def _state(runtime_dir: str | None) -> Path:
    return (Path(runtime_dir) if runtime_dir else paths.runtime_dir()) / "dashboard.json"


def running(runtime_dir: str | None) -> dict | None:
    """The running dashboard's ``{pid, url, listen}`` when its process lives and its port answers."""
    try:
        state = json.loads(_state(runtime_dir).read_text(encoding="utf-8"))
        os.kill(int(state["pid"]), 0)
        host, _, port = state["listen"].rpartition(":")
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return state
    except (OSError, ValueError, KeyError, TypeError):
        return None


def token() -> str:
    """The dashboard's token (``HERMES_HOME/dashboard.token``, made the first time)."""
    from dashboard.auth import load_token

    return load_token()


@click.command("dashboard")
@click.option("--open", "open_", is_flag=True, help="Open the page in a browser too.")
@click.option("--listen", metavar="HOST:PORT", help="Serve here (default: dashboard.listen, 127.0.0.1:8770; port 0: a free one).")
@click.option("--foreground", is_flag=True, help="Serve in this process until stopped (for a systemd unit).")
@click.option("--stop", is_flag=True, help="Stop the running dashboard.")
@json_option
def dashboard_command(open_: bool, listen: str | None, foreground: bool, stop: bool) -> None:
    """The web page of hermesd: the job tree live, a job's conversation and log, approvals,
    batches (rewards, samples), the bill and the governor, Kanban; and /metrics for
    Prometheus.  Starts it (or finds the one running) and prints its URL with the token once;
    open that URL, it keeps the token in a cookie.  It is a client of hermesd in a process of
    its own, on loopback unless dashboard.allow_remote is set (docs/operations.md)."""
    runtime_dir = root_obj().get("runtime_dir")
    args = [sys.executable, "-m", "dashboard", *(["--listen", listen] if listen else []),
            *(["--runtime-dir", str(runtime_dir)] if runtime_dir else [])]
    if foreground:
        os.execv(sys.executable, args)
    found = running(runtime_dir)
    if stop:
        if found is None:
            fail("not_found", "no dashboard is running")
        stop_process(int(found["pid"]), runtime_dir)
        out(json.dumps({"stopped": True, "pid": int(found["pid"])}) if is_json()
            else f"stopped the dashboard (pid {found['pid']})")
        return
    if found is None:
        found = start(args, runtime_dir)
    url = f"{found['url']}?token={token()}"
    out(json.dumps({"url": url, "pid": int(found["pid"])}) if is_json() else url)
    if open_:
        webbrowser.open(url)


def stop_process(pid: int, runtime_dir: str | None) -> None:
    """SIGTERM dashboard ``pid`` and wait until it has exited (at most :data:`STOP_SECONDS`, then
    exit status 9, ``timeout``); its ``dashboard.json`` is gone then (it removes it; if it could not,
    this does)."""
    from client.admin import daemon_alive

    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    while daemon_alive(pid):
        if time.monotonic() >= deadline:
            fail("timeout", f"the dashboard (pid {pid}) is still stopping after {STOP_SECONDS:g}s")
        time.sleep(0.05)
    from dashboard.__main__ import forget

    forget(_state(runtime_dir), pid)


def start(args: list[str], runtime_dir: str | None) -> dict:
    """Start the dashboard detached and wait until it serves; its one-line error (a port in use)
    ends this command with exit status 2."""
    home = paths.hermes_home()
    paths.ensure_private_dir(home)
    log_path = home / "dashboard.log"
    private.create_file(log_path)
    with open(log_path, "ab") as log:
        begin = log.tell()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                close_fds=True)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        found = running(runtime_dir)
        if found is not None and int(found["pid"]) == proc.pid:
            return found
        if proc.poll() is not None:
            with open(log_path, "rb") as fh:
                fh.seek(begin)
                said = fh.read().decode("utf-8", "replace").strip().splitlines()
            fail("bad_request", said[-1].removeprefix("hermesctl dashboard: ") if said else
                 f"the dashboard exited with status {proc.returncode} (see {log_path})")
        time.sleep(0.05)
    fail("timeout", f"the dashboard did not start serving within {START_SECONDS:g}s (see {log_path})")
    raise AssertionError("unreachable")


COMMANDS = (dashboard_command,)
