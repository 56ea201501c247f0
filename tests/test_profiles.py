"""Worker profiles: files under HERMES_HOME/profiles/NAME/config.yaml, validation
naming the field, broken files reported, and the hermesctl profile commands
against a real daemon."""

from __future__ import annotations

import json
import stat

import pytest
import yaml

from hermesd.contract.providers import PROVIDERS
from hermesd.kanban import profiles
from hermesd.protocol import ProtocolError


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    return tmp_path


def test_save_load_list_delete(home):
    saved = profiles.save("coder", {"description": "Writes code", "model": "m1", "toolsets": ["all", "kanban"]})
    path = home / "profiles" / "coder" / "config.yaml"
    assert saved.path == str(path)
    assert yaml.safe_load(path.read_text()) == {"name": "coder", "description": "Writes code", "model": "m1",
                                                "provider": None,
                                                "toolsets": ["terminal", "file", "web", "delegation", "kanban"], "worktree": False}
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert profiles.load("coder") == saved
    profiles.save("alpha", {"description": "First", "toolsets": ["*"]})
    assert [p.name for p in profiles.list_all()] == ["alpha", "coder"]
    assert "kanban" not in profiles.load("alpha").toolsets  # all/* never enable kanban
    with pytest.raises(ProtocolError, match="already exists") as err:
        profiles.save("coder", {"description": "again"})
    assert err.value.code == "invalid_state"
    assert profiles.save("coder", {"description": "again"}, replace=True).description == "again"
    assert profiles.delete("coder")["description"] == "again"
    assert not path.parent.exists()
    with pytest.raises(ProtocolError, match="no profile 'coder' \\(profiles: alpha\\)") as err:
        profiles.load("coder")
    assert err.value.code == "not_found"


@pytest.mark.parametrize("name, fields, field", [
    ("../x", {"description": "d"}, "name"),
    ("ok", {}, "description"),
    ("ok", {"description": "  "}, "description"),
    ("ok", {"description": "d", "provider": "magic"}, "provider"),
    ("ok", {"description": "d", "toolsets": ["terminal", "browser"]}, "toolsets"),
    ("ok", {"description": "d", "toolsets": "terminal"}, "toolsets"),
    ("ok", {"description": "d", "worktree": "yes"}, "worktree"),
    ("ok", {"description": "d", "model": 3}, "model"),
    ("ok", {"description": "d", "colour": "red"}, "colour"),
])
def test_invalid_profiles_name_the_field(home, name, fields, field):
    with pytest.raises(ProtocolError) as err:
        profiles.save(name, fields)
    assert err.value.code == "bad_request" and err.value.details["field"] == field
    assert not (home / "profiles" / "ok").exists()


def test_a_broken_file_names_file_and_key(home):
    profiles.save("good", {"description": "fine"})
    broken = home / "profiles" / "bad" / "config.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text("description: x\ntoolsets: [terminal, teleport]\n")
    with pytest.raises(ProtocolError, match=f"{broken}:2: toolsets: unknown toolset") as err:
        profiles.load("bad")
    assert err.value.code == "invalid_config" and err.value.details["file"] == str(broken)
    assert [p.name for p in profiles.list_all()] == ["good"]  # listed profiles are the readable ones
    assert profiles.delete("bad")["name"] == "bad"  # and a broken one can still be deleted


def test_profile_commands(make_daemon):
    d = make_daemon()
    out = d.ctl("profile", "create", "researcher", "--description", "Reads sources, writes notes",
                "--toolsets", "web,file", "--json")
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    assert created["toolsets"] == ["web", "file"] and created["path"].startswith(str(d.home / "profiles"))
    assert d.ctl("profile", "create", "researcher", "--description", "again").returncode == 6
    assert d.ctl("profile", "create", "coder", "--description", "Writes code", "--model", "m").returncode == 0
    listed = [json.loads(line) for line in d.ctl("profile", "list", "--json").stdout.splitlines()]
    assert [p["name"] for p in listed] == ["coder", "researcher"]
    text = d.ctl("profile", "list").stdout
    assert "Reads sources, writes notes" in text and "toolsets: web,file" in text
    assert json.loads(d.ctl("profile", "show", "coder", "--json").stdout)["model"] == "m"
    missing = d.ctl("profile", "show", "nobody", "--json")
    assert missing.returncode == 5 and json.loads(missing.stdout)["error"]["code"] == "not_found"
    assert d.ctl("profile", "delete", "coder").returncode == 0
    assert d.ctl("profile", "show", "coder").returncode == 5
    bad = d.ctl("profile", "create", "x", "--description", "d", "--toolsets", "nope", "--json")
    assert bad.returncode == 2 and "toolsets" in json.loads(bad.stdout)["error"]["message"]
    types = [e["type"] for e in d.call("events_since", since=0)["events"]]
    assert types.count("profile.created") == 2 and types.count("profile.deleted") == 1


def test_a_broken_file_shows_every_error_with_its_line(make_daemon):
    d = make_daemon()
    broken = d.home / "profiles" / "bad" / "config.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text("description: x\nprovider: magic\ncolour: red\n")
    out = d.ctl("profile", "show", "bad")
    assert out.returncode == 7 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"hermesctl: {broken}:2: provider: must be one of " + ", ".join(PROVIDERS),
        f"{broken}:3: colour: unknown key (known keys: name, description, model, provider, toolsets, worktree, mcp_servers)"]
