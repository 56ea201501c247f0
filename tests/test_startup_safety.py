"""A signal while the daemon starts stops it cleanly; another user's client is told it may not
reach the socket (exit 3), not a usage error."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.harness import wait_for

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)

OTHER_UID = 65534
"""``nobody``: a user that is not the one running the daemon."""


def _execed(pid: int) -> bool:
    """True once ``hermesd run`` (pid) has exec'd into the daemon process."""
    try:
        return b"hermesd.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _sigterm_held(pid: int) -> bool:
    """True when process ``pid`` blocks or catches SIGTERM (``SigBlk``/``SigCgt`` of
    ``/proc/PID/status``, proc(5)): `hermesd run` from its first line on, then the daemon."""
    bit = 1 << (signal.SIGTERM - 1)
    try:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":\t" in line)
    except OSError:
        return False
    return any(int(fields[key], 16) & bit for key in ("SigBlk", "SigCgt"))


def _left(d) -> list[str]:
    """What a stopped daemon left: live processes of its own, its sockets."""
    left = [f"pid {p.pid}" for p in d.children()]
    return left + [s.name for s in (d.runtime / "hermesd.sock", d.runtime / "events.sock",
                                    d.runtime / "children.sock") if s.exists()]


@pytest.mark.parametrize("delay", [None, 0.1, 0.3, 0.5])
def test_sigterm_while_starting_stops_cleanly(make_daemon, delay):
    d = make_daemon(start=False)
    with open(d.log_path, "ab") as log:
        d.proc = subprocess.Popen([sys.executable, "-m", "hermesd.cli", "run"], env=d.env, cwd=str(d.work),
                                  stdout=log, stderr=subprocess.STDOUT)
    if delay is None:  # at once after the exec: the daemon's own start-up, the zygote starting
        wait_for(lambda: _execed(d.proc.pid), 15, 0.001, "the exec into the daemon")
    else:
        time.sleep(delay)
    held = _sigterm_held(d.proc.pid)  # once held, held until the daemon's handler has it
    d.proc.send_signal(signal.SIGTERM)
    code = d.proc.wait(30)
    # before hermesd's first line (Python itself still starting: slow on a loaded machine) nothing
    # is started, and the signal's default action is clean too
    assert code == 0 if held else code in (0, -signal.SIGTERM), (code, held, d.log())
    assert "Traceback" not in d.log()
    wait_for(lambda: not _left(d), 10, what=f"nothing left (now: {_left(d)})")
    if delay is None:
        assert "while starting" in d.log()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="running a client as another user needs root and setpriv")
def test_another_users_client_exits_3_naming_the_socket_and_the_permission(make_daemon):
    base = Path(tempfile.mkdtemp(prefix="hermes-other-", dir="/tmp"))
    try:
        os.chmod(base, 0o711)  # others may pass through, as through /run/user
        runtime = base / "run"
        d = make_daemon(env={"HERMES_RUNTIME_DIR": str(runtime)}, start=False)
        d.runtime = runtime
        d.start()
        as_other = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", sys.executable,
                    "-m", "client"]
        env = {**d.env, "HOME": "/tmp"}
        for args in (["status"], ["ps"], ["--runtime-dir", str(runtime), "ps"]):
            done = subprocess.run([*as_other, *args], env=env, cwd="/tmp", capture_output=True, text=True, timeout=60)
            assert done.returncode == 3, (args, done.stdout, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and str(runtime / "hermesd.sock") in lines[0], done.stderr
            assert "permission denied" in lines[0] and "Traceback" not in done.stderr
        assert d.call("hello")  # the daemon is untouched
    finally:
        shutil.rmtree(base, ignore_errors=True)
