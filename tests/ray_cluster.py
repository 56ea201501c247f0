"""A real Ray cluster on this machine for tests and benchmarks: a head and worker nodes,
each a ``ray start --block`` process of its own.

Scoped so that it touches nothing of anyone else's: its own ``--temp-dir``, free ports
picked for every listening service, and every process it starts (``ray start``,
``gcs_server``, ``raylet``, the Ray workers and whatever they start) carries
``HERMES_TEST_RAY=<tag>-<node>`` in its environment.  :meth:`kill_node` and
:meth:`stop` kill exactly the processes with that tag (never ``ray stop``, which
would end every Ray on the machine).  The head has no CPUs, so items run on the
worker nodes only; the dashboard is off and object stores are small (2 cores).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.harness import processes_with_env, wait_for

RAY_CLI = ("import sys; from child.ray_driver import keep_loopback; keep_loopback(); "
           "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; sys.exit(main())")
"""``ray`` (the CLI) with loopback kept as given (:func:`child.ray_driver.keep_loopback`): every
node, its services and its connections on 127.0.0.1, never the machine's other interfaces."""
OBJECT_STORE_BYTES = 80 * 1024 * 1024
TAG_ENV = "HERMES_TEST_RAY"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayCluster:
    """``workers`` worker nodes of ``cpus`` logical CPUs each, plus a head with none."""

    def __init__(self, workers: int = 2, cpus: int = 2):
        self.tag = f"hermes-test-{secrets.token_hex(4)}"
        self.temp = Path(tempfile.mkdtemp(prefix="hrt-", dir="/tmp"))  # short: Ray's socket paths must fit
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.cpus, self.nodes = cpus, {}
        self.names = ["head"] + [f"worker{i + 1}" for i in range(workers)]

    def _start_node(self, name: str) -> subprocess.Popen:
        argv = [sys.executable, "-c", RAY_CLI, "start", "--block", "--disable-usage-stats", "--node-ip-address", "127.0.0.1",
                "--object-store-memory", str(OBJECT_STORE_BYTES),
                "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                "--metrics-export-port", str(free_port()), "--runtime-env-agent-port", str(free_port()),
                "--min-worker-port", "0", "--max-worker-port", "0"]
        if name == "head":
            argv += ["--head", "--port", str(self.port), "--num-cpus", "0", "--include-dashboard=false",
                     "--temp-dir", str(self.temp)]
        else:
            argv += ["--address", self.address, "--num-cpus", str(self.cpus)]
        scratch = self.temp / "tmp"  # the items' scratch directories too go where stop() removes them
        scratch.mkdir(exist_ok=True)
        env = {**os.environ, TAG_ENV: f"{self.tag}-{name}", "RAY_USAGE_STATS_ENABLED": "0", "TMPDIR": str(scratch)}
        for key in ("RAY_ADDRESS", "HERMES_DAEMON_PID", "HERMES_SUPERVISOR"):
            env.pop(key, None)
        with open(self.temp / f"{name}.log", "ab") as log:
            return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def alive_nodes(self) -> int:
        """Live nodes as the cluster sees them (asked in a separate process: tests never import ray)."""
        code = ("import ray; from child.ray_driver import keep_loopback; keep_loopback(); "
                "ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
                "print('ALIVE', sum(1 for n in ray.nodes() if n['Alive']))" % self.address)
        try:
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                                 env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
        except subprocess.TimeoutExpired:
            return 0
        counts = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("ALIVE ")]
        return int(counts[-1]) if out.returncode == 0 and counts else 0

    def start(self, timeout: float = 120.0) -> "RayCluster":
        """Start the head, then the workers; returns once every node is alive."""
        try:
            for count, name in enumerate(self.names, start=1):  # one at a time: two at once may collide
                self._bring_up(name, count, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _bring_up(self, name: str, count: int, timeout: float, attempts: int = 3) -> None:
        """Start node ``name`` until the cluster has ``count`` live nodes; a node whose start
        fails (Ray gives a raylet 30 s to register, too little on a loaded machine) is killed
        and started again, at most ``attempts`` times."""
        for attempt in range(1, attempts + 1):
            self.nodes[name] = self._start_node(name)
            try:
                if name == "head":
                    wait_for(self._listening, timeout, 0.2, "the Ray head to listen")
                wait_for(lambda: self._listening() and self.alive_nodes() >= count, timeout, 1.0,
                         f"Ray node {name} to join")
                return
            except AssertionError:
                if attempt == attempts:
                    raise
                self.kill_node(name)

    def _listening(self) -> bool:
        for name, proc in self.nodes.items():
            if proc.poll() is not None:
                raise AssertionError(f"ray {name} exited {proc.returncode}: "
                                     f"{(self.temp / f'{name}.log').read_text(errors='replace')[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def processes(self, name: str | None = None) -> list[psutil.Process]:
        """This cluster's live processes (of node ``name`` only, when given): those with its tag
        and all their descendants (Ray's agents retitle themselves, which may wipe the tag out of
        their ``/proc/PID/environ``; they are the raylet's children)."""
        found: dict[int, psutil.Process] = {}
        for n in [name] if name else self.names:
            roots = processes_with_env(TAG_ENV, f"{self.tag}-{n}")
            if n in self.nodes and self.nodes[n].poll() is None:
                roots.append(psutil.Process(self.nodes[n].pid))
            for root in roots:
                try:
                    family = [root, *root.children(recursive=True)]
                except psutil.Error:
                    family = [root]
                found.update((p.pid, p) for p in family)
        return list(found.values())

    def outside_connections(self, *pids: int) -> list[str]:
        """Sockets of this cluster's processes (and of ``pids``) bound or connected to an address
        that is not loopback (unspecified ``0.0.0.0``/``::`` listeners aside), one line each."""
        procs = self.processes()
        for pid in pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                continue
        found = []
        for proc in procs:
            try:
                conns = proc.net_connections(kind="inet")
            except psutil.Error:
                continue
            for conn in conns:
                for addr in (conn.laddr, conn.raddr):
                    if addr and not _loopback_or_unspecified(addr.ip):
                        found.append(f"pid {proc.pid}: {conn.laddr} -> {conn.raddr or '-'} ({conn.status})")
        return found

    def kill_node(self, name: str) -> None:
        """``kill -9`` every process of node ``name`` at once (a machine lost)."""
        for proc in self.processes(name):
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        try:
            self.nodes[name].wait(10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self) -> None:
        """Kill every process of this cluster and remove its temporary directory."""
        for _ in range(3):
            procs = self.processes()
            for proc in procs:
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.Error:
                    pass
            if not procs:
                break
            time.sleep(0.2)
        for proc in self.nodes.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.temp, ignore_errors=True)


def _loopback_or_unspecified(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    addr = getattr(addr, "ipv4_mapped", None) or addr
    return addr.is_loopback or addr.is_unspecified
