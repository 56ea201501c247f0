"""hermesctl's fast path (``client/fast.py`` over ``client/zmtp.py``): ``status`` and ``hello``
answered without importing click or pyzmq, printing exactly what the full client
prints, and everything it does not answer left to the full client."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.harness import wait_for

FULL = "import sys; sys.argv[0] = 'hermesctl'; from client.ctl import main; main()"


def _full(daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", FULL, *args], env=daemon.env, cwd=str(daemon.work),
                          capture_output=True, text=True, timeout=60)


def _steady(text: str) -> str:
    """Output with what moves between two runs (uptime, durations, the zygote's spares) masked."""
    return re.sub(r'\d+(\.\d+)?s\b|uptime_seconds"?: [0-9.]+|start: .*', "N", text)


def test_fast_commands_print_what_the_full_client_prints(daemon):
    running = daemon.delegate("still running", background=True, script=[{"text": "zzz", "sleep": 60}])["id"]
    try:
        wait_for(lambda: daemon.call("job", id=running)["status"] == "running", 60, 0.05, "the job running")
        for args in (("status",), ("ps",), ("hello",), ("--json", "hello"), ("ps", "--json")):
            fast, full = daemon.ctl(*args), _full(daemon, *args)
            assert fast.returncode == full.returncode == 0, (args, fast.stderr, full.stderr)
            assert _steady(fast.stdout) == _steady(full.stdout), args
            assert fast.stderr == full.stderr == ""
        assert running in daemon.ctl("ps").stdout
        assert '"pid": %d' % daemon.proc.pid in daemon.ctl("status", "--json").stdout
    finally:
        daemon.call("cancel", id=running)


def test_fast_path_imports_neither_click_nor_pyzmq(daemon):
    code = ("import sys; sys.argv = ['hermesctl', 'status']; import client; client.main(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'click', 'zmq', 'dataclasses', 'json'}), "
            "file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("hermesd "), out.stderr
    assert out.stderr.strip() == "[]"


def test_what_the_fast_path_does_not_answer_goes_to_the_full_client(daemon, tmp_path):
    with_option = daemon.ctl("--timeout", "20", "status")
    assert with_option.returncode == 0 and with_option.stdout.startswith("hermesd ")
    assert daemon.ctl("status", "--help").stdout.startswith("Usage: ")
    gone = daemon.ctl("status", env={"HERMES_RUNTIME_DIR": str(tmp_path / "nothing")})
    assert gone.returncode == 3 and "hermesd is not running" in gone.stderr and "Traceback" not in gone.stderr
    assert daemon.ctl("--json", "ps", "--json").returncode == 0  # two --json: not fast, still fine
