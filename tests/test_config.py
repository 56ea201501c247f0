"""Config validation: errors name the file, the line and the key."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from hermesd import config
from hermesd.protocol import ProtocolError


def test_defaults():
    cfg = config.parse("")
    assert cfg.delegation.max_async_children == 3
    assert cfg.delegation.max_concurrent_children == 3
    assert cfg.delegation.max_spawn_depth == 1


@pytest.mark.parametrize("text,line,key", [
    ("model: x\ndelegation:\n  max_async_children: three\n", 3, "delegation.max_async_children"),
    ("delegation:\n  max_asyncc_children: 2\n", 2, "delegation.max_asyncc_children"),
    ("provider: gpt\n", 1, "provider"),
    ("supervisor:\n  max_children: 0\n", 2, "supervisor.max_children"),
    ("toolsets: terminal\n", 1, "toolsets"),
    ("delegation: [1, 2]\n", 1, "delegation"),
    ("delegation:\n  subagent_auto_approve: 1\n", 2, "delegation.subagent_auto_approve"),
    ("context_windows:\n  claude-: lots\n", 2, "context_windows.claude-"),
    ("context_windows: 200000\n", 1, "context_windows"),
])
def test_errors_name_file_line_key(text, line, key):
    with pytest.raises(config.ConfigError) as info:
        config.parse(text, "/etc/hermes/config.yaml")
    err = info.value
    assert (err.file, err.line, err.key) == ("/etc/hermes/config.yaml", line, key)
    assert str(err).startswith(f"/etc/hermes/config.yaml:{line}: {key}: ")


def test_yaml_syntax_error_has_line():
    with pytest.raises(config.ConfigError) as info:
        config.parse("model: x\ndelegation:\n  - a\n  b: c\n", "c.yaml")
    assert info.value.line in (3, 4) and "invalid YAML" in str(info.value)


def test_check_config_command(tmp_path):
    bad = tmp_path / "config.yaml"
    bad.write_text("delegation:\n  max_spawn_depth: -1\n")
    out = subprocess.run([sys.executable, "-m", "hermesd.cli", "check-config", "--config", str(bad)],
                         capture_output=True, text=True)
    assert out.returncode == 7
    assert f"{bad}:2: delegation.max_spawn_depth:" in out.stderr
    good = tmp_path / "good.yaml"
    good.write_text("delegation:\n  max_async_children: 5\n")
    out = subprocess.run([sys.executable, "-m", "hermesd.cli", "check-config", "--config", str(good)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_daemon_refuses_invalid_config(tmp_path):
    from tests.harness import DaemonProc

    d = DaemonProc(tmp_path)
    (d.home / "config.yaml").write_text("supervisor:\n  max_children: lots\n")
    out = subprocess.run([sys.executable, "-m", "hermesd.cli", "run"], env=d.env, capture_output=True, text=True,
                         timeout=20)
    assert out.returncode == 7
    assert "config.yaml:2: supervisor.max_children" in out.stderr


def test_reload_refuses_invalid_and_keeps_running_config(daemon):
    path = daemon.home / "config.yaml"
    original = path.read_text()
    path.write_text(original + "delegation:\n  max_async_children: nope\n")
    with pytest.raises(ProtocolError) as info:
        daemon.call("reload")
    assert info.value.code == "invalid_config"
    assert info.value.details["key"] == "delegation.max_async_children"
    assert daemon.call("status")["caps"]["async"]["limit"] == 3
    path.write_text(original + "delegation:\n  max_async_children: 5\n")
    assert daemon.call("reload") == {"reloaded": True, "source": str(path), "restart_needed": []}
    assert daemon.call("status")["caps"]["async"]["limit"] == 5


def test_reload_names_keys_that_need_a_restart(daemon):
    path = daemon.home / "config.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    other = {"spawn": "forkserver", "forkserver": "spawn"}[daemon.call("status")["start"]["method"]]
    data.setdefault("supervisor", {}).update(start_method=other, max_children=7)
    path.write_text(yaml.safe_dump(data))
    out = subprocess.run([sys.executable, "-m", "client", "reload"], env=daemon.env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "supervisor.start_method changed: in force after a restart" in out.stdout
    status = daemon.call("status")
    assert status["caps"]["global"]["limit"] == 7  # the rest took effect
    assert daemon.call("reload")["restart_needed"] == ["supervisor.start_method"]  # still differs from the start


def test_check_config_names_every_problem_in_line_order(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("supervisor:\n  max_children: -2\n  bogus: 1\ndelegation:\n  max_async_children: x\nwhat: 3\n")
    out = subprocess.run([sys.executable, "-m", "hermesd.cli", "check-config", str(bad)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 7
    assert [line.split(": ")[2:4] for line in out.stderr.splitlines()] == [
        [f"{bad}:2", "supervisor.max_children"], [f"{bad}:3", "supervisor.bogus"],
        [f"{bad}:5", "delegation.max_async_children"], [f"{bad}:6", "what"]]
    with pytest.raises(config.ConfigError) as info:
        config.load(bad)
    assert info.value.line == 2 and [p.key for p in info.value.problems][1:] == [
        "supervisor.bogus", "delegation.max_async_children", "what"]


def _problems(path, text: str) -> list[str]:
    """The problems ``config.load`` names in a file of ``text`` at ``path``."""
    path.write_text(text)
    with pytest.raises(config.ConfigError) as info:
        config.load(path)
    return [str(p) for p in info.value.problems]


def test_a_key_set_twice_is_refused_with_both_lines(tmp_path):
    dup = tmp_path / "dup.yaml"
    assert _problems(dup, "delegation:\n  max_async_children: 2\ntoolsets: [file]\ndelegation:\n"
                          "  max_async_children: 5\n") == [f"{dup}:4: delegation: set twice (first on line 1); remove one"]


def test_a_section_set_twice_names_its_last_lines_for_the_value_yaml_keeps(tmp_path):
    dup = tmp_path / "dup.yaml"
    assert _problems(dup, "budgets:\n  daily_cost_usd: 0.5\n\nbudgets:\n  daily_cost_usd: 0\n") == [
        f"{dup}:4: budgets: set twice (first on line 1); remove one",
        f"{dup}:5: budgets.daily_cost_usd: must be a number > 0, not 0.0"]


def test_a_number_yaml_reads_as_text_says_so_and_an_empty_model_prefix_is_refused(tmp_path):
    bad = tmp_path / "n.yaml"
    assert _problems(bad, 'budgets:\n  daily_tokens: 1e3\n  daily_cost_usd: 1.5E1\n'
                          'context_windows:\n  "": 2048\n  gpt: 4e3\n') == [
        f"{bad}:2: budgets.daily_tokens: must be an integer > 0, not '1e3'; YAML reads 1e3 as text: write 1000",
        f"{bad}:3: budgets.daily_cost_usd: must be a number > 0, not '1.5E1'; YAML reads 1.5E1 as text: write 15",
        f'{bad}:4: context_windows."": a model name (or prefix) must not be empty: it would match every model',
        f"{bad}:6: context_windows.gpt: must be a whole number of tokens >= 1024, not '4e3'; "
        f"YAML reads 4e3 as text: write 4000"]
    assert config.yaml_text_number("fast") == config.yaml_text_number("nan") == ""
