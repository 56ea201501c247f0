"""hermesctl's fast path (``client/fast.py`` over ``client/zmtp.py``): the commands scripts call
(``status``, ``hello``, ``delegate``, ``ps``, ``result``, ``wait``, ``cancel``, ``events``)
answered without importing click or pyzmq, printing exactly what the full client prints
(output, error lines, exit codes), and everything it does not answer left to the full client."""

from __future__ import annotations

import pytest

import re
import subprocess
import sys

from tests.harness import wait_for

FULL = "import sys; sys.argv[0] = 'hermesctl'; from client.ctl import main; main()"
FAST = ("import atexit, os, sys; atexit.register(lambda: open(os.environ['SEEN'], 'w').write("
        "'full' if 'click' in sys.modules else 'fast')); sys.argv[0] = 'hermesctl'; import client; client.main()")


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
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'click', 'zmq', 'dataclasses', 'json', 'typing'}), "
            "sys.modules['datetime'].__name__, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("hermesd "), out.stderr
    assert out.stderr.strip() == "[] _datetime"


def test_what_the_fast_path_does_not_answer_goes_to_the_full_client(daemon, tmp_path):
    with_option = daemon.ctl("--timeout", "20", "status")
    assert with_option.returncode == 0 and with_option.stdout.startswith("hermesd ")
    assert daemon.ctl("status", "--help").stdout.startswith("Usage: ")
    gone = daemon.ctl("status", env={"HERMES_RUNTIME_DIR": str(tmp_path / "nothing")})
    assert gone.returncode == 3 and "hermesd is not running" in gone.stderr and "Traceback" not in gone.stderr
    assert daemon.ctl("--json", "ps", "--json").returncode == 0  # two --json: not fast, still fine


def _side_by_side(daemon, tmp_path, *args: str, env: dict[str, str] | None = None,
                  full_args: tuple[str, ...] | None = None) -> str:
    """Run ``hermesctl ARGS`` through ``client.main`` and through the full client (with ``full_args``
    if given); assert the same exit code, stdout and stderr (job ids, times, durations and pids
    masked, and a live job's queued or starting); return which path answered."""
    seen = tmp_path / "seen"
    runs = [subprocess.run([sys.executable, "-c", code, *argv], env={**daemon.env, **(env or {}), "SEEN": str(seen)},
                           cwd=str(daemon.work), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            for code, argv in ((FAST, args), (FULL, full_args or args))]
    (fast, full), path = runs, seen.read_text()
    mask = lambda text: re.sub(r"\b(bg|deleg)_[0-9a-f]+|\d{4}-\d\d-\d\dT[\d:.]+Z|\"(duration_seconds|pid|seconds)\": [\d.e-]+|queued|starting", "X",  # noqa: E731
                               re.sub(" +", " ", _steady(text)))  # a table's columns as wide as what moved
    assert (fast.returncode, mask(fast.stdout), mask(fast.stderr)) == \
        (full.returncode, mask(full.stdout), mask(full.stderr)), (args, path)
    assert "Traceback" not in fast.stderr
    return path


@pytest.mark.slow  # over 10 s: the default run stays short; .ci/run runs it
def test_the_commands_scripts_call_answer_fast_exactly_as_the_full_client(daemon, tmp_path):
    done = daemon.wait_job(daemon.delegate("ended", script=[{"text": "fine"}])["id"])["id"]
    failed = daemon.wait_job(daemon.delegate("broken", script=[{"error": "boom"}])["id"])["id"]
    running, other = (daemon.delegate("still running", background=True, script=[{"text": "zzz", "sleep": 600}])["id"]
                      for _ in range(2))
    wait_for(lambda: {daemon.call("job", id=j)["status"] for j in (running, other)} == {"running"}, 60, 0.05,
             "both jobs running")
    since = daemon.call("status")["last_seq"] - 6
    try:
        fast = [("ps",), ("ps", "--json"), ("--json", "ps", "--all", "--limit", "1"), ("ps", "--all", "--oldest-first"),
                ("result", done), ("result", failed, "--json"), ("result", done, "--trajectory"),
                ("wait", done), ("--timeout", "20", "wait", failed, "--json"), ("wait", running, "--timeout", "0.1"),
                ("events", "--since", str(since)), ("events", "--since", str(since), "--json", "--type", "job.state"),
                ("events", "--oldest-first", "--limit", "2"), ("events", "-n", "3", "--json"), ("cancel", done), ("--json", "cancel", failed),
                ("result", "deleg_000000000000"), ("--json", "wait", "nope"), ("cancel", "nope"),
                ("delegate", "--background", "--queue", "--env", "A=1", "--max-turns", "2", "a goal"),
                ("delegate", "in the foreground", "--toolsets", "terminal"), ("--json", "delegate", "again")]
        for args in fast:
            assert _side_by_side(daemon, tmp_path, *args) == "fast", args
        usage = [("ps", "--limit", "0"), ("result",), ("delegate", "--queue", "x"), ("ps", "--bogus"),
                 ("delegate", "--background", "--env", "=1", "x"), ("wait", "x", "--timeout", "-5"), ("events", "-f", "x")]
        for args in usage:
            assert _side_by_side(daemon, tmp_path, *args) == "full", args
        for args in (("ps",), ("result", done), ("--json", "wait", done), ("delegate", "--background", "x")):
            assert _side_by_side(daemon, tmp_path, *args, env={"HERMES_RUNTIME_DIR": str(tmp_path / "none")}) == "full"
        assert _side_by_side(daemon, tmp_path, "cancel", running, full_args=("cancel", other)) == "fast"
    finally:
        for job in (running, other):
            daemon.call("cancel", id=job) if daemon.call("job", id=job)["status"] == "running" else None
