"""Per-child resource limits: rlimits on the child and all it starts (cold and warm),
cgroup v2 where delegated (a fake cgroupfs here), and a child killed by one ends
failed with the limit named."""

from __future__ import annotations

import logging
import os
import re
import signal

import pytest

from hermesd.system import limits
from tests.chaos.helpers import delegate_warm, warm_on_start
from tests.harness import DaemonProc

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)

PROBE = ("cat /proc/$PPID/limits > parent_limits.txt; cat /proc/self/limits > own_limits.txt; "
         "tr '\\0' '\\n' < /proc/$PPID/environ | grep -c '^HERMES_ZYGOTE=' > warm.txt; "
         "python3 -c 'while 1: pass'; echo $? > spin_rc.txt")


def _limit(text: str, name: str) -> tuple[str, str]:
    line = next(x for x in text.splitlines() if x.startswith(name))
    soft, hard = re.split(r"\s{2,}", line.strip())[1:3]
    return soft, hard


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_rlimits_reach_the_child_and_its_commands(make_daemon, warm):
    config = {"child_limits": {"memory_mb": 4096, "cpu_seconds": 30, "open_files": 512},
              "supervisor": {"start_method": "forkserver" if warm else "spawn"}}
    d = make_daemon(config=config, start=False)
    (warm_on_start(d) if warm else d).start(timeout=120)
    rec = (delegate_warm if warm else DaemonProc.delegate)(d, "probe", toolsets=["terminal"], cpu_limit_seconds=1, timeout_seconds=120,
                     script=[{"tool_calls": [{"name": "terminal", "input": {"command": PROBE, "timeout": 60}}]},
                             {"text": "done"}])
    assert d.wait_job(rec["id"], 120)["status"] == "completed"
    for name in ("parent_limits.txt", "own_limits.txt"):
        text = (d.work / name).read_text()
        assert _limit(text, "Max cpu time") == ("1", str(1 + limits.CPU_GRACE)), text
        assert _limit(text, "Max address space") == ("unlimited",) * 2  # memory is watched instead
        assert _limit(text, "Max open files") == ("512", "512")
    assert (d.work / "spin_rc.txt").read_text().strip() == str(128 + signal.SIGXCPU), "a spinning command got SIGXCPU"
    assert (d.work / "warm.txt").read_text().strip() == ("1" if warm else "0"), "started the way the test meant"


def test_a_limit_above_the_config_is_refused(make_daemon):
    d = make_daemon(config={"child_limits": {"memory_mb": 512}})
    out = d.ctl("delegate", "--background", "--memory-limit", "1024", "g")
    assert out.returncode == 2 and "memory_limit_mb" in out.stderr and "Traceback" not in out.stderr


def _allocate(mib: int) -> list[dict]:
    command = f"python3 -c 'import time; x = bytearray({mib} << 20); time.sleep(1.5)' && echo held"
    return [{"tool_calls": [{"name": "terminal", "input": {"command": command, "timeout": 60}}]}, {"text": "done"}]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_memory_limit_without_cgroups_holds_what_the_job_really_uses(make_daemon, warm):
    d = make_daemon(config={"child_limits": {"cgroup": False},
                            "supervisor": {"start_method": "forkserver" if warm else "spawn"}}, start=False)
    (warm_on_start(d) if warm else d).start(timeout=120)
    start = delegate_warm if warm else DaemonProc.delegate
    under = d.wait_job(start(d, "under", toolsets=["terminal"], memory_limit_mb=256, script=_allocate(32))["id"])
    assert under["status"] == "completed", under
    over = d.wait_job(start(d, "over", toolsets=["terminal"], memory_limit_mb=256, script=_allocate(600))["id"])
    assert over["status"] == "failed" and over["exit_reason"] == "resource_limit", over
    assert re.match(r"memory limit 256 MiB exceeded: its processes used \d+ MiB \(killed by hermesd\)", over["error"])
    assert not d.children()


def test_a_child_killed_by_sigxcpu_fails_with_the_limit_named(daemon):
    rec = daemon.delegate("cpu", toolsets=["terminal"], cpu_limit_seconds=7,
                          script=[{"tool_calls": [{"name": "terminal", "input": {"command": "kill -XCPU $PPID"}}]},
                                  {"text": "never"}])
    job = daemon.wait_job(rec["id"])
    assert job["status"] == "failed" and job["error"].startswith("CPU time limit 7 s exceeded (SIGXCPU)"), job
    assert job["exit_reason"] == "resource_limit"


def fake_cgroupfs(tmp_path, controllers="cpu memory pids"):
    """A directory shaped like a delegated cgroup v2 (files the kernel would make)."""
    base = tmp_path / "cg" / "system.slice" / "hermesd.service"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.subtree_control").write_text("")
    (base / "cgroup.procs").write_text("")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/hermesd.service\n")
    return tmp_path / "cg", proc, base


def test_cgroups_detect_set_limits_and_name_an_oom_kill(tmp_path):
    mount, proc, base = fake_cgroupfs(tmp_path)
    cg = limits.Cgroups.detect(mount, proc)
    assert cg is not None and cg.base == base
    assert (base / "hermesd" / "cgroup.procs").read_text().strip() == str(os.getpid())
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids"
    lim = limits.Limits(memory_mb=256, processes=64)
    (base / "job-x").mkdir()
    (base / "job-x" / "memory.swap.max").write_text("max")
    assert cg.attach("x", 4242, lim)
    assert (base / "job-x" / "memory.max").read_text() == str(256 << 20)
    assert (base / "job-x" / "memory.swap.max").read_text() == "0"
    assert (base / "job-x" / "pids.max").read_text() == "64"
    assert (base / "job-x" / "cgroup.procs").read_text().strip() == "4242"
    assert not cg.oom_killed("x")
    (base / "job-x" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cg.oom_killed("x")
    assert limits.exceeded(lim, -signal.SIGKILL, True).startswith("memory limit 256 MiB exceeded")
    assert limits.exceeded(lim, -signal.SIGKILL, False) is None


def test_cgroups_skip_cleanly_without_delegation(tmp_path, caplog):
    caplog.set_level(logging.INFO, "hermesd")
    mount, proc, base = fake_cgroupfs(tmp_path, controllers="cpu")
    assert limits.Cgroups.detect(mount, proc) is None
    assert "controllers memory, pids not delegated" in caplog.text
    proc.write_text("4:memory:/x\n")
    assert limits.Cgroups.detect(mount, proc) is None
    proc.write_text("0::/\n")
    assert limits.Cgroups.detect(mount, proc) is None and "root cgroup" in caplog.text
