"""Verifiers shipped with hermesd: standalone scripts a batch run names with ``--verifier`` (``batch.verify``)."""
