"""The documentation stays true to the code.

* ``docs/protocol.md`` is exactly what ``docs/gen_protocol.py`` generates from
  ``hermesd/protocol.py`` and the handlers' docstrings;
* ``docs/architecture.md`` names every module (and no module that is gone), its
  state diagram is ``hermesd.jobs.TRANSITIONS``, and its import rules hold;
* ``docs/operations.md`` has every exit code, and the shell completion it
  documents works.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hermesd.jobs import TRANSITIONS
from hermesd.protocol import EXIT_CODES, EXIT_MEANINGS
from tests.harness import ROOT

DOCS = ROOT / "docs"
PACKAGES = ("hermesd", "child", "client", "batch", "dashboard")
BIN = Path(sys.executable).parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_protocol", DOCS / "gen_protocol.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_protocol_reference_is_generated_from_the_code():
    generated = _generator().render()
    committed = (DOCS / "protocol.md").read_text(encoding="utf-8")
    assert committed == generated, ("docs/protocol.md is out of date: run `.venv/bin/python docs/gen_protocol.py` "
                                    "and commit docs/protocol.md with your change")


def test_protocol_reference_covers_every_op_code_and_event():
    from hermesd.server import ROUTER

    HANDLERS, CHILD_HANDLERS = ROUTER.ops, ROUTER.child_ops

    text = (DOCS / "protocol.md").read_text(encoding="utf-8")
    for name in [*HANDLERS, *CHILD_HANDLERS]:
        assert f"#### `{name}`" in text
    for code, status in EXIT_CODES.items():
        assert f"| `{code}` | {status} |" in text
    for etype in ("job.queued", "job.state", "job.progress", "async_delegation", "daemon.started"):
        assert f"| `{etype}` |" in text
    assert "(not described yet)" not in text, "describe a new event type in its plugin's events (the core's: hermesd.events.CORE_EVENTS)"


def modules() -> set[str]:
    """Every Python module of the packages, as a path relative to the repository."""
    return {str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if "__pycache__" not in p.parts}


def test_architecture_names_every_module_and_only_real_ones():
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    missing = sorted(m for m in modules() if m not in text)
    assert not missing, f"docs/architecture.md does not describe {missing}: add them to its module map"
    named = set(re.findall(r"`((?:%s)/[\w/]+\.py)`" % "|".join(PACKAGES), text))
    gone = sorted(m for m in named if not (ROOT / m).exists())
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


def test_architecture_state_diagram_is_the_state_machine():
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    diagram = text.split("```mermaid", 1)[1].split("```", 1)[0]
    edges = set(re.findall(r"^\s*(\w+) --> (\w+)\s*$", diagram, re.M))
    assert edges == {(old, new) for old, news in TRANSITIONS.items() for new in news}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_architecture_import_rules_hold():
    allowed_daemon = {"hermesd", "hermesd.protocol", "hermesd.contract", "hermesd.paths", "hermesd.config",
                      "hermesd.system", "hermesd.system.prctl", "hermesd.warm.wire", "hermesd.system.rlimits",
                      "hermesd.private", "hermesd.journal", "hermesd.redaction", "hermesd.worktrees",
                      "hermesd.worktrees.git", "hermesd.mcp.config",
                      "hermesd.dashboard.config"}
    broken = []
    for module in sorted(modules()):
        top = module.split("/")[0]
        names = _imports(ROOT / module)
        roots = {n.split(".")[0] for n in names}
        if top in ("client", "child", "dashboard"):  # the dashboard is a client (its own process)
            daemon = {n for n in names if n.split(".")[0] == "hermesd"}
            bad = {n for n in daemon if n not in allowed_daemon and not n.startswith("hermesd.protocol.")
                   and not n.startswith("hermesd.contract.")
                   and not n.startswith("hermesd.paths.") and not n.startswith("hermesd.config.")
                   and not n.startswith("hermesd.system.prctl.") and not n.startswith("hermesd.warm.wire.")
                   and not n.startswith("hermesd.private.") and not n.startswith("hermesd.redaction.")
                   and not n.startswith("hermesd.worktrees.git.") and not n.startswith("hermesd.mcp.config.")
                   and not n.startswith("hermesd.dashboard.config.")
                   and not re.fullmatch(r"hermesd\.\w+\.spec(\.\w+)?", n)}
            broken += [f"{module} imports {n}" for n in sorted(bad)]
        if top == "batch":  # daemon-side: the daemon never imports Ray (its driver, a child, does)
            broken += [f"{module} imports {r}" for r in sorted(roots & {"client", "child", "ray"})]
        if top == "hermesd":
            broken += [f"{module} imports {r}" for r in sorted(roots & {"client", "child", "dashboard", "anthropic",
                                                                          "openai", "ray", "starlette", "uvicorn"})]
    for leaf in ("hermesd/warm/__init__.py", "hermesd/warm/wire.py", "hermesd/system/__init__.py", "hermesd/system/prctl.py",
                 "hermesd/system/rlimits.py", "hermesd/private.py", "hermesd/redaction.py",
                 "hermesd/journal.py", "hermesd/worktrees/__init__.py",
                 "hermesd/worktrees/git.py"):  # what children may import pulls in no daemon
        broken += [f"{leaf} imports {n}" for n in sorted(_imports(ROOT / leaf)) if n.split(".")[0] == "hermesd"]
    spec_leaves = [m for m in modules() if m.endswith("/spec.py")]  # a job type's parts of the job spec
    broken += [f"{leaf} imports {n}" for leaf in sorted(spec_leaves) for n in sorted(_imports(ROOT / leaf))
               if n.split(".")[0] in PACKAGES and not n.startswith("hermesd.contract.")]
    for leaf in sorted(m for m in modules() if m.startswith("hermesd/contract/")):  # leaves of one another only
        broken += [f"{leaf} imports {n}" for n in sorted(_imports(ROOT / leaf))
                   if n.split(".")[0] == "hermesd" and not n.startswith("hermesd.contract.")]
    assert not broken, "architecture rules broken:\n" + "\n".join(broken)


def test_batch_imports_no_cycle():
    """No module of ``batch/`` imports, even inside a function, one that imports it back (``batch.line``
    builds a line from ``batch.trajectories``' counts; the files are written by ``batch.trajectories``)."""
    names = {str(Path(m).with_suffix("")).replace("/", "."): m for m in modules() if m.startswith("batch/")}
    graph = {name: {n for n in _imports(ROOT / path) if n in names and n != name} for name, path in names.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and not seen.add(n) and reaches(n, goal, seen)) for n in graph[start])

    cycles = sorted(name for name in graph if reaches(name, name, set()))
    assert not cycles, f"batch modules in an import cycle: {cycles}"


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (not inside functions or TYPE_CHECKING blocks)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_clients_import_in_one_direction_and_load_nothing_heavy_at_start():
    from client.ctl import families

    below = ["client/tui.py", "client/top_board.py", "client/common.py", "client/fast.py", "client/verbs.py",
             "client/render.py", "client/connection.py", "client/calls.py", "client/zmtp.py"]
    family = [p for p in (f"{name.replace('.', '/')}.py" for name in families()) if p not in below]
    order = ["client/ctl.py", *family, *below]  # the command families from their registry (client.ctl.families)
    assert set(order) | {"client/__init__.py", "client/__main__.py"} == {m for m in modules() if m.startswith("client/")}
    tier = {"client/ctl.py": 0, **{m: 1 for m in family}, **{m: 2 + i for i, m in enumerate(below)}}
    broken = []
    for module in order:
        for name in _imports(ROOT / module):
            target = f"{name.replace('.', '/')}.py"
            if target in tier and target != module and (tier[target] < tier[module] or (
                    tier[target] == tier[module] and module not in family)):  # families may use one another
                broken.append(f"{module} imports {name}")
        heavy = {n for n in _top_level_imports(ROOT / module)
                 if n.split(".")[0] in ("textual", "rich", "prompt_toolkit", "jsonschema")}
        if module != "client/tui.py":  # the TUI itself is imported only when `top` runs on a terminal
            broken += [f"{module} imports {n} at start" for n in sorted(heavy)]
    assert not broken, "client imports must go one way (ctl → families → common → render, connection):\n" + \
        "\n".join(broken)
    out = subprocess.run([sys.executable, "-c", "import sys, client.ctl; print(sorted(m for m in sys.modules if "
                          "m.split('.')[0] in ('textual', 'rich', 'prompt_toolkit', 'jsonschema', 'yaml')))"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_operations_documents_every_exit_code_and_existing_units():
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    for code, status in EXIT_CODES.items():
        assert f"| `{code}` | {status} |" in text, f"exit code of {code} missing from docs/operations.md"
    for ref in set(re.findall(r"(?<![\w/])systemd/[\w./{},-]+", text)):
        ref = ref.rstrip(".,")
        expanded = [ref]
        if "{" in ref:
            head, alts, tail = re.match(r"(.*)\{(.*)\}(.*)", ref).groups()
            expanded = [f"{head}{alt}{tail}" for alt in alts.split(",")]
        for path in expanded:
            assert (ROOT / path).exists(), f"docs/operations.md names {path}, which does not exist"


def test_hermesctl_help_lists_every_exit_status():
    shown = " ".join(subprocess.run([sys.executable, "-m", "client", "--help"], capture_output=True, text=True,
                                    check=True).stdout.split())
    assert set(EXIT_CODES.values()) | {0, 130} == set(EXIT_MEANINGS)
    for status, meaning in EXIT_MEANINGS.items():
        assert f" {status} {meaning}" in shown, f"hermesctl --help does not list exit status {status}"


def test_documented_shell_completion_works():
    env = {**os.environ, "_HERMESCTL_COMPLETE": "bash_source"}
    script = subprocess.run([str(BIN / "hermesctl")], env=env, capture_output=True, text=True, timeout=30)
    assert script.returncode == 0 and "complete -o nosort -F _hermesctl_completion hermesctl" in script.stdout
    env = {**os.environ, "_HERMESCTL_COMPLETE": "bash_complete", "COMP_WORDS": "hermesctl de", "COMP_CWORD": "1"}
    words = subprocess.run([str(BIN / "hermesctl")], env=env, capture_output=True, text=True, timeout=30)
    assert "plain,delegate" in words.stdout.splitlines()
    env = {**os.environ, "_HERMESCTL_COMPLETE": "zsh_source"}
    zsh = subprocess.run([str(BIN / "hermesctl")], env=env, capture_output=True, text=True, timeout=30)
    assert zsh.stdout.startswith("#compdef hermesctl")


def test_job_ids_complete_from_the_running_daemon(daemon):
    done = daemon.wait_job(daemon.delegate("finished one", script=[{"text": "ok"}])["id"])
    env = {**daemon.env, "_HERMESCTL_COMPLETE": "bash_complete", "COMP_WORDS": "hermesctl cancel de",
           "COMP_CWORD": "2"}
    words = subprocess.run([str(BIN / "hermesctl")], env=env, capture_output=True, text=True, timeout=30)
    assert words.stdout.splitlines() == [f"plain,{done['id']}"]
    env["_HERMESCTL_COMPLETE"] = "zsh_complete"
    zsh = subprocess.run([str(BIN / "hermesctl")], env=env, capture_output=True, text=True, timeout=30)
    assert "completed: finished one" in zsh.stdout
    env["HERMES_RUNTIME_DIR"] = str(daemon.base / "nowhere")  # no daemon: no ids, no error
    none = subprocess.run([str(BIN / "hermesctl")], env=env, capture_output=True, text=True, timeout=30)
    assert none.returncode == 0 and none.stdout.strip() == ""


def test_a_job_types_event_lines_are_its_display_leaf_imported_only_for_its_events():
    """How a job type's events read is its package's ``display`` module (found by file), a leaf
    importing only ``hermesd.protocol``; a client showing only the core's events never imports one."""
    from hermesd.paths import plugin_modules

    names = plugin_modules("display")
    assert {"hermesd.kanban.display", "hermesd.sessions.display", "batch.display"} <= set(names)
    for name in names:
        ours = {n for n in _imports(ROOT / (name.replace(".", "/") + ".py"))
                if n.split(".")[0] in ("hermesd", "batch", "client", "child")}
        assert ours <= {"hermesd.protocol", "hermesd.protocol.one_line"}, name
    code = ("import sys; from client import render; e = dict(seq=1, time='t', job='j'); "
            "print(render.event_text({**e, 'type': 'job.state', 'data': {'previous': 'a', 'status': 'b'}})); "
            "print([m for m in sys.modules if m.endswith('.display')]); "
            "print(render.event_text({**e, 'type': 'kanban.claimed', 'data': {'task': 'kb_1', 'worker': 'w', 'attempt': 2}})); "
            "print(render.event_text({**e, 'type': 'batch.progress', 'data': dict(processed=1, total=2, done=1, failed=0)}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == 4, out.stderr
    assert lines[0].endswith("j        a -> b") and lines[1] == "[]"
    assert lines[2].endswith("kb_1     worker w (attempt 2)") and lines[3].endswith("j        1/2 done 1 failed 0")


@pytest.mark.parametrize("command", ["delegate", "send"])
def test_no_resume_help_says_how_such_a_job_ends_as_operations_does(command):
    shown = " ".join(subprocess.run([sys.executable, "-m", "client", command, "--help"], capture_output=True,
                                    text=True, check=True).stdout.split())
    assert "ends interrupted at a graceful stop, lost after a crash" in shown
    assert "end it lost instead" not in shown
