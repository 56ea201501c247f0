"""What an idle daemon keeps resident (issue 22): no TLS library, since it speaks only over unix
sockets (``hermesd.cli.keep_tls_out``; ids and tokens from ``os.urandom``, not ``secrets``, whose
``hmac`` would load libcrypto); the processes it starts are new interpreters and keep ``ssl``
(the zygote imports the provider SDKs, which need it)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.harness import wait_for

TLS = re.compile(r"lib(ssl|crypto)[.-]")


def test_the_daemon_maps_no_tls_library_and_the_zygote_does(daemon):
    job = daemon.wait_job(daemon.delegate("a job", script=[{"text": "done"}])["id"])
    assert job["status"] == "completed"
    assert not TLS.search(Path(f"/proc/{daemon.proc.pid}/maps").read_text()), "the daemon loaded a TLS library"
    if daemon.call("status")["start"]["method"] == "forkserver":
        zygote = wait_for(lambda: daemon.call("status")["start"].get("zygote"), 120, 0.1, "the zygote warm")
        assert TLS.search(Path(f"/proc/{zygote}/maps").read_text()), "the zygote could not import ssl"


NOT_RESIDENT = re.compile(r"_psutil_linux|_bz2\.cpython|_lzma\.cpython|libbz2|liblzma")
"""What the idle daemon does without (issue 22): psutil (``hermesd.procfs`` reads ``/proc``), and
bz2/lzma, which ``shutil`` imports (it is imported where a folder is removed or a program looked
up, not at start)."""


def test_the_idle_daemon_maps_neither_psutil_nor_the_compression_libraries(daemon):
    daemon.call("status")
    found = sorted(set(NOT_RESIDENT.findall(Path(f"/proc/{daemon.proc.pid}/maps").read_text())))
    assert found == [], f"the idle daemon loaded {found}"
