"""hermesd: a supervisor daemon for AI subagents."""

__version__ = "0.1.0"
