"""hermesd beside circus and supervisord: every figure of the comparison in bench/README.md in one run, as ratios, goals met or not.

The peers are installed from PyPI into a virtual environment of this
benchmark's own (``--venv``, default ``$HERMES_BENCH_PEERS`` or
``~/.cache/hermesd-bench/peers``; made with ``pip install circus supervisor``
on first use, reused after).  One ``circusd`` and one ``supervisord`` run in
temporary directories on unix sockets, each with one stopped program
``probe`` (``/bin/sleep 3600``), beside one hermesd with the default
configuration (scripted provider; the default start method, forkserver,
measured once its zygote is warm and two spares are held).  All three are up
together while the figures are taken, so they share the machine's load.

| figure | how |
|---|---|
| ``status`` from the command line | ``circusctl status``, ``supervisorctl status``, ``hermesctl status`` as whole new processes, interleaved, ``--runs`` each, p50; floors ``python -c pass`` and ``python -S -c pass`` in the same rounds |
| control round trip p50, one connection | ``--requests`` sequential status requests: circus's ZeroMQ client, supervisord's XML-RPC, :class:`client.connection.Connection` (:mod:`bench.peer_driver`) |
| requests/s, one client | status requests back to back for ``--seconds``; requests refused (busy, timeout) counted |
| request → new process | the peer's start of ``probe`` (reply once spawned, ``--starts`` times) vs hermesd's warm start to the child's hello (:func:`bench.bench_spawn.hello_latency`, 0.1 s apart); floors: ``fork()``+``_exit``+``waitpid`` and ``posix_spawn`` of ``/bin/true`` |
| daemon RSS idle | each daemon's resident set 2 s after it is ready, before any request is measured (hermesd's zygote and spares are processes of their own, not counted) |
| batch overhead at 16 workers | hermesd only: :func:`bench.bench_warm_start.batch_overhead` (``--prompts`` prompts of 1 s, default configuration) |

Every process started is ended, also when a step fails (the peers' own
children included).  Usage::

    .venv/bin/python bench/bench_peers.py [--venv DIR] [--runs 20] [--requests 2000] [--seconds 3]
        [--starts 40] [--prompts 1024] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_control, bench_spawn, bench_warm_start, peer_driver  # noqa: E402
from bench.common import daemon, machine, timed_process, wait_for  # noqa: E402
from client.connection import ClientError  # noqa: E402
from hermesd import __version__  # noqa: E402
from hermesd.protocol import ProtocolError  # noqa: E402

PEERS = ("circus", "supervisord")
DEFAULT_VENV = Path(os.environ.get("HERMES_BENCH_PEERS") or Path.home() / ".cache" / "hermesd-bench" / "peers")
MB = 2**20
BUSY = ("capacity_reached", "shutting_down", "timeout")
"""Error codes that mean a request was refused or dropped, not answered."""

CIRCUS_INI = """\
[circus]
endpoint = ipc://{tmp}/circus.sock
pubsub_endpoint = ipc://{tmp}/pubsub.sock
statsd = False

[watcher:probe]
cmd = /bin/sleep 3600
autostart = False
numprocesses = 1
respawn = False
"""
SUPERVISORD_CONF = """\
[unix_http_server]
file = {tmp}/supervisor.sock

[supervisord]
nodaemon = true
logfile = {tmp}/supervisord.log
pidfile = {tmp}/supervisord.pid
childlogdir = {tmp}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl = unix://{tmp}/supervisor.sock

[program:probe]
command = /bin/sleep 3600
autostart = false
autorestart = false
startsecs = 0
"""


def peers_venv(path: Path) -> Path:
    """The ``bin`` directory of the peers' virtual environment at ``path``, made and
    filled from PyPI (``pip install circus supervisor``) when it lacks them.
    Raises ``subprocess.CalledProcessError`` when pip fails."""
    python = path / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", "import circus, supervisor"],
                                          capture_output=True).returncode == 0:
        return path / "bin"
    print(f"  (installing circus and supervisor from PyPI into {path})", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "circus", "supervisor"], check=True)
    return path / "bin"


def peer_versions(bin_dir: Path) -> dict[str, str]:
    """``{"circus": version, "supervisor": version}`` as installed in the peers' environment."""
    code = ("import json, importlib.metadata as m; "
            "print(json.dumps({n: m.version(n) for n in ('circus', 'supervisor')}))")
    return json.loads(subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True,
                                     check=True).stdout)


def _end(proc: subprocess.Popen, kids: list[psutil.Process]) -> None:
    """Stop a peer daemon (SIGTERM, SIGKILL after 10 s) and every child it had."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    for kid in kids:
        with contextlib.suppress(psutil.Error):
            kid.kill()


@contextlib.contextmanager
def peer(kind: str, bin_dir: Path) -> Iterator[dict[str, Any]]:
    """A running ``circusd`` or ``supervisord`` (``kind``) in a temporary directory:
    ``{"kind", "pid", "endpoint", "ctl": argv of its status command}``; ended on exit."""
    with tempfile.TemporaryDirectory(prefix=f"hermes-bench-{kind}-") as tmp:
        if kind == "circus":
            conf = Path(tmp, "circus.ini")
            conf.write_text(CIRCUS_INI.format(tmp=tmp))
            endpoint = f"ipc://{tmp}/circus.sock"
            argv = [str(bin_dir / "circusd"), str(conf)]
            ctl = [str(bin_dir / "circusctl"), "--endpoint", endpoint, "status"]
        else:
            conf = Path(tmp, "supervisord.conf")
            conf.write_text(SUPERVISORD_CONF.format(tmp=tmp))
            endpoint = f"unix://{tmp}/supervisor.sock"
            argv = [str(bin_dir / "supervisord"), "-c", str(conf)]
            ctl = [str(bin_dir / "supervisorctl"), "-c", str(conf), "status"]
        with open(Path(tmp, "daemon.log"), "wb") as log:
            proc = subprocess.Popen(argv, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        kids: list[psutil.Process] = []
        try:
            def ready() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"{kind} exited ({proc.returncode}): {Path(tmp, 'daemon.log').read_text()}")
                return "probe" in subprocess.run(ctl, capture_output=True, text=True).stdout

            wait_for(ready, 60, 0.1, f"{kind} to answer")
            info = {"kind": kind, "pid": proc.pid, "endpoint": endpoint, "ctl": ctl, "kids": kids}
            yield info
        finally:
            with contextlib.suppress(psutil.Error):
                kids.extend(psutil.Process(proc.pid).children(recursive=True))
            _end(proc, kids)


def rss(pid: int) -> float:
    """Resident set of process ``pid``, MiB."""
    return psutil.Process(pid).memory_info().rss / MB


def whole_process(commands: dict[str, tuple[list[str], dict[str, str] | None]],
                  runs: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each command ``{name: (argv, env)}`` run to its end as a new process, ``runs``
    rounds of all of them one after the other (so they share the load): its wall-clock
    seconds and its CPU seconds (user + system, ``wait4``; on a loaded machine the CPU
    time still compares the commands where the wall time mostly measures the wait for
    a core).  A command that fails is an error (supervisorctl's 3, "a program is not
    running", is not)."""
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs + 1):
        for name, (argv, env) in commands.items():
            seconds, cpu_seconds, code, err = timed_process(argv, env)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)
            if code not in (0, 3):
                raise RuntimeError(f"{name} failed ({code}): {err[-500:]}")
    # the first round warms the page cache
    return {n: v[1:] for n, v in wall.items()}, {n: v[1:] for n, v in cpu.items()}


def _busy(exc: BaseException) -> bool:
    return isinstance(exc, (ProtocolError, ClientError)) and exc.code in BUSY


def hermesd_client(d, requests: int, seconds: float, starts: int) -> dict[str, Any]:
    """hermesd's side of :mod:`bench.peer_driver`'s figures, in this process."""
    conn = d.conn(timeout=30)
    status = lambda: conn.call("status")  # noqa: E731
    rtt = peer_driver.round_trips(status, requests)
    rps, refused = peer_driver.per_second(status, seconds, _busy)
    conn.close()
    return {"rtt": rtt, "rps": rps, "refused": refused, "starts": bench_spawn.hello_latency(d, starts, 0.1)}


def floor_posix_spawn(runs: int) -> list[float]:
    """Seconds of ``posix_spawn("/bin/true")`` + ``waitpid``, ``runs`` times."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        pid = os.posix_spawn("/bin/true", ["true"], os.environ)
        os.waitpid(pid, 0)
        times.append(time.perf_counter() - t0)
    return times


def run(venv: Path, runs: int = 20, requests: int = 2000, seconds: float = 3.0, starts: int = 40,
        prompts: int = 1024) -> dict[str, Any]:
    """Every figure (see the module doc); seconds, MiB, requests per second."""
    bin_dir = peers_venv(venv)
    result: dict[str, Any] = {"versions": {**peer_versions(bin_dir), "hermesd": __version__}, "venv": str(venv)}
    with contextlib.ExitStack() as stack:
        peers = {kind: stack.enter_context(peer(kind, bin_dir)) for kind in PEERS}
        d = stack.enter_context(daemon())
        bench_warm_start.warm(d, 2)
        time.sleep(2.0)
        result["rss"] = {**{kind: rss(p["pid"]) for kind, p in peers.items()}, "hermesd": rss(d.proc.pid)}
        commands = {kind: (p["ctl"], None) for kind, p in peers.items()}
        commands["hermesd"] = (bench_control.hermesctl_argv(), d.env)
        commands["python -c pass"] = ([sys.executable, "-c", "pass"], None)
        commands["python -S -c pass"] = ([sys.executable, "-S", "-c", "pass"], None)
        result["cli"], result["cli_cpu"] = whole_process(commands, runs)
        plan = json.dumps({"rtt": requests, "rps": seconds, "starts": starts})
        driver = str(Path(peer_driver.__file__).resolve())
        result["client"] = {kind: json.loads(subprocess.run(
            [str(bin_dir / "python"), driver, kind, p["endpoint"], plan], capture_output=True, text=True,
            check=True).stdout) for kind, p in peers.items()}
        result["client"]["hermesd"] = hermesd_client(d, requests, seconds, starts)
    result["floors"] = {"fork()+exit+wait": bench_spawn.floor_fork(starts * 5),
                        "posix_spawn /bin/true": floor_posix_spawn(starts * 5)}
    result["batch"] = bench_warm_start.batch_overhead(prompts, 1.0, 16)
    return result


def _p50(values: list[float]) -> float:
    return statistics.median(values)


def goals(r: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The issue's goals: ``(goal, measured, met)`` each."""
    cli, client, rss_ = r["cli"], r["client"], r["rss"]
    status, floor = _p50(cli["hermesd"]), _p50(cli["python -c pass"])
    cpu_ratio = _p50(r["cli_cpu"]["hermesd"]) / _p50(r["cli_cpu"]["python -c pass"])
    rtt, rtt_circus = _p50(client["hermesd"]["rtt"]), _p50(client["circus"]["rtt"])
    hello, fork = _p50(client["hermesd"]["starts"]), _p50(r["floors"]["fork()+exit+wait"])
    refused = client["hermesd"]["refused"]
    batch = r["batch"]
    lost = batch["prompts"] - batch["completed"]
    return [
        ("hermesctl status <= 2x python -c pass", f"{status * 1e3:.1f} / {floor * 1e3:.1f} ms = {status / floor:.2f}x "
         f"(CPU time: {cpu_ratio:.2f}x)", status <= 2 * floor),
        ("round trip p50 <= 0.6x circus", f"{rtt * 1e3:.3f} / {rtt_circus * 1e3:.3f} ms = {rtt / rtt_circus:.2f}x",
         rtt <= 0.6 * rtt_circus),
        ("requests/s, one client >= circus",
         f"{client['hermesd']['rps']:,.0f} / {client['circus']['rps']:,.0f} = "
         f"{client['hermesd']['rps'] / client['circus']['rps']:.2f}x", client["hermesd"]["rps"] >= client["circus"]["rps"]),
        ("daemon idle RSS <= supervisord", f"{rss_['hermesd']:.1f} / {rss_['supervisord']:.1f} MiB", 
         rss_["hermesd"] <= rss_["supervisord"]),
        ("warm request -> child hello <= 4x fork+exit+wait", f"{hello * 1e3:.2f} / {fork * 1e3:.2f} ms = "
         f"{hello / fork:.2f}x", hello <= 4 * fork),
        ("batch overhead, 16 workers, default config <= 3%", f"{batch['overhead']:.1%} ({batch['method']})",
         batch["overhead"] <= 0.03),
        ("0 requests refused as busy", f"{refused} status requests refused, {lost} of {batch['prompts']} "
         "batch prompts not completed", refused == 0 and lost == 0),
    ]


def report(r: dict[str, Any]) -> str:
    """The figures as text: one row per figure, the peers, hermesd, hermesd/peer ratios, the floors; then the goals."""
    v, cli, client, rss_ = r["versions"], r["cli"], r["client"], r["rss"]
    kinds = (*PEERS, "hermesd")
    floors = r["floors"]

    def row(name: str, values: dict[str, float], unit: str, fmt: str, floor: str = "", higher: bool = False) -> str:
        cells = "".join(f"{format(values[k], fmt) + unit:>14}" for k in kinds)
        ratios = "".join(f"{values['hermesd'] / values[k]:>9.2f}x" for k in PEERS)
        return f"  {name:<38}{cells}{ratios}  {floor}"

    cpu = r["cli_cpu"]
    ms = {"cli": {k: _p50(cli[k]) * 1e3 for k in kinds}, "cli_cpu": {k: _p50(cpu[k]) * 1e3 for k in kinds},
          "rtt": {k: _p50(client[k]["rtt"]) * 1e3 for k in kinds},
          "start": {k: _p50(client[k]["starts"]) * 1e3 for k in kinds}}
    lines = [
        "hermesd beside circus and supervisord", machine(),
        f"  circus {v['circus']}, supervisor {v['supervisor']} (PyPI, in {r['venv']}); hermesd {v['hermesd']}, "
        "default configuration",
        f"  {'figure (p50)':<38}{'circus':>14}{'supervisord':>14}{'hermesd':>14}{'/circus':>10}{'/superv.':>10}  floor",
        row("status, command line, whole process", ms["cli"], " ms", ".1f",
            f"python -c pass {_p50(cli['python -c pass']) * 1e3:.1f} ms, python -S -c pass "
            f"{_p50(cli['python -S -c pass']) * 1e3:.1f} ms"),
        row("  the same, CPU time (user + system)", ms["cli_cpu"], " ms", ".1f",
            f"python -c pass {_p50(cpu['python -c pass']) * 1e3:.1f} ms, python -S -c pass "
            f"{_p50(cpu['python -S -c pass']) * 1e3:.1f} ms"),
        row("control round trip, one connection", ms["rtt"], " ms", ".3f"),
        row("requests/s, one client", {k: client[k]["rps"] for k in kinds}, "", ",.0f"),
        row("request -> new process", ms["start"], " ms", ".2f",
            ", ".join(f"{name} {_p50(values) * 1e3:.2f} ms" for name, values in floors.items())),
        row("daemon RSS idle", rss_, " MiB", ".1f"),
        f"  {'batch overhead, 16 workers, default':<38}{'-':>14}{'-':>14}{r['batch']['overhead']:>14.1%}"
        f"{'':>20}  0 ({r['batch']['prompts']} prompts x 1s, ideal {r['batch']['ideal']:.1f}s, "
        f"measured {r['batch']['wall']:.1f}s)",
        "  (request -> new process: circus and supervisord reply once the program is spawned; hermesd is timed "
        "to the child's hello, runtime loaded)",
        "goals",
    ]
    for goal, measured, met in goals(r):
        lines.append(f"  {'met    ' if met else 'NOT met'}  {goal}: {measured}")
    return "\n".join(lines)


def main() -> None:
    """Command line: see the module doc."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the peers' virtual environment")
    parser.add_argument("--runs", type=int, default=20, help="whole-process status runs of each command")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--starts", type=int, default=40)
    parser.add_argument("--prompts", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.venv, args.runs, args.requests, args.seconds, args.starts, args.prompts)
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    main()
