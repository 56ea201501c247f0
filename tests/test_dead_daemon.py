"""A client talking to a dead daemon knows at once: its stale socket is "not running", exit 3.

``kill -9`` leaves ``hermesd.sock`` behind; every ``hermesctl`` command must still exit 3
with one line, not wait out its reply timeout (``--timeout 60`` here: a command that
waited for it would hit the subprocess timeout), and a ``wait`` already waiting must say
that the daemon stopped and exit 3 instead of hanging, or carry on across a restart.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from client.connection import RESTART_GRACE_SECONDS, daemon_gone
from hermesd import paths
from hermesd.protocol import EXIT_CODES
from tests.harness import wait_for

LONG = [{"text": "resting", "sleep": 120}]
NOT_RUNNING = EXIT_CODES["daemon_not_running"]


def _ctl_popen(daemon, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "client", "--timeout", "60", *args], env=daemon.env,
                            cwd=str(daemon.work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


@pytest.fixture
def dead(daemon):
    """A daemon killed with ``kill -9`` (its socket file left behind) and one of its job ids."""
    job = daemon.delegate("left behind", background=True, script=LONG)["id"]
    daemon.kill9()
    assert daemon.runtime.joinpath("hermesd.sock").exists()
    return daemon, job


@pytest.mark.parametrize("args", [("status",), ("ps",), ("wait", "JOB"), ("result", "JOB"), ("logs", "JOB"),
                                  ("events", "--follow"), ("delegate", "--background", "hi"), ("shutdown",),
                                  ("--json", "wait", "JOB")])
def test_every_command_on_a_stale_socket_exits_3(dead, args):
    daemon, job = dead
    proc = _ctl_popen(daemon, *[job if a == "JOB" else a for a in args])
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == NOT_RUNNING, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "not running" in lines[0] and "hermesd.sock" in lines[0], err
    assert "Traceback" not in err


def test_daemon_gone_names_the_reason(dead, tmp_path):
    daemon, _job = dead
    sockets = paths.sockets(daemon.runtime)
    assert "nothing listens" in daemon_gone(sockets)
    daemon.start()
    assert daemon_gone(sockets) is None
    assert "no socket" in daemon_gone(paths.sockets(tmp_path / "nowhere"))


def test_wait_already_waiting_says_the_daemon_stopped_and_exits_3(daemon):
    job = daemon.delegate("long", background=True, script=LONG)["id"]
    waiter = _ctl_popen(daemon, "wait", job)
    _wait_until_waiting(waiter)
    daemon.kill9()
    out, err = waiter.communicate(timeout=RESTART_GRACE_SECONDS + 20)
    assert waiter.returncode == NOT_RUNNING, (out, err)
    assert "stopped" in err and f"waiting up to {RESTART_GRACE_SECONDS:g}s" in err
    assert "did not come back" in err.strip().splitlines()[-1]
    assert "Traceback" not in err


def test_wait_carries_on_across_a_restart(daemon):
    job = daemon.delegate("long", background=True, script=LONG, resume=False)["id"]
    waiter = _ctl_popen(daemon, "wait", job)
    _wait_until_waiting(waiter)
    daemon.kill9()
    daemon.start()  # the job was running when its daemon died: the new one says it is lost
    out, err = waiter.communicate(timeout=RESTART_GRACE_SECONDS + 20)
    assert waiter.returncode == EXIT_CODES["job_failed"], (out, err)
    assert "lost" in out
    assert "waiting up to" in err and "hermesd is back" in err


def _wait_until_waiting(proc: subprocess.Popen, steady: float = 1.0) -> None:
    """Until ``proc`` has held its connection for ``steady`` seconds: its handshake done and its
    request sent (on a loaded machine, a ``kill -9`` just after the connection was seen once
    landed in the handshake: a daemon that never answered, which ``wait`` rightly calls not running)."""
    since: list[float] = []

    def held() -> bool:
        if not _waiting(proc):
            since.clear()
            return False
        since[:] = since or [time.monotonic()]
        return time.monotonic() - since[0] >= steady

    wait_for(held, what="hermesctl wait connected")


def _waiting(proc: subprocess.Popen) -> bool:
    """True once ``proc`` (``hermesctl``) is connected to the daemon: it has a Unix stream
    socket open, which it makes only after its liveness check (psutil)."""
    try:
        return bool(psutil.Process(proc.pid).net_connections(kind="unix"))
    except psutil.Error:
        return False
