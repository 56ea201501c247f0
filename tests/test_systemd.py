"""systemd integration: the units verify and say what docs/operations.md says; sd_notify works end to end.

The notify test plays systemd's part: it binds its own datagram socket, starts
a real daemon with ``NOTIFY_SOCKET`` and ``WATCHDOG_USEC`` pointing at it, and
reads what hermesd says (READY, STATUS, WATCHDOG at the requested interval,
RELOADING then READY on SIGHUP, STOPPING on shutdown).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermesd.config import Supervisor
from hermesd.system.systemd import Notifier
from tests.harness import ROOT, wait_for

UNITS = ROOT / "systemd"
BIN = Path(sys.executable).parent
PREFIXES = {"/opt/hermesd/bin/": f"{BIN}/", "%h/.local/bin/": f"{BIN}/"}
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as ``{section: {key: [values…]}}`` (continuation lines joined)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    pending = ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def unit_files() -> list[Path]:
    """Every unit we ship: system units, timers and their services, the user unit."""
    return sorted(UNITS.glob("*.service")) + sorted(UNITS.glob("*.timer")) + sorted((UNITS / "user").glob("*"))


def installed_copy(src: Path, dest_dir: Path) -> Path:
    """``src`` with its install prefix replaced by this venv's bin directory (so ExecStart exists)."""
    text = src.read_text()
    for prefix, here in PREFIXES.items():
        text = text.replace(prefix, here)
    dest = dest_dir / src.name
    dest.write_text(text)
    return dest


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (apt-get install systemd)")
def test_systemd_analyze_verify_every_unit(tmp_path):
    system_dir, user_dir, xdg = tmp_path / "system", tmp_path / "user", tmp_path / "xdg"
    for d in (system_dir, user_dir, xdg):
        d.mkdir(mode=0o700)
    system = [installed_copy(p, system_dir) for p in unit_files() if p.parent == UNITS]
    user = [installed_copy(p, user_dir) for p in unit_files() if p.parent != UNITS]
    assert len(system) >= 5 and user
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg), "SYSTEMD_LOG_LEVEL": "notice"}
    for mode, files, cwd in (([], system, system_dir), (["--user"], user, user_dir)):
        out = subprocess.run([SYSTEMD_ANALYZE, *mode, "verify", *[p.name for p in files]], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=60)
        # verify exits 0 on unknown keys and bad values, but prints them: both must be clean
        assert out.returncode == 0 and not out.stderr.strip() and not out.stdout.strip(), \
            f"systemd-analyze {' '.join(mode)} verify:\n{out.stdout}{out.stderr}"


def _seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "min": 60}
    for suffix, factor in units.items():
        if value.endswith(suffix) and value[: -len(suffix)].replace(".", "").isdigit():
            return float(value[: -len(suffix)]) * factor
    return float(value)


@pytest.mark.parametrize("path", [UNITS / "hermesd.service", UNITS / "user" / "hermesd.service"],
                         ids=["system", "user"])
def test_daemon_units_say_what_spec_asks(path):
    svc = parse_unit(path)["Service"]
    one = {key: values[-1] for key, values in svc.items()}
    assert one["Type"] == "notify" and one["KillMode"] == "mixed" and one["Restart"] == "on-failure"
    assert one["ExecStart"].endswith("/hermesd run")
    assert one["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert one["RuntimeDirectory"] == "hermes" and one["NoNewPrivileges"] == "yes"
    assert "HERMES_RUNTIME_DIR=%t/hermes" in svc["Environment"]
    assert _seconds(one["WatchdogSec"]) >= 10
    # above the daemon's own stop: stop_timeout_seconds, then 2 s after SIGKILL, plus a margin
    assert _seconds(one["TimeoutStopSec"]) >= Supervisor().stop_timeout_seconds + 2 + 5
    if path.parent == UNITS:  # the system unit: dedicated user, state directory, sandbox
        assert one["User"] == "hermes" and one["StateDirectory"] == "hermes"
        assert "HERMES_HOME=/var/lib/hermes" in svc["Environment"]
        assert one["ProtectSystem"] == "strict" and one["ProtectHome"] == "yes" and one["PrivateTmp"] == "yes"


@pytest.mark.parametrize("path", [UNITS / "hermes-dashboard.service", UNITS / "user" / "hermes-dashboard.service"],
                         ids=["system", "user"])
def test_dashboard_units_outlive_the_daemon_and_reach_it(path):
    from dashboard.__main__ import SHUTDOWN_SECONDS

    unit, daemon = parse_unit(path), parse_unit(path.parent / "hermesd.service")
    assert "hermesd.service" in unit["Unit"]["Wants"] and "hermesd.service" in unit["Unit"]["After"]
    assert not {"Requires", "Requisite", "BindsTo", "PartOf"} & set(unit["Unit"]), \
        "stopping or restarting hermesd must not stop the dashboard (it reconnects)"
    svc = {key: values[-1] for key, values in unit["Service"].items()}
    assert svc["ExecStart"].endswith("/hermesctl dashboard --foreground") and svc["Type"] == "exec"
    assert svc["Restart"] == "on-failure" and svc["RestartPreventExitStatus"] == "2"
    assert _seconds(svc["TimeoutStopSec"]) > SHUTDOWN_SECONDS
    env = {name: dict(e.split("=", 1) for e in parsed["Service"]["Environment"]) for name, parsed in
           (("dashboard", unit), ("daemon", daemon))}
    for key in ("HERMES_HOME", "HERMES_RUNTIME_DIR"):  # the daemon's config, token file and sockets
        assert env["dashboard"][key] == env["daemon"][key], key
    assert "EnvironmentFile" not in svc, "the dashboard is given no provider key"
    assert "RemoveIPC" not in svc, "it would remove the IPC objects of hermesd's user as the dashboard stops"
    if path.parent == UNITS:  # the daemon's user (its sockets are 0600), its state directory, a sandbox
        theirs = {key: values[-1] for key, values in daemon["Service"].items()}
        for key in ("User", "Group", "StateDirectory", "StateDirectoryMode"):
            assert svc[key] == theirs[key], key
        assert svc["ProtectSystem"] == "strict" and svc["ReadWritePaths"] == "%t" and svc["NoNewPrivileges"] == "yes"


def test_every_timer_starts_a_cron_style_command():
    timers = sorted(UNITS.glob("*.timer"))
    assert {t.stem for t in timers} >= {"hermes-delegate-example", "hermes-nightly-batch"}
    for timer in timers:
        assert parse_unit(timer)["Timer"]["OnCalendar"]
        svc = parse_unit(timer.with_suffix(".service"))
        assert svc["Service"]["Type"] == ["oneshot"] and "hermesd.service" in svc["Unit"]["After"]
        command = " ".join(svc["Service"]["ExecStart"])
        assert ("hermesctl delegate --background" in command) or ("hermes-batch" in command and "--detach" in command)


# -- sd_notify end to end ---------------------------------------------------------------------------


class NotifyListener:
    """The systemd side of sd_notify: a bound datagram socket collecting ``(time, {KEY: VALUE})``."""

    def __init__(self, path: Path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.messages: list[tuple[float, dict[str, str]]] = []

    def drain(self) -> list[tuple[float, dict[str, str]]]:
        """Read every datagram waiting; returns all messages so far."""
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return self.messages
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append((time.monotonic(), fields))

    def having(self, key: str, value: str | None = None) -> list[tuple[float, dict[str, str]]]:
        """Messages so far that carry ``key`` (with ``value``, when given)."""
        return [(t, m) for t, m in self.drain() if key in m and (value is None or m[key] == value)]

    def close(self) -> None:
        """Close and remove the socket."""
        self.sock.close()
        self.path.unlink(missing_ok=True)


@pytest.fixture
def listener(tmp_path):
    """A NotifyListener in the test's temporary directory."""
    lis = NotifyListener(tmp_path / "notify.sock")
    yield lis
    lis.close()


def test_notify_ready_status_watchdog_reload_stopping(make_daemon, listener):
    watchdog_usec = 1_000_000
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path), "WATCHDOG_USEC": str(watchdog_usec)})
    ready = wait_for(lambda: listener.having("READY", "1"), what="READY=1")
    assert "running" in ready[0][1]["STATUS"] and ready[0][1]["MAINPID"] == str(d.proc.pid)
    pings = wait_for(lambda: (w := listener.having("WATCHDOG", "1")) and len(w) >= 7 and w, timeout=15,
                     what="seven WATCHDOG=1")
    gaps = [b[0] - a[0] for a, b in zip(pings, pings[1:])]
    requested = watchdog_usec / 1e6
    assert max(gaps) < requested, f"a watchdog ping came late: {gaps}"
    assert requested / 4 < statistics.median(gaps) < requested * 0.9, gaps
    assert all("STATUS" in m for _, m in pings)

    seen = len(listener.drain())
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: any("READY" in m for _, m in listener.drain()[seen:]), what="READY=1 after SIGHUP")
    after = [m for _, m in listener.messages[seen:] if "WATCHDOG" not in m]
    assert after[0]["RELOADING"] == "1" and int(after[0]["MONOTONIC_USEC"]) > 0
    assert after[1]["READY"] == "1"

    assert d.stop() == 0
    stopping = listener.having("STOPPING", "1")
    assert stopping and stopping[0][0] > pings[-1][0]


def test_notify_bad_config_on_reload_still_ends_ready(make_daemon, listener):
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)})
    wait_for(lambda: listener.having("READY", "1"), what="READY=1")
    (d.home / "config.yaml").write_text("delegation:\n  max_async_children: three\n")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: len(listener.having("READY", "1")) >= 2, what="READY=1 after a refused reload")
    assert listener.having("RELOADING", "1")
    assert not listener.having("WATCHDOG"), "no WATCHDOG_USEC given, so no pings"
    assert d.call("status")["pid"] == d.proc.pid
    assert "reload refused" in d.log() and "Traceback" not in d.log()  # one line, not a callback's traceback


def test_notifier_outside_systemd_and_abstract_socket(tmp_path):
    assert Notifier({}).notify(READY="1") is False
    assert Notifier({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}).watchdog_seconds is None
    assert Notifier({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}).watchdog_seconds == 2.0
    name = f"hermes-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    try:
        sock.settimeout(5)
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).notify(READY="1", STATUS="ok")
        assert sock.recv(100) == b"READY=1\nSTATUS=ok"
    finally:
        sock.close()
