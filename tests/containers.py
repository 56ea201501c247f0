"""A local test image and container clean-up, for tests and bench (podman, ``--runtime runc``).

The image ``localhost/hermes-test-busybox:latest`` is made here, offline: a
root filesystem holding Debian's ``busybox-static`` binary with a symbolic link
per applet (``/bin/sh``, ``hostname``, ``ls``, ``sleep``…), packed into a tar
archive and loaded with ``podman import``.  Made once per machine (kept in
podman's storage), checked with ``podman image exists``.

:func:`remove_under` removes every container whose ``hermes.state_dir`` label
lies under a directory: a test's own containers and never another's.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

IMAGE = "localhost/hermes-test-busybox:latest"
RUNTIME = "runc"
"""crun fails on kernels with hybrid cgroups (v1 and v2 mounted together): runc works."""

BUSYBOX = "/bin/busybox"
APT_HINT = "apt-get install -y podman runc busybox-static"


def podman() -> list[str] | None:
    """``["/usr/bin/podman", "--runtime", "runc"]``, or None when podman, runc or busybox-static is missing."""
    path, runc = shutil.which("podman"), shutil.which(RUNTIME) or shutil.which("runc", path="/usr/sbin")
    if not path or not runc or not _static_busybox():
        return None
    return [path, "--runtime", RUNTIME]


def _static_busybox() -> bool:
    """True when :data:`BUSYBOX` has no program interpreter (a dynamic ELF names ``ld-linux`` early on)."""
    try:
        with open(BUSYBOX, "rb") as fh:
            return b"ld-linux" not in fh.read(4096)
    except OSError:
        return False


def ensure_image(engine: list[str], work: Path) -> str:
    """Import :data:`IMAGE` unless podman has it; returns its name.  ``work``: a scratch directory."""
    if subprocess.run([*engine, "image", "exists", IMAGE], capture_output=True).returncode == 0:
        return IMAGE
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True).stdout.split()
    archive = work / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ("bin", "tmp", "etc", "proc", "sys", "dev", "workspace"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, "bin/busybox")
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
    subprocess.run([*engine, "import", "--change", "ENV=PATH=/bin", str(archive), IMAGE], check=True,
                   capture_output=True)
    return IMAGE


def labelled_under(engine: list[str], root: Path) -> list[str]:
    """Ids of the containers whose ``hermes.state_dir`` label is ``root`` or below it."""
    ids = subprocess.run([*engine, "ps", "-aq", "--no-trunc", "--filter", "label=hermes.state_dir"],
                         capture_output=True, text=True).stdout.split()
    if not ids:
        return []
    out = subprocess.run([*engine, "inspect", "--format", '{{.Id}} {{index .Config.Labels "hermes.state_dir"}}', *ids],
                         capture_output=True, text=True).stdout
    prefix = str(root.resolve())
    return [cid for cid, _, where in (line.partition(" ") for line in out.splitlines())
            if where == prefix or where.startswith(prefix + "/")]


def remove_under(engine: list[str], root: Path) -> list[str]:
    """Remove (``rm -f``) the containers of :func:`labelled_under`; returns their ids."""
    ids = labelled_under(engine, root)
    if ids:
        subprocess.run([*engine, "rm", "-f", "-t", "0", *ids], capture_output=True)
    return ids


def runc_orphans(engine: list[str]) -> set[str]:
    """Ids of containers runc runs that podman no longer lists: what a podman command killed
    half-way can leave (invisible to any removal by label)."""
    running = subprocess.run([RUNTIME, "list", "-q"], capture_output=True, text=True).stdout.split()
    known = subprocess.run([*engine, "ps", "-aq", "--no-trunc"], capture_output=True, text=True).stdout.split()
    return set(running) - set(known)


def kill_orphans(ids: set[str]) -> None:
    """End containers of :func:`runc_orphans` (``runc kill`` then ``runc delete --force``)."""
    for cid in ids:
        subprocess.run([RUNTIME, "kill", cid, "KILL"], capture_output=True)
        subprocess.run([RUNTIME, "delete", "--force", cid], capture_output=True)
