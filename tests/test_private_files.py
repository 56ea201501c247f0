"""Private files under any umask: every file hermesd creates under HERMES_HOME has its final
mode from its creation (``hermesd.private``), sampled while a daemon started under
``umask 000`` starts, runs jobs and stops."""

from __future__ import annotations

import pytest
import os
import stat
import threading
from pathlib import Path

from tests.harness import wait_for

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)


class Sampler(threading.Thread):
    """Walks ``root`` over and over, keeping every mode each path was seen with."""

    def __init__(self, root: Path):
        super().__init__(daemon=True)
        self.root, self.seen, self.done = root, {}, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for folder, dirs, files in os.walk(self.root):
                for name in dirs + files:
                    path = os.path.join(folder, name)
                    try:
                        mode = os.lstat(path).st_mode
                    except FileNotFoundError:
                        continue
                    self.seen.setdefault(path, set()).add(mode)


def test_everything_under_hermes_home_is_private_from_its_creation_under_umask_000(make_daemon):
    d = make_daemon(config={"hooks": {"on_job_end": "cat > /dev/null"}}, start=False)
    os.chmod(d.home, 0o777)  # ours but open to others: fixed at start
    (d.home / "jobs").mkdir(mode=0o777)
    os.chmod(d.home / "jobs", 0o777)
    before = {str(p) for p in d.home.rglob("*")}
    sampler = Sampler(d.home)
    sampler.start()
    old = os.umask(0)
    try:
        d.start()
    finally:
        os.umask(old)
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": "echo x > note.txt"}}]}, {"text": "done"}]
    ids = [d.delegate(f"job {n}", script=script, toolsets=["terminal"])["id"] for n in range(2)]
    for job_id in ids:
        assert d.wait_job(job_id)["status"] == "completed"
    wait_for(lambda: all((d.home / "jobs" / i / "hook.log").exists() for i in ids), what="the hooks' logs")
    assert d.stop() == 0
    sampler.done.set()
    sampler.join(10)
    assert stat.S_IMODE(os.stat(d.home).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d.home / "jobs").st_mode) == 0o700
    created = {p: modes for p, modes in sampler.seen.items() if p not in before}
    names = {os.path.basename(p) for p in created}
    assert {"state.db", "state.db-wal", "hermesd.pid", "log", "trajectory.json", "hook.log"} <= names, names
    loose = {p: sorted(oct(stat.S_IMODE(m)) for m in modes) for p, modes in created.items()
             if any(stat.S_IMODE(m) != (0o700 if stat.S_ISDIR(m) else 0o600) for m in modes)}
    assert not loose, loose
    # the tools write with the user's umask, in the user's directory
    assert stat.S_IMODE(os.stat(d.work / "note.txt").st_mode) == 0o666
