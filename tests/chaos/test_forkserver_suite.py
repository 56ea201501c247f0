"""The daemon's integration tests again, with warm start.

The tests are imported from their modules and run here with ``make_daemon``
overridden: every daemon runs with ``supervisor.start_method: forkserver`` and
each (re)start waits until its zygote is warm, so the children are forked.
Caps, cancel, kill -9, shutdown and the child runtime (interruption, title,
environment, timeout) are the representative subset; the rest is opt-in slow.
"""

from __future__ import annotations

import pytest

from tests.chaos.helpers import forkserver, warm_on_start
from tests.test_child_runtime import (  # noqa: F401 - collected here
    test_child_interrupted_mid_tool_reports_within_two_seconds, test_child_process_title_and_environment,
    test_child_timeout_ends_timed_out, test_runaway_command_killed_at_its_timeout_with_its_group)
from tests.test_daemon_caps import (  # noqa: F401 - collected here
    test_cancel_queued_job, test_cancel_running_child_keeps_partial_output, test_five_background_against_cap_three,
    test_global_cap_queues_foreground, test_queue_runs_all_five)
from tests.test_daemon_lifecycle import (  # noqa: F401 - collected here
    test_kill9_children_die_and_restart_reports_lost, test_sigterm_stops_children_and_grandchildren)
from tests.test_sessions import (  # noqa: F401 - collected here
    api, test_background_completions_arrive_as_new_turns_exactly_once,
    test_kill9_between_completion_and_delivery_delivers_once)

SLOW = {"test_global_cap_queues_foreground", "test_queue_runs_all_five", "test_cancel_queued_job",
        "test_runaway_command_killed_at_its_timeout_with_its_group", "test_child_timeout_ends_timed_out",
        "test_child_interrupted_mid_tool_reports_within_two_seconds",
        "test_background_completions_arrive_as_new_turns_exactly_once",
        "test_kill9_between_completion_and_delivery_delivers_once"}
"""Opt-in (``-m slow``): the default run keeps caps, cancel, kill -9, shutdown, title and environment."""


@pytest.fixture
def make_daemon(make_daemon):
    """``tests.conftest.make_daemon`` with warm start, waiting for the zygote at every start."""
    def make(config=None, env=None, start=True, name="d"):
        daemon = warm_on_start(make_daemon(forkserver(config), env, start=False, name=name))
        return daemon.start() if start else daemon

    return make
