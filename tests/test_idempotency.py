"""Idempotent submission: a request sent again with the same ``idempotency_key`` gets the first
job (same id, ``repeat: true``) and starts nothing, for delegations, parallel groups, session
messages and batch runs, also after a restart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hermesd.protocol import ProtocolError
from tests.test_batch_daemon import write_dataset

SLOW = [{"text": "done", "sleep": 1.0}]


def test_delegate_twice_with_a_key_is_one_job_also_after_a_restart(daemon):
    first = daemon.delegate("once", background=True, script=SLOW, idempotency_key="cron-1")
    again = daemon.delegate("once, sent again", background=True, idempotency_key="cron-1")
    assert again["id"] == first["id"] and again["repeat"] is True and "repeat" not in first
    other = daemon.delegate("another", background=True, script=SLOW, idempotency_key="cron-2")
    assert other["id"] != first["id"]
    assert daemon.wait_job(first["id"])["status"] == "completed"
    assert daemon.stop() == 0
    daemon.start()
    cli = daemon.ctl("delegate", "--background", "--idempotency-key", "cron-1", "--json", "once")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["id"] == first["id"]
    people = daemon.ctl("delegate", "--background", "--idempotency-key", "cron-1", "once")
    assert people.stdout.startswith(first["id"]) and "not started again" in people.stderr
    assert sorted(j["id"] for j in daemon.call("ps", all=True)["jobs"]) == sorted([first["id"], other["id"]])


def test_spawn_parallel_session_send_and_batch_run_repeat_their_first_answer(daemon, tmp_path):
    group = daemon.call("spawn_parallel", tasks=[{"goal": "a"}, {"goal": "b"}], cwd=str(daemon.work),
                        idempotency_key="k")
    again = daemon.call("spawn_parallel", tasks=[{"goal": "a"}, {"goal": "b"}, {"goal": "c"}],
                        cwd=str(daemon.work), idempotency_key="k")
    assert again["repeat"] and again["group"] == group["group"]
    assert [j["id"] for j in again["jobs"]] == [j["id"] for j in group["jobs"]]

    turn = daemon.call("session.send", session="s", text="hello", cwd=str(daemon.work), idempotency_key="k")
    resent = daemon.ctl("send", "s", "hello", "--idempotency-key", "k")
    assert resent.stdout.startswith(turn["turn"]["id"]) and "not started again" in resent.stderr
    assert len([j for j in daemon.call("ps", all=True)["jobs"] if j["kind"] == "session_turn"]) == 1

    data = write_dataset(tmp_path / "data.jsonl", [{"prompt": "p1"}])
    args = dict(dataset_file=str(data), batch_size=1, run_name="r", output_dir=str(tmp_path / "out"),
                idempotency_key="nightly")
    run = daemon.call("batch.run", **args)
    out = subprocess.run([str(Path(sys.executable).parent / "hermes-batch"), "--dataset_file", str(data), "--batch_size", "1",
                          "--run_name", "r", "--output_dir", str(tmp_path / "out"), "--idempotency-key", "nightly",
                          "--detach"], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == run["id"] and "not started again" in out.stderr


def test_a_bad_key_is_refused_naming_it(daemon):
    for key in ("", "x" * 201, "line\nbreak"):
        with pytest.raises(ProtocolError) as err:
            daemon.delegate("bad", idempotency_key=key)
        assert err.value.code == "bad_request" and "idempotency_key" in str(err.value)
