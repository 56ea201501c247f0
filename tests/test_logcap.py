"""Each job's log is capped: a child flooding its log is rotated, the cap shows in the log."""

from __future__ import annotations

import pytest
import contextlib
import os

from hermesd.upkeep.logcap import rotate, rotated
from tests.harness import wait_for

pytestmark = pytest.mark.start_method  # runs again with the other start method (.ci/run)


def test_rotate_copies_the_tail_truncates_and_says_so(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a" * 6000 + b"b" * 4000)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)  # as the child holds it
    try:
        assert rotate(path, 5000, 2) == 10000
        assert rotated(path, 1).read_bytes() == b"a" * 1000 + b"b" * 4000
        os.write(fd, b"after\n")
        text = path.read_text()
        assert text.startswith("[hermesd ") and "log rotated at 10000 bytes" in text and "5000 before them dropped" in text
        assert text.endswith("after\n") and path.stat().st_size < 300, "the child's next write lands at the new end"
        path.write_bytes(b"c" * 6000)
        rotate(path, 5000, 2)
        assert rotated(path, 2).read_bytes().endswith(b"b" * 4000) and rotated(path, 1).read_bytes() == b"c" * 5000
        assert rotate(path, 5000, 2) == 0, "under the cap: nothing to do"
        path.write_bytes(b"d" * 6000)
        rotate(path, 5000, 0)
        assert "dropped" in path.read_text() and not rotated(path, 3).exists()
    finally:
        os.close(fd)


def test_a_flooding_child_never_outgrows_the_cap(make_daemon):
    d = make_daemon(config={"logs": {"max_bytes": 65536, "keep": 1, "check_interval_seconds": 0.1}})
    flood = "for i in $(seq 1 400); do head -c 65536 /dev/zero | tr '\\\\0' x >> /proc/$PPID/fd/1; sleep 0.02; done"
    rec = d.delegate("flood", toolsets=["terminal"], timeout_seconds=120,
                     script=[{"tool_calls": [{"name": "terminal", "input": {"command": flood, "timeout": 100}}]},
                             {"text": "done"}])
    log = d.home / "jobs" / rec["id"] / "log"
    biggest = 0
    while d.call("job", id=rec["id"])["status"] not in ("completed", "failed"):
        with contextlib.suppress(FileNotFoundError):  # rotated between two looks
            biggest = max(biggest, log.stat().st_size)
        wait_for(lambda: True, 0.05)
    folder = sum(p.stat().st_size for p in log.parent.iterdir())
    assert biggest < 65536 + 3_000_000, biggest
    assert folder < 2 * (65536 + 3_000_000), "400 × 64 KiB = 26 MB were written; the folder holds a fraction"
    text = d.call("logs", id=rec["id"])["data"]
    assert "log rotated" in text
    assert rotated(log, 1).exists() and not rotated(log, 2).exists()


def test_a_50_mb_flood_at_full_speed_stays_under_the_cap(make_daemon):
    """No timer to outrun: the child's own writer rotates before a write would pass the cap."""
    d = make_daemon(config={"logs": {"max_bytes": 1048576, "keep": 1}})
    flood = "head -c 50000000 /dev/zero | tr '\\\\0' x > /proc/$PPID/fd/2; echo flooded"
    rec = d.delegate("flood", toolsets=["terminal"], timeout_seconds=120,
                     script=[{"tool_calls": [{"name": "terminal", "input": {"command": flood, "timeout": 100}}]},
                             {"text": "done"}])
    folder = d.home / "jobs" / rec["id"]

    def size(path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:  # renamed by a rotation between the listing and the look
            return 0

    biggest = 0
    while d.call("job", id=rec["id"])["status"] not in ("completed", "failed"):
        biggest = max(biggest, sum(size(p) for p in folder.glob("log*")))
    assert d.call("job", id=rec["id"])["status"] == "completed"
    final = {p.name: p.stat().st_size for p in folder.glob("log*")}
    assert set(final) == {"log", "log.1"} and max(final.values()) <= 1048576 + 200, final
    assert biggest <= 2 * (1048576 + 200), biggest
    assert (folder / "log").read_text().startswith("[hermes-child ")
