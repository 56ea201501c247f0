"""Shared fixtures: a real daemon in a temporary directory, cleaned up even on failure."""

from __future__ import annotations

import pytest

from tests.harness import DaemonProc


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
