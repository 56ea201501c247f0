"""Benchmarks of hermesd (see ``bench/README.md``); ``python -m bench`` runs them all in one go."""
