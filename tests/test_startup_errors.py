"""No start-up failure prints a traceback: one line naming the path (and the limit), exit non-zero.

Each case starts a real ``hermesd run`` in a temporary directory made unusable in
one way: a runtime directory whose socket paths exceed the Unix limit, one that
cannot be created, one that is read-only, a state directory that is full, a state
database that is a directory or not a database at all.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hermesd.paths import SOCKET_PATH_MAX
from tests.chaos.helpers import mounted, read_only
from tests.harness import DaemonProc


def _start(daemon: DaemonProc, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hermesd.cli", "run"], env={**daemon.env, **env},
                          capture_output=True, text=True, timeout=60)


def _one_line_naming(out: subprocess.CompletedProcess, *texts: str) -> str:
    assert out.returncode != 0, out
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for text in texts:
        assert text in lines[0], lines[0]
    return lines[0]


def test_socket_path_over_the_unix_limit(tmp_path):
    runtime = tmp_path / ("r" * (SOCKET_PATH_MAX - len(str(tmp_path))))
    line = _one_line_naming(_start(DaemonProc(tmp_path), HERMES_RUNTIME_DIR=str(runtime)),
                            str(runtime), f"limit of {SOCKET_PATH_MAX} bytes", "HERMES_RUNTIME_DIR")
    assert "children.sock" in line or "hermesd.sock" in line or "events.sock" in line
    assert not runtime.exists(), "nothing is created before the check"


def test_runtime_directory_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    _one_line_naming(_start(DaemonProc(tmp_path), HERMES_RUNTIME_DIR=str(blocker / "run")),
                     str(blocker / "run"), "Not a directory")


def test_read_only_runtime_directory(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    with read_only(runtime):
        _one_line_naming(_start(DaemonProc(tmp_path), HERMES_RUNTIME_DIR=str(runtime)), str(runtime))


def test_full_state_directory(tmp_path):
    daemon = DaemonProc(tmp_path)
    config = (daemon.home / "config.yaml").read_bytes()
    with mounted("tmpfs", daemon.home, "size=1m"):
        (daemon.home / "config.yaml").write_bytes(config)
        with open(daemon.home / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError:
                pass
        _one_line_naming(_start(daemon), str(daemon.home / "state.db"))


def test_state_database_that_cannot_be_opened(tmp_path):
    for name, make in (("dir", lambda p: p.mkdir()), ("garbage", lambda p: p.write_bytes(b"\x07" * 4096))):
        daemon = DaemonProc(tmp_path / name)
        make(daemon.home / "state.db")
        _one_line_naming(_start(daemon), str(daemon.home / "state.db"))
        assert Path(daemon.home / "state.db").exists()


def test_hermes_home_that_is_a_file(tmp_path):
    home = tmp_path / "home-file"
    home.write_text("not a directory\n")
    env = {k: v for k, v in DaemonProc(tmp_path).env.items() if k != "HERMES_RUNTIME_DIR"}
    for command in ("run", "check-config"):
        out = subprocess.run([sys.executable, "-m", "hermesd.cli", command], env={**env, "HERMES_HOME": str(home)},
                             capture_output=True, text=True, timeout=60)
        line = _one_line_naming(out, "HERMES_HOME", str(home), "is not a directory")
        assert "config.yaml" not in line and out.returncode == 7  # a configuration hermesd cannot use
