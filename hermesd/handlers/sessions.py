"""Sessions ops (filled in by the sessions job type)."""
