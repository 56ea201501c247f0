"""Fuzzing the control protocol harder than ``tests/test_daemon_protocol.py``:
every op the daemon lists with arguments of every wrong type, hostile msgpack
(deep nesting, lying length headers, bad UTF-8, odd keys), frames just under
and over the size limit, many-frame messages, forged child messages on
``children.sock`` — from several clients at once while a real job runs.

The daemon must answer every frame it can answer with a typed error (or drop
it), never die, keep its memory in bounds, and finish the real job."""

from __future__ import annotations

import random
import struct
import threading

import msgpack
import psutil
import zmq

from hermesd import protocol
from tests.chaos.helpers import assert_no_leftovers

VALUES = [None, True, -1, 0, 1 << 63, -(1 << 63), 2.5, float("nan"), "", "x" * 5000, "\udcff".encode(
    "utf-8", "surrogatepass"), b"\x00\xff", [], [None] * 50, {}, {"a": {"b": {"c": []}}}, {1: 2}, "../../etc/passwd",
          "deleg_" + "0" * 12, "/", "*"]
ARGS = ["id", "goal", "tasks", "toolsets", "since", "limit", "offset", "timeout", "background", "queue", "cwd",
        "session", "text", "context", "model", "role", "dataset_file", "run_name", "batch_size", "types", "all"]


def _hostile_msgpack(rng: random.Random) -> bytes:
    """Frames that are msgpack only in part."""
    depth = rng.choice([100, 5000, 200_000])
    return rng.choice([
        b"\x91" * depth + b"\xc0",                          # arrays nested very deep
        b"\xdb" + struct.pack(">I", 0xFFFFFFF0) + b"abc",    # str32 claiming 4 GiB
        b"\xdd" + struct.pack(">I", 0x7FFFFFFF),             # array32 claiming 2**31 items
        b"\x81\xa2op\xc4\x03\xff\xfe\xfd",                   # op as bytes
        msgpack.packb({"v": 1, "id": 1, "op": "hello", "args": {}}) + b"trailing",
        msgpack.packb({(1, 2): 3, "op": "hello"}),
        msgpack.packb(msgpack.ExtType(5, b"ext")),
        b"\xa3\xff\xfe\xfd",                                 # str with invalid UTF-8
        msgpack.packb({"v": 1, "id": 2, "op": "hello", "args": {"x": float("inf")}}),
    ])


def _request(rng: random.Random, ops: list[str]) -> bytes:
    args = {rng.choice(ARGS): rng.choice(VALUES) for _ in range(rng.randrange(0, 5))}
    body = {"v": rng.choice([1, 1, 1, 2, "1", None]), "id": rng.choice([rng.randrange(1 << 40), "s", None, []]),
            "op": rng.choice(ops + ["", "child.result", "x" * 300]), "args": rng.choice([args, args, [], "a", None])}
    if rng.random() < 0.1:
        del body[rng.choice(list(body))]
    return msgpack.packb(body, use_bin_type=True)


def _frames(rng: random.Random, ops: list[str]) -> list[bytes]:
    roll = rng.random()
    if roll < 0.6:
        return [_request(rng, ops)]
    if roll < 0.85:
        return [_hostile_msgpack(rng)]
    if roll < 0.95:
        return [rng.randbytes(rng.randrange(0, 2000)) for _ in range(rng.randrange(2, 40))]
    return [b""]


def _fuzz(path: str, ops: list[str], seed: int, count: int, replies: list[int]) -> None:
    rng = random.Random(seed)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(path)
    got = 0
    try:
        for _ in range(count):
            sock.send_multipart(_frames(rng, ops))
            while sock.poll(0):
                reply = protocol.decode_reply(sock.recv_multipart()[-1])
                assert reply["ok"] or reply["error"]["code"] in protocol.ERROR_CODES, reply
                got += 1
        while sock.poll(5000):  # until the daemon has been quiet for a while
            sock.recv_multipart()
            got += 1
    finally:
        sock.close()
        replies.append((seed, got))


def test_fuzz_every_op_from_several_clients_while_a_job_runs(daemon):
    ops = [op for op in daemon.call("hello")["ops"] if op != "shutdown"]  # a well-formed one would be obeyed
    rss_before = psutil.Process(daemon.proc.pid).memory_info().rss
    rec = daemon.delegate("survive the fuzz", script=[{"text": "done", "sleep": 3}])
    control, children = (f"ipc://{daemon.runtime / name}" for name in ("hermesd.sock", "children.sock"))
    replies: list[int] = []
    threads = [threading.Thread(target=_fuzz, args=(path, ops + list(protocol.CHILD_OPS), seed, 1500, replies))
               for seed, path in enumerate([control, control, control, children])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    assert len(replies) == 4 and sum(got for _, got in replies) > 2000, replies
    assert daemon.call("hello")["pid"] == daemon.proc.pid and daemon.proc.poll() is None
    final = daemon.wait_job(rec["id"])
    assert final["status"] == "completed" and final["summary"] == "done"
    grown = psutil.Process(daemon.proc.pid).memory_info().rss - rss_before
    assert grown < 150 * 2**20, f"RSS grew by {grown / 2**20:.0f} MiB"
    assert_no_leftovers(daemon, {rec["id"]})


def test_frames_around_the_size_limit(daemon):
    ctx = zmq.Context.instance()
    limit = protocol.MAX_MESSAGE_BYTES
    for size, answered in ((limit - 1024, True), (limit + 1, True), (protocol.MAX_FRAME_READ + 1024, False)):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"ipc://{daemon.runtime / 'hermesd.sock'}")
        args = {"goal": "", "cwd": str(daemon.work)}
        args["goal"] = "g" * (size - len(protocol.encode_request("delegate", args)[1]) - 4)  # str32 header
        _, frame = protocol.encode_request("delegate", args)
        assert abs(len(frame) - size) <= 8
        sock.send(frame)
        if answered:
            assert sock.poll(30_000), "a frame under the limit must be answered"
            reply = protocol.decode_reply(sock.recv())
            assert not reply["ok"] and reply["error"]["code"] in ("too_large", "bad_request"), reply["error"]
            assert size < limit or reply["error"]["code"] == "too_large"
        else:
            assert not sock.poll(1000), "a frame past what the socket reads is dropped"
        sock.close()
        assert daemon.call("hello")["pid"] == daemon.proc.pid


def test_forged_child_messages_do_not_touch_a_real_job(daemon):
    rec = daemon.delegate("real job", script=[{"text": "real result", "sleep": 2}])
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"ipc://{daemon.runtime / 'children.sock'}")
    for op in protocol.CHILD_OPS:
        for token in ("", "0" * 32, None, 5):
            _, frame = protocol.encode_request(op, {"job": rec["id"], "token": token, "status": "completed",
                                                    "summary": "forged", "pid": 1})
            sock.send(frame)
            assert sock.poll(10_000)
            reply = protocol.decode_reply(sock.recv())
            assert not reply["ok"] and reply["error"]["code"] in ("not_found", "bad_request"), reply
    sock.close()
    final = daemon.wait_job(rec["id"])
    assert final["status"] == "completed" and final["summary"] == "real result"
