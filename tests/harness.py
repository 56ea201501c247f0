"""A real hermesd in a temporary directory, for integration tests.

The daemon runs as a real process (``python -m hermesd.cli run``) with its own
``HERMES_HOME`` and runtime directory.  :meth:`DaemonProc.cleanup` ends every
process it started — the daemon, its children and their descendants (found by
the ``HERMES_SUPERVISOR`` variable in their environment) — even when a test fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import yaml

from client.connection import ClientError, Connection

ROOT = Path(__file__).resolve().parent.parent


def _shared_data() -> Path:
    """The shared demo data (HumanEval prompts): ``$HERMES_SHARED/data`` (as demo.sh), else
    ``../shared/data`` beside the checkout, else ``/work/shared/data``; the first that exists."""
    places = [Path(os.environ["HERMES_SHARED"]) / "data"] if os.environ.get("HERMES_SHARED") else []
    places += [ROOT.parent / "shared" / "data", Path("/work/shared/data")]
    return next((p for p in places if p.is_dir()), places[0])


DATA = _shared_data()
START_METHOD = os.environ.get("HERMES_TEST_START_METHOD", "")
"""``supervisor.start_method`` of every test daemon whose config names none
(``HERMES_TEST_START_METHOD=spawn`` runs the suite cold; unset: the default, forkserver)."""


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns a truthy value; raise AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def paused_after_first(env: dict[str, str], base: Path, op: str, seconds: float = 2.0) -> dict[str, str]:
    """``env`` for a client that pauses ``seconds`` after its first ``op`` request was answered
    (a ``sitecustomize`` in ``base`` wraps ``Connection.call``) and touches ``base/paused`` as
    it begins: a test kills the daemon in that window, between a follower's first answer and
    what it does next (on a loaded machine the daemon once went just there)."""
    return _with_sitecustomize(env, base,
        "import pathlib, time\n"
        "from client import connection\n"
        "call, first = connection.Connection.call, []\n"
        "def paused(self, op, _timeout=None, **args):\n"
        "    out = call(self, op, _timeout, **args)\n"
        f"    if op == {op!r} and not first:\n"
        "        first.append(op)\n"
        f"        pathlib.Path({str(base / 'paused')!r}).touch()\n"
        f"        time.sleep({seconds!r})\n"
        "    return out\n"
        "connection.Connection.call = paused\n")


def child_held_after(env: dict[str, str], base: Path, op: str, key: str, seconds: float = 60.0) -> dict[str, str]:
    """``env`` for a daemon whose children hold ``seconds`` (touching ``base/held`` as they begin)
    after the first answer to their ``op`` whose ``key`` is not empty (a ``sitecustomize`` in
    ``base`` wraps ``child.channel.Channel.call``; once ``held`` exists no child holds again): a
    test kills the daemon in that window, between what a child was told and what it does with it."""
    return _with_sitecustomize(env, base,
        "import pathlib, time\n"
        f"held = pathlib.Path({str(base / 'held')!r})\n"
        "try:\n"
        "    from child import channel\n"
        "except ImportError:\n"
        "    channel = None\n"
        "if channel is not None:\n"
        "    call = channel.Channel.call\n"
        "    def holding(self, op, /, timeout=30.0, **args):\n"
        "        out = call(self, op, timeout, **args)\n"
        f"        if op == {op!r} and isinstance(out, dict) and out.get({key!r}) and not held.exists():\n"
        "            held.touch()\n"
        f"            time.sleep({seconds!r})\n"
        "        return out\n"
        "    channel.Channel.call = holding\n")


def _with_sitecustomize(env: dict[str, str], base: Path, code: str) -> dict[str, str]:
    """``env`` whose Pythons run ``code`` as they start (``base/sitecustomize.py``); ``PYTHONPATH``:
    ``base``, then ``env``'s (else this process's)."""
    (base / "sitecustomize.py").write_text(code)
    path = env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, (str(base), path)))}


def command_line(proc: psutil.Process) -> str:
    """``proc``'s command line as one string; ``""`` once it has exited (a zombie not yet reaped, or
    gone): a process can end between being listed and being read."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return ""


def process_name(proc: psutil.Process) -> str:
    """``proc``'s name; ``""`` once it has exited (as :func:`command_line`)."""
    try:
        return proc.name()
    except (psutil.Error, OSError):
        return ""


def processes_with_env(key: str, value: str) -> list[psutil.Process]:
    """Every live (non-zombie) process whose environment has ``key=value`` (read raw from
    ``/proc/PID/environ``: a process that retitled itself may have blanked its first entries,
    which makes ``psutil.Process.environ`` return nothing)."""
    entry = f"{key}={value}".encode()
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if entry in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0"):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


class DaemonProc:
    """One hermesd under test.  ``config`` is written to ``HERMES_HOME/config.yaml``."""

    def __init__(self, base: Path, config: dict[str, Any] | None = None, env: dict[str, str] | None = None):
        self.base = base
        self.home = base / "home"
        self.runtime = base / "run"
        self.work = base / "work"
        for d in (self.home, self.work):
            d.mkdir(parents=True, exist_ok=True)
        cfg = {"provider": "scripted", "supervisor": {"interrupt_grace_seconds": 0.5, "stop_timeout_seconds": 5}}
        for key, value in (config or {}).items():
            if isinstance(value, dict) and isinstance(cfg.get(key), dict):
                cfg[key] = {**cfg[key], **value}
            else:
                cfg[key] = value
        if START_METHOD and "start_method" not in cfg["supervisor"]:
            cfg["supervisor"] = {**cfg["supervisor"], "start_method": START_METHOD}
        self.config = cfg
        (self.home / "config.yaml").write_text(yaml.safe_dump(cfg))
        self.env = {**os.environ, "HERMES_HOME": str(self.home), "HERMES_RUNTIME_DIR": str(self.runtime),
                    **(env or {})}
        for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
                    "NOTIFY_SOCKET", "WATCHDOG_USEC"):
            if key not in (env or {}):
                self.env.pop(key, None)
        self.proc: subprocess.Popen | None = None
        self.supervisor_id = str((self.home / "state.db").resolve())
        self.log_path = base / "hermesd.log"
        self.wrapper: list[str] = []  # a command line the daemon's is appended to (e.g. entering a cgroup first)

    def start(self, timeout: float = 15.0) -> "DaemonProc":
        """Start the daemon and wait until it answers ``hello``."""
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([*self.wrapper, sys.executable, "-m", "hermesd.cli", "run"], env=self.env,
                                     cwd=str(self.work), stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"hermesd exited with {self.proc.returncode}:\n{self.log()}")
            try:
                return bool(self.conn(timeout=0.5).call("hello"))
            except ClientError:
                return False

        wait_for(up, timeout, 0.05, "hermesd to answer hello")
        return self

    def log(self) -> str:
        """The daemon's own stderr so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def conn(self, timeout: float = 10.0) -> Connection:
        """A fresh in-process client connection."""
        return Connection(self.runtime, timeout=timeout)

    def call(self, op: str, **args: Any) -> Any:
        """One request on a fresh connection."""
        c = self.conn()
        try:
            return c.call(op, **args)
        finally:
            c.close()

    def ctl(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60.0,
            input_text: str | None = None) -> subprocess.CompletedProcess:
        """Run ``hermesctl ARGS`` as a real process (text output; ``input_text`` on its stdin)."""
        return subprocess.run([sys.executable, "-m", "client", *args], env={**self.env, **(env or {})},
                              cwd=str(self.work), capture_output=True, text=True, timeout=timeout,
                              input=input_text, stdin=None if input_text is not None else subprocess.DEVNULL)

    def delegate(self, goal: str = "test goal", **args: Any) -> dict[str, Any]:
        """``delegate`` with the test work directory as cwd."""
        args.setdefault("cwd", str(self.work))
        return self.call("delegate", goal=goal, **args)

    def wait_job(self, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Block until the job is terminal; returns its record."""
        answer = self.conn(timeout=timeout + 5).call("wait", timeout + 5, id=job_id, timeout=timeout)
        assert answer["done"], f"job {job_id} still {answer['job']['status']} after {timeout}s"
        return answer["job"]

    def children(self) -> list[psutil.Process]:
        """Live processes started for this daemon (children and their descendants)."""
        return processes_with_env("HERMES_SUPERVISOR", self.supervisor_id)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM the daemon and wait for it; returns its exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill9(self) -> None:
        """``kill -9`` the daemon and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def cleanup(self) -> None:
        """End everything this daemon started, whatever state the test left it in."""
        try:
            self.stop(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill9()
        for proc in self.children():
            try:
                proc.kill()
            except psutil.Error:
                pass
