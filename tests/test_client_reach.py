"""A client that cannot reach the socket says why in one line and exits 3, never a traceback.

Real clients in subprocesses (``hermesctl``, ``hermes-batch``, ``chat``): ``HERMES_HOME`` a
file, a runtime directory the client may not enter (another user's, the system unit's; root
is made an ordinary user for it by dropping ``CAP_DAC_OVERRIDE`` from its bounding set), and
a daemon's socket owned by another user, which even root's client refuses (fast path too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from hermesd.protocol import EXIT_CODES

NOT_RUNNING = EXIT_CODES["daemon_not_running"]
CLIENTS = (["-m", "client", "status"], ["-m", "client", "ps"], ["-m", "client", "chat"],
           ["-c", "from client.batch import main; main()", "--dataset_file", "d.jsonl", "--batch_size", "1",
            "--run_name", "r"])


def _run(argv: list[str], env: dict[str, str], cwd, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("HERMES_RUNTIME_DIR", "XDG_RUNTIME_DIR")}
    return subprocess.run([*prefix, sys.executable, *argv], env={**clean, **env}, cwd=str(cwd), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def _one_line(out: subprocess.CompletedProcess, *texts: str) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and out.returncode == NOT_RUNNING, (out.returncode, out.stderr)
    for text in texts:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("argv", CLIENTS, ids=["status", "ps", "chat", "hermes-batch"])
def test_hermes_home_a_file(tmp_path, argv):
    home = tmp_path / "home"
    home.write_text("a file\n")
    _one_line(_run(argv, {"HERMES_HOME": str(home)}, tmp_path), f"{home} is not a directory", "HERMES_HOME=")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
@pytest.mark.parametrize("argv", CLIENTS, ids=["status", "ps", "chat", "hermes-batch"])
def test_a_runtime_directory_not_open_to_the_client(tmp_path, argv):
    other = tmp_path / "other"
    (other / "run").mkdir(parents=True)
    os.chown(other / "run", 65534, 65534)
    os.chown(other, 65534, 65534)
    other.chmod(0o700)
    as_user = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    out = _run(argv, {"HERMES_HOME": str(other), "HERMES_RUNTIME_DIR": str(other / "run")}, tmp_path, as_user)
    _one_line(out, "permission denied", str(other / "run" / "hermesd.sock"), "HERMES_RUNTIME_DIR")


@pytest.mark.skipif(os.geteuid() != 0, reason="root's client is the one that could connect anyway")
def test_root_refuses_a_socket_it_does_not_own(daemon):
    for name in ("hermesd.sock", "events.sock"):
        os.chown(daemon.runtime / name, 65534, 65534)
    for argv in (["status"], ["status", "--json"], ["ps"], ["events", "-f"]):
        _one_line(daemon.ctl(*argv), "is not yours (owner uid 65534)")


@pytest.fixture(params=[b"HTTP/1.1 400 Bad Request\r\n\r\n", b"x" * 80], ids=["closes", "not-zmtp"])
def junk_socket(tmp_path, request):
    """A runtime directory whose ``hermesd.sock`` is served by something else: it writes
    ``request.param`` to every connection and closes it."""
    import socket
    import threading

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(run / "hermesd.sock"))
    server.listen(16)
    server.settimeout(0.1)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                peer, _ = server.accept()
            except TimeoutError:
                continue
            with peer:
                try:
                    peer.sendall(request.param)
                except OSError:  # the client left first (libzmq drops a peer that is not ZMTP at once)
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield run
    done.set()
    thread.join(5)
    server.close()


@pytest.mark.parametrize("argv", [["-m", "client", "status"], ["-m", "client", "ps", "--all"],
                                  ["-m", "client", "approvals"], CLIENTS[3]],
                         ids=["status", "ps", "approvals", "hermes-batch"])
def test_a_socket_whose_peer_is_not_hermesd_is_said_at_once(tmp_path, junk_socket, argv):
    """Not a 30 s timeout blaming the daemon: exit 3 (``not_hermesd``) naming the socket."""
    (tmp_path / "d.jsonl").write_text('{"prompt": "p"}\n')
    (tmp_path / "home").mkdir()
    out = _run(argv, {"HERMES_HOME": str(tmp_path / "home"), "HERMES_RUNTIME_DIR": str(junk_socket)}, tmp_path)
    assert EXIT_CODES["not_hermesd"] == NOT_RUNNING
    _one_line(out, f"what answers on {junk_socket / 'hermesd.sock'} is not hermesd")
