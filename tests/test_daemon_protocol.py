"""The control protocol under abuse, and event catch-up without loss."""

from __future__ import annotations

import random

import msgpack
import pytest
import zmq

from hermesd import protocol
from hermesd.protocol import ProtocolError



def _garbage(rng: random.Random) -> list[bytes]:
    """One malformed or random request (as the frames a DEALER sends)."""
    choice = rng.randrange(10)
    if choice == 0:
        return [rng.randbytes(rng.randrange(0, 300))]
    if choice == 1:
        return [msgpack.packb(rng.choice([1, "x", [1, 2], None, 3.5, True]))]
    if choice == 2:
        return [msgpack.packb({"v": 1, "id": rng.randrange(1 << 30), "op": rng.choice(["delegate", "wait", "cancel",
                               "logs", "ps", "events_since", "job", "result"]),
                               "args": {rng.choice(["goal", "id", "since", "offset", "tasks", "toolsets"]):
                                        rng.choice([None, -1, 1 << 62, "", "x" * 10, [], {}, [1, "a"], 2.5, True])}})]
    if choice == 3:
        return [msgpack.packb({"v": rng.choice([0, 2, "1", None]), "id": 1, "op": "hello"})]
    if choice == 4:
        return [msgpack.packb({"v": 1, "id": rng.choice([None, [], {}, 1.5, True]), "op": "hello"})]
    if choice == 5:
        return [msgpack.packb({"v": 1, "id": 7, "op": rng.choice(["", 5, None, "child.hello", "x" * 1000])})]
    if choice == 6:
        return [msgpack.packb({"v": 1, "id": 8, "op": "status", "args": rng.choice([[], "a", 5])})]
    if choice == 7:
        return [b"", b""] + [rng.randbytes(10)]
    if choice == 8:
        return [msgpack.packb({"v": 1, "id": 9, "op": "delegate", "args": {"goal": "x", "cwd": "relative/dir"}})]
    return [msgpack.packb({"v": 1, "id": 10, "op": "events_since", "args": {"since": "zero"}})]


def test_thousand_malformed_frames_get_typed_errors(daemon):
    rng = random.Random(1234)
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"ipc://{daemon.runtime / 'hermesd.sock'}")
    replies = []
    for _ in range(1000):
        sock.send_multipart(_garbage(rng))
        while sock.poll(0):
            replies.append(sock.recv_multipart())
    while sock.poll(1000):  # drain until the daemon has been quiet for a second
        replies.append(sock.recv_multipart())
    assert len(replies) >= 900  # the rest were dropped (nothing to answer to)
    codes = set()
    for frames in replies:
        reply = protocol.decode_reply(frames[-1])
        assert reply["ok"] in (True, False)
        if not reply["ok"]:
            assert reply["error"]["code"] in protocol.ERROR_CODES
            codes.add(reply["error"]["code"])
    assert {"bad_request", "unknown_op", "version_mismatch"} <= codes
    sock.close()
    assert daemon.call("hello")["pid"] == daemon.proc.pid
    assert daemon.proc.poll() is None


def test_oversized_frame_is_dropped_and_daemon_stays_up(daemon):
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"ipc://{daemon.runtime / 'hermesd.sock'}")
    sock.send(b"\x00" * (protocol.MAX_MESSAGE_BYTES + 10))
    sock.close()
    assert daemon.call("hello")["pid"] == daemon.proc.pid


def test_disconnected_subscriber_catches_up_without_loss(daemon):
    conn = daemon.conn()
    seen = []
    for event in conn.follow(0, follow=False):
        seen.append(event["seq"])
    before = seen[-1] if seen else 0
    # while "disconnected", work happens
    recs = [daemon.delegate(f"while away {i}") for i in range(3)]
    for rec in recs:
        daemon.wait_job(rec["id"])
    # reconnect: subscribe first, then the backlog, de-duplicated by seq
    got = []
    for event in daemon.conn().follow(before, follow=True, idle=0.2, stop_after=1.5):
        got.append(event)
    seqs = [e["seq"] for e in got]
    assert seqs == list(range(before + 1, before + 1 + len(seqs)))
    assert seqs == sorted(set(seqs))
    states = [(e["job"], e["data"]["status"]) for e in got if e["type"] == "job.state"]
    for rec in recs:
        assert (rec["id"], "completed") in states
    last = daemon.call("events_since", since=0, limit=10000)["last_seq"]
    assert seqs[-1] == last


def test_live_subscriber_sees_completion_events(daemon):
    conn = daemon.conn()
    start = daemon.call("events_since", since=0)["last_seq"]
    rec = daemon.delegate("observe me", background=True)
    types = []
    for event in conn.follow(start, idle=0.2, stop_after=15):
        types.append(event["type"])
        if event["type"] == "async_delegation":
            data = event["data"]
            for key in ("goal", "context", "toolsets", "role", "model", "status", "api_calls",
                        "duration_seconds", "dispatched_at", "completed_at", "result"):
                assert key in data, key
            assert data["delegation_id"] == rec["id"] and data["status"] == "completed"
            break
    assert "job.queued" in types and "async_delegation" in types


def test_typed_argument_errors(daemon):
    for args in ({"goal": ""}, {"goal": 5}, {"goal": "x", "background": "yes"}, {"goal": "x", "max_turns": 0}):
        with pytest.raises(ProtocolError) as info:
            daemon.call("delegate", cwd=str(daemon.work), **args)
        assert info.value.code == "bad_request"
