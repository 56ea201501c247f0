"""The chaos suite's default part stays short; the rest is marked ``slow`` here.

A module lists the names of its long tests in ``SLOW`` (tests imported from
other modules cannot be decorated without marking them there too).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` the items named in their module's ``SLOW`` (a wrapper, before
    ``tests/conftest.py``'s, which orders the items by that mark)."""
    for item in items:
        if getattr(item, "originalname", None) in getattr(getattr(item, "module", None), "SLOW", ()):
            item.add_marker(pytest.mark.slow)
    return (yield)
