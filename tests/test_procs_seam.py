"""Both sides of the stop races, through the OS seam of procs.py (no real processes)."""

from __future__ import annotations

import signal

from hermesd.procs import ProcessManager


class FakeHandle:
    def __init__(self, pid):
        self.pid = pid
        self.returncode = None


class FakeOS:
    """Records signals; processes 'exit' when the test says so."""

    def __init__(self):
        self.signals = []
        self.exited = []
        self.alive = set()
        self.next_pid = 1000

    def spawn(self, argv, *, cwd, env, log_path):
        self.next_pid += 1
        self.alive.add(self.next_pid)
        self.env = env
        return FakeHandle(self.next_pid)

    def kill(self, pid, sig):
        self.signals.append(("kill", pid, sig))
        return pid in self.alive

    def killpg(self, pgid, sig):
        self.signals.append(("killpg", pgid, sig))
        return pgid in self.alive

    def reap(self):
        out, self.exited = self.exited, []
        return out

    def descendants_with_env(self, key, value, skip=frozenset()):
        return []

    def start_time(self, pid):
        return 0.0


class FakeLoop:
    def __init__(self):
        self.timers = []

    def call_later(self, delay, fn, *args):
        timer = Timer(delay, fn, args)
        self.timers.append(timer)
        return timer

    def fire_all(self):
        for timer in sorted(self.timers, key=lambda t: t.delay):
            if not timer.cancelled:
                timer.fn(*timer.args)


class Timer:
    def __init__(self, delay, fn, args):
        self.delay, self.fn, self.args, self.cancelled = delay, fn, args, False

    def cancel(self):
        self.cancelled = True


def _manager():
    fake, loop, exits = FakeOS(), FakeLoop(), []
    pm = ProcessManager(loop, exits.append, os_seam=fake, grace=1.0, supervisor_id="sup")
    return pm, fake, loop, exits


def test_stop_escalates_sigint_sigterm_sigkill(tmp_path):
    pm, fake, loop, exits = _manager()
    child = pm.start("j1", cwd=str(tmp_path), log_path=tmp_path / "log", env={"NOTIFY_SOCKET": "/x"})
    assert "NOTIFY_SOCKET" not in fake.env and fake.env["HERMES_JOB_ID"] == "j1"
    pm.stop("j1", "cancel")
    loop.fire_all()
    assert fake.signals == [("kill", child.pid, signal.SIGINT), ("killpg", child.pid, signal.SIGTERM),
                            ("killpg", child.pid, signal.SIGKILL)]


def test_child_exiting_during_stop_cancels_escalation(tmp_path):
    pm, fake, loop, exits = _manager()
    child = pm.start("j1", cwd=str(tmp_path), log_path=tmp_path / "log", env={})
    pm.stop("j1", "cancel")
    fake.alive.discard(child.pid)
    fake.exited.append((child.pid, 0))
    pm.reap()
    assert exits and exits[0].stop_reason == "cancel" and exits[0].returncode == 0
    before = list(fake.signals)
    loop.fire_all()
    assert fake.signals == before  # timers were cancelled: no signal to a reused pid


def test_kill_finding_process_gone_is_normal(tmp_path):
    pm, fake, loop, exits = _manager()
    child = pm.start("j1", cwd=str(tmp_path), log_path=tmp_path / "log", env={})
    fake.alive.discard(child.pid)  # exited, not yet reaped: ESRCH on every signal
    assert pm.stop("j1", "shutdown") is True
    loop.fire_all()
    fake.exited.append((child.pid, -9))
    pm.reap()
    assert exits[0].returncode == -9 and "j1" not in pm.children


def test_unknown_pid_reaped_silently(tmp_path):
    pm, fake, loop, exits = _manager()
    fake.exited.append((4242, 0))  # an orphaned grandchild re-parented to the subreaper
    pm.reap()
    assert exits == []
