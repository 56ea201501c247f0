"""Issue 19 end to end on real daemons: stale children, opt-in wall clock, pause/resume,
--after, retry, --env, the job-end hook, structured output, and an agent steering its own
children (scripted provider and the fake Anthropic server)."""

from __future__ import annotations

import json
import math

import psutil
import pytest

from child.channel import Channel
from hermesd import config as config_mod
from hermesd.protocol import ProtocolError
from tests.fakes.anthropic_server import FakeAnthropic, Message, text_block
from tests.harness import wait_for

# start_method (run again with the other start method, .ci/run): the tests where how a child starts
# shows: a child interrupted or timed out (its process group stopped), its environment, a shutdown.

QUIET = [{"text": "thinking hard", "sleep": 30}]
"""A model call that never answers and shows no activity."""


def _stale(make_daemon, seconds=1.5, **config):
    return make_daemon({"delegation": {"stale_after_seconds": seconds}, **config})


# -- timeouts: activity, not clocks ------------------------------------------------------------


@pytest.mark.start_method
def test_a_quiet_child_is_interrupted_as_stale_saying_what_it_was_doing(make_daemon):
    d = _stale(make_daemon)
    rec = d.wait_job(d.delegate("quiet", script=QUIET)["id"], timeout=30)
    assert (rec["status"], rec["exit_reason"]) == ("interrupted", "stale")
    assert "no activity for" in rec["error"] and "waiting for the model's first reply" in rec["error"], rec["error"]


def test_a_long_streamed_reply_and_a_chatty_command_are_activity(make_daemon):
    d = _stale(make_daemon)
    streamed = d.delegate("stream", script=[{"text": "done", "stream": 4}])
    chatty = d.delegate("chatty", toolsets=["terminal"], script=[
        {"tool_calls": [{"name": "terminal", "input": {"command": "for i in 1 2 3 4 5 6 7 8; do echo $i; "
                                                                   "sleep 0.5; done"}}]},
        {"text": "counted"}])
    assert d.wait_job(streamed["id"], timeout=30)["status"] == "completed"
    assert d.wait_job(chatty["id"], timeout=30)["status"] == "completed"


def test_streaming_from_the_fake_anthropic_server_is_reported_as_activity(make_daemon):
    with FakeAnthropic() as api:
        api.reply(Message([text_block("a long answer " * 40)], event_delay=0.6))  # ~6.5 s of streamed events
        # (importing the SDK alone can take seconds on a loaded machine: no tight stale limit here)
        d = make_daemon({"delegation": {"stale_after_seconds": 60}, "provider": "anthropic", "base_url": api.url},
                        env={"ANTHROPIC_API_KEY": "test-key"})
        rec = d.wait_job(d.delegate("stream slowly", toolsets=[])["id"], timeout=60)
        assert rec["status"] == "completed", rec["error"]
        progress = [e["data"] for e in d.call("events_since", since=0, types=["job.progress"])["events"]]
        streaming = [p for p in progress if p.get("activity") == "streaming the model's reply"]
        assert len(streaming) >= 2, progress  # throttled (every 2 s), but all along the stream


@pytest.mark.start_method
def test_no_default_wall_clock_and_an_opt_in_one(make_daemon):
    assert config_mod.Config().delegation.child_timeout_seconds is None
    d = make_daemon()
    rec = d.wait_job(d.delegate("limited", timeout_seconds=1, script=[{"text": "x", "stream": 20}])["id"], timeout=30)
    assert (rec["status"], rec["exit_reason"]) == ("timed_out", "timeout")
    assert rec["timeout_seconds"] == 1


@pytest.mark.parametrize("bad", [-1, 0, math.nan, math.inf])
def test_bad_limits_are_bad_request(daemon, bad):
    with pytest.raises(ProtocolError) as err:
        daemon.delegate("x", timeout_seconds=bad)
    assert err.value.code == "bad_request" and "timeout_seconds" in err.value.message


@pytest.mark.parametrize("text", ["delegation: {stale_after_seconds: 0}", "delegation: {stale_after_seconds: .nan}",
                                  "delegation: {child_timeout_seconds: -5}", "hooks: {timeout_seconds: 0}"])
def test_bad_limits_in_the_config_are_refused(text):
    with pytest.raises(config_mod.ConfigError):
        config_mod.parse(text, "config.yaml")


def test_hermesctl_timeout_seconds_nan_is_a_usage_error(daemon):
    res = daemon.ctl("delegate", "x", "--timeout-seconds", "nan")
    assert res.returncode == 2 and "--timeout-seconds" in res.stderr  # the flag typed, not the argument


# -- operator controls --------------------------------------------------------------------------


def test_pause_holds_new_starts_across_a_restart_and_resume_runs_them(make_daemon):
    d = make_daemon()
    assert "paused" in d.ctl("pause").stdout
    res = d.ctl("delegate", "held", "--background", "--json")
    rec = json.loads(res.stdout)
    assert rec["status"] == "queued" and rec["queue_paused"] is True
    assert "the queue is paused" in d.ctl("delegate", "held too", "--background").stderr
    assert "PAUSED" in d.ctl("status").stdout
    d.stop()
    d.start()
    assert d.call("status")["queue"]["paused"] is True
    assert d.call("job", id=rec["id"])["status"] == "queued"
    d.ctl("resume")
    assert d.wait_job(rec["id"])["status"] == "completed"
    assert d.call("status")["queue"]["paused"] is False


def test_while_paused_nothing_is_refused_and_the_caps_wait_in_the_queue(make_daemon):
    d = make_daemon({"delegation": {"max_async_children": 2}})
    d.ctl("pause")
    held = [d.ctl("delegate", "--background", "--json", f"held {i}") for i in range(4)]
    assert [r.returncode for r in held] == [0] * 4, [r.stderr for r in held]
    status = d.ctl("status").stdout
    assert "cap async: 0/2" in status and "0 running, 4 queued" in status
    slash = d.ctl("send", "main", "/background look around")
    assert slash.returncode == 0 and "the queue is paused: it starts after hermesctl resume" in slash.stdout
    d.ctl("resume")
    for rec in held:
        assert d.wait_job(json.loads(rec.stdout)["id"])["status"] == "completed"


def test_after_starts_when_all_completed_and_fails_naming_the_one_that_did_not(daemon):
    first = daemon.delegate("first", script=[{"text": "one", "stream": 1.5}])
    second = daemon.delegate("second")
    then = daemon.delegate("then", after=[first["id"], second["id"]])
    assert daemon.call("job", id=then["id"])["status"] == "queued"
    assert daemon.call("status")["queue"]["waiting_for_jobs"] == 1
    done = daemon.wait_job(then["id"])
    assert done["status"] == "completed" and done["after"] == [first["id"], second["id"]]
    assert done["started_at"] >= daemon.call("job", id=first["id"])["completed_at"]

    failing = daemon.delegate("fails", script=[{"error": "model exploded"}])
    doomed = daemon.delegate("doomed", after=[failing["id"]])
    chained = daemon.delegate("chained", after=[doomed["id"]])
    rec = daemon.wait_job(doomed["id"])
    assert (rec["status"], rec["exit_reason"]) == ("failed", "dependency")
    assert failing["id"] in rec["error"] and "model exploded" in rec["error"]
    assert daemon.wait_job(chained["id"])["status"] == "failed"


def test_after_an_unknown_id_is_not_found(daemon):
    res = daemon.ctl("delegate", "x", "--after", "deleg_000000000000")
    assert res.returncode == 5 and "deleg_000000000000" in res.stderr


def test_a_cycle_in_after_is_bad_request():
    from hermesd.control import dependencies

    rows = {"a": {"spec": {"after": ["b"]}}, "b": {"spec": {"after": ["new"]}}}
    with pytest.raises(ProtocolError) as err:
        dependencies.check("new", ["a"], rows.get)
    assert err.value.code == "bad_request" and "new -> a -> b -> new" in err.value.message


def test_retry_runs_the_same_spec_again_linked_to_the_old_job(daemon):
    old = daemon.wait_job(daemon.delegate("try me", script=[{"error": "flaky"}], env={"MODE": "x"})["id"])
    assert old["status"] == "failed"
    res = daemon.ctl("retry", old["id"], "--json")
    new = json.loads(res.stdout)
    assert new["retry_of"] == old["id"] and new["id"] != old["id"] and new["goal"] == "try me"
    assert new["env"] == ["MODE"]
    assert daemon.wait_job(new["id"])["status"] == "failed"  # same script, same end
    running = daemon.delegate("busy", script=QUIET)
    assert daemon.ctl("retry", running["id"]).returncode == 6  # invalid_state while it runs
    daemon.call("cancel", id=running["id"])


@pytest.mark.start_method
def test_env_per_job_reaches_the_child_and_hermes_names_are_refused(daemon):
    rec = daemon.ctl("delegate", "env", "--env", "GREETING=hello world", "--toolsets", "terminal", "--json")
    assert rec.returncode == 0, rec.stderr
    job = json.loads(rec.stdout)
    assert job["env"] == ["GREETING"]
    script = [{"tool_calls": [{"name": "terminal", "input": {"command": "printf %s \"$GREETING\" > greeting.txt"}}]},
              {"text": "done"}]
    out = daemon.wait_job(daemon.delegate("write", toolsets=["terminal"], env={"GREETING": "hi there"},
                                          script=script)["id"])
    assert out["status"] == "completed"
    assert (daemon.work / "greeting.txt").read_text() == "hi there"
    with pytest.raises(ProtocolError) as err:
        daemon.delegate("x", env={"HERMES_CHILD_TOKEN": "stolen"})
    assert err.value.code == "bad_request" and "HERMES_CHILD_TOKEN" in err.value.message


# -- the job-end hook ---------------------------------------------------------------------------


def test_on_job_end_gets_the_record_and_a_slow_or_failing_hook_never_hurts(make_daemon, tmp_path):
    out = tmp_path / "hooks"
    out.mkdir()
    d = make_daemon({"hooks": {"on_job_end": f'cat > {out}/"$HERMES_JOB_ID.json"; '
                                             f'case "$HERMES_JOB_STATUS" in failed) exit 3;; cancelled) sleep 60;; esac',
                               "timeout_seconds": 1}})
    ok = d.wait_job(d.delegate("hooked")["id"])
    record = json.loads(wait_for(lambda: (out / f"{ok['id']}.json").exists() and (out / f"{ok['id']}.json").read_text(),
                                 what="hook output"))
    assert record["id"] == ok["id"] and record["status"] == "completed" and record["goal"] == "hooked"
    bad = d.wait_job(d.delegate("fails", script=[{"error": "boom"}])["id"])
    slow = d.delegate("slow", script=QUIET)
    d.call("cancel", id=slow["id"])
    wait_for(lambda: f"{bad['id']} failed with exit status 3" in d.log(), what="failure logged")
    wait_for(lambda: f"for {slow['id']} took longer than hooks.timeout_seconds" in d.log(), what="slow hook killed")
    assert d.call("status")["hooks"]["on_job_end"] is True  # the daemon answers throughout
    assert not [p for p in psutil.process_iter(["cmdline"]) if "sleep 60" in " ".join(p.info["cmdline"] or [])
                and str(out) in " ".join(p.info["cmdline"] or [])]


@pytest.mark.start_method
def test_on_job_end_runs_to_the_end_for_the_jobs_a_shutdown_interrupts(make_daemon, tmp_path):
    out = tmp_path / "hooks"
    out.mkdir()
    d = make_daemon({"hooks": {"on_job_end": f'sleep 0.5; cat > {out}/"$HERMES_JOB_ID.json"', "timeout_seconds": 10}})
    # resume=False: these end interrupted at the shutdown (resumable ones go back to the queue, not ended)
    held = [d.delegate(f"long {i}", background=True, script=QUIET, resume=False)["id"] for i in range(3)]
    wait_for(lambda: all(d.call("job", id=j)["status"] == "running" for j in held), what="the jobs to run")
    assert d.ctl("shutdown", "--wait").returncode == 0
    records = {j: json.loads((out / f"{j}.json").read_text()) for j in held}
    assert {r["status"] for r in records.values()} == {"interrupted"}
    assert "killed" not in d.log()


# -- structured output --------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_output_schema_one_repair_turn_then_failed_with_the_error(daemon, tmp_path):
    repaired = daemon.wait_job(daemon.delegate("count", output_schema=SCHEMA, toolsets=[],
                                               script=[{"text": "about three"}, {"text": '```json\n{"n": 3}\n```'}])["id"])
    assert repaired["status"] == "completed" and json.loads(repaired["summary"]) == {"n": 3}
    broken = daemon.wait_job(daemon.delegate("count", output_schema=SCHEMA, toolsets=[],
                                             script=[{"text": '{"n": "three"}'}, {"text": '{"n": "3"}'}])["id"])
    assert (broken["status"], broken["exit_reason"]) == ("failed", "output_schema")
    assert "$.n" in broken["error"] and "integer" in broken["error"]
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integr"}}}))
    res = daemon.ctl("delegate", "x", "--output-schema", str(schema_file))
    assert res.returncode == 2 and "$.properties.n.type" in res.stderr, res.stderr


# -- an agent controls its own children -----------------------------------------------------------


def _token_of(daemon, job_id):
    def find():
        for proc in daemon.children():
            try:
                env = proc.environ()
            except psutil.Error:
                continue
            if env.get("HERMES_JOB_ID") == job_id and "HERMES_CHILD_TOKEN" in env:
                return env["HERMES_CHILD_TOKEN"]
        return None
    return wait_for(find, what=f"the token of {job_id}")


def test_an_agent_lists_steers_and_stops_only_its_own_children(make_daemon):
    d = make_daemon({"delegation": {"max_spawn_depth": 1}})
    parent = d.delegate("parent", role="orchestrator", toolsets=["delegation"], script=QUIET)
    other = d.delegate("someone else's", script=QUIET)
    wait_for(lambda: d.call("job", id=parent["id"])["status"] == "running", what="parent running")
    channel = Channel(str(d.runtime / "children.sock"), parent["id"], _token_of(d, parent["id"]))
    try:
        steady = [{"tool_calls": [{"name": "terminal", "input": {"command": "sleep 1"}}]} for _ in range(3)]
        kid = channel.call("child.delegate", background=True,
                           tasks=[{"goal": "child work", "toolsets": ["terminal"], "script": steady + QUIET}])
        kid_id = kid["delegation_id"]
        wait_for(lambda: d.call("job", id=kid_id)["status"] == "running", what="child running")
        listed = channel.call("child.children")["subagents"]
        assert [c["id"] for c in listed] == [kid_id]
        assert listed[0]["goal"] == "child work" and listed[0]["status"] == "running"
        assert {"model_calls", "last_activity", "last_activity_at"} <= set(listed[0])
        assert channel.call("child.steer", id=kid_id, message="focus on the README")["id"] == kid_id
        wait_for(lambda: "focus on the README" in d.call("logs", id=kid_id)["data"], what="the child read it")
        for op, extra in (("child.steer", {"message": "hi"}), ("child.stop_child", {})):
            with pytest.raises(ProtocolError) as err:
                channel.call(op, id=other["id"], **extra)
            assert err.value.code == "not_found"
        channel.call("child.stop_child", id=kid_id)
        rec = d.wait_job(kid_id)
        assert rec["status"] == "interrupted" and "stopped by the agent" in rec["error"]
    finally:
        channel.close()
        for job in (parent, other):
            d.call("cancel", id=job["id"])
