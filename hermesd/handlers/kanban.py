"""Kanban ops (filled in by the kanban job type)."""
