"""Idempotent submission: the same request sent again with the same ``idempotency_key`` gets the
first job (same id, ``repeat: true``) and starts nothing, for delegations, parallel groups, session
messages and batch runs, and the first Kanban task for ``kanban.create``, also after a restart; the key
sent with other arguments is refused."""

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
    cli = daemon.ctl("delegate", "--background", "--idempotency-key", "cron-1", "--json", "once")
    assert cli.returncode == 0, cli.stderr
    first = json.loads(cli.stdout)
    assert "repeat" not in first
    other = daemon.delegate("another", background=True, script=SLOW, idempotency_key="cron-2")
    assert other["id"] != first["id"]
    assert daemon.wait_job(first["id"])["status"] == "completed"
    assert daemon.stop() == 0
    daemon.start()
    again = daemon.ctl("delegate", "--background", "--idempotency-key", "cron-1", "--json", "once")
    assert again.returncode == 0 and json.loads(again.stdout)["id"] == first["id"], again.stderr
    assert json.loads(again.stdout)["repeat"] is True
    people = daemon.ctl("delegate", "--background", "--idempotency-key", "cron-1", "once")
    assert people.stdout.startswith(first["id"]) and "not started again" in people.stderr
    assert sorted(j["id"] for j in daemon.call("ps", all=True)["jobs"]) == sorted([first["id"], other["id"]])


def test_the_key_with_other_arguments_is_refused_naming_it_and_the_first_job(daemon):
    first = daemon.delegate("a", background=True, script=SLOW, idempotency_key="k")
    out = daemon.ctl("delegate", "--background", "--idempotency-key", "k", "a different goal")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "idempotency_key 'k' was sent before with other arguments" in out.stderr and first["id"] in out.stderr
    with pytest.raises(ProtocolError) as err:
        daemon.delegate("a", background=True, idempotency_key="k")  # no script: another request too
    assert err.value.code == "bad_request" and err.value.details["job"] == first["id"]
    assert daemon.delegate("a", background=True, script=SLOW, idempotency_key="k")["repeat"] is True
    assert [j["id"] for j in daemon.call("ps", all=True)["jobs"]] == [first["id"]]


def test_spawn_parallel_session_send_and_batch_run_repeat_their_first_answer(daemon, tmp_path):
    tasks = [{"goal": "a"}, {"goal": "b"}]
    group = daemon.call("spawn_parallel", tasks=tasks, cwd=str(daemon.work), idempotency_key="k")
    again = daemon.call("spawn_parallel", tasks=tasks, cwd=str(daemon.work), idempotency_key="k")
    assert again["repeat"] and again["group"] == group["group"]
    assert [j["id"] for j in again["jobs"]] == [j["id"] for j in group["jobs"]]
    with pytest.raises(ProtocolError, match="other arguments"):
        daemon.call("spawn_parallel", tasks=[*tasks, {"goal": "c"}], cwd=str(daemon.work), idempotency_key="k")

    turn = daemon.ctl("send", "s", "hello", "--idempotency-key", "k", "--json")
    assert turn.returncode == 0, turn.stderr
    resent = daemon.ctl("send", "s", "hello", "--idempotency-key", "k")
    assert resent.stdout.startswith(json.loads(turn.stdout)["turn"]["id"]) and "not started again" in resent.stderr
    assert len([j for j in daemon.call("ps", all=True)["jobs"] if j["kind"] == "session_turn"]) == 1

    data = write_dataset(tmp_path / "data.jsonl", [{"prompt": "p1"}])
    argv = [str(Path(sys.executable).parent / "hermes-batch"), "--dataset_file", str(data), "--batch_size", "1",
            "--run_name", "r", "--output_dir", str(tmp_path / "out"), "--idempotency-key", "nightly", "--detach"]
    runs = [subprocess.run(argv, env=daemon.env, capture_output=True, text=True, timeout=60) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[1].stderr
    assert runs[1].stdout.strip() == runs[0].stdout.strip() and "not started again" in runs[1].stderr


def test_a_bad_key_is_refused_naming_it(daemon):
    for key in ("", "x" * 201, "line\nbreak"):
        with pytest.raises(ProtocolError) as err:
            daemon.delegate("bad", idempotency_key=key)
        assert err.value.code == "bad_request" and "idempotency_key" in str(err.value)


def test_a_background_errand_sent_twice_with_a_key_is_one_job(daemon):
    # Found by the soak (issue 44): a client whose `/background` got no answer (the daemon was
    # killed meanwhile) sends it again with its key; the key was ignored, and two errands ran.
    args = {"session": "s", "text": "/background one errand", "cwd": str(daemon.work), "idempotency_key": "bg-1"}
    first = daemon.call("session.send", **args)
    again = daemon.call("session.send", **args)
    assert again["delegation_id"] == first["delegation_id"] and again["repeat"] is True
    assert again["command"] == "background" and again["session"] == "s"
    errands = [j for j in daemon.call("ps", all=True)["jobs"] if j["kind"] == "background"]
    assert [j["id"] for j in errands] == [first["delegation_id"]]
    with pytest.raises(ProtocolError, match="other arguments"):
        daemon.call("session.send", **{**args, "text": "/background another errand"})


def test_kanban_create_twice_with_a_key_is_one_task_also_after_a_restart(daemon):
    # Found by the soak: a client that lost kanban.create's answer could not ask again safely.
    made = daemon.ctl("profile", "create", "scribe", "--description", "Writes notes", "--provider", "scripted")
    assert made.returncode == 0, made.stderr
    argv = ("kanban", "create", "write the notes", "--assignee", "scribe", "--triage", "--idempotency-key", "plan-1")
    cli = daemon.ctl(*argv, "--json")
    assert cli.returncode == 0, cli.stderr
    first = json.loads(cli.stdout)
    assert "repeat" not in first and "idempotency_key" not in first
    assert daemon.stop() == 0
    daemon.start()
    again = daemon.ctl(*argv, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {**first, "repeat": True}
    people = daemon.ctl(*argv)
    assert people.stdout.startswith(first["id"]) and "not started again" in people.stderr
    other = daemon.ctl("kanban", "create", "other notes", "--assignee", "scribe", "--triage", "--idempotency-key", "plan-1")
    assert other.returncode == 2 and "was sent before with other arguments (task " + first["id"] in other.stderr
    with pytest.raises(ProtocolError) as err:
        daemon.call("kanban.create", title="write the notes", assignee="scribe", idempotency_key="plan-1")
    assert err.value.code == "bad_request" and err.value.details["task"] == first["id"]
    assert [t["id"] for t in daemon.call("kanban.list")["tasks"]] == [first["id"]]
