"""Shared fixtures: a real daemon in a temporary directory, cleaned up even on failure."""

from __future__ import annotations

import os

import pytest

from tests.harness import DaemonProc


for _size in ("COLUMNS", "LINES"):  # a pytest-xdist worker gets COLUMNS=80 LINES=24: clients' tables would
    os.environ.pop(_size, None)     # fit that, while the tests pass a width where they mean one

SHARED_SCOPES = ("package", "module", "class", "session")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Order and group the tests for a parallel run (pytest-xdist, as ``.ci/run`` runs them with
    ``HERMES_TEST_WORKERS`` above 1: ``--dist loadgroup --no-loadscope-reorder``).

    * The ``cpu`` tests (the embedded model, TRL training, a pip install: each keeps both cores busy
      by itself, and two at once each take three times as long) form one group, run one after
      another by one worker, and come first; then the other ``slow`` tests, then the rest (a
      stable sort): the longest taken first leave no worker alone with one of them at the end.
      Without xdist the order is the files' own.
    * A test that uses a fixture of ours shared beyond one test (module or session scope: a Ray
      cluster, a browser, the embedded model) goes with the rest of its file, so one worker makes
      that fixture once: into the ``cpu`` group when the file has a ``cpu`` test, else a group of
      its own.  Every other test may go to any worker.

    A wrapper, so it runs before every plain implementation (the xdist worker reads the groups in a
    plain one of its own), after ``tests/chaos/conftest.py``'s wrapper, registered later, has marked
    its long tests.
    """
    def shares(item) -> bool:
        fixtures = getattr(item, "_fixtureinfo", None)
        return bool(fixtures) and any(d.scope in SHARED_SCOPES and d.baseid
                                      for defs in fixtures.name2fixturedefs.values() for d in defs)

    def path(item) -> str:
        return item.nodeid.split("::")[0]

    cpu_files = {path(item) for item in items if item.get_closest_marker("cpu")}
    shared_files = {path(item) for item in items if shares(item)}
    for item in items:
        if item.get_closest_marker("cpu") or path(item) in cpu_files & shared_files:
            item.add_marker(pytest.mark.cpu)
            item.add_marker(pytest.mark.xdist_group("cpu"))
        elif path(item) in shared_files:
            item.add_marker(pytest.mark.xdist_group(path(item)))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # one process keeps the files' own order
        items.sort(key=lambda item: (item.get_closest_marker("cpu") is None, item.get_closest_marker("slow") is None))
    return (yield)


@pytest.fixture
def make_daemon(tmp_path):
    """Factory: ``make_daemon(config=None, env=None, start=True) -> DaemonProc``; all are cleaned up."""
    made: list[DaemonProc] = []

    def make(config=None, env=None, start=True, name="d"):
        daemon = DaemonProc(tmp_path / f"{name}{len(made)}", config, env)
        made.append(daemon)
        return daemon.start() if start else daemon

    yield make
    for daemon in made:
        daemon.cleanup()


@pytest.fixture
def daemon(make_daemon):
    """A running daemon on the scripted provider with default caps."""
    return make_daemon()
