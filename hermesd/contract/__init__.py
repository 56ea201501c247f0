"""Every name that crosses a boundary between daemon, clients and children, defined once.

The package's map (it imports nothing: each module is a leaf, standard library only, that the
daemon, the clients (``client/``) and the children (``child/``) import beside
:mod:`hermesd.protocol`):

* :mod:`hermesd.contract.states`: job and Kanban task states, the stop reasons;
* :mod:`hermesd.contract.wire`: the wire types of the children's socket, ``JobSpec`` and ``JobResult``;
* :mod:`hermesd.contract.providers`: the model providers' table, their keys, the models' context windows;
* :mod:`hermesd.contract.tokens`: the token counts and the estimate of them;
* :mod:`hermesd.contract.toolsets`: the toolsets and their tools, the roles;
* :mod:`hermesd.contract.launch`: how hermesd starts a Python of its own, a child's environment variables.
"""
