"""The batch job type as the daemon runs it (no front end here)."""
