"""How the zygote forks a spare (``child.spare``): as its own sibling, or by a double fork.

Each case runs in a process of its own (the "zygote" below), as the real zygote
does: a raw ``clone(2)`` is exercised on this machine's kernel, never assumed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.harness import ROOT, wait_for

SIBLING = textwrap.dedent("""
    import os, sys, random
    from child.spare import fork_beside
    before = random.random()
    pid = fork_beside()
    if pid == 0:  # the sibling: report who it is, then exit with a status its parent can read
        os.write(1, f"child {os.getpid()} ppid {os.getppid()} random {random.random() != before}\\n".encode())
        os._exit(7)
    os.write(1, f"zygote {os.getpid()} forked {pid}\\n".encode())
""")


def _zygote(script: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_fork_beside_makes_the_callers_parent_the_childs_parent():
    zygote = _zygote(SIBLING)
    out, _ = zygote.communicate(timeout=60)
    assert zygote.returncode == 0, out
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    child = int(lines["zygote"].split()[-1])
    # the sibling is this test's child, not the zygote's: this process reaps it and reads its status
    reaped, status = os.waitpid(child, 0)
    assert reaped == child and os.waitstatus_to_exitcode(status) == 7
    pid, _, ppid, _, reseeded = lines["child"].split()
    assert int(pid) == child and int(ppid) == os.getpid()
    assert reseeded == "True", "os.register_at_fork callbacks (random's reseed) ran in the child"


REFUSED = textwrap.dedent("""
    import os, socket, sys
    import child.spare as spare
    spare._SYS_CLONE = None  # as on an architecture whose clone number is not wired
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    forked = spare.Spare.fork(theirs)
    print(forked.pid, spare._beside_refused, flush=True)
    sys.stdin.readline()  # the test looked at the spare
    os.close(forked.cmd)  # its end of file: the spare exits
""")


def test_a_refused_clone_falls_back_to_the_double_fork():
    zygote = subprocess.Popen([sys.executable, "-c", REFUSED], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        pid_text, refused = zygote.stdout.readline().split()
        pid = int(pid_text)
        assert refused == "True"
        # the intermediate exited: the spare is nobody's child of the zygote any more
        wait_for(lambda: _ppid(pid) not in (None, zygote.pid), timeout=10, what="the spare re-parented")
        zygote.communicate("\n", timeout=30)
        wait_for(lambda: _ppid(pid) is None or _state(pid) == "Z", timeout=10, what="the spare gone at end of file")
    finally:
        if zygote.poll() is None:
            zygote.kill()
            zygote.wait()


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None

