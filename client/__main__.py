"""``python -m client``: the same as the ``hermesctl`` command."""

from client.ctl import main

main()
