"""hermesd.endpoint: a ROUTER served from the event loop, over real ZeroMQ sockets."""

from __future__ import annotations

import asyncio

import zmq

from hermesd.endpoint import Endpoint


def serve(address: str, on_message_factory, requests: list[bytes], expect: int | None = None) -> list[bytes]:
    """Bind a ROUTER at ``address``, serve it with an Endpoint whose handler is
    ``on_message_factory(endpoint)``, send ``requests`` from a DEALER; the first ``expect``
    replies (default: one per request), in order (a TimeoutError after 5 s)."""
    expect = len(requests) if expect is None else expect
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.bind(address)
    dealer.connect(address)
    loop = asyncio.new_event_loop()
    holder = {}
    endpoint = Endpoint(loop, router, lambda envelope, frame: holder["handler"](envelope, frame))
    holder["handler"] = on_message_factory(endpoint)
    try:
        for request in requests:
            dealer.send(request)

        async def collect() -> list[bytes]:
            replies = []
            while len(replies) < expect:
                if dealer.poll(0):
                    replies.append(dealer.recv())
                else:
                    await asyncio.sleep(0.001)
            return replies

        return loop.run_until_complete(asyncio.wait_for(collect(), 5.0))
    finally:
        endpoint.close()
        loop.close()
        dealer.close(linger=0)
        ctx.term()


def test_every_request_is_answered_in_order_also_when_answered_inside_the_drain(tmp_path):
    requests = [str(i).encode() for i in range(200)]  # more than one drain's batch
    replies = serve(f"ipc://{tmp_path}/e.sock", lambda ep: lambda envelope, frame: ep.send([*envelope, b"re " + frame]), requests)
    assert replies == [b"re " + r for r in requests]


def test_a_handler_that_raises_does_not_leave_the_next_requests_waiting(tmp_path, caplog):
    def factory(ep):
        def handle(envelope, frame):
            if frame == b"boom":
                raise RuntimeError("a handler's bug")  # the loop logs it and goes on
            ep.send([*envelope, frame])
        return handle

    # inproc: every request is in the ROUTER's queue before the loop first looks (one edge for all)
    assert serve("inproc://endpoint-test", factory, [b"boom", b"a", b"b"], expect=2) == [b"a", b"b"]
    assert "a handler's bug" in caplog.text
