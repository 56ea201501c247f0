"""Shared fixtures: a real daemon in a temporary directory, cleaned up even on failure."""

from __future__ import annotations

import pytest

from tests.harness import DaemonProc


SHARED_SCOPES = ("package", "module", "class", "session")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Order and group the tests for a parallel run (pytest-xdist, as ``.ci/run`` runs them:
    ``--dist loadgroup --no-loadscope-reorder``).

    * The ``slow`` tests come first, in their order, then the rest (a stable sort): the longest
      tests taken first leave no worker alone with one of them at the end.
    * A test that uses a fixture of ours shared beyond one test (module or session scope: a Ray
      cluster, a browser, the embedded model) is grouped with the rest of its file
      (``xdist_group``), so one worker makes that fixture once; every other test may go to any
      worker.

    Runs first (the xdist worker reads the groups in a hook of its own), after
    ``tests/chaos/conftest.py``'s, registered later, has marked its long tests.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        shared = fixtures and any(d.scope in SHARED_SCOPES and d.baseid for defs in fixtures.name2fixturedefs.values()
                                  for d in defs)
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


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
