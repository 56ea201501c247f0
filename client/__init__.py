"""Thin clients of hermesd: hermesctl, hermes-batch, hermesctl top."""
