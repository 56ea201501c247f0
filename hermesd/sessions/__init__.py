"""The sessions job type (kind ``session_turn``): persistent conversations.

* :mod:`hermesd.sessions.ops`: the plugin and the ``session.*`` ops;
* :mod:`hermesd.sessions.service`: turns (one at a time per session), history,
  completions delivered as new turns.

This module imports nothing.
"""
