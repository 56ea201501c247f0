"""MCP servers through real daemons and real third-party servers from PyPI: ``mcp-server-time``
(stdio) and ``mcp-server-git`` on a temporary repository, called by a scripted model through a
delegation; the config's checks; failures as tool errors naming the server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from mcp.server.mcpserver import Image, MCPServer

from hermesd import config
from hermesd.protocol import ProtocolError
from tests.harness import command_line, wait_for

TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def git_server(repo) -> dict:
    return {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]}


def make_repo(path):
    path.mkdir()
    for argv in (["init", "-q"], ["-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-q",
                                  "--allow-empty", "-m", "first"]):
        subprocess.run(["git", *argv], cwd=path, check=True, capture_output=True)
    (path / "new.txt").write_text("untracked\n")
    return path


def trajectory(d, job: str) -> dict:
    return json.loads((d.home / "jobs" / job / "trajectory.json").read_text())


def tool_results(d, job: str) -> list[str]:
    return [str(m["content"]) for m in trajectory(d, job)["messages"] if m["role"] == "tool"]


def call(name: str, **args) -> dict:
    return {"tool_calls": [{"name": name, "input": args}]}


def test_a_delegation_calls_the_tools_of_real_stdio_servers(make_daemon, tmp_path):
    repo = make_repo(tmp_path / "repo")
    d = make_daemon(config={"mcp_servers": {"time": TIME, "git": {**git_server(repo), "tools": ["git_status"]}},
                            "approvals": {"always": ["mcp__nothing__*"]}})
    script = [call("mcp__time__get_current_time", timezone="Europe/Paris"),
              call("mcp__git__git_status", repo_path=str(repo)),
              call("mcp__time__get_current_time", timezone="Not/AZone"),
              {"text": "done"}]
    job = d.delegate("what time is it", script=script, toolsets=["file", "mcp:time", "mcp:git"])["id"]
    row = d.wait_job(job)
    assert row["status"] == "completed", row
    paris, status, bad = tool_results(d, job)
    assert json.loads(paris)["timezone"] == "Europe/Paris"
    assert "new.txt" in status
    assert "MCP server 'time' reports an error" in bad and "Not/AZone" in bad
    trace = d.call("result", id=job)["trace"]
    assert [(t["name"], t["ok"]) for t in trace] == [("mcp__time__get_current_time", True),
                                                     ("mcp__git__git_status", True),
                                                     ("mcp__time__get_current_time", False)]
    assert all(t["seconds"] >= 0 for t in trace)
    recorded = trajectory(d, job)
    offered = {t["function"]["name"]: t["function"] for t in recorded["tools"]}
    assert {"mcp__time__get_current_time", "mcp__time__convert_time", "mcp__git__git_status"} <= set(offered)
    assert "mcp__git__git_log" not in offered  # not in its allow-list
    assert offered["mcp__time__get_current_time"]["parameters"]["required"] == ["timezone"]
    assert recorded["tool_stats"]["mcp__time__get_current_time"] == {"count": 2, "success": 1, "failure": 1}
    log = (d.home / "jobs" / job / "log").read_text()
    assert "mcp time: ready" in log and "mcp git: ready" in log and "s, 1 tool: git_status\n" in log
    stderr = [line for line in log.splitlines() if " mcp time: " in line and "ready in" not in line]
    assert stderr and "Not/AZone" in "\n".join(stderr)  # the server's own stderr, in the job's log
    used = d.call("result", id=job)["mcp"]
    assert used["time"] == {"transport": "stdio", "state": "ready", "tools": 2, "calls": 2, "failures": 1,
                            "error": None} and used["git"]["tools"] == 1
    shown = d.ctl("result", job)
    assert "mcp: time (stdio) ready, 2 tools, 2 calls, 1 failed" in shown.stdout, shown


def test_a_server_that_exits_at_start_is_an_error_naming_it_and_the_job_goes_on(make_daemon):
    d = make_daemon(config={"mcp_servers": {"broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}}})
    script = [call("mcp__broken__anything"), {"text": "went on"}]
    job = d.delegate("try it", script=script, toolsets=["mcp:broken"])["id"]
    row = d.wait_job(job)
    assert row["status"] == "completed" and row["summary"] == "went on"
    (result,) = tool_results(d, job)
    assert "MCP server 'broken' failed: did not start" in result and "exit status 3" in result
    assert "MCP server broken is unavailable" in trajectory(d, job)["messages"][0]["content"]
    assert "[mcp broken failed]" in d.ctl("ps", "--all").stdout


def test_a_server_whose_variable_is_unset_does_not_start_and_says_which(make_daemon):
    d = make_daemon(config={"mcp_servers": {"time": {**TIME, "env": {"X_TOKEN": "${T2_NEVER_SET_TOKEN}"}}}})
    job = d.delegate("t", script=[call("mcp__time__get_current_time", timezone="UTC"), {"text": "on"}],
                     toolsets=["mcp:time"])["id"]
    assert d.wait_job(job)["status"] == "completed"
    why = ("did not start: mcp_servers.time.env: ${T2_NEVER_SET_TOKEN} names a variable hermesd's "
           "environment does not have")
    assert d.call("result", id=job)["mcp"]["time"]["error"] == why
    (result,) = tool_results(d, job)
    assert why in result
    probe = subprocess.run([sys.executable, "-m", "client", "mcp", "tools", "time"], env=d.env,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 1 and why in probe.stderr and "Traceback" not in probe.stderr, probe

def test_a_toolset_naming_no_server_is_refused(make_daemon):
    d = make_daemon(config={"mcp_servers": {"time": TIME, "off": {**TIME, "enabled": False}}})
    for toolset, why in (("mcp:nope", "names no server of mcp_servers (known: mcp:off, mcp:time)"),
                         ("mcp:off", "server 'off' is disabled")):
        with pytest.raises(ProtocolError) as info:
            d.delegate("x", toolsets=[toolset])
        assert why in str(info.value)
    listed = d.ctl("mcp", "list")
    assert listed.returncode == 0 and "mcp:time" in listed.stdout and "disabled" in listed.stdout, listed
    tools = d.ctl("mcp", "tools", "time")
    assert tools.returncode == 0, tools.stderr
    assert "mcp__time__get_current_time" in tools.stdout and "2 tools from MCP server time" in tools.stdout
    assert d.ctl("mcp", "tools", "nope").returncode == 5
    off = d.ctl("mcp", "tools", "off")
    assert off.returncode == 2 and "MCP server 'off' is disabled" in off.stderr and not off.stdout, off
    assert len(off.stderr.strip().splitlines()) == 1 and "Error" not in off.stderr, off


def test_mcp_tools_of_a_missing_command_says_command_not_found(make_daemon):
    d = make_daemon(config={"mcp_servers": {"gone": {"command": "t2-no-such-mcp-server"}}})
    shown = d.ctl("mcp", "tools", "gone")
    assert shown.returncode == 1, shown
    assert "MCP server gone failed: " in shown.stderr and "command not found: t2-no-such-mcp-server" in shown.stderr
    assert "is failed" not in shown.stderr and "Error:" not in shown.stderr, shown.stderr


def test_mcp_tools_of_a_failing_server_shows_its_stderr_with_the_secrets_redacted(make_daemon):
    """``hermesctl mcp tools NAME`` says why a server did not start with the end of its stderr, which
    may show its environment: redacted as a job's log is (the probe printed the values as they were)."""
    values = {"GH_TOKEN": "ghp_probe0123456789abcdef", "DATABASE_URL": "postgres://u:pw-probe-4242@db/x",
              "MY_API_KEY": "literal-secret-value-123"}
    dump = "import os, sys; [print(k, v, file=sys.stderr) for k, v in sorted(os.environ.items())]; sys.exit(1)"
    leaky = {"command": sys.executable, "args": ["-c", dump],
             "env": {"MY_API_KEY": values["MY_API_KEY"], "DB": "${DATABASE_URL}", "GH": "${GH_TOKEN}",
                     "STAGE": "production"}}
    d = make_daemon(config={"secrets": ["DATABASE_URL"], "mcp_servers": {"leaky": leaky}},
                    env={"GH_TOKEN": values["GH_TOKEN"], "DATABASE_URL": values["DATABASE_URL"]})
    for argv in (("mcp", "tools", "leaky"), ("mcp", "tools", "leaky", "--json")):
        shown = d.ctl(*argv)
        assert shown.returncode == 1 and "exit status 1" in shown.stderr + shown.stdout, shown
        for name, value in values.items():
            assert value not in shown.stdout + shown.stderr, (argv, name)
        assert "STAGE production" in shown.stdout + shown.stderr, "a plain value stays as it is"
    assert "MY_API_KEY [REDACTED:MY_API_KEY]" in shown.stdout and "[REDACTED:GH_TOKEN]" in shown.stdout
    assert "DB [REDACTED:DATABASE_URL]" in shown.stdout


def test_mcp_tools_runs_the_server_where_a_job_from_there_would(make_daemon):
    """A relative ``cwd`` means for ``hermesctl mcp tools`` what it means for a job started from the
    same directory, not a directory of the daemon's."""
    d = make_daemon(config={"mcp_servers": {"time": {**TIME, "cwd": "here"}}})
    (d.work / "here").mkdir()
    shown = d.ctl("mcp", "tools", "time")
    assert shown.returncode == 0 and "mcp__time__get_current_time" in shown.stdout, shown
    job = d.delegate("t", script=[{"text": "ok"}], toolsets=["mcp:time"])["id"]
    d.wait_job(job)
    assert d.call("result", id=job)["mcp"]["time"]["state"] == "ready"
    with pytest.raises(ProtocolError, match="cwd: 'here' is not the absolute path of a directory"):
        d.call("mcp.tools", name="time", cwd="here")

def test_check_config_names_each_bad_server_key(tmp_path):
    bad = tmp_path / "config.yaml"
    bad.write_text("toolsets: [terminal, mcp:gone]\n"
                   "mcp_servers:\n"
                   "  both:\n    command: x\n    url: http://127.0.0.1:1/mcp\n"
                   "  web:\n    url: ftp://nowhere\n    args: [a]\n"
                   "  slow:\n    command: x\n    timeout: -1\n    colour: red\n"
                   "  bad__name:\n    command: x\n")
    out = subprocess.run([sys.executable, "-m", "hermesd.cli", "check-config", str(bad)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 7
    text = out.stderr
    for where in (f"{bad}:1: toolsets: 'mcp:gone' names no server of mcp_servers",
                  f"{bad}:3: mcp_servers.both: has both command and url",
                  f"{bad}:7: mcp_servers.web.url: must be an http:// or https:// URL",
                  f"{bad}:8: mcp_servers.web.args: is for a stdio server",
                  f"{bad}:11: mcp_servers.slow.timeout: must be a number of seconds > 0",
                  f"{bad}:12: mcp_servers.slow.colour: unknown key",
                  f"{bad}:13: mcp_servers.bad__name: a server's name is"):
        assert where in text, (where, text)
    good = config.parse("mcp_servers:\n  t:\n    command: x\n    timeout: 5\n    tools: {include: a, exclude: [b]}\n"
                        "toolsets: [mcp:t]\n")
    server = good.mcp()["t"]
    assert (server.timeout_seconds, server.include, server.exclude, server.transport) == (5.0, ["a"], ["b"], "stdio")


def test_check_config_beside_a_bad_server_still_knows_the_good_ones(tmp_path):
    bad = tmp_path / "config.yaml"
    bad.write_text("toolsets: [mcp:time, mcp:tme]\n"
                   "mcp_servers:\n  time:\n    command: mcp-server-time\n  broken:\n    comand: x\n"
                   "batch:\n  distributions:\n    d: {mcp:time: 0.5}\n    e: 5\n")
    out = subprocess.run([sys.executable, "-m", "hermesd.cli", "check-config", str(bad)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 7
    assert f"{bad}:1: toolsets: 'mcp:tme' names no server of mcp_servers (known: mcp:time)" in out.stderr
    assert "'mcp:time'" not in out.stderr and "(it has none)" not in out.stderr, out.stderr
    assert f"{bad}:6: mcp_servers.broken.comand: unknown key" in out.stderr
    assert f"{bad}:10: batch.distributions.e: must be a mapping" in out.stderr


HANGING = '''
import sys, time
from mcp.server.mcpserver import MCPServer
app = MCPServer("hang")

@app.tool()
def nap(seconds: float) -> str:
    """Sleep that long."""
    time.sleep(seconds)
    return "woke"

app.run()
'''


CRASHING = HANGING.replace('app.run()', """
@app.tool()
def crash() -> str:
    \"\"\"Exit at once.\"\"\"
    import os
    os._exit(9)

app.run()""")


def test_a_server_that_crashes_mid_call_is_an_error_naming_it_and_is_started_again(make_daemon, tmp_path):
    script_file = tmp_path / "crash.py"
    script_file.write_text(CRASHING)
    d = make_daemon(config={"mcp_servers": {"frail": {"command": sys.executable, "args": [str(script_file)]}},
                            "approvals": {"always": ["mcp__other__*"]}})
    job = d.delegate("crash", script=[call("mcp__frail__crash"), call("mcp__frail__nap", seconds=0), {"text": "on"}],
                     toolsets=["mcp:frail"])["id"]
    row = d.wait_job(job)
    assert row["status"] == "completed" and row["summary"] == "on"
    crashed, again = tool_results(d, job)
    assert "MCP server 'frail' stopped during a call of crash (exited with exit status 9)" in crashed
    assert again == "woke"
    assert d.call("result", id=job)["mcp"]["frail"]["state"] == "ready"


def test_approvals_always_takes_a_pattern_of_mcp_tools():
    from child.approval import always

    assert always("mcp__github__create_issue", ("mcp__github__*",))
    assert not always("mcp__gitlab__create_issue", ("mcp__github__*",)) and always("terminal", ["terminal"])


def test_a_server_that_hangs_is_an_error_naming_it_and_the_job_goes_on(make_daemon, tmp_path):
    script_file = tmp_path / "hang.py"
    script_file.write_text(HANGING)
    d = make_daemon(config={"mcp_servers": {"slow": {"command": sys.executable, "args": [str(script_file)],
                                                     "timeout_seconds": 1}}})
    job = d.delegate("nap", script=[call("mcp__slow__nap", seconds=600), {"text": "went on"}],
                     toolsets=["mcp:slow"])["id"]
    row = d.wait_job(job)
    assert row["status"] == "completed" and row["summary"] == "went on"
    (result,) = tool_results(d, job)
    assert "MCP server 'slow' did not answer nap within timeout_seconds=1" in result


def _server_of(d, job: str) -> psutil.Process:
    """The MCP server process of the running job (a process of its child, in its process group)."""
    child = psutil.Process(wait_for(lambda: d.call("job", id=job)["pid"], what="the child's pid"))

    def found():
        servers = [p for p in child.children(recursive=True) if "mcp_server_time" in command_line(p)]
        return servers[0] if servers else None

    server = wait_for(found, what="the MCP server to start")
    assert os.getpgid(server.pid) == os.getpgid(child.pid) == child.pid
    environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    assert not [e for e in environ if e.startswith((b"HERMES_", b"ANTHROPIC_", b"OPENAI_"))], environ
    return server


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("victim", ["child", "hermesd", "cancel"])
def test_kill_9_or_cancel_leaves_no_server_running(make_daemon, victim):
    d = make_daemon(config={"mcp_servers": {"time": TIME}}, env={"OPENAI_API_KEY": "sk-test-never-passed-1234"})
    job = d.delegate("wait", script=[{"sleep": 120}], toolsets=["mcp:time"])["id"]
    server = _server_of(d, job)
    if victim == "child":
        os.kill(d.call("job", id=job)["pid"], signal.SIGKILL)
        assert d.wait_job(job)["status"] == "failed"
    elif victim == "cancel":
        d.call("cancel", id=job)
        assert d.wait_job(job)["status"] == "cancelled"
    else:
        d.kill9()
    wait_for(lambda: _gone(server), timeout=20, what=f"the MCP server to end with the {victim}")



def test_a_cancel_while_a_server_starts_is_no_failure_of_the_server(make_daemon, tmp_path):
    mute = tmp_path / "mute.py"  # starts and never answers the handshake
    mute.write_text("import sys, time\nprint('up', file=sys.stderr, flush=True)\ntime.sleep(600)\n")
    d = make_daemon(config={"mcp_servers": {"mute": {"command": sys.executable, "args": [str(mute)],
                                                     "connect_timeout_seconds": 600}}})
    job = d.delegate("wait", script=[{"text": "never"}], toolsets=["mcp:mute"])["id"]
    log = d.home / "jobs" / job / "log"
    wait_for(lambda: log.exists() and "mcp mute: up" in log.read_text(), what="the server to start")
    child = psutil.Process(d.call("job", id=job)["pid"])
    server = wait_for(lambda: next((p for p in child.children(recursive=True) if str(mute) in command_line(p)),
                                   None), what="the server's process")
    d.call("cancel", id=job)
    assert d.wait_job(job)["status"] == "cancelled"
    state = d.call("result", id=job)["mcp"]["mute"]
    assert state["state"] == "stopped" and state["error"] == "the job stopped before it was ready", state
    listed = subprocess.run([sys.executable, "-m", "client", "ps", "--all"], env=d.env, capture_output=True,
                            text=True, timeout=60)
    assert job in listed.stdout and "[mcp" not in listed.stdout, listed.stdout
    wait_for(lambda: _gone(server), timeout=20, what="the server to end with the job")
    assert "mute: failed" not in log.read_text()


def test_mcp_tools_is_bounded_by_the_global_timeout_and_stops_the_server(make_daemon, tmp_path):
    mute, started = tmp_path / "mute.py", tmp_path / "mute.pid"  # starts, says its pid, never answers the handshake
    mute.write_text(f"import os, pathlib, time\npathlib.Path({str(started)!r}).write_text(str(os.getpid()))\n"
                    "time.sleep(600)\n")
    d = make_daemon(config={"mcp_servers": {"mute": {"command": sys.executable, "args": [str(mute)],
                                                     "connect_timeout_seconds": 600}}})
    probing = subprocess.Popen([sys.executable, "-m", "client", "--timeout", "10", "mcp", "tools", "mute"], env=d.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: started.exists() and started.read_text() or probing.poll() is not None, 60,
             what="the probe to start the server")
    assert started.exists(), "the probe did not start the server within --timeout 10 (a machine too loaded?)"
    server = psutil.Process(int(started.read_text()))
    out, err = probing.communicate(timeout=60)
    assert probing.returncode == 9 and not out, (out, err)
    assert err.strip() == ("hermesctl mcp tools: MCP server mute did not list its tools within 10s (the caller's "
                           "timeout, hermesctl --timeout); it was stopped"), err
    wait_for(lambda: _gone(server), timeout=20, what="the server stopped with its probe")
    after = d.ctl("mcp", "tools", "mute", "--timeout", "2", "--json")  # after the command too; --json
    assert after.returncode == 9 and len(after.stderr.strip().splitlines()) == 1, after
    answer = json.loads(after.stdout)
    assert answer["state"] == "timed_out" and answer["error"].startswith("did not list its tools within 2s"), answer
    with pytest.raises(ProtocolError, match="argument 'timeout_seconds' must be >= 0.001"):
        d.call("mcp.tools", name="mute", timeout_seconds=0)


@pytest.fixture
def http_server():
    """A streamable HTTP MCP server made with the mcp SDK, run by uvicorn on a free port of 127.0.0.1."""
    import socket
    import threading

    import uvicorn

    app = MCPServer("echoes")

    @app.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return f"echo: {text}"

    @app.tool()
    def picture() -> Image:
        """A tiny picture."""
        return Image(data=b"\x89PNG\r\n\x1a\n0000", format="png")

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app.streamable_http_app(), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, what="uvicorn to start")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    server.should_exit = True
    thread.join(10)
    sock.close()


def test_a_streamable_http_server(make_daemon, http_server):
    d = make_daemon(config={"mcp_servers": {"web": {"url": http_server, "headers": {"X-Test": "1"}}}})
    job = d.delegate("echo", script=[call("mcp__web__echo", text="hi"), call("mcp__web__picture"), {"text": "ok"}],
                     toolsets=["mcp:web"])["id"]
    assert d.wait_job(job)["status"] == "completed"
    echoed, picture = tool_results(d, job)
    assert "echo: hi" in echoed
    assert "[image: image/png, 12 bytes (base64), not shown]" in picture


def test_the_readme_example_is_a_valid_config():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("### MCP servers"):]
    example = section[section.index("```yaml\n") + 8:section.index("```\n", section.index("```yaml"))]
    parsed = config.parse(example)
    servers = parsed.mcp()
    assert sorted(servers) == ["git", "github", "time"] and servers["github"].transport == "http"
    assert servers["git"].include == ["git_status", "git_log", "git_diff"] and not servers["github"].enabled


def test_a_kanban_profile_declares_servers_only_its_workers_get():
    from hermesd.kanban import profiles
    from hermesd.mcp.ops import OWN, known_to

    checked = profiles.check({"description": "keeps time", "mcp_servers": {"clock": TIME}})
    assert checked["mcp_servers"] == {"clock": TIME}
    with pytest.raises(ProtocolError, match=r"mcp_servers\.clock\.url: must be an http"):
        profiles.check({"description": "x", "mcp_servers": {"clock": {"url": "nowhere"}}})
    cfg = config.parse("mcp_servers:\n  time:\n    command: x\n")
    own = {"clock": config_server("clock", TIME)}
    assert sorted(known_to(cfg, {OWN: own})) == ["clock", "time"] and sorted(known_to(cfg, {})) == ["time"]


def config_server(name: str, entry: dict) -> dict:
    from hermesd.mcp.config import parse_server

    return parse_server(name, entry, []).to_wire()


def test_a_call_running_at_a_restart_gets_effect_unknown_and_the_server_starts_again(make_daemon, tmp_path):
    script_file = tmp_path / "hang.py"
    script_file.write_text(HANGING)
    d = make_daemon(config={"mcp_servers": {"slow": {"command": sys.executable, "args": [str(script_file)]}}})
    job = d.delegate("nap", script=[call("mcp__slow__nap", seconds=600), {"text": "after the restart"}],
                     toolsets=["mcp:slow"])["id"]
    journal = d.home / "jobs" / job / "journal.jsonl"
    wait_for(lambda: journal.exists() and '"tool_started"' in journal.read_text(), what="the call to start")
    d.kill9()
    d.start()
    row = d.wait_job(job)
    assert row["status"] == "completed" and row["summary"] == "after the restart", row
    (result,) = tool_results(d, job)
    assert "hermesd restarted while this tool call ran, so its effect is unknown" in result
    assert (d.home / "jobs" / job / "log").read_text().count("mcp slow: ready") == 2


def test_a_batch_distribution_of_the_config_gives_items_an_mcp_server(make_daemon, tmp_path):
    d = make_daemon(config={"mcp_servers": {"time": TIME},
                            "batch": {"distributions": {"clock": {"file": 1.0, "mcp:time": 1.0}}}})
    script = [{"thinking": "I ask the clock what time it is.",
               "tool_calls": [{"name": "mcp__time__get_current_time", "input": {"timezone": "UTC"}}]}, {"text": "ok"}]
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps({"prompt": "time?", "script": script}) + "\n")
    record = d.call("batch.run", dataset_file=str(dataset), run_name="clock", batch_size=5, distribution="clock",
                    allow_synthetic=True, output_dir=str(tmp_path / "out"))
    d.wait_job(record["id"], timeout=120)
    (line,) = [json.loads(x) for x in (tmp_path / "out" / "clock" / "batch_0.jsonl").read_text().splitlines()]
    assert line["toolsets_used"] == ["file", "mcp:time"]
    assert line["tool_stats"]["mcp__time__get_current_time"] == {"count": 1, "success": 1, "failure": 0}
    assert "mcp__time__convert_time" in {t["function"]["name"] for t in line["tools"]}
    stats = json.loads((tmp_path / "out" / "clock" / "statistics.json").read_text())
    assert stats["tool_statistics"]["mcp__time__get_current_time"]["count"] == 1
    with pytest.raises(ProtocolError, match="the config's: clock"):
        d.call("batch.run", dataset_file=str(dataset), run_name="x", distribution="nope", output_dir=str(tmp_path))
    listed = subprocess.run([sys.executable, "-c", "from client.batch import main; main()", "--list_distributions"],
                            env=d.env, capture_output=True, text=True, timeout=60)
    assert "clock: file 100%, mcp:time 100% — config.yaml's own" in listed.stdout, listed
    bad = config.parse  # a distribution naming no server is the config's mistake
    with pytest.raises(config.ConfigError, match=r"batch.distributions.clock: 'mcp:gone' names no server"):
        bad("batch:\n  distributions:\n    clock: {mcp:gone: 0.5}\n")
