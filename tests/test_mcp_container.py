"""A stdio MCP server inside a job's container (podman with runc, the busybox test image).

The server is a busybox ``sh`` script in the job's working directory (so in the container's
``/workspace``): newline-delimited JSON-RPC 2.0, the MCP stdio transport
(https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#stdio).  A real
daemon starts it with ``ENGINE exec -i`` in the job's container; the scripted model calls its
tool; its result says where it ran.  Without podman, runc and busybox-static the tests are
skipped (``tests/test_containers.py`` says what to install).
"""

from __future__ import annotations

import json
import os
import re
import signal
import uuid
from pathlib import Path

import psutil
import pytest

from child.container import SLEEP_SECONDS
from tests.harness import wait_for
from tests.test_containers import CONFIG, boxed, image, needs_podman, of_job  # noqa: F401 (fixtures)
from tests.test_mcp import call, tool_results, trajectory

SERVER = r"""# An MCP server in busybox sh: one JSON-RPC 2.0 message a line on stdin and stdout. It answers
# initialize, tools/list and tools/call, ignores notifications (no id) and answers any other
# request "method not found" (the SDK's server/discover probe, after which it falls back to
# initialize). Its stderr says what it does.
echo "box: up in $(hostname)" >&2
while IFS= read -r line; do
  head=${line%%,\"params\"*}
  id=$(printf '%s\n' "$head" | sed -n 's/.*"id":\([^,}]*\).*/\1/p')
  method=$(printf '%s\n' "$head" | sed -n 's/.*"method":"\([^"]*\)".*/\1/p')
  echo "box: $method" >&2
  [ -n "$id" ] || continue
  case $method in
  initialize)
    version=$(printf '%s\n' "$line" | sed -n 's/.*"protocolVersion":"\([^"]*\)".*/\1/p')
    result='{"protocolVersion":"'$version'","capabilities":{"tools":{}},"serverInfo":{"name":"box","version":"1"}}' ;;
  tools/list)
    result='{"tools":[{"name":"where","description":"Where this server runs","inputSchema":{"type":"object"}}]}' ;;
  tools/call)
    text="host $(hostname), pid 1 $(tr '\000' ' ' < /proc/1/cmdline), in $(pwd), token $BOX_TOKEN"
    result='{"content":[{"type":"text","text":"'$text'"}]}' ;;
  *)
    printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}\n' "$id"
    continue ;;
  esac
  printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$result"
done
echo "box: stdin closed" >&2
"""

TOKEN = "boxtok-0123456789abcdef"
"""The value of the server's ``BOX_TOKEN`` (``${BOX_TOKEN_SOURCE}`` in its config): a secret by its name."""


def box_daemon(make_daemon, tmp_path: Path) -> tuple:
    """A daemon whose config has the server ``box`` (``tools/server.sh`` of the job's directory,
    run there: ``cwd: tools``), and ``(daemon, job directory, marker)``: ``marker`` is an argument
    of the server's, which finds its processes."""
    work = tmp_path / "w"
    (work / "tools").mkdir(parents=True)
    (work / "tools" / "server.sh").write_text(SERVER)
    marker = f"box-{uuid.uuid4().hex}"
    server = {"command": "/bin/sh", "args": ["server.sh", marker], "cwd": "tools",
              "env": {"BOX_TOKEN": "${BOX_TOKEN_SOURCE}"}}
    d = make_daemon({**CONFIG, "mcp_servers": {"box": server}},
                    env={"BOX_TOKEN_SOURCE": TOKEN, "OPENAI_API_KEY": "sk-test-never-passed-1234"})
    return d, work, marker


def naming(*words: str) -> list[psutil.Process]:
    """The processes of the host whose command line holds one of ``words``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if any(word in line for word in words):
            found.append(p)
    return found


def nothing_left(job: str, marker: str, container: str) -> bool:
    """True once job ``job`` has no container and no process names its server's ``marker`` or
    its ``container`` (the engine's exec clients, conmon)."""
    return not of_job(job) and not naming(marker, container)


@needs_podman
def test_a_stdio_server_runs_inside_the_jobs_container_and_nothing_is_left_after_the_job(make_daemon, tmp_path,
                                                                                         boxed):
    d, work, marker = box_daemon(make_daemon, tmp_path)
    # between two calls a command of the terminal times out: what is killed inside is the command's
    timed_out = {"tool_calls": [{"name": "terminal", "input": {"command": "sleep 50", "timeout": 1}}]}
    job = d.delegate("where does it run", cwd=str(work), image=boxed, toolsets=["mcp:box", "terminal"],
                     script=[call("mcp__box__where"), timed_out, call("mcp__box__where"), {"text": "done"}])["id"]
    row = d.wait_job(job, timeout=60)
    assert row["status"] == "completed", row
    log = (d.home / "jobs" / job / "log").read_text()
    container = re.search(r"container ([0-9a-f]{12}) of ", log).group(1)
    first, killed, again = tool_results(d, job)
    # podman names the host of a container by its short id; pid 1 is the container's sleep
    assert f"host {container}, pid 1 sleep {SLEEP_SECONDS} , in /workspace/tools," in first, first
    assert first.endswith("token [REDACTED:BOX_TOKEN]"), first  # its variable, redacted in the result
    assert "timed out after 1s" in killed and again == first
    assert TOKEN not in json.dumps(trajectory(d, job)) and TOKEN not in log
    assert log.count(f"mcp box: box: up in {container}") == 1, log  # its stderr; one server all along
    assert log.count("mcp box: box: tools/call") == 2 and "starting it again" not in log, log
    used = d.call("result", id=job)["mcp"]["box"]
    assert (used["transport"], used["tools"], used["calls"], used["failures"]) == ("stdio", 1, 2, 0), used
    wait_for(lambda: nothing_left(job, marker, container), 30, what="the container and the server gone")


@needs_podman
@pytest.mark.parametrize("how", ["cancel", "kill -9 of the child"])
def test_no_server_or_container_is_left_after(make_daemon, tmp_path, boxed, how):
    d, work, marker = box_daemon(make_daemon, tmp_path)
    job = d.delegate("wait", cwd=str(work), image=boxed, toolsets=["mcp:box"], script=[{"sleep": 120}])["id"]
    server = wait_for(lambda: [p for p in naming(marker) if p.info["cmdline"][0] == "/bin/sh"], 30,
                      what="the server inside the container")
    (container,) = of_job(job)
    # inside: its variable, nothing of hermesd's environment
    environ = Path(f"/proc/{server[0].pid}/environ").read_bytes().split(b"\0")
    assert f"BOX_TOKEN={TOKEN}".encode() in environ, environ
    assert not [e for e in environ if e.startswith((b"HERMES_", b"OPENAI_", b"BOX_TOKEN_SOURCE"))], environ
    # its engine client: a process of the child's group, the value not on its command line
    child = d.call("job", id=job)["pid"]
    (client,) = [p for p in psutil.Process(child).children(recursive=True) if marker in " ".join(p.cmdline())]
    assert os.getpgid(client.pid) == child
    argv = client.cmdline()
    assert argv[argv.index("exec"):argv.index("exec") + 4] == ["exec", "-i", "--env", "BOX_TOKEN"], argv
    assert TOKEN not in " ".join(argv)
    if how == "cancel":
        d.call("cancel", id=job)
        assert d.wait_job(job)["status"] == "cancelled"
    else:
        os.kill(child, signal.SIGKILL)
        assert d.wait_job(job)["status"] == "failed"
    wait_for(lambda: nothing_left(job, marker, container), 30, what=f"the container and the server gone after {how}")
