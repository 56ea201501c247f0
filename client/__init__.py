"""hermesd's clients.  :func:`main` is ``hermesctl``'s entry point."""

import sys


def main() -> None:
    """``hermesctl``: the commonest read-only commands answered by :mod:`client.fast` (no click,
    no pyzmq imported), everything else by the full client, :func:`client.ctl.main`."""
    from client import fast

    if not fast.run(sys.argv[1:]):
        from client.ctl import main as full

        full()
