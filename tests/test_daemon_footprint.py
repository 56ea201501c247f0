"""What an idle daemon keeps resident (bench/README.md): no TLS library, since it speaks only over unix
sockets (``hermesd.daemon.keep_tls_out``; ids and tokens from ``os.urandom``, not ``secrets``, whose
``hmac`` would load libcrypto); the processes it starts are new interpreters and keep ``ssl``
(the zygote imports the provider SDKs, which need it)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import wait_for

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)

TLS = re.compile(r"lib(ssl|crypto)[.-]")


def _zygote(daemon) -> int:
    return wait_for(lambda: daemon.call("status")["start"].get("zygote"), 120, 0.1, "the zygote warm")


def test_the_daemon_maps_no_tls_library_and_a_zygote_for_anthropic_does(make_daemon):
    daemon = make_daemon({"provider": "anthropic"}, env={"ANTHROPIC_API_KEY": "sk-test"})
    job = daemon.wait_job(daemon.delegate("a job", script=[{"text": "done"}], provider="scripted")["id"])
    assert job["status"] == "completed"
    assert not TLS.search(Path(f"/proc/{daemon.proc.pid}/maps").read_text()), "the daemon loaded a TLS library"
    if daemon.call("status")["start"]["method"] == "forkserver":
        assert TLS.search(Path(f"/proc/{_zygote(daemon)}/maps").read_text()), "the zygote could not import ssl"


def test_the_zygote_imports_only_the_sdks_in_use_and_learns_a_new_one(daemon):
    """A zygote that imported the Anthropic SDK would be 100 MB, each fork copying its page
    tables; one for the scripted and local providers is a quarter of that.  A job with
    another provider makes it import that provider's SDK for the spares to come."""
    if daemon.call("status")["start"]["method"] != "forkserver":
        pytest.skip("warm start only")
    zygote = _zygote(daemon)
    assert not TLS.search(Path(f"/proc/{zygote}/maps").read_text()), "no provider of the config needs TLS"
    job = daemon.wait_job(daemon.delegate("another provider", provider="openai-compat")["id"])
    assert job["status"] == "failed"  # no server to talk to; its hello reached the daemon first
    wait_for(lambda: TLS.search(Path(f"/proc/{zygote}/maps").read_text()), 60, 0.1,
             "the zygote importing the openai SDK (and ssl) for the spares to come")

NOT_RESIDENT = re.compile(r"_psutil_linux|_bz2\.cpython|_lzma\.cpython|libbz2|liblzma|_decimal\.cpython|_random\.cpython|_pickle\.cpython")
"""What the idle daemon does without (bench/README.md): psutil (``hermesd.system.procfs`` reads ``/proc``),
bz2/lzma, which ``shutil`` imports (it is imported where a folder is removed or a program looked
up, not at start), ``decimal`` (the config imports it to word an error), ``random`` and ``pickle``
(pyzmq imports them; ``hermesd.daemon.defer_imports`` makes them load at their first use)."""


def test_the_idle_daemon_maps_neither_psutil_nor_the_compression_libraries_nor_decimal(daemon):
    daemon.call("status")
    found = sorted(set(NOT_RESIDENT.findall(Path(f"/proc/{daemon.proc.pid}/maps").read_text())))
    assert found == [], f"the idle daemon loaded {found}"


def test_a_deferred_module_loads_at_its_first_use():
    """``hermesd.daemon.defer_imports``: a library's ``import random`` binds it without running it;
    its first attribute access runs it, and it works as imported; what a deferred module is given
    to have before it runs is what it has once it runs (``pickle``'s protocols, which pyzmq reads)."""
    code = ("import sys; from hermesd.daemon import DEFERRED, defer_imports; defer_imports(); "
            "import pickle, random, zmq; lazy = not {'_random', '_pickle'} & set(sys.modules); "
            "value = random.Random('seed').random(); ok = pickle.loads(pickle.dumps([1])) == [1]; "
            "same = all(getattr(pickle, k) == v for k, v in DEFERRED['pickle'].items()); "
            "print(lazy, {'_random', '_pickle'} <= set(sys.modules), 0 <= value < 1, ok, same)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True"] * 5, out


def test_the_daemon_runs_optimized_without_the_yaml_parser_until_a_reload(daemon):
    """``hermesd run`` read the config, then exec'd the daemon process (the same pid) under
    ``-OO -X no_debug_ranges``, the config handed over as JSON; PyYAML comes in with the first ``reload``."""
    argv = Path(f"/proc/{daemon.proc.pid}/cmdline").read_bytes().split(b"\0")
    assert b"-OO" in argv and b"-Xno_debug_ranges" in argv and b"hermesd.daemon" in argv, argv
    assert daemon.call("status")["config"] == str(daemon.home / "config.yaml")
    maps = lambda: Path(f"/proc/{daemon.proc.pid}/maps").read_text()  # noqa: E731
    assert "_yaml" not in maps()
    assert daemon.call("reload")["reloaded"]
    assert "_yaml" in maps()


def test_the_daemon_interpreter_keeps_the_options_that_change_behaviour():
    code = "from hermesd.daemon import interpreter_options; print(' '.join(interpreter_options()))"
    out = subprocess.run([sys.executable, "-I", "-W", "error::ResourceWarning", "-X", "dev", "-X", "no_debug_ranges",
                          "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["-OO", "-Xno_debug_ranges"] and out.count("-Xno_debug_ranges") == 1, out
    assert "-I" in out and "-Werror::ResourceWarning" in out and "-Xdev" in out



def test_the_daemon_starts_with_its_standard_streams_closed(make_daemon):
    """``hermesd run 2>&- <&-`` (as some init scripts start daemons): the config's memory file
    must not take the number of a closed standard stream."""
    daemon = make_daemon(start=False)
    argv = f"exec {shlex.quote(sys.executable)} -m hermesd.cli run <&- >&- 2>&-"
    daemon.proc = subprocess.Popen(["bash", "-c", argv], env=daemon.env, cwd=str(daemon.work))
    wait_for(lambda: daemon.proc.poll() is not None or (daemon.runtime / "hermesd.sock").exists(), 30, 0.05,
             "the daemon's socket")
    assert daemon.proc.poll() is None, f"hermesd run exited {daemon.proc.returncode}"
    job = daemon.wait_job(daemon.delegate("streams closed")["id"])
    assert job["status"] == "completed"
    daemon.call("shutdown")
    assert daemon.proc.wait(20) == 0


def test_the_kanban_board_is_imported_at_its_first_use(make_daemon):
    """An idle daemon that never had a task holds neither the board nor its dispatcher
    (``KanbanPlugin.board``); the first ``kanban.*`` op makes them (the imports, as
    ``PYTHONPROFILEIMPORTTIME`` writes them to the daemon's log)."""
    daemon = make_daemon(env={"PYTHONPROFILEIMPORTTIME": "1"})
    daemon.call("status")
    assert "hermesd.kanban.ops" in daemon.log() and "hermesd.kanban.board" not in daemon.log()
    daemon.call("kanban.list")
    wait_for(lambda: "hermesd.kanban.board" in daemon.log() and "hermesd.kanban.dispatcher" in daemon.log(),
             what="the board imported at the first kanban op")


def _imported(log: str) -> set[str]:
    """The modules ``PYTHONPROFILEIMPORTTIME`` wrote to a log (``import time: … | name``)."""
    return set(re.findall(r"^import time:.*\|\s*([\w.]+)\s*$", log, re.M))


def test_an_idle_daemon_imports_no_part_a_plugin_makes_at_its_first_use(make_daemon):
    """Every plugin's :attr:`hermesd.plugin.Plugin.on_demand` modules (its services made at their
    first op or hook) are absent from an idle daemon that never had a job of its kinds, and exist."""
    from importlib.util import find_spec

    from hermesd.server import PLUGINS

    lazy = {name: cls.__name__ for cls in PLUGINS for name in cls.on_demand}
    assert all(find_spec(name) for name in lazy), lazy
    daemon = make_daemon(env={"PYTHONPROFILEIMPORTTIME": "1"})
    daemon.call("status")
    imported = _imported(daemon.log())
    assert "hermesd.server" in imported  # the log is the daemon's
    assert sorted(set(lazy) & imported) == []


def test_the_ledger_and_the_governor_are_made_at_a_metered_jobs_first_call(make_daemon):
    """An idle daemon answers ``status``'s ``spend`` and ``governor`` without them (nothing spent,
    no limiter: ``BillingPlugin.spent``, ``GovernorPlugin.describe``); a job of a metered provider
    (the fake Anthropic server) makes both at its first ``child.grant``, and its spend is the ledger's."""
    from hermesd.billing.budget import nothing_spent
    from tests.fakes.anthropic_server import FakeAnthropic

    lazy = {"hermesd.billing.ledger", "hermesd.governor.service"}
    with FakeAnthropic() as api:
        daemon = make_daemon({"provider": "anthropic", "base_url": api.url, "model": "claude-fake"},
                             env={"ANTHROPIC_API_KEY": "sk-test", "PYTHONPROFILEIMPORTTIME": "1"})
        status = daemon.call("status")
        assert status["spend"]["today"] == nothing_spent() and status["governor"] == []
        assert not lazy & _imported(daemon.log())
        job = daemon.wait_job(daemon.delegate("a metered job")["id"], timeout=60)
    assert job["status"] == "completed", job
    assert lazy <= _imported(daemon.log())
    status = daemon.call("status")
    assert status["governor"] and status["spend"]["today"]["calls"] >= 1, status
