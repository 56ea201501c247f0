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
