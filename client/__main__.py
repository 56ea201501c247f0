"""``python -m client``: the same as the ``hermesctl`` command."""

from client import main

main()
