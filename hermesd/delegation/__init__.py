"""The delegation job type (kinds ``delegation`` and ``background``): subagents for people and agents.

* :mod:`hermesd.delegation.ops`: the plugin, the client ops (``delegate``,
  ``spawn_parallel``, ``retry``) and an agent's child ops (``child.delegate``,
  ``child.children``, ``child.steer``, ``child.stop_child``, ``child.inbox``);
* :mod:`hermesd.delegation.service`: delegation from an agent — depth, toolsets,
  the background cap, foreground groups, steering;
* :mod:`hermesd.delegation.inbox`: the steer messages, kept until their child journaled them;
* :mod:`hermesd.delegation.tasks`: task arguments checked into job fields;
* :mod:`hermesd.delegation.delivery`: background delegations' completion notifications.

This module imports nothing.
"""
