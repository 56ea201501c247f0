"""The daemon's side of warm start (hermesd.warmstart) against a zygote that is gone."""

from __future__ import annotations

import os
import socket

from hermesd import warmstart, zygote
from hermesd.warmstart import ZygoteClient


def _client(monkeypatch, spares):
    monkeypatch.setattr(warmstart, "is_subreaper", lambda: True)
    client = ZygoteClient({})
    monkeypatch.setattr(client, "start", lambda: setattr(client, "restarted", True))  # no real zygote
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.close()  # the zygote died: asking it for a spare fails
    client.sock, client.info, client.spares = ours, {"pid": 4242}, spares
    return client


def test_a_job_handed_to_a_spare_is_not_also_started_cold_when_the_zygote_is_gone(monkeypatch):
    r, w = os.pipe()
    client = _client(monkeypatch, [(5555, w, 4242)])
    child = client.spawn(cwd="/", env={"HERMES_JOB_ID": "j1"}, log_path=os.devnull)
    assert child is not None and child.pid == 5555, "the spare has the job: no cold start as well"
    request = zygote._read_request(r)
    assert request["env"] == {"HERMES_JOB_ID": "j1"} and request["zygote"] == 4242
    assert client.sock is None and client.restarted  # the broken zygote is replaced
    os.close(r)


def test_held_spares_are_used_while_there_is_no_zygote(monkeypatch):
    r, w = os.pipe()
    client = _client(monkeypatch, [(5555, w, 4242)])
    client.sock.close()
    client.sock, client.info = None, None  # lost; the next one is still warming up
    assert client.spawn(cwd="/", env={}, log_path=os.devnull).pid == 5555
    assert zygote._read_request(r)["zygote"] == 4242
    assert client.spawn(cwd="/", env={}, log_path=os.devnull) is None  # none left: cold
    os.close(r)
