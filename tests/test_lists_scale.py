"""Lists that scale (ps, events, completion page through everything) and integers range-checked."""

from __future__ import annotations

import json
import sqlite3

import msgpack
import pytest
import zmq

from hermesd import protocol
from hermesd.protocol import ProtocolError
from tests.harness import DaemonProc


def insert_jobs(daemon: DaemonProc, n: int, status: str = "completed", prefix: str = "deleg_old") -> list[str]:
    """``n`` finished jobs written straight into the daemon's state.db (as a long-lived daemon has)."""
    db = sqlite3.connect(daemon.home / "state.db", timeout=10)
    ids = [f"{prefix}{i:06d}" for i in range(n)]
    with db:
        db.executemany("INSERT INTO jobs (id, kind, status, goal, dispatched_at, completed_at) VALUES "
                       "(?, 'delegation', ?, 'g', ?, ?)",
                       [(job, status, f"2026-01-01T00:00:{i % 60:02d}Z", "2026-01-01T00:01:00Z")
                        for i, job in enumerate(ids)])
    db.close()
    return ids


def test_ps_pages_through_every_job_newest_first(daemon):
    ids = insert_jobs(daemon, 1159)
    out = daemon.ctl("ps", "--all", "--json")
    assert out.returncode == 0, out.stderr
    listed = [json.loads(line)["id"] for line in out.stdout.splitlines()]
    assert listed == ids[::-1], "every job, newest first"
    out = daemon.ctl("ps", "--all", "--json", "--oldest-first")
    assert [json.loads(line)["id"] for line in out.stdout.splitlines()] == ids
    out = daemon.ctl("ps", "--all", "--json", "--limit", "5")
    assert [json.loads(line)["id"] for line in out.stdout.splitlines()] == ids[::-1][:5]
    assert "more jobs exist" in out.stderr
    page = daemon.call("ps", all=True, limit=1000)
    assert len(page["jobs"]) == 1000 and page["more"] is True and page["next"] is not None
    rest = daemon.call("ps", all=True, limit=1000, cursor=page["next"])
    assert len(rest["jobs"]) == 159 and rest["more"] is False


def test_completion_finds_a_new_job_among_thousands(daemon):
    insert_jobs(daemon, 1500)
    newest = insert_jobs(daemon, 1, status="running", prefix="deleg_zzz")[0]
    c = daemon.conn()
    try:
        assert [j["id"] for j in c.jobs(all=True, order="newest", prefix="deleg_zz")] == [newest]
        assert len(list(c.jobs(all=True, prefix="deleg_old"))) == 1500
    finally:
        c.close()
    out = daemon.ctl(env={"_HERMESCTL_COMPLETE": "bash_complete", "COMP_WORDS": "hermesctl wait deleg_zz",
                          "COMP_CWORD": "2"})
    assert newest in out.stdout, out.stdout + out.stderr


def test_events_newest_first_and_in_order(daemon):
    for _ in range(3):
        daemon.wait_job(daemon.delegate()["id"])
    last = daemon.call("status")["last_seq"]
    out = daemon.ctl("events", "--json")
    seqs = [json.loads(line)["seq"] for line in out.stdout.splitlines()]
    assert seqs == list(range(last, 0, -1)), "newest first, all of them"
    out = daemon.ctl("events", "--json", "--oldest-first", "--limit", "4")
    assert [json.loads(line)["seq"] for line in out.stdout.splitlines()] == [1, 2, 3, 4]
    assert "more events exist" in out.stderr
    page = daemon.call("events_since", since=0, limit=2)
    assert page["more"] is True and page["gap"] is None and page["oldest_seq"] == 1


@pytest.mark.parametrize("argv, field", [
    (["kanban", "create", "t", "--assignee", "x", "--priority", "99999999999999999999"], "priority"),
    (["kanban", "create", "t", "--assignee", "x", "--priority", "9223372036854775807"], "priority"),
    (["events", "--since", "9223372036854775808"], "since"),
    (["batch", "run", "--dataset_file", "/nonexistent.jsonl", "--run_name", "r",
      "--batch_size", "99999999999999999999"], "batch_size"),
])
def test_numbers_out_of_range_are_bad_requests_without_traceback(daemon, argv, field):
    out = daemon.ctl(*argv)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert field in out.stderr and "Traceback" not in out.stderr
    assert "Traceback" not in daemon.log()


def test_frames_with_huge_integers_get_bad_request_naming_the_field(daemon):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"ipc://{daemon.runtime / 'hermesd.sock'}")
    try:
        cases = [("events_since", {"since": (1 << 64) - 1}, "since"),
                 ("ps", {"all": True, "limit": 0}, "limit"),
                 ("kanban.create", {"title": "t", "assignee": "x", "priority": 1 << 63}, "priority"),
                 ("spawn_parallel", {"tasks": [{"goal": "g"}, {"goal": "g", "max_turns": (1 << 64) - 1}]},
                  "tasks[1].max_turns"),
                 ("delegate", {"goal": "g", "timeout_seconds": float("inf")}, "timeout_seconds"),
                 ("logs", {"id": "x", "limit": -5}, "limit")]
        for i, (op, args, field) in enumerate(cases):
            sock.send(msgpack.packb({"v": 1, "id": i, "op": op, "args": args}))
            assert sock.poll(10000)
            reply = msgpack.unpackb(sock.recv(), raw=False)
            assert reply["ok"] is False and reply["error"]["code"] == "bad_request", reply
            assert reply["error"]["details"]["field"] == field, reply
    finally:
        sock.close()
    assert "Traceback" not in daemon.log()


def test_client_refuses_what_msgpack_cannot_carry(daemon):
    with pytest.raises(ProtocolError) as err:
        daemon.call("events_since", since=1 << 70)
    assert err.value.code == "bad_request" and err.value.details["field"] == "since"


@pytest.mark.parametrize("single", [False, True])
def test_the_byte_scan_never_passes_a_frame_whose_numbers_check_ints_refuses(single):
    """``protocol.may_hold_bad_numbers`` lets the daemon skip the walk of a frame: it must
    say "maybe" for every frame the walk would refuse (floats 64 and 32 bits, ints)."""
    values = [0, 1, -1, (1 << 63) - 1, -(1 << 63), 1 << 63, (1 << 64) - 1, 0.0, -0.0, 1.5, -2.5e300, 5e-324,
              float("inf"), float("-inf"), float("nan"), -float("nan"), 3.4e38, "x" * 40, [1.0, [2**63]]]
    for value in values:
        try:
            frame = msgpack.packb({"a": [value, {"b": value}]}, use_single_float=single)
        except OverflowError:  # a double no float 32 holds
            continue
        decoded = msgpack.unpackb(frame, raw=False)
        try:
            protocol.check_ints(decoded)
        except ProtocolError:
            assert protocol.may_hold_bad_numbers(frame), (value, single)
    assert not protocol.may_hold_bad_numbers(msgpack.packb({"ok": [1, 2.5, "text", -(1 << 63)]}))
