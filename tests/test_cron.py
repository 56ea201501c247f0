"""Cron's bare environment: the crontab example's commands and every hermesctl command work there.

Cron runs a command with ``env -i`` plus the crontab's own variables: no
terminal, no ``HOME`` or ``XDG_RUNTIME_DIR`` unless set, a minimal ``PATH``,
no locale.  These tests run real processes that way against a real daemon.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from client.ctl import cli
from hermesd.protocol import EXIT_CODES
from tests.harness import ROOT, wait_for

CRONTAB = ROOT / "systemd" / "crontab.example"
BIN = Path(sys.executable).parent
SLEEPY = [{"text": "started", "sleep": 30}]
HAS_BATCH = importlib.util.find_spec("client.batch") is not None


def crontab() -> tuple[dict[str, str], list[str]]:
    """The example's variable assignments and the commands of its job lines."""
    env, commands = {}, []
    for line in CRONTAB.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assignment = re.match(r"^([A-Z_]+)=(.*)$", line)
        if assignment:
            env[assignment[1]] = assignment[2]
        else:
            commands.append(line.split(None, 5)[5])
    return env, commands


CRON_ENV, CRON_COMMANDS = crontab()


def localise(text: str, daemon) -> str:
    """The example's install paths mapped onto the test daemon and this venv."""
    return (text.replace("/opt/hermesd/bin", str(BIN)).replace("/var/lib/hermes", str(daemon.home))
            .replace("/run/hermes", str(daemon.runtime)))


def bare_run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``argv`` under ``env -i`` with only ``env``: no terminal, no stdin, its own session."""
    return subprocess.run(["/usr/bin/env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv], cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                          start_new_session=True)


def run_like_cron(daemon, command: str) -> subprocess.CompletedProcess:
    """One crontab command as cron runs it: its variables only, ``\\%`` a literal ``%``, cwd the home."""
    env = {k: localise(v, daemon) for k, v in CRON_ENV.items() if k != "MAILTO"}
    return bare_run([env["SHELL"], "-c", localise(command, daemon).replace("\\%", "%")], env, daemon.home)


def test_crontab_example_shape():
    assert {"PATH", "HERMES_HOME", "HERMES_RUNTIME_DIR", "SHELL"} <= set(CRON_ENV)
    assert any("hermesctl delegate --background" in c for c in CRON_COMMANDS)
    assert any(c.startswith("hermes-batch ") and "--detach" in c for c in CRON_COMMANDS)
    for command in CRON_COMMANDS:
        assert "%" not in command.replace("\\%", ""), f"an unescaped % ends a cron command: {command}"


@pytest.mark.parametrize("command", CRON_COMMANDS, ids=[c.split(" --")[0][:40] for c in CRON_COMMANDS])
def test_crontab_command_works_in_bare_environment(make_daemon, command):
    if command.startswith("hermes-batch") and not HAS_BATCH:
        pytest.skip("hermes-batch (client/batch.py) is not in this tree yet")
    d = make_daemon()
    (d.home / "datasets").mkdir()
    (d.home / "datasets" / "nightly.jsonl").write_text(
        "".join(json.dumps({"prompt": f"say {i}"}) + "\n" for i in range(3)))
    out = run_like_cron(d, command)
    assert out.returncode == 0, f"{command}\nstdout: {out.stdout}\nstderr: {out.stderr}"
    assert "\x1b[" not in out.stdout + out.stderr, "no colours without a terminal"
    if "delegate" in command:
        assert d.call("ps", all=True)["jobs"], "the delegation reached the daemon"
    if command.startswith("hermes-batch"):
        wait_for(lambda: d.call("ps", all=True, kind="batch")["jobs"], what="the batch job")
    for path in re.findall(r">>? *((?:\$\([^)]*\)|\S)+)", localise(command, d)):
        if path != "/dev/null":
            written = Path(re.sub(r"\$\([^)]*\)", "*", path))
            files = list(written.parent.glob(written.name))
            assert files, f"{path} was not written"
            lines = [ln for f in files for ln in f.read_text().splitlines()]
            assert all(isinstance(json.loads(ln), dict) for ln in lines), f"{path}: JSON lines expected"


# -- every hermesctl command ------------------------------------------------------------------------


def leaf_commands(group: click.Group = cli, prefix: tuple[str, ...] = ()):
    """``(path, command)`` of every runnable hermesctl command, subcommands of groups included."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_command_has_json_and_help():
    for path, command in leaf_commands():
        names = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert "--json" in names, f"hermesctl {' '.join(path)} has no --json"
        assert command.help, f"hermesctl {' '.join(path)} has no help text"


class Bare:
    """``hermesctl`` for one daemon, as cron would run it."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.env = {"PATH": f"{BIN}:/usr/bin:/bin", "HERMES_RUNTIME_DIR": str(daemon.runtime)}

    def __call__(self, *args: str, code: int = 0) -> subprocess.CompletedProcess:
        out = bare_run([str(BIN / "hermesctl"), *args], self.env, self.daemon.work)
        assert out.returncode == code, f"hermesctl {' '.join(args)} -> {out.returncode}\n{out.stdout}{out.stderr}"
        assert "\x1b[" not in out.stdout + out.stderr, f"hermesctl {' '.join(args)} printed colours"
        if "--json" in args:
            lines = out.stdout.splitlines()
            assert all(isinstance(json.loads(ln), dict) for ln in lines), out.stdout
        return out

    def both(self, *args: str, code: int = 0) -> list[dict]:
        """Run as text and as ``--json`` (after the subcommand); returns the JSON objects."""
        self(*args, code=code)
        return [json.loads(ln) for ln in self(*args, "--json", code=code).stdout.splitlines()]


def test_every_hermesctl_command_in_bare_environment(daemon):
    ctl = Bare(daemon)
    covered = {("hello",), ("status",), ("ps",), ("delegate",), ("wait",), ("result",), ("logs",), ("events",),
               ("cancel",), ("reload",), ("shutdown",), ("top",)}
    assert ctl.both("hello")[0]["pid"] == daemon.proc.pid
    assert ctl.both("status")[0]["caps"]["async"]["limit"] == 3
    job = ctl("--json", "delegate", "--background", "cron goal").stdout
    job_id = json.loads(job)["id"]
    assert ctl.both("wait", job_id)[0]["status"] == "completed"
    assert ctl.both("delegate", "foreground goal")[0]["status"] == "completed"
    assert ctl.both("result", job_id)[0]["summary"]
    (daemon.home / "jobs" / job_id / "log").write_text("logged line\n")
    assert ctl.both("logs", job_id)[0]["data"] == "logged line\n"
    assert job_id in ctl("ps", "--all").stdout and ctl.both("ps") == []
    assert any(e["type"] == "async_delegation" for e in ctl.both("events"))
    if ("top",) in dict(leaf_commands()):
        assert job_id in ctl("top").stdout
        assert ctl("top", "--json").stdout.strip()
    long_job = daemon.delegate("long", background=True, script=SLEEPY)["id"]
    assert ctl("--json", "cancel", long_job).stdout
    assert ctl.both("cancel", job_id, code=EXIT_CODES["invalid_state"])[0]["error"]["code"] == "invalid_state"
    assert ctl.both("result", "bg_nope", code=EXIT_CODES["not_found"])[0]["error"]["code"] == "not_found"
    ctl.both("reload")
    for path, _command in leaf_commands():  # commands other engineers add: at least their help works bare
        if path not in covered:
            ctl(*path, "--help")
    ctl("shutdown", "--json")
    daemon.proc.wait(30)
    err = ctl.both("status", code=EXIT_CODES["daemon_not_running"])
    assert err[0]["error"]["code"] == "daemon_not_running"
