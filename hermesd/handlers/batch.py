"""Batch ops (filled in by the batch job type)."""
