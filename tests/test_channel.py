"""The child's channel to ``children.sock``, against a real ROUTER socket."""

from __future__ import annotations

import threading

import zmq

from child import channel as channel_mod
from child.channel import Channel
from hermesd import protocol


def _echo_once(router: zmq.Socket) -> dict:
    """Answer one request on ``router`` with its own args; returns the request."""
    assert router.poll(5000), "no request reached the ROUTER"
    *envelope, frame = router.recv_multipart()
    request = protocol.decode_request(frame)
    router.send_multipart([*envelope, protocol.encode_reply(request.id, request.args)])
    return {"op": request.op, **request.args}


def test_preconnected_socket_is_taken_over_by_the_next_channel(tmp_path):
    path = str(tmp_path / "children.sock")
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{path}")
    try:
        channel_mod.preconnect(path)
        ready = channel_mod._preconnected[path][1]
        chan = Channel(path, "job-1", "tok")
        assert chan._sock is ready and path not in channel_mod._preconnected
        reply_box = {}
        t = threading.Thread(target=lambda: reply_box.update(_echo_once(router)))
        t.start()
        assert chan.call("child.hello", pid=42, timeout=5.0) == {"job": "job-1", "token": "tok", "pid": 42}
        t.join(5)
        assert reply_box["op"] == "child.hello"
        chan.close()
        # no connection waiting: a channel connects on its own
        chan2 = Channel(path, "job-2", "tok")
        assert chan2._sock is not ready
        chan2.close()
    finally:
        channel_mod._preconnected.pop(path, None)
        router.close(linger=0)
        ctx.term()
