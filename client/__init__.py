"""hermesd's clients.  :func:`main` is ``hermesctl``'s entry point."""

import sys


def c_datetime() -> None:
    """Make ``import datetime`` give the C module ``_datetime`` it ends as anyway: msgpack imports
    ``datetime`` (for its ``Timestamp``), and CPython 3.11's ``Lib/datetime.py`` first defines the
    whole pure-Python implementation, then replaces each public name by ``_datetime``'s (``from
    _datetime import *``): a tenth of a fast command's start for nothing.  The same classes and
    functions either way (3.12's ``datetime.py`` tries ``_datetime`` first)."""
    if "datetime" not in sys.modules:
        try:
            import _datetime
        except ImportError:  # a Python without it: the pure-Python module
            return
        sys.modules["datetime"] = _datetime


def main() -> None:
    """``hermesctl``: the commonest read-only commands answered by :mod:`client.fast` (no click,
    no pyzmq imported), everything else by the full client, :func:`client.ctl.main`."""
    c_datetime()
    from client import fast

    if not fast.run(sys.argv[1:]):
        from client.ctl import main as full

        full()
