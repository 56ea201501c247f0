"""The daemon's side of warm start (hermesd.warm.client): a zygote that is gone, one that is
slower than the requests, one that cannot start — on a real event loop, with real sockets."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import pytest

from child import loopback
from hermesd.warm import client as warm_client
from hermesd.warm.client import HeldSpare, ZygoteClient
from hermesd.warm.wire import read_request, recv_msg, send_msg


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _client(monkeypatch, loop, spares):
    monkeypatch.setattr(warm_client, "is_subreaper", lambda: True)
    client = ZygoteClient({}, loop)
    monkeypatch.setattr(client, "start", lambda: setattr(client, "restarted", True))  # no real zygote
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    client.sock, client.info, client.spares = ours, {"pid": 4242}, spares
    return client, theirs


def test_a_job_handed_to_a_spare_is_not_also_started_cold_when_the_zygote_is_gone(monkeypatch, loop):
    r, w = os.pipe()
    client, theirs = _client(monkeypatch, loop, [HeldSpare(5555, w, 4242)])
    theirs.close()  # the zygote died: asking it for a spare fails
    child = client.spawn(cwd="/", env={"HERMES_JOB_ID": "j1"}, log_path=os.devnull)
    assert child is not None and child.pid == 5555, "the spare has the job: no cold start as well"
    request = read_request(r)
    assert request["env"] == {"HERMES_JOB_ID": "j1"} and request["zygote"] == 4242
    assert client.sock is None and client.restarted  # the broken zygote is replaced
    os.close(r)


def test_held_spares_are_used_while_there_is_no_zygote(monkeypatch, loop):
    r, w = os.pipe()
    client, theirs = _client(monkeypatch, loop, [HeldSpare(5555, w, 4242)])
    theirs.close()
    client.sock.close()
    client.sock, client.info = None, None  # lost; the next one is still warming up
    assert client.spawn(cwd="/", env={}, log_path=os.devnull).pid == 5555
    assert read_request(r)["zygote"] == 4242
    assert client.spawn(cwd="/", env={}, log_path=os.devnull) is None  # none left: cold
    os.close(r)


def test_with_no_spare_held_the_job_starts_cold_at_once_and_the_spare_catches_up(monkeypatch, loop):
    client, theirs = _client(monkeypatch, loop, [])
    client.loop.add_reader(client.sock.fileno(), client._on_readable)
    # A zygote that answers every request for a spare at once: a client that waited for
    # it (on the loop) would get this spare for the job instead of starting it cold.
    assert client.spawn(cwd="/", env={}, log_path=os.devnull) is None
    ask, _ = recv_msg(theirs)
    assert ask == {"fork": 2, "held": 0}  # none held: the zygote forks at once
    r, w = os.pipe()
    send_msg(theirs, {"spare": 6666}, (w,))
    os.close(w)
    loop.run_until_complete(asyncio.sleep(0.05))  # the loop reads it; nobody asks
    assert [s.pid for s in client.spares] == [6666] and client.asked == 1
    assert client.describe() == {"zygote": 4242, "spares": 1}
    assert client.spawn(cwd="/", env={}, log_path=os.devnull).pid == 6666
    assert read_request(r)["zygote"] == 4242
    client.close()
    os.close(r)
    theirs.close()


def test_status_only_reads(monkeypatch, loop):
    client, theirs = _client(monkeypatch, loop, [])
    client.sock.close()
    client.sock, client.info = None, None  # lost, restart not due yet
    assert client.describe() == {"zygote": None, "spares": 0}
    assert not getattr(client, "restarted", False), "describe() must not start a zygote"
    theirs.close()


@pytest.mark.parametrize("command, why", [
    (("/nonexistent/python",), "cannot start the zygote"),
    ((sys.executable, "-c", "raise SystemExit(3)"), "stopped before it was warm"),
])
def test_a_zygote_that_cannot_start_leaves_children_cold_and_says_why(monkeypatch, loop, command, why):
    monkeypatch.setattr(warm_client, "is_subreaper", lambda: True)
    client = ZygoteClient({"PATH": os.environ.get("PATH", "")}, loop, command=command)

    async def until_cold():
        client.start()
        while client.cold_reason is None:
            await asyncio.sleep(0.01)

    loop.run_until_complete(asyncio.wait_for(until_cold(), 30))
    start = client.describe()
    assert start["zygote"] is None and why in start["cold_reason"] and "children start cold" in start["cold_reason"]
    assert client.spawn(cwd="/", env={}, log_path=os.devnull) is None
    client.close()


def test_no_subreaper_no_zygote(monkeypatch, loop):
    monkeypatch.setattr(warm_client, "is_subreaper", lambda: False)
    client = ZygoteClient({}, loop)
    client.start()
    assert client.proc is None and "not a child subreaper" in client.describe()["cold_reason"]


def test_at_hand_says_wait_while_a_spare_is_coming_and_tells_the_listeners_when_it_came(monkeypatch, loop):
    client, theirs = _client(monkeypatch, loop, [])
    client.loop.add_reader(client.sock.fileno(), client._on_readable)
    told = []
    client.listeners.append(lambda: told.append(loop.time()))
    assert client.spawn(cwd="/", env={}, log_path=os.devnull) is None  # cold: the job never waits
    assert client.at_hand() is False, "a spare is on its way: a batch item waits for it"
    r, w = os.pipe()
    send_msg(theirs, {"spare": 6666}, (w,))
    os.close(w)
    loop.run_until_complete(asyncio.sleep(0.05))
    assert told and client.at_hand() is True
    client.close()
    os.close(r)
    theirs.close()


def test_at_hand_stops_waiting_for_a_spare_that_does_not_come(monkeypatch, loop):
    monkeypatch.setattr(warm_client, "SPARE_WAIT", 0.1)
    client, theirs = _client(monkeypatch, loop, [])
    told = []
    client.listeners.append(lambda: told.append(True))
    assert client.at_hand() is False
    loop.run_until_complete(asyncio.sleep(0.3))  # the zygote is stuck: no spare
    assert told == [True] and client.at_hand() is True, "after SPARE_WAIT a cold start is as good"
    theirs.close()
    client.sock.close()


def test_at_hand_without_a_warm_zygote_never_waits(monkeypatch, loop):
    client, theirs = _client(monkeypatch, loop, [])
    client.info = None  # warming up
    assert client.at_hand() is True
    theirs.close()
    client.sock.close()


def test_the_template_does_what_each_childs_first_call_would_do_itself():
    """After the zygote's warm-up, a child building its SDK client and reaching the API it calls
    imports nothing more (the transport and the resources are the template's, shared); each
    provider's warm calls were answered by the loopback server, whose thread is gone (the
    template forks with no other thread)."""
    code = ("import sys, threading; from child.zygote import preload_for, warm_up; "
            "failed = warm_up(preload_for('anthropic,openai-compat', None)); "
            "import anthropic, openai; before = set(sys.modules); "
            "anthropic.Anthropic(api_key='k', base_url='http://127.0.0.1:9', max_retries=0).messages; "
            "openai.OpenAI(api_key='k', base_url='http://127.0.0.1:9/v1', max_retries=0).chat.completions; "
            "from child.providers import anthropic as a, openai_compat as o; "
            "print(failed, sorted(set(sys.modules) - before), a.warm_template(), o.warm_template(), "
            "threading.active_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"[] [] {loopback.CALLS} {loopback.CALLS} 1", out.stdout


def test_every_sdk_client_of_a_process_verifies_with_one_tls_context(monkeypatch):
    """The certificates are parsed once per process (in the template, so children share them):
    both SDKs' clients use the same context, and another SSL_CERT_FILE gets its own."""
    import ssl

    from child.providers.anthropic import AnthropicProvider
    from child.providers.base import tls_context
    from child.providers.openai_compat import OpenAICompatProvider

    clients = [AnthropicProvider(base_url="http://127.0.0.1:9", api_key="k")._sdk(),
               OpenAICompatProvider("m", base_url="http://127.0.0.1:9/v1", api_key="k")._sdk()]
    shared = tls_context()
    assert isinstance(shared, ssl.SSLContext) and tls_context() is shared
    assert [c._client._transport._pool._ssl_context for c in clients] == [shared, shared]
    if os.environ.get("SSL_CERT_FILE"):
        monkeypatch.delenv("SSL_CERT_FILE")
    else:
        monkeypatch.setenv("SSL_CERT_FILE", ssl.get_default_verify_paths().openssl_cafile)
    assert tls_context() is not shared


def test_the_warm_calls_go_through_no_proxy():
    """A proxy in the template's environment never sees the loopback calls (nothing leaves the
    host): with HTTP(S)_PROXY at a port nobody serves, every warm call is still answered."""
    env = {**os.environ, "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "ALL_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    code = ("from child.providers import anthropic as a, openai_compat as o; "
            "print(a.warm_template(), o.warm_template())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{loopback.CALLS} {loopback.CALLS}", out.stdout
