"""``hermes-batch --executor ray`` on a real Ray cluster started here: a head and two
worker nodes as processes of their own (``tests.ray_cluster``), hermesd and its
driver, items as processes on the workers, the fake Anthropic server as the model.

The slow cases share one cluster (module scope; the node-killing case comes last).
The quick cases need Ray installed but no cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from hermesd.protocol import ProtocolError
from tests.fakes.anthropic_server import DEFAULT_USAGE, FakeAnthropic, Message, last_user_text, text_block, thinking_block
from tests.fakes.limits import Limits
from tests.harness import wait_for
from tests.ray_cluster import TAG_ENV, RayCluster, free_port
from tests.test_batch_daemon import check_consistent, read_run, write_dataset

pytest.importorskip("ray", reason="the Ray extra is not installed (pip install -e '.[test,ray]')")

SECRET = "sk-ant-test-" + "5ecret" * 4
"""The provider key of these runs: it must reach the fake server and appear nowhere else."""


class Model:
    """The fake model: thinks, answers, ``delay`` seconds per reply; remembers when each prompt was asked."""

    def __init__(self, delay: float = 0.0, limits: Limits | None = None):
        self.api = FakeAnthropic(delay=delay, limits=limits)
        self.asked: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.api.default = self.reply

    def reply(self, request) -> Message:
        with self.lock:
            self.asked.append((time.monotonic(), last_user_text(request)))
        return Message([thinking_block("I think it through."), text_block("done")])

    def __enter__(self) -> "Model":
        self.api.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.api.__exit__(*exc)


@pytest.fixture(scope="module")
def cluster():
    """One head and two worker nodes (2 CPUs each), stopped whatever happens."""
    c = RayCluster(workers=2, cpus=2)
    try:
        yield c.start()
    finally:
        c.stop()


PRICES = {"claude-test": {"input": 3, "output": 15, "cache_write": 3.75, "cache_read": 0.3}}


def ray_daemon(make_daemon, api_url: str, **config: Any):
    """A hermesd whose items ask the fake Anthropic server, with the secret key in its environment."""
    return make_daemon({"provider": "anthropic", "base_url": api_url, "supervisor": {"max_children": 4}, **config},
                       env={"ANTHROPIC_API_KEY": SECRET})


def ray_items(daemon, batch: str) -> list[dict[str, Any]]:
    """The ``ray_item`` jobs of batch job ``batch``, as ``ps --all`` lists them."""
    return [j for j in daemon.call("ps", all=True, kind="ray_item")["jobs"] if j.get("parent") == batch]


def prompts(path: Path, n: int) -> Path:
    return write_dataset(path, [{"prompt": f"prompt number {i}"} for i in range(n)])


def run_ray(daemon, cluster, dataset: Path, name: str, **args: Any) -> dict[str, Any]:
    args.setdefault("batch_size", 10)
    return daemon.call("batch.run", dataset_file=str(dataset), run_name=name, output_dir=str(daemon.base / "out"),
                       executor="ray", ray_address=cluster.address, **args)


def items_running(cluster) -> list[psutil.Process]:
    """Item processes on the cluster's nodes (``python -m child`` started by a Ray task)."""
    return [p for p in cluster.processes() if "HERMES_ITEM_DIR" in _environ(p)]


def _environ(p: psutil.Process) -> dict[str, str]:
    """The environment of ``p`` read raw (a retitled process may blank its first entries, and
    then ``psutil.Process.environ`` returns nothing)."""
    try:
        raw = Path(f"/proc/{p.pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return {}
    return dict(entry.split("=", 1) for entry in raw.split("\0") if "=" in entry)


def indices(run: dict[str, Any]) -> list[int]:
    return sorted(line["prompt_index"] for lines in run["batches"].values() for line in lines)


def driver_pids(daemon) -> list[int]:
    return [p.pid for p in daemon.children() if "batch_driver" in " ".join(_cmdline(p))]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def no_secret_in(*places: Path) -> None:
    for place in places:
        for path in ([place] if place.is_file() else place.rglob("*")):
            if path.is_file() and not path.is_symlink():
                try:
                    assert SECRET.encode() not in path.read_bytes(), f"the provider key leaked into {path}"
                except OSError:
                    continue


# without a cluster ---------------------------------------------------------------------


def test_an_unreachable_cluster_is_one_clear_error_before_anything_starts(make_daemon, tmp_path):
    daemon = make_daemon({"batch": {"executor": "ray"}})  # the executor from the config, the address from RAY_ADDRESS
    dataset = prompts(tmp_path / "p.jsonl", 3)
    address = f"127.0.0.1:{free_port()}"
    for _ in range(2):  # tried again: the probing drivers leave nothing behind
        out = subprocess.run([sys.executable, "-c", "from client.batch import main; main()", "--dataset_file",
                              str(dataset), "--batch_size", "2", "--run_name", "nowhere", "--output_dir",
                              str(tmp_path / "out")], env={**daemon.env, "RAY_ADDRESS": address},
                             cwd=str(daemon.work), capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out
        assert f"cannot reach the Ray cluster at {address}" in out.stderr and "Traceback" not in out.stderr
        assert not (tmp_path / "out" / "nowhere").exists()
        assert daemon.call("batch.list")["batches"] == []
        wait_for(lambda: not driver_pids(daemon), 30, 0.2, "the probing driver to end")
    wait_for(lambda: not daemon.call("ps", all=True, kind="batch_driver")["jobs"], 30, 0.2,
             "the refused runs' drivers to be forgotten")
    assert daemon.call("status")["jobs"] == {}
    wait_for(lambda: not list((daemon.home / "jobs").glob("raydrv_*")), 30, 0.2, "their folders to go")
    # a dashboard's address given as the flag: refused as what it is (Ray blamed RAY_ADDRESS, cut mid-advice)
    out = subprocess.run([sys.executable, "-c", "from client.batch import main; main()", "--dataset_file",
                          str(dataset), "--batch_size", "2", "--run_name", "dashboard", "--output_dir",
                          str(tmp_path / "out"), "--ray_address", "http://127.0.0.1:8265"], env=daemon.env,
                         cwd=str(daemon.work), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "http://127.0.0.1:8265 is an HTTP address" in out.stderr, out
    assert "Traceback" not in out.stderr and not (tmp_path / "out" / "dashboard").exists()


def test_ray_not_installed_is_one_clear_error(make_daemon, tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(  # hermesd's Python without Ray: the import system finds no 'ray'
        "import sys\n"
        "class _NoRay:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoRay)\n")
    daemon = make_daemon(env={"PYTHONPATH": str(hide)})
    with pytest.raises(ProtocolError) as err:
        daemon.call("batch.run", dataset_file=str(prompts(tmp_path / "p.jsonl", 2)), run_name="noray",
                    batch_size=2, output_dir=str(tmp_path / "out"), executor="ray", ray_address="127.0.0.1:1")
    assert err.value.code == "bad_request" and "pip install 'hermesd[ray]'" in err.value.message
    assert not (tmp_path / "out" / "noray").exists() and not driver_pids(daemon)


def _run_starter(starter: Path, timeout: float) -> tuple[dict, str]:
    """Run ``starter`` as a Ray worker would run items, without Ray (no daemon to reach, in a
    session of its own); returns the JSON its last line prints, and its standard error."""
    return _run_starter_args(starter, [], timeout)


def _run_starter_args(starter: Path, args: list[str], timeout: float) -> tuple[dict, str]:
    """:func:`_run_starter` with command-line arguments ``args``."""
    env = {**os.environ, "HERMES_DAEMON_PID": "1", "HERMES_CHILD_SOCKET": "/nonexistent", "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run([sys.executable, str(starter), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          start_new_session=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_an_item_serves_the_process_that_started_it_not_hermesd(tmp_path):
    """The trap of a child started from a Ray task by hand: its lifeline checked for
    hermesd and killed the task's process group.  run_item's item serves its starter,
    in a group of its own, and the starter lives on."""
    starter = tmp_path / "starter.py"
    starter.write_text(
        "import json, os, sys\n"
        "from child.item import run_item\n"
        "spec = {'job': 'item_x', 'kind': 'batch_item', 'goal': 'hello', 'provider': 'scripted', 'toolsets': [],\n"
        "        'script': [{'thinking': 'hm', 'text': 'hi'}], 'max_turns': 2, 'timeout_seconds': 60,\n"
        "        'record_trajectory': True}\n"
        "out = run_item('item_x', 7, spec, {'ANTHROPIC_API_KEY': 'k'})\n"
        "print(json.dumps({'outcome': out, 'alive': os.getpid(), 'group': os.getpgrp()}))\n")
    report, _ = _run_starter(starter, timeout=120)
    outcome = report["outcome"]
    assert outcome["status"] == "completed", outcome
    assert outcome["index"] == 7 and outcome["result"]["trajectory"]["conversations"][-1]["value"].endswith("hi")


def test_a_workers_items_start_warm_each_in_its_own_session_as_the_workers_child(tmp_path):
    """What a Ray worker does for item after item, without Ray: the first item starts the
    worker's template and waits for it; every item is a spare of it — a child of the worker
    (its lifeline), leading a session of its own.  A template that died and cannot warm up in
    time means one cold item, and the next is warm again, from a new zygote."""
    starter = tmp_path / "starter.py"
    starter.write_text(
        "import json, os, sys, time\n"
        "from child import item_warm\n"
        "from child.item import run_item\n"
        "probe = 'echo zygote=${HERMES_ZYGOTE:-none} parent=$(ps -o ppid= -p $PPID | xargs) session=$(ps -o sid= -p $PPID | xargs) item=$PPID'\n"
        "spec = {'job': 'item_x', 'kind': 'ray_item', 'goal': 'hello', 'provider': 'scripted', 'toolsets': ['terminal'],\n"
        "        'script': [{'tool_calls': [{'name': 'terminal', 'input': {'command': probe}}]}, {'thinking': 'hm', 'text': 'hi'}],\n"
        "        'max_turns': 3, 'record_trajectory': True}\n"
        "seen = []\n"
        "for i in range(4):\n"
        "    if i == 2:  # the zygote dies; the next item will not wait for the new one\n"
        "        item_warm._template.proc.kill(); item_warm._template.proc.wait(); item_warm.WARM_WAIT_SECONDS = 0\n"
        "    out = run_item(f'item_{i}', i, spec, {})\n"
        "    item_warm.WARM_WAIT_SECONDS = 30.0\n"
        "    tool = [c['value'] for c in out['result']['trajectory']['conversations'] if c['from'] == 'tool']\n"
        "    seen.append({'status': out['status'], 'tool': tool[0]})\n"
        "print(json.dumps({'seen': seen, 'me': os.getpid()}))\n")
    report, stderr = _run_starter(starter, timeout=180)
    probes = []
    for entry in report["seen"]:
        assert entry["status"] == "completed", entry
        text = json.loads(entry["tool"].split("<tool_response>")[1].split("</tool_response>")[0])["content"]
        probes.append(dict(part.split("=") for part in text.split("[exit")[0].split()))
    zygotes = [probe["zygote"] for probe in probes]
    assert zygotes[0] == zygotes[1] != "none" and zygotes[2] == "none" and zygotes[3] not in ("none", zygotes[0]), probes
    for probe in probes:
        assert probe["parent"] == str(report["me"]) and probe["session"] == probe["item"], probes
    assert "Traceback" not in stderr and "prepare failed" not in stderr, stderr


def test_a_host_runs_its_slots_at_once_all_warm_and_stops_the_one_cancelled(tmp_path):
    """An item host without Ray: three items at once (threads), each a spare of the host's one
    zygote though it holds two spares at first, each a child of the host in a session of its
    own; a fourth, cancelled while its tool sleeps, is stopped within the grace, its group
    killed; one cancelled before it got to the host never starts."""
    starter = tmp_path / "starter.py"
    starter.write_text(
        "import json, os, sys, threading, time\n"
        "from child.item_host import ItemHost\n"
        "probe = 'sleep 1; echo zygote=${HERMES_ZYGOTE:-none} parent=$(ps -o ppid= -p $PPID | xargs) session=$(ps -o sid= -p $PPID | xargs) item=$PPID'\n"
        "def spec(command):\n"
        "    return {'job': 'item_x', 'kind': 'ray_item', 'goal': 'hello', 'provider': 'scripted', 'toolsets': ['terminal'],\n"
        "            'script': [{'tool_calls': [{'name': 'terminal', 'input': {'command': command}}]}, {'text': 'hi'}],\n"
        "            'max_turns': 3, 'record_trajectory': True}\n"
        "host = ItemHost(4)\n"
        "out = {}\n"
        "def run(handle, command):\n"
        "    out[handle] = host.run(handle, 0, spec(command), {}, 1.0, None)\n"
        "threads = [threading.Thread(target=run, args=(f'item_{i}', probe)) for i in range(3)]\n"
        "threads.append(threading.Thread(target=run, args=('item_long', 'sleep 300 & echo $! > ' + sys.argv[1] + '; wait')))\n"
        "for t in threads: t.start()\n"
        "deadline = time.monotonic() + 120\n"
        "while not os.path.exists(sys.argv[1]) or not os.path.getsize(sys.argv[1]):\n"
        "    assert time.monotonic() < deadline; time.sleep(0.05)\n"
        "cancelled_at = time.monotonic(); running = host.cancel('item_long', 1.0)\n"
        "threads[3].join(); stopped_in = time.monotonic() - cancelled_at\n"
        "for t in threads[:3]: t.join()\n"
        "early = host.cancel('item_early', 1.0); run('item_early', probe)\n"
        "sleeper = int(open(sys.argv[1]).read())\n"
        "def alive(pid):  # a zombie is dead: its parent (init) reaps it when it will\n"
        "    try:\n"
        "        return open(f'/proc/{pid}/stat').read().rpartition(')')[2].split()[0] != 'Z'\n"
        "    except OSError:\n"
        "        return False\n"
        "deadline = time.monotonic() + 10\n"
        "while alive(sleeper) and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print(json.dumps({'out': out, 'me': os.getpid(), 'running': running, 'early': early, 'stopped_in': stopped_in,\n"
        "                  'sleeper_alive': alive(sleeper)}))\n")
    env_done = tmp_path / "sleeper.pid"
    report, stderr = _run_starter_args(starter, [str(env_done)], timeout=240)
    probes = []
    for i in range(3):
        entry = report["out"][f"item_{i}"]
        assert entry["status"] == "completed", entry
        tool = [c["value"] for c in entry["result"]["trajectory"]["conversations"] if c["from"] == "tool"][0]
        text = json.loads(tool.split("<tool_response>")[1].split("</tool_response>")[0])["content"]
        probes.append(dict(part.split("=") for part in text.split("[exit")[0].split()))
    assert len({p["zygote"] for p in probes}) == 1 and probes[0]["zygote"] != "none", probes
    assert len({p["item"] for p in probes}) == 3
    for probe in probes:
        assert probe["parent"] == str(report["me"]) and probe["session"] == probe["item"], probes
    assert report["running"] is True and report["stopped_in"] < 15 and not report["sleeper_alive"], report
    assert report["out"]["item_long"]["status"] != "completed", report["out"]["item_long"]
    assert report["early"] is False and report["out"]["item_early"]["status"] == "interrupted"
    assert report["out"]["item_early"]["error"] == "cancelled before it started"
    assert "Traceback" not in stderr, stderr


def test_hosts_are_planned_where_the_cluster_has_room_most_free_cpus_first():
    """The driver's hosts: as many slots as a node's free CPUs and memory hold for one item's
    reservation, nodes with the most free CPUs first, no more slots than wanted."""
    from child.ray_hosts import MAX_SLOTS, plan

    gib = 1024 ** 3
    free = {"head": {"CPU": 0.0, "memory": 8 * gib}, "a": {"CPU": 2.0, "memory": 8 * gib},
            "b": {"CPU": 3.5, "memory": 1 * gib}}
    assert plan(free, 8, 0.5, 0) == [("b", 7), ("a", 1)]
    assert plan(free, 20, 0.5, 0) == [("b", 7), ("a", 4)]  # no room for more
    assert plan(free, 8, 0.5, gib // 2) == [("b", 2), ("a", 4)]  # b holds 2 by its memory
    assert plan(free, 3, 1.0, 0) == [("b", 3)]
    assert plan(free, 5, 0.0, 0) == [("b", 5)]  # no CPUs asked: all on one node
    assert plan(free, 100, 0.0, 0) == [("b", MAX_SLOTS), ("a", MAX_SLOTS), ("head", MAX_SLOTS)]
    assert plan(free, 0, 0.5, 0) == [] and plan({}, 4, 0.5, 0) == []


def test_no_room_names_the_reservation_at_fault_and_the_nodes_as_they_are():
    """A cluster that cannot hold one item: the flag at fault, and each node's CPUs and memory
    together (a CPU-less head with the most memory is no room for an item that needs a CPU)."""
    from batch.executor_ray import no_room
    from batch.settings import Settings

    def settings(cpus: float, memory: int | None) -> Settings:
        return Settings(run_name="r", dataset_file="/d.jsonl", output_dir="/out", batch_size=1,
                        ray_address="127.0.0.1:6379", ray_num_cpus=cpus, ray_memory_mb=memory)

    cluster = {"fits": False, "shapes": [[2.0, 23640], [2.0, 23439], [0.0, 23840]]}
    field, error = no_room(settings(2, 23700), cluster)
    assert field == "ray_memory_mb" and "lower --ray_memory_mb (batch.ray_memory_mb)" in error, error
    assert "(2 CPU(s) and 23700 MiB each; its largest nodes have 2 CPU(s) and 23640 MiB; 2 CPU(s) and 23439 MiB; " \
           "0 CPU(s) and 23840 MiB)" in error and "127.0.0.1:6379" in error, error
    assert no_room(settings(3, None), cluster)[0] == "ray_num_cpus"
    field, error = no_room(settings(3, 30000), cluster)
    assert field == "ray_num_cpus" and "lower --ray_num_cpus and --ray_memory_mb" in error, error


def test_a_dead_hosts_scratch_directories_are_swept_and_no_one_elses(tmp_path, monkeypatch):
    """An item's scratch directory (its spec, log and working directory) names its host's pid;
    a host killed with its driver leaves it behind, and the next host on the node removes it:
    only those of dead hosts, only this user's, only ours by name."""
    from child import item

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"{item.SCRATCH_PREFIX}{gone.pid}-abc123"
    live = tmp_path / f"{item.SCRATCH_PREFIX}{os.getpid()}-def456"
    older = tmp_path / f"{item.SCRATCH_PREFIX}k2j4h5gd"  # no pid in its name: not one of these
    other = tmp_path / f"other-{gone.pid}-x"
    for path in (dead, live, older, other):
        (path / "work").mkdir(parents=True)
        (path / "spec.json").write_text("{}")
    assert item.sweep_scratch() == 1
    assert not dead.exists() and live.exists() and older.exists() and other.exists()


# on the cluster --------------------------------------------------------------------------


def on_cluster(fn):
    """A slow case on the shared cluster, with room for a loaded 2-core machine (an item can take seconds of CPU)."""
    return pytest.mark.slow(pytest.mark.timeout(900)(fn))


@on_cluster
def test_forty_prompts_each_index_once_items_on_workers_and_the_key_nowhere(make_daemon, cluster, tmp_path):
    with Model(delay=0.3) as model:
        daemon = ray_daemon(make_daemon, model.api.url, ray={"idle_seconds": 1})  # its driver ends soon after
        record = run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 40), "forty", num_workers=4,
                         distribution="no_web")
        ex = record["executor"]
        assert ex["name"] == "ray" and ex["nodes"] == 3 and ex["cpus"] == 4.0 and ex["driver"].startswith("raydrv_")
        assert ex["address"] == cluster.address  # the driver joined on loopback, as asked
        seen = wait_for(lambda: items_running(cluster), 60, 0.05, "an item process on a worker")
        assert cluster.outside_connections(*driver_pids(daemon)) == []  # nodes, workers, items, driver: loopback only
        for item in seen[:2]:
            try:
                env, parent = _environ(item), item.parent()
                assert item.pid == os.getpgid(item.pid)  # a session and process group of its own
                assert env["HERMES_LIFELINE_PID"] == str(parent.pid) and "HERMES_DAEMON_PID" not in env
                assert _environ(parent)[TAG_ENV].split("-")[-1].startswith("worker")  # a Ray worker on a worker node
            except (psutil.Error, ProcessLookupError):
                continue  # ended meanwhile
        text = daemon.ctl("batch", "status", "forty").stdout
        assert "executor: Ray cluster" in text and "3 node(s), 4 CPUs" in text
        daemon.wait_job(record["id"], timeout=600)
    final = daemon.call("batch.status", id=record["id"])
    assert final["status"] == "completed", final
    run = read_run(Path(final["run_dir"]))
    check_consistent(run, 10)
    assert indices(run) == list(range(40)) and run["statistics"]["prompts"]["written"] == 40
    assert final["progress"]["done"] == 40
    events = daemon.call("events_since", seq=0)["events"]
    progress = [e for e in events if e["type"] == "batch.progress" and e["job"] == record["id"]]
    assert len(progress) == 40 and progress[-1]["data"]["done"] == 40
    keys = {r.headers.get("x-api-key") or r.headers.get("authorization", "").removeprefix("Bearer ")
            for r in model.api.requests}
    assert keys == {SECRET}  # the key reached every item (the SDK sends it as x-api-key or a bearer token)
    assert len(model.api.requests) == 40
    line = run["batches"][0][0]
    assert line["metadata"]["provider"] == "anthropic" and "<think>" in line["conversations"][2]["value"]
    no_secret_in(daemon.base, cluster.temp)
    assert SECRET not in json.dumps(events)
    wait_for(lambda: daemon.call("job", id=ex["driver"])["status"] != "running", 30, 0.2, "the driver to end")
    assert daemon.call("job", id=ex["driver"])["status"] == "completed"  # told to stop once idle, not cancelled
    assert f"executor: Ray cluster {cluster.address}" in daemon.ctl("batch", "status", "forty").stdout
    pid = daemon.proc.pid  # the daemon never imported Ray: no Ray library mapped in its memory
    assert not [m.path for m in psutil.Process(pid).memory_maps() if "-packages/ray/" in m.path or "_raylet" in m.path]
    wait_for(lambda: not driver_pids(daemon) and not items_running(cluster), 30, 0.2, "the driver to end")


@on_cluster
def test_cancel_stops_in_flight_items(make_daemon, cluster, tmp_path):
    with Model(delay=30.0) as model:
        daemon = ray_daemon(make_daemon, model.api.url)
        record = run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 12), "cancelled", num_workers=4)
        wait_for(lambda: len(items_running(cluster)) == 4 and len(model.api.requests) == 4, 90, 0.1,
                 "four items asking the model")
        out = daemon.ctl("batch", "cancel", "cancelled", timeout=90)
        assert out.returncode == 0 and "cancelled" in out.stdout, out
        wait_for(lambda: not items_running(cluster), 30, 0.1, "the items on the workers to stop")
        wait_for(lambda: not driver_pids(daemon), 30, 0.1, "the driver to end")
        final = daemon.call("batch.status", id=record["id"])
        assert final["status"] == "cancelled" and final["progress"]["done"] == 0
        assert len(model.api.requests) == 4  # nothing more was started


@on_cluster
def test_kill9_of_hermesd_mid_run_then_restart_resumes_without_rerunning(make_daemon, cluster, tmp_path):
    with Model(delay=0.5) as model:
        daemon = ray_daemon(make_daemon, model.api.url)
        record = run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 24), "killed", num_workers=4)
        run_dir = Path(record["run_dir"])

        def done() -> set[int]:
            try:
                return {int(i) for i in json.loads((run_dir / "checkpoint.json").read_text())["done"]}
            except (OSError, ValueError, KeyError):
                return set()

        wait_for(lambda: len(done()) >= 8, 120, 0.1, "eight prompts done")
        daemon.kill9()
        killed_at, finished = time.monotonic(), done()
        wait_for(lambda: not items_running(cluster) and not driver_pids(daemon), 60, 0.2,
                 "the driver and its items to die with hermesd")
        daemon.start()
        daemon.wait_job(record["id"], timeout=600)
    final = daemon.call("batch.status", id=record["id"])
    assert final["status"] == "completed", final
    run = read_run(run_dir)
    check_consistent(run, 10)
    assert indices(run) == list(range(24))
    again = {text for at, text in model.asked if at > killed_at}
    assert not again & {f"prompt number {i}" for i in finished}, "a finished prompt ran again"


@on_cluster
def test_kill9_of_the_driver_mid_run_a_new_driver_finishes_exactly_once(make_daemon, cluster, tmp_path):
    with Model(delay=0.5) as model:
        daemon = ray_daemon(make_daemon, model.api.url)
        record = run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 16), "driverkilled", num_workers=4)
        wait_for(lambda: len(model.api.requests) >= 6 and items_running(cluster), 120, 0.1, "items running")
        first = record["executor"]["driver"]
        os.kill(driver_pids(daemon)[0], 9)
        wait_for(lambda: daemon.call("batch.status", id=record["id"])["executor"].get("driver") not in (None, first),
                 60, 0.2, "a new driver")
        daemon.wait_job(record["id"], timeout=600)
    final = daemon.call("batch.status", id=record["id"])
    assert final["status"] == "completed" and final["progress"]["failed"] == 0, final
    run = read_run(Path(final["run_dir"]))
    check_consistent(run, 10)
    assert indices(run) == list(range(16))
    assert daemon.call("job", id=first)["status"] == "failed"  # the killed one, reaped and recorded
    # each attempt is a job: those the killed driver had out ended lost, their prompts ran again as new items
    attempts = ray_items(daemon, record["id"])
    lost = [j for j in attempts if j["status"] == "lost"]
    assert lost and all("its Ray driver ended" in j["error"] for j in lost), lost
    completed = [j for j in attempts if j["status"] == "completed"]
    assert len(completed) == 16 and len(attempts) == 16 + len(lost), [(j["id"], j["status"]) for j in attempts]


@on_cluster
def test_an_item_no_node_can_hold_is_refused_before_anything_starts(make_daemon, cluster, tmp_path):
    """Items that would wait forever (no node has that many CPUs, or that much memory) are one
    clear error naming the flag and the largest node, and no run is created."""
    daemon = ray_daemon(make_daemon, "http://127.0.0.1:9")
    for args, field, asked in (({"ray_num_cpus": 3}, "ray_num_cpus", "3 CPU(s) each"),
                               ({"ray_memory_mb": 5_000_000}, "ray_memory_mb", "5000000 MiB each")):
        with pytest.raises(ProtocolError) as err:
            run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 4), f"nofit_{field}", **args)
        assert err.value.code == "bad_request" and err.value.details.get("field") == field, err.value
        assert asked in err.value.message and "its largest nodes have 2 CPU(s) and " in err.value.message and \
            f"lower --{field} (batch.{field})" in err.value.message, err.value.message
        assert not (daemon.base / "out" / f"nofit_{field}").exists()
    wait_for(lambda: not driver_pids(daemon), 30, 0.2, "the drivers to end")
    assert daemon.call("batch.list")["batches"] == []


@on_cluster
def test_a_second_batch_runs_warm_on_the_first_ones_driver_and_hosts_and_idle_drivers_end(
        make_daemon, cluster, tmp_path):
    """Ray hosts kept warm across batches: the second batch on the same cluster with the same
    reservation takes the first one's driver, idle in the pool, and runs its items on the same
    hosts (the same Ray worker processes).  A third batch with another reservation needs a new
    driver: the idle one is ended at once (it holds room there), its hosts with it.  The third
    one's driver is told to stop ``ray.idle_seconds`` after its batch (as the config says once
    reloaded)."""
    daemon = make_daemon({"ray": {"idle_seconds": 300}})
    probe = "echo host=$(ps -o ppid= -p $PPID | xargs)"  # the item's parent: its host
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": probe}}]},
              {"thinking": "the host answered", "text": "done"}]
    hosts, records = [], []

    def batch(name: str, **args: Any) -> None:
        data = write_dataset(tmp_path / f"{name}.jsonl", [{"prompt": f"{name} {i}", "script": script} for i in range(8)])
        records.append(run_ray(daemon, cluster, data, name, num_workers=4, distribution="terminal_only",
                               allow_synthetic=True, **args))
        daemon.wait_job(records[-1]["id"], timeout=600)
        run = read_run(Path(records[-1]["run_dir"]))
        assert indices(run) == list(range(8)), run
        tools = [c["value"] for lines in run["batches"].values() for line in lines for c in line["conversations"]
                 if c["from"] == "tool"]
        texts = [json.loads(t.split("<tool_response>")[1].split("</tool_response>")[0])["content"] for t in tools]
        hosts.append({int(text.split("host=")[1].split()[0]) for text in texts})

    def status(driver: str) -> str:
        return daemon.call("job", id=driver)["status"]

    batch("first")
    batch("second")
    first, second = (r["executor"] for r in records)
    assert not first["warm"] and first["driver_starts"] == 1, first
    assert second["warm"] and second["driver"] == first["driver"] and second["driver_starts"] == 0, second
    assert hosts[1] <= hosts[0], hosts  # the second batch's items ran on the first one's hosts
    assert status(first["driver"]) == "running"  # idle, kept

    daemon.config["ray"] = {"idle_seconds": 3}
    (daemon.home / "config.yaml").write_text(yaml.safe_dump(daemon.config))
    assert daemon.call("reload")["reloaded"]
    batch("third", ray_num_cpus=0.5)
    third = records[-1]["executor"]
    assert not third["warm"] and third["driver"] != first["driver"], third
    wait_for(lambda: status(first["driver"]) != "running", 60, 0.5, "the idle driver to be ended for the room")
    assert status(first["driver"]) == "completed"  # well before its 300 s, told to stop, not cancelled
    wait_for(lambda: not any(psutil.pid_exists(pid) for pid in hosts[0]), 60, 0.2, "its hosts to end with it")
    wait_for(lambda: status(third["driver"]) != "running", 60, 0.5, "the third batch's idle driver to be ended")
    assert status(third["driver"]) == "completed"  # told to stop, not cancelled


@on_cluster
def test_items_waiting_for_a_slot_are_pending_their_logs_come_back_and_the_step_time_reaches_them(
        make_daemon, cluster, tmp_path):
    """More prompts in flight (6) than the cluster has slots (4 CPUs, 1 each): only the items a
    host has started count as ``running``, the others as ``pending``.  The scripted provider's
    step time (``HERMES_SCRIPTED_STEP_SECONDS`` of hermesd) reaches the items; an item's log
    comes back when it ends (``hermesctl logs``), and while it runs ``logs`` says where it is."""
    step, marker = 2.0, "a line of the item's own log"
    daemon = make_daemon(env={"HERMES_SCRIPTED_STEP_SECONDS": str(step)})
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": f"echo {marker} > /proc/$PPID/fd/2"}}]},
              {"thinking": "it is done", "text": "done"}]
    dataset = write_dataset(tmp_path / "p.jsonl", [{"prompt": f"prompt {i}", "script": script} for i in range(10)])
    record = run_ray(daemon, cluster, dataset, "waiting", num_workers=6, distribution="terminal_only",
                     allow_synthetic=True)
    seen = []

    def four_of_six_running() -> bool:
        p = daemon.call("batch.status", id=record["id"])["progress"]
        seen.append(p["running"])
        return p["running"] == 4 and p["pending"] == p["total"] - p["processed"] - 4 >= 2

    wait_for(four_of_six_running, 120, 0.1, "four items running and the other two in flight pending")

    def hint_of_a_running_item() -> bool:
        running = [j["id"] for j in ray_items(daemon, record["id"]) if j["status"] == "running"]
        out = daemon.ctl("logs", running[0]) if running else None
        return out is not None and out.returncode == 0 and "runs on a Ray node" in out.stderr  # else it just ended

    wait_for(hint_of_a_running_item, 120, 0.1, "hermesctl logs to say where a running item's log is")
    daemon.wait_job(record["id"], timeout=600)
    assert max(seen) <= 4, seen  # never more running than the cluster has slots
    final = daemon.call("batch.status", id=record["id"])
    assert final["status"] == "completed" and final["progress"]["done"] == 10, final
    items = ray_items(daemon, record["id"])
    assert len(items) == 10 and all(j["duration_seconds"] >= 2 * step for j in items), items  # each step slept
    out = daemon.ctl("logs", items[0]["id"])
    assert out.returncode == 0 and marker in out.stdout, out
    out = daemon.ctl("logs", record["id"])
    assert out.returncode == 0 and out.stdout.count(marker) == 10, out


@on_cluster
def test_a_batch_given_up_after_its_drivers_died_says_so_on_its_items(make_daemon, cluster, tmp_path):
    """The drivers of a batch die five times in a row (what a cluster going away does; here
    ``kill -9`` after each has its items out): the batch ends ``failed`` saying so, and the
    last driver's items end ``lost`` with it, saying why — not "cancelled by request"."""
    with Model(delay=60.0) as model:
        daemon = ray_daemon(make_daemon, model.api.url)
        record = run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 4), "givenup", num_workers=2)
        killed: list[str] = []
        for _ in range(5):
            def items_out() -> int | None:
                ex = daemon.call("batch.status", id=record["id"])["executor"]
                alive = ex.get("driver") not in (None, *killed) and ex.get("in_flight") and driver_pids(daemon)
                return driver_pids(daemon)[0] if alive else None

            pid = wait_for(items_out, 120, 0.1, "a new driver with items out")
            killed.append(daemon.call("batch.status", id=record["id"])["executor"]["driver"])
            os.kill(pid, 9)
        final = daemon.wait_job(record["id"], timeout=120)
    assert final["status"] == "failed" and "ended 5 times in a row" in final["error"], final
    items = ray_items(daemon, record["id"])
    last = [j for j in items if "its batch ended" in (j["error"] or "")]
    assert last and all("lost: its Ray driver ended; its batch ended failed: the Ray driver of this batch ended 5 "
                        "times in a row" in j["error"] for j in last), items
    assert {j["status"] for j in items} == {"lost"} and not any("cancelled by request" in j["error"] for j in items)


@on_cluster
def test_a_worker_node_lost_mid_run_its_items_run_again_exactly_once(make_daemon, cluster, tmp_path):
    with Model(delay=1.0) as model:
        daemon = ray_daemon(make_daemon, model.api.url)
        record = run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 24), "nodelost", num_workers=4)
        on_worker1 = lambda: [p for p in items_running(cluster) if _environ(p).get(TAG_ENV, "").endswith("-worker1")]  # noqa: E731
        wait_for(lambda: len(model.api.requests) >= 8 and on_worker1(), 120, 0.1, "items running on worker1")
        lost = {_environ(p).get("HERMES_JOB_ID") for p in on_worker1()}
        cluster.kill_node("worker1")
        daemon.wait_job(record["id"], timeout=600)
    final = daemon.call("batch.status", id=record["id"])
    assert final["status"] == "completed", final
    run = read_run(Path(final["run_dir"]))
    check_consistent(run, 10)
    assert indices(run) == list(range(24)), "every prompt exactly once"
    assert lost and final["progress"]["failed"] == 0  # the lost node's prompts ran again
    # each attempt a job: those on the lost node ended lost, their prompts ran again as new items
    attempts = {j["id"]: j for j in ray_items(daemon, record["id"])}
    ended_lost = [attempts[i] for i in lost if attempts[i]["status"] == "lost"]
    assert ended_lost and all("its Ray host was lost" in j["error"] for j in ended_lost), [attempts[i] for i in lost]
    assert sorted(j["status"] for j in attempts.values()) == ["completed"] * 24 + ["lost"] * len(ended_lost)


@on_cluster
def test_items_on_ray_ask_the_governor_through_their_driver_and_are_billed(make_daemon, cluster, tmp_path):
    """The fake says no (2 requests per 2 s, 429 with retry-after beyond): every item's call
    asks hermesd's governor through the driver, so few are refused and none fails; each item
    is a job of the batch, and what the calls spent is the run's bill everywhere."""
    with Model(limits=Limits(requests=2, window=2.0)) as model:
        daemon = ray_daemon(make_daemon, model.api.url, model="claude-test", prices=PRICES)
        record = run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 8), "governed", num_workers=4,
                         distribution="no_web")
        daemon.wait_job(record["id"], timeout=600)
        governor = daemon.call("status")["governor"]
    final = daemon.call("batch.status", id=record["id"])
    assert final["status"] == "completed" and final["progress"]["failed"] == 0, final
    assert model.api.limits.admitted == 8
    # four workers start at once against a limit of two: the initial window's burst may be refused, once
    assert model.api.limits.refused_total <= 2, model.api.limits.refused
    assert [g["endpoint"].rsplit(" key ", 1)[0] for g in governor] == [f"anthropic {model.api.url}"]  # asked

    usage = final["usage"]  # each admitted reply's usage is the fake's DEFAULT_USAGE
    assert (usage["calls"], usage["input"], usage["output"]) == (8, 8 * DEFAULT_USAGE["input_tokens"],
                                                                 8 * DEFAULT_USAGE["output_tokens"]), usage
    assert usage["cost_usd"] > 0 and not usage["cost_unknown"]
    stats = read_run(Path(final["run_dir"]))["statistics"]
    assert stats["usage"]["calls"] == 8 and stats["cost_usd"] == usage["cost_usd"]
    by_batch = json.loads(daemon.ctl("usage", "--by", "batch", "--json").stdout)
    assert [(r["key"], r["calls"], r["cost_usd"]) for r in by_batch["rows"]] == [(record["id"], 8, usage["cost_usd"])]
    items = ray_items(daemon, record["id"])
    assert len(items) == 8 and {j["status"] for j in items} == {"completed"}, items
    by_job = {r["key"]: r for r in json.loads(daemon.ctl("usage", "--by", "job", "--json").stdout)["rows"]}
    assert sorted(by_job) == sorted(j["id"] for j in items) and all(r["calls"] == 1 for r in by_job.values())
    lines = [line for lines in read_run(Path(final["run_dir"]))["batches"].values() for line in lines]
    assert all(line["metadata"]["cost_usd"] == by_job[line["metadata"]["job"]]["cost_usd"] > 0 for line in lines)


@on_cluster
def test_ray_items_show_in_ps_and_top_and_a_quiet_one_is_stopped_as_stale(make_daemon, cluster, tmp_path):
    """Items report activity through their driver: ``ps`` and ``top`` show them running, and
    one whose model call shows no sign of life is interrupted by the stale rule (no wall
    clock) and its process on the worker stopped."""
    with Model(delay=120.0) as model:
        # room for a cold item's imports on a loaded machine: it is quiet while it waits for the model
        daemon = ray_daemon(make_daemon, model.api.url, delegation={"stale_after_seconds": 20})
        record = run_ray(daemon, cluster, prompts(tmp_path / "p.jsonl", 2), "quiet", num_workers=2)

        def up() -> list[dict[str, Any]]:
            items = ray_items(daemon, record["id"])
            assert not any(j["status"] in ("interrupted", "failed") for j in items), items
            return [j for j in items if j["status"] == "running"] if len(model.api.requests) == 2 else []

        running = wait_for(up, 120, 0.2, "two items up and asking the model")
        listing = daemon.ctl("ps").stdout
        board = daemon.ctl("top").stdout  # not a terminal: the board once, as text
        assert all(j["id"] in listing and j["id"] in board for j in running), (listing, board)
        daemon.wait_job(record["id"], timeout=300)
        wait_for(lambda: not items_running(cluster), 60, 0.2, "the stale items' processes to stop")
    final = daemon.call("batch.status", id=record["id"])
    assert final["progress"]["failed"] == 2 and final["progress"]["done"] == 0, final
    items = ray_items(daemon, record["id"])
    assert [(j["status"], j["exit_reason"]) for j in items] == [("interrupted", "stale")] * 2, items
    assert all("no activity for" in j["error"] for j in items)
    assert len(model.api.requests) == 2  # nothing ran again
