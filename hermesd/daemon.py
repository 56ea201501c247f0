"""The daemon process: what ``hermesd run`` execs into once the config is read.

``hermesd run`` parses its command line (argparse) and reads and checks the
config file (PyYAML); an invalid file ends it there, exit 7, as before.  Then
:func:`exec_daemon` replaces the process (same pid, so systemd, a pid file or a
test that holds a ``Popen`` keep following it) with::

    python -P -OO -Xno_debug_ranges -m hermesd.daemon FD

where ``FD`` is an anonymous in-memory file (``memfd_create(2)``) holding the
checked config as JSON (``{"path", "source", "log_level", "config"}``;
``config`` in the shape of :meth:`hermesd.config.Config.to_dict`).  :func:`main`
reads it, rebuilds the config with :func:`hermesd.config.from_data` and runs
:func:`hermesd.server.run`.

Why (an idle daemon's memory, bench/README.md): the daemon never holds argparse or
PyYAML (about 1.3 MiB; a ``reload`` imports PyYAML when it re-reads the file),
nor docstrings and asserts (``-OO``: about 1.5 MiB of code objects across the
standard library, pyzmq and hermesd, none of which the daemon reads), nor the
columns of each instruction's position in them (``-X no_debug_ranges``: about
0.1 MiB; a traceback in the daemon's log names each line without the ``^^^^``
under the expression).  Its children are new interpreters started without
either.  ``-P``
(:data:`hermesd.contract.launch.PYTHON`, as for every Python hermesd starts) keeps the
working directory out of ``sys.path``, so a ``logging.py`` where it is started
cannot shadow a module.  The interpreter options that change behaviour
(``-I``, ``-E``, ``-s``, ``-B``, ``-W``, ``-X``) carry over.  The config goes
through a file descriptor, not an environment variable, which every child
would inherit and ``/proc/PID/environ`` would keep for the daemon's life.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import sys
import types
from typing import Any, NoReturn

from hermesd import config as config_mod, private
from hermesd.contract.launch import PYTHON

LOG_FORMAT = "%(asctime)s hermesd[%(process)d] %(levelname)s %(message)s"


def interpreter_options() -> list[str]:
    """The options of the Python that runs the daemon (after :data:`hermesd.contract.launch.PYTHON`):
    ``-OO``, ``-X no_debug_ranges`` (see the module doc) and those of this interpreter that
    change behaviour (isolation, environment, warnings, ``-X``)."""
    flags = sys.flags
    options = ["-OO", "-Xno_debug_ranges"]
    if flags.isolated:
        options.append("-I")
    else:
        options += ["-E"] * bool(flags.ignore_environment) + ["-s"] * bool(flags.no_user_site)
    options += ["-B"] * bool(flags.dont_write_bytecode)
    options += [f"-W{w}" for w in sys.warnoptions]
    options += [f"-X{k}" if v is True else f"-X{k}={v}" for k, v in sys._xoptions.items() if k != "no_debug_ranges"]
    return options


def exec_daemon(config: config_mod.Config, path: str | None, log_level: str) -> NoReturn:
    """Replace this process by the daemon (see the module doc) running ``config``.

    ``path``: the ``--config`` given (None: the default file), which ``reload``
    reads again.  Returns only by raising ``OSError`` when the exec fails.
    """
    handoff = {"path": path, "source": config.source, "log_level": log_level,
               "config": {k: v for k, v in config.to_dict().items() if k != "source"}}
    memfd = os.memfd_create("hermesd-config")
    try:  # above the standard streams: with one of them closed, the memfd would take its number
        fd = fcntl.fcntl(memfd, fcntl.F_DUPFD, 3)
    finally:
        os.close(memfd)
    os.write(fd, json.dumps(handoff).encode())
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.execv(PYTHON[0], [*PYTHON, *interpreter_options(), "-m", "hermesd.daemon", str(fd)])


DEFERRED: dict[str, dict[str, Any]] = {
    "random": {},
    "pickle": {"DEFAULT_PROTOCOL": 4, "HIGHEST_PROTOCOL": 5},
}
"""Standard-library modules that pyzmq imports at its own import for calls the daemon does not
make, and what of each it reads then (its values before it runs: pickle's as in Python 3.11 to
3.13, which tests/test_daemon_footprint.py compares with the interpreter's): ``zmq.sugar.socket``
imports ``random`` for ``Socket.bind_to_random_port`` and ``pickle`` for ``send_pyobj`` and
``recv_pyobj``, whose default protocol it reads.  With their extensions (``_random``,
``_sha512``, ``_bisect``, ``_pickle``) they were about 0.5 MiB of an idle daemon (bench/README.md);
:func:`defer_imports` has them run at their first use (a batch's toolset draw, the governor's
jitter)."""


def defer_imports(modules: dict[str, dict[str, Any]] = DEFERRED) -> None:
    """Put each module named in ``modules`` that is not imported yet in ``sys.modules`` unrun (a
    :class:`Deferred`) with the attributes given for it: an ``import`` of it binds the module, the
    first read of an attribute it does not have yet runs it, in place (``import random`` then
    ``random.uniform`` work as ever), and its own values replace the ones given."""
    from importlib.util import find_spec, module_from_spec

    for name, known in modules.items():
        spec = None if name in sys.modules else find_spec(name)
        if spec is None or spec.loader is None:
            continue
        module = module_from_spec(spec)  # its __spec__, __name__, __file__…, not run
        vars(module).update(known)
        module.__class__ = Deferred
        sys.modules[name] = module


class Deferred(types.ModuleType):
    """A module not run yet (:func:`defer_imports`).  Unlike :class:`importlib.util.LazyLoader`'s
    modules, reading what it already has (``__spec__``, which Python 3.11's ``import`` statement
    reads of a module found in ``sys.modules``) does not run it: only a missing attribute does.
    The daemon's event-loop thread is the one that uses these modules (two threads reading a
    missing attribute at once could both run it)."""

    def __getattr__(self, attr: str) -> Any:
        self.__class__ = types.ModuleType
        self.__spec__.loader.exec_module(self)
        return getattr(self, attr)


def keep_tls_out() -> None:
    """Make ``import ssl`` fail in this process, before asyncio is imported.

    The daemon speaks only over unix sockets, never TLS, yet asyncio imports
    ``ssl`` when it can (``asyncio.base_events``, ``asyncio.sslproto``: both
    fall back to ``ssl = None``), which maps libssl and libcrypto, about 5 MiB
    of an idle daemon's 33 (bench/README.md).  A ``None`` in ``sys.modules`` makes the
    import raise ``ImportError`` (the import system's documented rule).  Its
    children (zygote, child processes) are new interpreters and keep ``ssl``.
    """
    sys.modules.setdefault("ssl", None)


def main(argv: list[str]) -> int:
    """``python -m hermesd.daemon FD``: run the daemon on the config in file descriptor
    ``FD`` (:func:`exec_daemon`); returns the exit status.

    SIGTERM and SIGINT arrive blocked (``hermesd run`` blocks them before the exec, and a
    blocked signal stays pending across it): here they are caught into :data:`EARLY_SIGNALS`
    and unblocked, so a signal while the daemon starts makes it finish starting and stop at
    once, cleanly (``Daemon.run``: nothing it started is left; 130 after a SIGINT), instead
    of dying by the signal half-way.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, _frame: EARLY_SIGNALS.append(signal.Signals(signum).name))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        return _run(int(argv[0]))
    except KeyboardInterrupt:
        return 130


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals that stop the daemon; blocked by ``hermesd run`` from just before its exec."""

EARLY_SIGNALS: list[str] = []
"""The names of the stop signals that came while the daemon started (before its event loop's handlers)."""


def _run(fd: int) -> int:
    private.tighten_umask()  # all it creates is private from the first byte, whatever the umask
    try:
        handoff = json.loads(os.pread(fd, os.fstat(fd).st_size, 0))
    finally:
        os.close(fd)
    logging.basicConfig(level=handoff["log_level"], stream=sys.stderr, format=LOG_FORMAT)
    try:
        config = config_mod.from_data(handoff["config"], handoff["source"])
    except config_mod.ConfigError as err:  # checked by hermesd run: only a version mismatch gets here
        print(f"hermesd: invalid configuration: {err}", file=sys.stderr)
        return 7
    keep_tls_out()
    defer_imports()
    from hermesd import server

    return server.run(config, handoff["path"], early_signals=EARLY_SIGNALS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
