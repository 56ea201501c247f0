"""The soak's faults, each injected at a random moment of a cycle (:func:`schedule`).

* ``kill9`` — ``kill -9`` of hermesd, then a start (its children die with it: the new daemon resumes them);
* ``sigterm`` — a graceful stop, then a start;
* ``child`` — ``kill -9`` of a random child (``hermes-child JOB …``);
* ``zygote`` — ``kill -9`` of the warm-start zygote (``hermes-zygote``);
* ``provider`` — the model answering 429, 500 or 529, or breaking its streams, for a few seconds
  (and until it refused a few requests);
* ``disk`` — ``HERMES_HOME``'s file system (a small tmpfs, mounted by the soak as root) full for a few
  seconds: a ballast file takes every free byte, then is removed;
* ``dblock`` — ``state.db`` locked by another process's connection (``BEGIN IMMEDIATE``) for a few seconds;
* ``reload`` — the config file changed (``delegation.max_async_children`` and ``supervisor.max_children``
  moved) and ``reload``;
* ``disconnect`` — a client sends ``delegate`` (with an idempotency key) and goes away before the answer,
  then asks again with the same key, as a client that lost its connection does.

Each fault returns what it did, in one line, for the run's log.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import psutil
import yaml
import zmq

from bench.soak.brain import FAULTS, tag
from hermesd import protocol
from tests.harness import command_line, wait_for

PROVIDER_LEAST_REFUSED, PROVIDER_MOST_SECONDS = 3, 15.0
"""A provider fault lasts its drawn 1-4 s and until it refused this many requests (children starting
cold, or resuming, may call nothing for seconds), but never longer than this."""
ZYGOTE_WAIT_SECONDS = 20.0
"""How long the zygote fault waits for a warm zygote (one is warmed up after each start)."""
KINDS = ("kill9", "sigterm", "child", "zygote", "provider", "disk", "dblock", "reload", "disconnect")


class Faults:
    """The faults against one soak run (``soak``: a :class:`bench.soak.Soak`); ``injected`` counts them
    by kind, ``restarts`` holds the monotonic time of each daemon restart, ``killed`` the jobs whose
    child was killed (by job id)."""

    def __init__(self, soak: Any):
        self.soak = soak
        self.injected: Counter = Counter()
        self.restarts: list[float] = []
        self.killed: Counter = Counter()
        self.in_flight_killed = 0
        """Jobs running in a process killed with ``kill -9`` (a child, or the daemon with all of them)."""
        self.lock = threading.Lock()  # one daemon restart at a time
        self.disk_full = soak.tmpfs
        self.deck: list[str] = []

    def inject(self, kind: str, rng: random.Random) -> str:
        """Inject one fault of ``kind``; returns what was done."""
        what = getattr(self, "_" + kind)(rng)
        self.injected[kind] += 1
        return what

    def _restart(self, stop: Callable[[], Any]) -> None:
        d = self.soak.d
        with self.lock:
            stop()
            self.restarts.append(time.monotonic())
            d.start(120.0)

    def _kill9(self, rng: random.Random) -> str:
        pid = self.soak.d.proc.pid
        self.in_flight_killed += self._running()
        self._restart(self.soak.d.kill9)
        return f"kill -9 hermesd {pid}, started {self.soak.d.proc.pid}"

    def _sigterm(self, rng: random.Random) -> str:
        pid = self.soak.d.proc.pid
        self._restart(lambda: self.soak.d.stop(120.0))
        return f"SIGTERM hermesd {pid}, started {self.soak.d.proc.pid}"

    def _running(self, pid: int | None = None) -> int:
        """Jobs running now (of the process ``pid``: a batch items' host runs several); each may lose
        the usage of a reply it read when killed."""
        try:
            jobs = self.soak.d.call("ps")["jobs"]
        except Exception:  # noqa: BLE001 - the daemon is busy or going: count the processes instead
            return len(self._processes("hermes-child"))
        return sum(1 for j in jobs if j.get("status") == "running" and (pid is None or j.get("pid") == pid)) or 1

    def _processes(self, word: str) -> list[tuple[psutil.Process, list[str]]]:
        found, procs = [], {p.pid: p for p in self.soak.d.children()}
        with contextlib.suppress(psutil.Error):
            procs.update({p.pid: p for p in psutil.Process(self.soak.d.proc.pid).children(recursive=True)})
        for proc in procs.values():
            words = command_line(proc).split()
            if words and words[0] == word:
                found.append((proc, words))
        return found

    def _kill_one(self, rng: random.Random, what: str, found: list[tuple[psutil.Process, list[str]]]) -> str:
        """``kill -9`` of one of ``found`` (a random one); returns what was done."""
        if not found:
            return f"kill -9 {what}: none running"
        proc, words = rng.choice(found)
        running = self._running(proc.pid) if what == "child" else 0
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            return f"kill -9 {what} {proc.pid}: gone already"
        if what == "child":
            self.killed[words[1] if len(words) > 1 else "?"] += 1
            self.in_flight_killed += running
        return f"kill -9 {what} {proc.pid} ({' '.join(words[:2])})"

    def _child(self, rng: random.Random) -> str:
        return self._kill_one(rng, "child", self._processes("hermes-child"))

    def _zygote(self, rng: random.Random) -> str:
        def ready() -> list[tuple[psutil.Process, list[str]]]:
            return [(p, w) for p, w in self._processes("hermes-zygote") if len(w) == 1]

        with contextlib.suppress(AssertionError):  # a daemon just started may still be warming it up
            wait_for(ready, ZYGOTE_WAIT_SECONDS, 0.1, "a warm zygote")
        return self._kill_one(rng, "zygote", ready())

    def _provider(self, rng: random.Random) -> str:
        fault, seconds = rng.choice(FAULTS), rng.uniform(1.0, 4.0)
        brain, start = self.soak.brain, time.monotonic()
        before = sum(brain.refused.values())
        brain.fail(fault, PROVIDER_MOST_SECONDS)
        while time.monotonic() - start < PROVIDER_MOST_SECONDS and (
                time.monotonic() - start < seconds or sum(brain.refused.values()) - before < PROVIDER_LEAST_REFUSED):
            time.sleep(0.05)
        brain.fail("", 0.0)
        return (f"provider {fault} for {time.monotonic() - start:.1f}s "
                f"({sum(brain.refused.values()) - before} requests)")

    def _disk(self, rng: random.Random) -> str:
        if not self.disk_full:
            return "disk full: skipped (HERMES_HOME is no tmpfs of the soak's: needs root)"
        seconds = rng.uniform(1.0, 3.0)
        ballast = self.soak.d.home / "ballast"
        try:
            fill(ballast)
            time.sleep(seconds)
        finally:
            ballast.unlink()
        return f"disk full for {seconds:.1f}s"

    def _dblock(self, rng: random.Random) -> str:
        seconds = rng.uniform(1.0, 4.0)
        db = sqlite3.connect(self.soak.d.home / "state.db", timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            time.sleep(seconds)
            db.execute("ROLLBACK")
        finally:
            db.close()
        return f"state.db locked for {seconds:.1f}s"

    def _reload(self, rng: random.Random) -> str:
        path = self.soak.d.home / "config.yaml"
        config = yaml.safe_load(path.read_text())
        value = rng.choice([4, 6, 8])
        config.setdefault("delegation", {})["max_async_children"] = value
        config.setdefault("supervisor", {})["max_children"] = value + 4
        path.write_text(yaml.safe_dump(config))
        answer = self.soak.call("reload")
        return f"reload (max_async_children {value}): {answer.get('reloaded')}"

    def _disconnect(self, rng: random.Random) -> str:
        ident = f"x{self.soak.next_id()}"
        work = self.soak.workload
        args = {"goal": f"soak work {tag('d', ident, 1)}", "background": True, "queue": True,
                "toolsets": ["terminal"], "cwd": str(self.soak.d.work), "idempotency_key": f"soak-{ident}"}
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.connect(f"ipc://{self.soak.d.runtime / 'hermesd.sock'}")
        sock.send(protocol.encode_request("delegate", args)[1])
        time.sleep(rng.uniform(0, 0.02))
        sock.close()  # gone before the answer (or just as it comes)
        item = work._add("d", ident, 1)
        item.id = self.soak.call("delegate", **args)["id"]
        return f"client gone mid-delegate, asked again: {item.id}"


def schedule(faults: Faults, rng: random.Random, count: int, spread: float, log: Callable[[str], None],
             kinds: tuple[str, ...] = KINDS) -> threading.Thread:
    """A thread injecting ``count`` faults at random moments within about ``spread`` seconds; each line
    of what was done goes to ``log``.  The kinds are dealt from ``kinds`` shuffled, dealt again when
    all were (so every kind comes once before any comes twice: 9 faults are one of each).  The draws
    come from ``rng`` before the thread starts, so a seed replays the same faults in the same order."""
    plan = []
    for _ in range(count):
        if not faults.deck:
            faults.deck = rng.sample(list(kinds), len(kinds))
        plan.append((rng.uniform(0, spread / max(1, count)), faults.deck.pop(), random.Random(rng.random())))

    def run() -> None:
        for pause, kind, own in plan:
            time.sleep(pause)
            try:
                log(f"  fault {kind}: {faults.inject(kind, own)}")
            except Exception as exc:  # noqa: BLE001 - the run goes on; the oracle judges the end
                log(f"  fault {kind}: FAILED to inject: {type(exc).__name__}: {exc}")
                faults.soak.problems.append(f"fault {kind} could not be injected: {exc}")

    thread = threading.Thread(target=run, name="soak-faults", daemon=True)
    thread.start()
    return thread


__all__ = ["KINDS", "Faults", "schedule"]


def fill(ballast: Path) -> None:
    """Take every free byte of the file system of ``ballast`` with that file (created 0600; remove it
    to free the space again): fallocate(2) what ``statvfs`` says is free, then 4 KiB writes until ENOSPC."""
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        stat = os.fstatvfs(fd)
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, max(1, stat.f_bavail * stat.f_frsize))
        os.lseek(fd, 0, os.SEEK_END)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    finally:
        os.close(fd)
